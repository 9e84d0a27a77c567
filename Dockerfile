# syntax=docker/dockerfile:1
# gpu-admission-webhook: `gpu-webhook serve` on a small, non-root, read-only-root-FS friendly image.
# Build: docker build -t gpu-admission-webhook:0.1.0 .   (or, without a Docker engine:
#        buildah bud --isolation=chroot -t gpu-admission-webhook:0.1.0 .; tests/image builds it)

# --- builder: install the project into a self-contained virtualenv -------------------------
FROM python:3.11-slim AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# A C compiler for the build only (the final stage copies the virtualenv, not the compiler).
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
# Dependencies change less often than the code: copy the metadata first for layer caching.
COPY pyproject.toml setup.py README.md LICENSE ./
COPY webhook ./webhook
# The README's install (`pip install '.[fast]'`, with uvloop/orjson), with the evaluation core
# compiled by mypyc (GPU_WEBHOOK_COMPILE=1, setup.py). The compiler (mypy) and what it reads
# (the project's dependencies, for their types) go into the system interpreter, which builds
# the wheel: the virtualenv gets only the wheel and its runtime dependencies. The `fast` extra
# too: mypyc type-checks what it compiles, and webhook/admission/jsoncodec.py imports orjson
# (without it the build stops with "Cannot find implementation or library stub for module named
# "orjson"", as it did until tests/image built this file).
RUN /usr/local/bin/python -m pip install --no-cache-dir 'setuptools>=77' 'mypy==2.4.1' \
       types-pyyaml '.[fast]' \
    && GPU_WEBHOOK_COMPILE=1 /usr/local/bin/python -m pip wheel --no-cache-dir \
       --no-build-isolation --no-deps --wheel-dir /wheels . \
    && pip install --no-cache-dir "$(ls /wheels/gpu_admission_webhook-*.whl)[fast]" \
    && find /opt/venv -name '__pycache__' -type d -prune -exec rm -rf {} + \
    && rm -rf /opt/venv/lib/python3.11/site-packages/pip /opt/venv/bin/pip*

# --- runtime: only the virtualenv, no compilers, no pip caches ------------------------------
FROM python:3.11-slim
# glibc malloc: buffers of 32 KiB and more (TLS records, request bodies) are mmap'd and given back
# to the kernel when freed, and the heap is trimmed past 128 KiB free. Without them a burst of
# slow clients left ~30 MiB more resident after they were gone (bench/bench_slow_clients.py).
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TMPDIR=/tmp \
    MALLOC_MMAP_THRESHOLD_=32768 \
    MALLOC_TRIM_THRESHOLD_=131072
COPY --from=builder /opt/venv /opt/venv
# 65532 is the conventional "nonroot" uid/gid (distroless); numeric so that Kubernetes can
# check runAsNonRoot without resolving names.
USER 65532:65532
# The root filesystem can be mounted read-only: the only writable path the server needs is
# /tmp (in Kubernetes an emptyDir, as in the Helm chart).
VOLUME ["/tmp"]
# 8443: HTTPS admission endpoints (/mutate, /validate, /healthz, /readyz, /policies).
# 9090: plain-HTTP /metrics, /healthz, /readyz.
EXPOSE 8443 9090
ENTRYPOINT ["gpu-webhook"]
CMD ["serve", "--port", "8443", "--metrics-port", "9090", "--tls-cert", "/etc/webhook/tls/tls.crt", "--tls-key", "/etc/webhook/tls/tls.key", "--log-format", "json"]
