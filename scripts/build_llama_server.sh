#!/usr/bin/env bash
# Builds llama.cpp's server (the CPU peer of `sllm bench serve`) and its quantizer (for `sllm bench make-gguf`)
# from the llama.cpp sources vendored in PyPI's llama-cpp-python sdist (no llama.cpp binary comes from the
# registries these machines reach). The source tree stays in ${SLLM_CACHE_DIR:-~/.cache/sllm}/llama.cpp (its
# converter, convert_hf_to_gguf.py, and vocabulary files are used too) and the binaries go to its bin/
# (about 15-20 min on 2 cores).
set -euo pipefail
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
dest=${SLLM_CACHE_DIR:-$HOME/.cache/sllm}/llama.cpp
if [ -x "$dest/bin/llama-server" ] && [ -x "$dest/bin/llama-quantize" ]; then echo "$dest/bin/llama-server"; exit 0; fi
mkdir -p "$dest"
cd "$dest"
[ -f "llama_cpp_python-$VERSION.tar.gz" ] ||
  python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d .
[ -d "llama_cpp_python-$VERSION" ] || tar xzf "llama_cpp_python-$VERSION.tar.gz"
cd "llama_cpp_python-$VERSION/vendor/llama.cpp"
# GGML_NATIVE: the instructions of this CPU, as a user building it here would get.
cmake -B build -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target llama-server llama-quantize -j"$(nproc)" >/dev/null
mkdir -p "$dest/bin"
cp -a build/bin/. "$dest/bin/"
echo "$dest/bin/llama-server"
