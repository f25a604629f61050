#!/usr/bin/env bash
# One entry point for a fresh machine (Debian 12, no GPU needed). Idempotent and
# quick when everything is already in place.
#   tools/setup.sh run    install deps, fetch the default model, build, run the default job
#   tools/setup.sh test   install deps, fetch the default model, build, run the whole test suite
#   tools/setup.sh build  install deps and build only
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MODE="${1:-run}"
JOBS="$(nproc)"

APT_PACKAGES=(cmake ninja-build g++ pkg-config python3-pip
  libtbb-dev liburing-dev libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev
  libtomlplusplus-dev libfmt-dev libxxhash-dev libopenblas-dev libpcre2-dev
  clang-14 libclang-rt-14-dev gnuplot-nox)
PY_PACKAGES=("numpy==2.4.6" "gguf==0.19.0" "tokenizers==0.23.3")

log() { echo "setup: $*" >&2; }

install_apt() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "installing Debian packages: ${missing[*]}"
    local SUDO=""
    [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

install_python() {
  if ! python3 -c "import numpy, gguf, tokenizers" 2>/dev/null; then
    log "installing Python test oracles: ${PY_PACKAGES[*]}"
    python3 -m pip install --quiet --disable-pip-version-check "${PY_PACKAGES[@]}" 2>/dev/null ||
      python3 -m pip install --quiet --disable-pip-version-check --break-system-packages "${PY_PACKAGES[@]}"
  fi
}

configure_build() {  # dir, extra cmake args...
  local dir="$1"; shift
  if [[ ! -f "$dir/build.ninja" ]]; then
    log "configuring $dir"
    cmake -S . -B "$dir" -G Ninja -DREDWOOD_WERROR=ON "$@" >/dev/null
  fi
  log "building $dir"
  cmake --build "$dir" -j "$JOBS"
}

# The 10-layer self-draft of the default model that the example jobs use.
make_draft() {
  [[ -f models/smollm2-draft-10L.gguf ]] ||
    ./build/redwood make-draft --from models/SmolLM2-135M-Instruct.Q4_1.gguf --layers 10 \
      --out models/smollm2-draft-10L.gguf >/dev/null
}

install_apt
install_python
tools/fetch-models.sh

case "$MODE" in
  build)
    configure_build build
    ;;
  run)
    configure_build build
    make_draft
    log "running the default job: configs/jobs/smoke.toml (24 prompts; re-running resumes)"
    ./build/redwood batch configs/jobs/smoke.toml
    ;;
  test)
    configure_build build
    make_draft
    log "test suite (Release build, all labels)"
    ctest --test-dir build --output-on-failure -j "$JOBS" --timeout 900
    log "unit tests under AddressSanitizer + UBSan"
    configure_build build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREDWOOD_SANITIZE=ON -DREDWOOD_CUDA=OFF
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest --test-dir build-asan --output-on-failure -j "$JOBS" -L fast --timeout 900
    ;;
  *)
    echo "usage: tools/setup.sh run|test|build" >&2
    exit 2
    ;;
esac
