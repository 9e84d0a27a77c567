"""Helpers for the integration tests: test policies, a threaded TLS server and its client."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from webhook.admission.jsoncodec import JsonCodec, json_codec
from webhook.admission.state import STATE, WebhookState
from webhook.core.policies.crl import crl_configmap as build_crl_configmap
from webhook.sources.files import load_policy_dir
from webhook.sources.store import PolicyStore

# Test-owned policies, so exact-message tests do not change when configmaps/ is edited.
TEST_POLICIES: dict[str, dict[str, str]] = {
    "cf-crl-test-vcuda-core": {
        "key": "tencent.com/vcuda-core",
        "dataType": "integer",
        "defaultValue": "10",
        "descriptionEn": "vGPU compute, 100 per card",
        "group": "gpu-manager",
        "limits": "optional",
        "requests": "disabled",
        "wholeUnit": "100",
    },
    "cf-crl-test-vcuda-memory": {
        "key": "tencent.com/vcuda-memory",
        "dataType": "integer",
        "defaultValue": "8",
        "group": "gpu-manager",
        "limits": "optional",
        "requests": "disabled",
    },
    "cf-crl-test-nvidia-gpu": {
        "key": "nvidia.com/gpu",
        "dataType": "integer",
        "group": "nvidia",
        "limits": "required",
        "requests": "fromLimits",
        "max": "8",
    },
}


# The request path's JSON codecs: orjson (the `fast` extra, the default install) and the
# standard library (`pip install .`). The integration servers run under both.
CODECS = ("orjson", "json")


def codec_named(name: str) -> JsonCodec:
    """The codec called `name`; skips the test when orjson is not installed."""
    codec = json_codec(prefer_orjson=name == "orjson")
    if codec.name != name:
        pytest.skip("orjson is not installed (the `fast` extra): only the json codec runs")
    return codec


def crl_configmap(name: str, data: dict[str, str], *, enabled: str = "true") -> dict[str, Any]:
    """A CRL ConfigMap in kube-public whose group label is `data["group"]`."""
    return build_crl_configmap(name, data, enabled=enabled)


def write_policies(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in TEST_POLICIES.items():
        (directory / f"{name}.yaml").write_text(yaml.safe_dump(crl_configmap(name, data)))
    return directory


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode()


@dataclass
class RunningServer:
    """A started app: `request` speaks HTTPS to it, verifying the certificate with the CA."""

    app: web.Application
    port: int
    ca_file: Path
    store: PolicyStore
    loop: asyncio.AbstractEventLoop

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        content_type: str | None = "application/json",
        headers: dict[str, str] | None = None,
    ) -> Reply:
        conn = http.client.HTTPSConnection(
            "localhost", self.port, context=self.client_context(), timeout=30
        )
        try:
            sent = {"Content-Type": content_type} if content_type else {}
            conn.request(method, path, body=body, headers={**sent, **(headers or {})})
            response = conn.getresponse()
            return Reply(response.status, dict(response.getheaders()), response.read())
        finally:
            conn.close()

    def review(self, endpoint: str, review: dict[str, Any]) -> dict[str, Any]:
        reply = self.request("POST", endpoint, json.dumps(review).encode())
        assert reply.status == 200, reply.text
        response: dict[str, Any] = reply.json()
        return response

    def app_state(self) -> WebhookState:
        return self.app[STATE]

    def call(self, func: Any) -> Any:
        """Run a plain function on the server's loop thread (for state the loop owns)."""
        return asyncio.run_coroutine_threadsafe(_call(func), self.loop).result(timeout=30)


async def _call(func: Any) -> Any:
    return func()


def metric_samples(text: str) -> dict[str, float]:
    """Prometheus text exposition -> {series with labels: value}."""
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            samples[series] = float(value)
    return samples


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def serve_in_thread(
    app: web.Application, ssl_context: ssl.SSLContext | None, ca_file: Path, store: PolicyStore
) -> Iterator[RunningServer]:
    """Start `app` on 127.0.0.1 in a thread with its own loop; stop it when the caller is done."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, Any] = {}

    async def start() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port, ssl_context=ssl_context).start()
        holder["runner"], holder["port"] = runner, port

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(start())
        except BaseException as exc:
            holder["error"] = exc
            started.set()
            return
        started.set()
        loop.run_forever()
        loop.run_until_complete(holder["runner"].cleanup())
        loop.close()

    thread = threading.Thread(target=run, name="webhook-test-server", daemon=True)
    thread.start()
    started.wait(30)
    if "error" in holder:
        raise holder["error"]
    try:
        yield RunningServer(app, holder["port"], ca_file, store, loop)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)


def ready_store(policy_dir: Path) -> PolicyStore:
    store = PolicyStore()
    store.replace(load_policy_dir(policy_dir))
    return store
