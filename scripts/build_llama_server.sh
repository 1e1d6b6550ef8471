#!/usr/bin/env bash
# Builds llama.cpp's server, the CPU peer of `sllm bench serve`, from the llama.cpp sources vendored in
# PyPI's llama-cpp-python sdist (no llama.cpp binary comes from the registries these machines reach), and
# caches it outside the repo in ${SLLM_CACHE_DIR:-~/.cache/sllm}/llama.cpp/bin (about 15 min on 2 cores).
set -euo pipefail
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
dest=${SLLM_CACHE_DIR:-$HOME/.cache/sllm}/llama.cpp
if [ -x "$dest/bin/llama-server" ]; then echo "$dest/bin/llama-server"; exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d .
tar xzf "llama_cpp_python-$VERSION.tar.gz"
cd "llama_cpp_python-$VERSION/vendor/llama.cpp"
# GGML_NATIVE: the instructions of this CPU, as a user building it here would get.
cmake -B build -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target llama-server -j"$(nproc)" >/dev/null
mkdir -p "$dest/bin"
cp -a build/bin/. "$dest/bin/"
echo "$dest/bin/llama-server"
