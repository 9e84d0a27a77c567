# syntax=docker/dockerfile:1
# gpu-admission-webhook: `gpu-webhook serve` on a small, non-root, read-only-root-FS friendly image.
# Build: docker build -t gpu-admission-webhook:0.1.0 .   (or, without a Docker engine:
#        buildah bud --isolation=chroot -t gpu-admission-webhook:0.1.0 .; tests/image builds it)
# What each step adds, measured: docs/operations/image.md.

# --- builder: the compiled wheel, then a self-contained virtualenv --------------------------
FROM python:3.11-slim AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# A C compiler for the build only (gcc brings binutils' `strip`; the final stage copies the
# virtualenv, not the compiler).
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev binutils \
    && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml setup.py README.md LICENSE ./
COPY webhook ./webhook
# The evaluation core compiled by mypyc (GPU_WEBHOOK_COMPILE=1, setup.py) into a wheel. The
# compiler (mypy) and what it reads (the project's dependencies, for their types) go into the
# system interpreter, which builds the wheel. The `fast` extra too: mypyc type-checks what it
# compiles, and webhook/admission/jsoncodec.py imports orjson (without it the build stops with
# "Cannot find implementation or library stub for module named "orjson"").
RUN python -m pip install 'setuptools>=77' 'mypy==2.4.1' types-pyyaml '.[fast]' \
    && GPU_WEBHOOK_COMPILE=1 python -m pip wheel --no-build-isolation --no-deps \
       --wheel-dir /wheels .
# The virtualenv gets only the wheel and its runtime dependencies: created without pip (nor
# setuptools), filled by the system interpreter's pip (`--python`), no .pyc written (the root
# filesystem is read-only at run time; PYTHONDONTWRITEBYTECODE=1 there too).
RUN python -m venv --without-pip /opt/venv \
    && python -m pip --python /opt/venv/bin/python install --no-compile \
       "$(ls /wheels/gpu_admission_webhook-*.whl)[fast]"
# What nothing imports at run time (docs/operations/image.md):
# - the kubernetes client's generated typed APIs (client/api, aio/client/api) and model
#   classes: webhook/sources only uses ApiClient.call_api with _preload_content=False (raw
#   JSON), Configuration, the kubeconfig/in-cluster loaders and the exception types; the
#   packages' __init__ modules load these lazily (module __getattr__), so they stay;
# - test suites, type stubs and C/Cython sources shipped inside wheels;
# then every shared object is stripped of its symbol tables and debug information (the mypyc
# core, uvloop, cryptography, pydantic-core, ...), and the build fails if the server, every
# webhook.sources module and the compiled extensions no longer import.
RUN cd /opt/venv/lib/python3.11/site-packages \
    && rm -rf kubernetes/client/api kubernetes/aio/client/api \
    && find kubernetes/client/models kubernetes/aio/client/models -name '*.py' \
       ! -name '__init__.py' -delete \
    && find . -depth -type d \( -name tests -o -name test -o -name __pycache__ \) \
       -exec rm -rf {} + \
    && find . -type f \( -name '*.pyi' -o -name '*.pyx' -o -name '*.pxd' -o -name '*.pxi' \
       -o -name '*.c' -o -name '*.h' \) -delete \
    && find /opt/venv -type f -name '*.so*' -exec strip --strip-unneeded {} + \
    && /opt/venv/bin/python -c "import webhook.cli.serve, webhook.sources.kubeapi, \
webhook.sources.reflector, webhook.sources.snapshot, webhook.sources.auditor, \
webhook.sources.audit, webhook.sources.watched, webhook.core.evaluation.evaluate as e, \
orjson, uvloop, cryptography.hazmat.bindings._rust, pydantic_core, yaml; \
assert e.__file__.endswith('.so'), e.__file__" \
    && find /opt/venv -name '__pycache__' -type d -prune -exec rm -rf {} +

# --- runtime: only the virtualenv: no compiler, no pip, no caches ---------------------------
FROM python:3.11-slim
# glibc malloc: buffers of 32 KiB and more (TLS records, request bodies) are mmap'd and given back
# to the kernel when freed, and the heap is trimmed past 128 KiB free. Without them a burst of
# slow clients left ~30 MiB more resident after they were gone (bench/bench_slow_clients.py).
# HOME: uid 65532 has no passwd entry, and the kubernetes client resolves ~/.kube/config when
# imported ("Could not determine home directory" without HOME, as tests/image found).
ENV PATH=/opt/venv/bin:$PATH \
    HOME=/tmp \
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
