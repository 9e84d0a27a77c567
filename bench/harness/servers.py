"""The servers a benchmark runs, all on loopback: the webhook (`gpu-webhook serve`) and a no-op
aiohttp TLS server, each in its own process; the fake API server of tests/fakekube.py in a thread
(fake_cluster) or in a process of its own (KubeProcess); the webhook's admission app in this
process (admission_app); and the TLS material they serve with (workdir, certificates)."""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from webhook.tls.certs import CertPaths

from bench.harness import REPO
from bench.harness.proc import taskset

# The harness's own processes (bench.harness.processes): `noop` (below) and `client` (the
# Python load generator), run from this checkout (cwd=REPO: `-m` looks there first).
CHILD = [sys.executable, "-m", "bench.harness"]


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


def server_argv(
    kind: str,
    port: int,
    tls: Any,
    policies: Path,
    *,
    kubeconfig: Path | None = None,
    log_level: str = "info",
    config: Path | None = None,
    extra: tuple[str, ...] = (),
) -> list[str]:
    """The command line of the webhook (`kind="webhook"`: `gpu-webhook serve`, run from the
    tree it measures, with `extra` options) or of the no-op server, on 127.0.0.1:`port`."""
    if kind != "webhook":
        return [*CHILD, "noop", "--port", str(port), "--cert", str(tls.cert), "--key", str(tls.key)]
    code = "import sys; from webhook.cli import main; sys.exit(main())"
    argv = [sys.executable, "-c", code, "serve", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--tls-cert", str(tls.cert), "--tls-key", str(tls.key)]
    if kubeconfig is None:
        argv += ["--policies", str(policies)]
    else:
        argv += ["--kubeconfig", str(kubeconfig)]
    if config is not None:
        argv += ["--config", str(config)]
    argv += ["--log-format", "json", "--log-level", log_level]
    # No load balancer to drain from: stop at once when the run is over.
    return [*argv, "--drain-seconds", "0", *extra]


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
    argv = server_argv(kind, port, tls, policies, kubeconfig=kubeconfig, log_level=log_level)
    if cpus:
        argv = taskset(cpus) + argv
    process = subprocess.Popen(
        argv,
        # `python -c` puts the working directory first on sys.path: another tree's webhook is
        # imported only when run from that tree.
        cwd=(tree or REPO) if kind == "webhook" else REPO,
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


@contextmanager
def workdir(prefix: str) -> Iterator[Path]:
    """A scratch directory for one run, removed after it."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def certificates(work: Path) -> CertPaths:
    """A CA and a server certificate for localhost and 127.0.0.1, written under `work`/tls."""
    from webhook.tls.certs import write_certificates

    return write_certificates(work / "tls", ["localhost"], ["127.0.0.1"])


def kubeconfig(directory: Path, port: int) -> Path:
    """A kubeconfig for the fake API server on 127.0.0.1:`port`, with the token it accepts."""
    from tests.fakekube import TOKEN

    path = directory / "kubeconfig"
    cluster = {"name": "fake", "cluster": {"server": f"http://127.0.0.1:{port}"}}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": "bench", "user": {"token": TOKEN}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "bench"}}],
        "current-context": "fake",
    }
    path.write_text(json.dumps(config))
    return path


def _serve_kube(
    populate: Callable[..., Any], args: tuple[Any, ...], ready: Any, commands: Any
) -> None:
    """The fake API server's process: populate, report (port, facts), then answer request
    counts."""
    from tests.fakekube import FakeKube

    async def main() -> None:
        kube = FakeKube()
        facts = populate(kube, *args)
        await kube.start()
        ready.put((kube.port, facts))
        loop = asyncio.get_running_loop()
        while True:
            command = await loop.run_in_executor(None, commands.get)
            if command == "count":
                counts: dict[str, int] = {}
                for request in kube.requests:
                    counts[request.method] = counts.get(request.method, 0) + 1
                ready.put(counts)
                kube.requests.clear()

    asyncio.run(main())


class KubeProcess:
    """The fake API server of tests/fakekube.py in a process of its own (spawned: its memory and
    CPU are not the benchmark's), holding what `populate(kube, *args)` put in it; `facts` is
    what populate returned. A module-level `populate` of the benchmark's script works: the
    spawned process imports the script again as __mp_main__."""

    def __init__(self, populate: Callable[..., Any], *args: Any, timeout: float = 900) -> None:
        context = multiprocessing.get_context("spawn")
        self._ready, self._commands = context.Queue(), context.Queue()
        self._process = context.Process(
            target=_serve_kube, args=(populate, args, self._ready, self._commands), daemon=True
        )
        self._timeout = timeout
        self.port = 0
        self.facts: Any = None

    def __enter__(self) -> KubeProcess:
        self._process.start()
        try:
            self.port, self.facts = self._ready.get(timeout=self._timeout)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self._process.kill()
        self._process.join()

    def counts(self) -> dict[str, int]:
        """The requests the server received since the last call, by method."""
        self._commands.put("count")
        counts: dict[str, int] = self._ready.get(timeout=60)
        return counts


@asynccontextmanager
async def admission_app(
    config: Any, images: Any
) -> AsyncIterator[Callable[[Any], Awaitable[float]]]:
    """The webhook's admission app in this process (aiohttp's test server on loopback) with the
    standard policies and the image resolver `images`; yields `mutate(obj)`, which sends `obj`
    to /mutate and returns the seconds the answer took (an answer other than 200 fails)."""
    from aiohttp.test_utils import TestClient, TestServer

    from tests.helpers import standard_policies
    from tests.integration.test_admission import admission_review
    from webhook.admission.app import create_app
    from webhook.sources.store import PolicyStore

    store = PolicyStore()
    store.replace(standard_policies())
    http: TestClient[Any, Any] = TestClient(TestServer(create_app(config, store, images=images)))
    await http.start_server()

    async def mutate(obj: Any) -> float:
        started = time.perf_counter()
        reply = await http.post("/mutate", json=admission_review(obj))
        await reply.read()
        if reply.status != 200:
            raise RuntimeError(f"/mutate answered HTTP {reply.status}")
        return time.perf_counter() - started

    try:
        yield mutate
    finally:
        await http.close()
