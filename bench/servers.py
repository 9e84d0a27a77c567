"""The servers under test: the webhook (`gpu-webhook serve`), a no-op aiohttp TLS server, and
the fake API server for the cluster-watch runs; each in its own process (or thread)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# The entry point whose `noop` and `client` subcommands run the no-op server and the load
# generator in their own processes.
ENTRY = Path(__file__).resolve().with_name("bench_server.py")


def noop_main(args: argparse.Namespace) -> int:
    """An aiohttp TLS server doing the least an admission webhook can: read, answer allowed."""
    from aiohttp import web

    # The same JSON library as the webhook on this stack: orjson unless disabled or missing.
    loads: Any = json.loads
    dumps: Any = lambda value: json.dumps(value, separators=(",", ":")).encode()  # noqa: E731
    if not os.environ.get("GPU_WEBHOOK_DISABLE_ORJSON"):
        try:
            import orjson

            loads, dumps = orjson.loads, orjson.dumps
        except ImportError:
            pass

    async def review(request: web.Request) -> web.Response:
        # The least a webhook can do: parse the review and answer `allowed` for its uid.
        data = loads(await request.read())
        answer = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": data["request"]["uid"], "allowed": True},
        }
        return web.Response(body=dumps(answer), content_type="application/json")

    async def ready(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=7 * 1024 * 1024)
    app.router.add_post("/mutate", review)
    app.router.add_post("/validate", review)
    app.router.add_get("/readyz", ready)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(args.cert, args.key)
    loop_factory = None
    if not os.environ.get("GPU_WEBHOOK_DISABLE_UVLOOP"):
        try:
            import uvloop

            loop_factory = uvloop.new_event_loop
        except ImportError:
            pass

    async def serve() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", args.port, ssl_context=context).start()
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await runner.cleanup()

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(serve())
    return 0


def taskset(cpus: set[int]) -> list[str]:
    """The prefix running a command on `cpus` only (util-linux's taskset)."""
    return ["taskset", "-c", ",".join(str(cpu) for cpu in sorted(cpus))]


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def env(
    disable_uvloop: bool = False, disable_orjson: bool = False, tree: Path | None = None
) -> dict[str, str]:
    """The server's environment; `tree` runs the webhook of another checkout (its package first
    on the path, ahead of this checkout's editable install)."""
    env = dict(os.environ)
    first = str(tree or REPO)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [first, env.get("PYTHONPATH")]))
    env.pop("GPU_WEBHOOK_DISABLE_UVLOOP", None)
    env.pop("GPU_WEBHOOK_DISABLE_ORJSON", None)
    if disable_uvloop:
        env["GPU_WEBHOOK_DISABLE_UVLOOP"] = "1"
    if disable_orjson:
        env["GPU_WEBHOOK_DISABLE_ORJSON"] = "1"
    return env


def wait_ready(port: int, ca: Path, process: subprocess.Popen[bytes]) -> None:
    import http.client

    context = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before becoming ready")
        try:
            conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=2)
            conn.request("GET", "/readyz")
            if conn.getresponse().status == 200:
                conn.close()
                return
            conn.close()
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("server did not become ready within 60 s")


@contextmanager
def server(
    kind: str,
    tls: Any,
    policies: Path,
    *,
    kubeconfig: Path | None = None,
    no_uvloop: bool = False,
    no_orjson: bool = False,
    log_level: str = "info",
    tree: Path | None = None,
    cpus: set[int] | None = None,
) -> Iterator[tuple[int, int]]:
    """Start the webhook (`kind="webhook"`) or the no-op server; yields (port, pid).

    With `kubeconfig` the webhook watches that cluster's CRL ConfigMaps instead of loading
    `policies`, and is ready after its first list.
    """
    port = free_port()
    if kind == "webhook":
        code = "import sys; from webhook.cli import main; sys.exit(main())"
        argv = [sys.executable, "-c", code, "serve", "--host", "127.0.0.1", "--port", str(port)]
        argv += ["--tls-cert", str(tls.cert), "--tls-key", str(tls.key)]
        if kubeconfig is None:
            argv += ["--policies", str(policies)]
        else:
            argv += ["--kubeconfig", str(kubeconfig)]
        argv += ["--log-format", "json", "--log-level", log_level]
        # No load balancer to drain from: stop at once when the run is over.
        argv += ["--drain-seconds", "0"]
    else:
        argv = [sys.executable, str(ENTRY), "noop", "--port", str(port)]
        argv += ["--cert", str(tls.cert), "--key", str(tls.key)]
    if cpus:
        argv = taskset(cpus) + argv
    process = subprocess.Popen(
        argv,
        # `python -c` puts the working directory first on sys.path: another tree's webhook is
        # imported only when run from that tree.
        cwd=tree or REPO,
        env=env(no_uvloop, no_orjson, tree),
        stdout=subprocess.DEVNULL,
        # The webhook logs one line per review, as in production; the pipe is drained to null.
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready(port, tls.ca_cert, process)
        yield port, process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def get(port: int, ca: Path, path: str) -> str:
    import http.client

    context = ssl.create_default_context(cafile=str(ca))
    conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=30)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read().decode()
        if response.status != 200:
            raise RuntimeError(f"GET {path}: HTTP {response.status}: {body[:200]}")
        return body
    finally:
        conn.close()


def gauge(metrics: str, name: str) -> int:
    for line in metrics.splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    raise RuntimeError(f"no {name} in /metrics")


def policy_configmaps(policies: Path) -> list[dict[str, Any]]:
    """The ConfigMaps of a policy directory, read as the file source reads them."""
    from webhook.sources.files import policy_files, read_documents

    return [
        doc
        for file in policy_files(policies)
        for doc in read_documents(file)
        if isinstance(doc, dict) and doc.get("kind") == "ConfigMap"
    ]


@contextmanager
def fake_cluster(configmaps: list[dict[str, Any]], directory: Path) -> Iterator[Path]:
    """The fake API server of tests/fakekube.py serving `configmaps`; yields a kubeconfig.

    It runs on its own event loop in a thread of this (orchestrating) process, which is idle
    while the load generator, a separate process, drives the webhook.
    """
    # tests/ is a namespace package at the repository root, which `python bench/...` does not
    # put on sys.path (the webhook and client processes get it through PYTHONPATH, see _env).
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.fakekube import FakeKube

    kube = FakeKube()
    for cm in configmaps:
        kube.put(cm)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fake-kube", daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(kube.start(), loop).result(timeout=30)
        directory.mkdir(parents=True, exist_ok=True)
        yield kube.write_kubeconfig(directory)
    finally:
        asyncio.run_coroutine_threadsafe(kube.stop(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()
