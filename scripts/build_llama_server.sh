#!/usr/bin/env bash
# Builds llama.cpp's server (the CPU peer of `sllm bench serve`) and its quantizer (for `sllm bench make-gguf`)
# from the llama.cpp sources vendored in PyPI's llama-cpp-python sdist (no llama.cpp binary comes from the
# registries these machines reach). The source tree stays in ${SLLM_CACHE_DIR:-~/.cache/sllm}/llama.cpp (its
# converter, convert_hf_to_gguf.py, and vocabulary files are used too) and the binaries go to its bin/
# (about 15-20 min on 2 cores).
# LLAMA_CPU_ISA=avx2 builds, beside it, a server for AMD's AVX2-only EPYCs (AVX2, FMA and F16C, no AVX-512
# nor AVX-VNNI) into bin-avx2/: the peer of SLLM_CPU_ISA=avx2 on a CPU that has more (about 5 min).
set -euo pipefail
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
ISA=${LLAMA_CPU_ISA:-native}
dest=${SLLM_CACHE_DIR:-$HOME/.cache/sllm}/llama.cpp
case "$ISA" in
  native) bin=bin build=build targets="llama-server llama-quantize"
          flags=(-DGGML_NATIVE=ON) ;;  # the instructions of this CPU, as a user building it here would get
  avx2) bin=bin-avx2 build=build-avx2 targets="llama-server"
        flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX_VNNI=OFF
               -DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX512_VBMI=OFF) ;;
  *) echo "LLAMA_CPU_ISA must be native or avx2, not $ISA" >&2; exit 2 ;;
esac
if [ -x "$dest/$bin/llama-server" ] && { [ "$ISA" != native ] || [ -x "$dest/$bin/llama-quantize" ]; }; then
  echo "$dest/$bin/llama-server"; exit 0
fi
mkdir -p "$dest"
cd "$dest"
[ -f "llama_cpp_python-$VERSION.tar.gz" ] ||
  python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d .
[ -d "llama_cpp_python-$VERSION" ] || tar xzf "llama_cpp_python-$VERSION.tar.gz"
cd "llama_cpp_python-$VERSION/vendor/llama.cpp"
cmake -B "$build" "${flags[@]}" -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
# shellcheck disable=SC2086  # the targets are words
cmake --build "$build" --target $targets -j"$(nproc)" >/dev/null
mkdir -p "$dest/$bin"
cp -a "$build/bin/." "$dest/$bin/"
echo "$dest/$bin/llama-server"
