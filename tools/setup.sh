#!/usr/bin/env bash
# One entry point for a fresh machine (Debian 12, no GPU needed). Idempotent and
# quick when everything is already in place.
#   tools/setup.sh run    install deps, fetch the default model, build the `redwood`
#                         binary only, run the default job
#   tools/setup.sh test   install deps (+ test tools and Python oracles), fetch the
#                         default model, build everything, run the whole test suite
#   tools/setup.sh build  as `test`, without running the tests
# All three build in build/. CUDA: `run` builds the CUDA backend only where a GPU
# answers nvidia-smi, and then for that GPU's architecture only; `test` and
# `build` build it wherever the toolkit is found (REDWOOD_CUDA=AUTO), for every
# architecture in CMakeLists.txt, as CI does. REDWOOD_CUDA=ON|OFF|AUTO and
# REDWOOD_CUDA_ARCHS="86;90" in the environment override either. A build/ left
# by one mode is reconfigured by another only where their CUDA settings differ.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MODE="${1:-run}"
JOBS="$(nproc)"

# Enough to build and run `redwood` (gtest is a CMake requirement of the tree).
APT_PACKAGES=(cmake ninja-build g++ pkg-config python3-pip
  libtbb-dev liburing-dev libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev
  libtomlplusplus-dev libfmt-dev libxxhash-dev libopenblas-dev libpcre2-dev libcpp-httplib-dev)
# Only the test suite needs these (fuzz builds, bench plots).
APT_TEST_PACKAGES=(clang-14 libclang-rt-14-dev gnuplot-nox)
PY_PACKAGES=("numpy==2.4.6" "gguf==0.19.0" "tokenizers==0.23.3" "openai==3.57.0")

log() { echo "setup: $*" >&2; }

install_apt() {  # packages...
  local missing=()
  for p in "$@"; do
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

# A value from DIR's CMake cache ("" when unset or not configured).
cache_get() {  # dir, name
  [[ -f "$1/CMakeCache.txt" ]] || return 0
  sed -n "s/^$2:[A-Z]*=//p" "$1/CMakeCache.txt" | head -n1
}

# The compute capability of the first GPU as CMake wants it ("89"), or "" when
# no GPU answers.
gpu_arch() {
  local cap
  cap="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null)" || return 0
  cap="${cap%%$'\n'*}"; cap="${cap//[. $'\r']/}"
  if [[ "$cap" =~ ^[0-9]+$ ]]; then echo "$cap"; fi
  return 0
}

# Configures DIR with the given -D options when it is not configured yet or its
# cache disagrees with one of them (only those options are compared); then builds
# the given targets (none: everything).
configure_build() {  # dir, "-DNAME=VALUE"..., [--] [target...]
  local dir="$1"; shift
  local opts=() targets=() reconf=0
  while (($#)) && [[ "$1" == -D* ]]; do opts+=("$1"); shift; done
  [[ "${1:-}" == "--" ]] && shift
  targets=("$@")
  if [[ ! -f "$dir/build.ninja" ]]; then
    reconf=1
  else
    local o name value
    for o in "${opts[@]}"; do
      name="${o#-D}"; value="${name#*=}"; name="${name%%=*}"; name="${name%%:*}"
      [[ "$(cache_get "$dir" "$name")" == "$value" ]] || reconf=1
    done
  fi
  if ((reconf)); then
    log "configuring $dir ${opts[*]}"
    cmake -S . -B "$dir" -G Ninja -DREDWOOD_WERROR=ON "${opts[@]}" >/dev/null
  fi
  log "building $dir${targets[*]:+ (${targets[*]})}"
  if ((${#targets[@]})); then
    cmake --build "$dir" -j "$JOBS" --target "${targets[@]}"
  else
    cmake --build "$dir" -j "$JOBS"
  fi
}

# CUDA options for `run` (none: keep build/'s own). Without REDWOOD_CUDA or
# REDWOOD_CUDA_ARCHS in the environment: a build/ that is already configured is
# kept unless a GPU answers that it does not cover (so `run` after `test` builds
# nothing new); otherwise CUDA for this GPU's architecture only, or no CUDA
# where no GPU answers.
run_cuda_opts() {
  local arch; arch="$(gpu_arch)"
  if [[ -n "${REDWOOD_CUDA:-}${REDWOOD_CUDA_ARCHS:-}" ]]; then
    local cuda="${REDWOOD_CUDA:-ON}" archs="${REDWOOD_CUDA_ARCHS:-$arch}"
    echo "-DREDWOOD_CUDA=$cuda"
    if [[ "$cuda" != OFF && -n "$archs" ]]; then echo "-DREDWOOD_CUDA_ARCHS=$archs"; fi
    return 0
  fi
  if [[ -f build/build.ninja ]]; then
    [[ -z "$arch" ]] && return 0
    local have; have="$(cache_get build REDWOOD_CUDA_ARCHS)"
    if [[ "$(cache_get build REDWOOD_CUDA)" != OFF ]] &&
       [[ "$have" == native || ";$have;" == *";$arch;"* ]]; then
      return 0
    fi
  fi
  if [[ -n "$arch" ]]; then
    printf '%s\n' "-DREDWOOD_CUDA=ON" "-DREDWOOD_CUDA_ARCHS=$arch"
  else
    echo "-DREDWOOD_CUDA=OFF"
  fi
}

# CUDA options for `test`/`build`: the toolkit where found, every architecture
# CMakeLists.txt names (what CI builds), unless the environment says otherwise.
full_cuda_opts() {
  local default_archs
  default_archs="$(sed -n 's/^set(REDWOOD_CUDA_ARCHS "\([^"]*\)".*/\1/p' CMakeLists.txt)"
  echo "-DREDWOOD_CUDA=${REDWOOD_CUDA:-AUTO}"
  echo "-DREDWOOD_CUDA_ARCHS=${REDWOOD_CUDA_ARCHS:-$default_archs}"
}

# The 10-layer self-draft of the default model that the example jobs use.
make_draft() {
  [[ -f models/smollm2-draft-10L.gguf ]] ||
    ./build/redwood make-draft --from models/SmolLM2-135M-Instruct.Q4_1.gguf --layers 10 \
      --out models/smollm2-draft-10L.gguf >/dev/null
}

case "$MODE" in
  run)
    install_apt "${APT_PACKAGES[@]}"
    tools/fetch-models.sh
    mapfile -t cuda_opts < <(run_cuda_opts)
    configure_build build "${cuda_opts[@]}" -- redwood
    make_draft
    log "running the default job: configs/jobs/smoke.toml (24 prompts; re-running resumes)"
    ./build/redwood batch configs/jobs/smoke.toml
    ;;
  build)
    install_apt "${APT_PACKAGES[@]}" "${APT_TEST_PACKAGES[@]}"
    install_python
    tools/fetch-models.sh
    mapfile -t cuda_opts < <(full_cuda_opts)
    configure_build build "${cuda_opts[@]}"
    ;;
  test)
    install_apt "${APT_PACKAGES[@]}" "${APT_TEST_PACKAGES[@]}"
    log "include order (tools/check-includes)"
    tools/check-includes
    log "the streamer's locking under clang -Wthread-safety (tools/check-thread-safety)"
    tools/check-thread-safety
    install_python
    tools/fetch-models.sh
    mapfile -t cuda_opts < <(full_cuda_opts)
    configure_build build "${cuda_opts[@]}"
    make_draft
    log "test suite (Release build, all labels)"
    ctest --test-dir build --output-on-failure -j "$JOBS" --timeout 900
    log "unit tests under AddressSanitizer + UBSan"
    configure_build build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREDWOOD_SANITIZE=ON -DREDWOOD_CUDA=OFF
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest --test-dir build-asan --output-on-failure -j "$JOBS" -L fast --timeout 900
    log "redwood serve under AddressSanitizer + UBSan (the API test with the openai client)"
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest --test-dir build-asan --output-on-failure -R '^serve_api$' --timeout 900
    ;;
  *)
    echo "usage: tools/setup.sh run|test|build" >&2
    exit 2
    ;;
esac
