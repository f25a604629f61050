#!/usr/bin/env bash
# Same-machine reference: llama.cpp's llama-bench on the models bench_kernels
# runs, with the same shapes (64-token prefill, decode) and thread count.
# llama.cpp comes from PyPI: the llama-cpp-python sdist vendors it; its
# llama-bench is built here (CPU only, -march=native) into build/llamacpp/.
#   bench/llamacpp_reference.sh MODEL.gguf [MODEL.gguf ...]
# Not part of the tests or the runtime; takes a few minutes the first time.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
DIR="$ROOT/build/llamacpp"
BENCH="$DIR/src/build/bin/llama-bench"
THREADS="${THREADS:-$(nproc)}"
if [[ $# -lt 1 ]]; then
  echo "usage: bench/llamacpp_reference.sh MODEL.gguf [MODEL.gguf ...]" >&2
  exit 2
fi
if [[ ! -x "$BENCH" ]]; then
  mkdir -p "$DIR"
  echo "llamacpp_reference: fetching llama-cpp-python $VERSION (sdist) from PyPI" >&2
  python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$DIR"
  rm -rf "$DIR/src" "$DIR/unpack"
  mkdir -p "$DIR/unpack"
  tar xzf "$DIR/llama_cpp_python-$VERSION.tar.gz" -C "$DIR/unpack"
  mv "$DIR/unpack/llama_cpp_python-$VERSION/vendor/llama.cpp" "$DIR/src"
  rm -rf "$DIR/unpack"
  echo "llamacpp_reference: building llama-bench (CPU, native)" >&2
  cmake -S "$DIR/src" -B "$DIR/src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >/dev/null
  cmake --build "$DIR/src/build" --target llama-bench -j "$(nproc)" >/dev/null
fi
args=()
for m in "$@"; do args+=(-m "$m"); done
# pp64: one 64-token prompt pass; tg32: 32 decoded tokens; 5 repetitions each.
"$BENCH" "${args[@]}" -t "$THREADS" -p 64 -n 32 -r 5 -o md
