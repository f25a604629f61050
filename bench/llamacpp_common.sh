# shellcheck shell=bash
# Sourced by the llama.cpp comparisons (bench/llamacpp_regime.sh, bench/llamacpp_parallel.sh):
# the llama.cpp build, the memory cgroup and the chat-templated prompts, one copy each.
# Expects ROOT (the repository) to be set; sets LLAMACPP_DIR and LLAMACPP_BIN.
LLAMACPP_VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
LLAMACPP_DIR="$ROOT/build/llamacpp"
LLAMACPP_BIN="$LLAMACPP_DIR/src/build/bin"
# OpenMP threads that sleep while they wait: on this 2-vCPU VM spinning ones made llama.cpp
# 6x slower (SmolLM2 decode: 117 ms/token spinning, 18.8 passive, 16.6 with one thread).
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

# llamacpp_build TARGET...: builds what is missing of the given CMake targets (CPU), from the
# llama-cpp-python sdist on PyPI (fetched into build/llamacpp/ if absent); a target is there
# when $LLAMACPP_BIN/<target> (or lib<target>.so) is.
llamacpp_build() {
  local t missing=()
  for t in "$@"; do [[ -x $LLAMACPP_BIN/$t || -f $LLAMACPP_BIN/lib$t.so ]] || missing+=("$t"); done
  [[ ${#missing[@]} -gt 0 ]] || return 0
  if [[ ! -d $LLAMACPP_DIR/src ]]; then
    mkdir -p "$LLAMACPP_DIR"
    python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$LLAMACPP_VERSION" -d "$LLAMACPP_DIR"
    rm -rf "$LLAMACPP_DIR/unpack" && mkdir -p "$LLAMACPP_DIR/unpack"
    tar xzf "$LLAMACPP_DIR/llama_cpp_python-$LLAMACPP_VERSION.tar.gz" -C "$LLAMACPP_DIR/unpack"
    mv "$LLAMACPP_DIR/unpack/llama_cpp_python-$LLAMACPP_VERSION/vendor/llama.cpp" "$LLAMACPP_DIR/src"
    rm -rf "$LLAMACPP_DIR/unpack"
  fi
  # -march=native, except that where the CPU reports AMX the ISA is named without it: in
  # a VM that has not enabled AMX's tile state, ggml's AMX kernels die of SIGILL.
  local isa=(-DGGML_NATIVE=ON)
  if grep -qw amx_tile /proc/cpuinfo; then
    isa=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON
      -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF
      -DGGML_AMX_BF16=OFF)
  fi
  # A build folder copied from elsewhere keeps a CMake cache naming the old place, which
  # CMake refuses: configure it afresh.
  local cache="$LLAMACPP_DIR/src/build/CMakeCache.txt" was
  was="$(sed -n 's/^CMAKE_CACHEFILE_DIR:INTERNAL=//p' "$cache" 2>/dev/null || true)"
  if [[ -f $cache ]] && { [[ ! -d $was ]] || [[ $(cd "$was" && pwd -P) != $(cd "${cache%/*}" && pwd -P) ]]; }; then
    echo "llamacpp: $cache names another folder; configuring afresh" >&2
    rm -rf "$cache" "$LLAMACPP_DIR/src/build/CMakeFiles"
  fi
  echo "llamacpp: building ${missing[*]} (CPU)" >&2
  cmake -S "$LLAMACPP_DIR/src" -B "$LLAMACPP_DIR/src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${isa[@]}" \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON \
    -DLLAMA_BUILD_SERVER=OFF >/dev/null
  cmake --build "$LLAMACPP_DIR/src/build" --target "${missing[@]}" -j "$(nproc)" >/dev/null
}

# llamacpp_driver NAME: compiles tools/NAME.c (a driver of ours on libllama's public API)
# into build/NAME when missing or older than its source; prints its path.
llamacpp_driver() {
  local src="$ROOT/tools/$1.c" exe="$ROOT/build/$1" inc="$LLAMACPP_DIR/src"
  llamacpp_build llama >&2
  if [[ ! -x $exe || $src -nt $exe ]]; then
    # Every ggml library named (--no-as-needed) and found through the executable's rpath:
    # libllama.so's own RUNPATH may name the folder it was first built in.
    cc -O2 -std=c11 -Wall -Wextra -o "$exe" "$src" -I "$inc/include" -I "$inc/ggml/include" \
      -L "$LLAMACPP_BIN" -Wl,--no-as-needed -lllama -lggml -lggml-base -lggml-cpu \
      -Wl,--disable-new-dtags,-rpath,"$LLAMACPP_BIN" >&2
  fi
  echo "$exe"
}

# llamacpp_cgroup LIMIT_MIB: the memory cgroup redwood-llamacpp-<pid> (v1 if mounted, else v2) with
# that limit, page cache included; sets CG and PEAK (its peak-usage file: reset before each
# run on v1; on v2, memory.peak is the highest since the cgroup was made). Needs root.
# shellcheck disable=SC2034  # CG and PEAK are for the caller
llamacpp_cgroup() {
  if [[ -d /sys/fs/cgroup/memory ]]; then
    CG=/sys/fs/cgroup/memory/redwood-llamacpp-$$
    mkdir -p "$CG"
    echo $(($1 << 20)) >"$CG/memory.limit_in_bytes"
    PEAK="$CG/memory.max_usage_in_bytes"
  else
    CG=/sys/fs/cgroup/redwood-llamacpp-$$
    mkdir -p "$CG"
    echo $(($1 << 20)) >"$CG/memory.max"
    PEAK="$CG/memory.peak"
  fi
}

# run_in_cgroup COMMAND...: runs it in $CG, the page cache dropped first.
run_in_cgroup() {
  sync
  echo 3 >/proc/sys/vm/drop_caches
  if [[ -f $CG/memory.max_usage_in_bytes ]]; then echo 0 >"$CG/memory.max_usage_in_bytes"; fi
  bash -c 'echo $$ > '"$CG"'/cgroup.procs && exec "$@"' _ "$@"
}

# llamacpp_chat_prompts PROMPTS.jsonl COUNT [OUT]: the first COUNT prompts with SmolLM2's chat
# template, as `redwood` applies it with chat = true: one JSON string a line on stdout, or
# with OUT, written there each ended by a NUL byte (tools/llamacpp-parallel.c's input).
llamacpp_chat_prompts() {
  python3 - "$@" <<'PY'
import json, sys
texts = []
for line in open(sys.argv[1]).readlines()[: int(sys.argv[2])]:
    p = json.loads(line)["prompt"]
    texts.append("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                 f"<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n")
if len(sys.argv) > 3:
    with open(sys.argv[3], "wb") as f:
        f.write(b"".join(t.encode() + b"\0" for t in texts))
else:
    for t in texts:
        print(json.dumps(t))
PY
}
