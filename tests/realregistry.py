"""The CNCF distribution registry (what Docker Hub and Harbor run) on 127.0.0.1 with TLS, with or
without Bearer-token auth, and a tiny token server issuing the JWTs it verifies: for tests that
skip, saying why, when the registry binary is absent (../shared/tools/registry/build.sh)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import ssl
import subprocess
import threading
import time
import uuid
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from aiohttp import web
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.hazmat.primitives.serialization import Encoding
from yarl import URL

from tests.fakeregistry import serve_tls
from tests.ociimages import Built, digest
from webhook.tls.certs import CertKeyPair, CertPaths, generate_ca

T = TypeVar("T")
ENV_BINARY = "GPU_WEBHOOK_REGISTRY_BIN"
SERVICE = "gpu-webhook-test-registry"
ISSUER = "gpu-webhook-test-token-issuer"


def registry_binary() -> Path | None:
    """$GPU_WEBHOOK_REGISTRY_BIN, else $DISTRIBUTION_HOME/registry, else ~/.cache/registry."""
    if os.environ.get(ENV_BINARY):
        return Path(os.environ[ENV_BINARY])
    home = os.environ.get("DISTRIBUTION_HOME") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "registry"
    )
    path = Path(home) / "registry"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Registry:
    """One `registry serve` process; several may share one storage directory."""

    binary: Path
    tls: CertPaths
    storage: Path
    token: Mapping[str, str] | None = None  # realm, service, issuer, rootcertbundle
    # More top-level configuration, e.g. {"validation": {"manifests": {"indexes": {"platforms":
    # "none"}}}} to accept indexes whose entries name no stored manifest (hostile ones).
    extra: Mapping[str, Any] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, workdir: Path) -> None:
        config = {
            "version": 0.1,
            "log": {"level": "warn"},
            "storage": {"filesystem": {"rootdirectory": str(self.storage)}},
            "http": {
                "addr": self.host,
                "tls": {"certificate": str(self.tls.cert), "key": str(self.tls.key)},
            },
        }
        if self.token is not None:
            config["auth"] = {"token": dict(self.token)}
        config.update(self.extra)
        path = workdir / f"registry-{self.port}.json"  # YAML is a superset of JSON
        path.write_text(json.dumps(config))
        log = (workdir / f"registry-{self.port}.log").open("wb")
        env = {k: v for k, v in os.environ.items() if k != "DISTRIBUTION_HOME"}
        self.process = subprocess.Popen(
            [str(self.binary), "serve", str(path)], stdout=log, stderr=subprocess.STDOUT, env=env
        )
        deadline = time.monotonic() + 20
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"registry exited: {(workdir / f'registry-{self.port}.log').read_text()}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("registry did not listen within 20 s") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


async def push(host: str, ca: Path, repository: str, tag: str, built: Built) -> None:
    """Push with the OCI distribution API: each blob the repository lacks (POST an upload, PUT it
    with its digest), the child manifests by digest, then what the tag names."""
    context = ssl.create_default_context(cafile=str(ca))
    base = f"https://{host}/v2/{repository}"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        for blob_digest, blob in built.blobs.items():
            async with session.head(f"{base}/blobs/{blob_digest}") as held:
                if held.status == 200:
                    continue  # already in this repository (another tag of the same image)
            async with session.post(f"{base}/blobs/uploads/") as started:
                assert started.status == 202, await started.text()
                location = started.headers["Location"]
            url = started.url.join(URL(location)).update_query(digest=blob_digest)
            async with session.put(
                url, data=blob, headers={"Content-Type": "application/octet-stream"}
            ) as put:
                assert put.status == 201, await put.text()
        for media, body in [*built.manifests, built.top]:
            reference = tag if (media, body) == built.top else digest(body)
            async with session.put(
                f"{base}/manifests/{reference}", data=body, headers={"Content-Type": media}
            ) as put:
                assert put.status == 201, await put.text()


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class TokenServer:
    """Docker's token protocol (GET realm?service=&scope=, Basic credentials optional): public
    repositories get pull for anyone, `private/*` only for a known user; JWTs signed ES256
    with the signer's certificate in the x5c header (distribution verifies it against
    `rootcertbundle`)."""

    tls: CertPaths
    users: Mapping[str, str]
    # OAuth2 refresh tokens (a docker config's `identitytoken`) -> user, for the POST form of
    # distribution docs/spec/auth/oauth.md.
    refresh_tokens: Mapping[str, str] = field(default_factory=dict)
    signer: CertKeyPair = field(default_factory=lambda: generate_ca("test token signer"))
    requests: list[tuple[str, str | None]] = field(default_factory=list)  # (scope, user)
    oauth_forms: list[dict[str, str]] = field(default_factory=list)  # POST /token bodies
    host: str = ""
    _runner: web.AppRunner | None = None

    def bundle(self, path: Path) -> Path:
        path.write_bytes(self.signer.cert_pem)
        return path

    def _sign(self, claims: Mapping[str, Any]) -> str:
        der = self.signer.certificate.public_bytes(Encoding.DER)
        header = {"typ": "JWT", "alg": "ES256", "x5c": [base64.b64encode(der).decode()]}
        signing_input = (
            f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        )
        r, s = decode_dss_signature(
            self.signer.private_key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        )
        return f"{signing_input}.{_b64url(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"

    async def _token(self, request: web.Request) -> web.Response:
        user = None
        header = request.headers.get("Authorization", "")
        if header.startswith("Basic "):
            name, _, password = base64.b64decode(header[6:]).decode().partition(":")
            if self.users.get(name) != password:
                return web.json_response({"details": "incorrect username or password"}, status=401)
            user = name
        scopes = request.query.getall("scope", [])
        return web.json_response(
            {
                "token": self._grant(scopes, user, request.query.get("service", "")),
                "expires_in": 300,
            }
        )

    async def _oauth_token(self, request: web.Request) -> web.Response:
        """The refresh-token grant: form grant_type, refresh_token, service, client_id, scope
        (space-separated); the answer's `access_token` (oauth.md "Response fields")."""
        form = {k: str(v) for k, v in (await request.post()).items()}
        self.oauth_forms.append(form)
        if form.get("grant_type") != "refresh_token" or not form.get("client_id"):
            return web.json_response({"error": "invalid_request"}, status=400)
        user = self.refresh_tokens.get(form.get("refresh_token", ""))
        if user is None:
            return web.json_response({"error": "invalid_grant"}, status=401)
        scopes = form.get("scope", "").split()
        token = self._grant(scopes, user, form.get("service", ""))
        return web.json_response(
            {"access_token": token, "expires_in": 300, "scope": form.get("scope", "")}
        )

    def _grant(self, scopes: list[str], user: str | None, service: str) -> str:
        access = []
        for scope in scopes:
            self.requests.append((scope, user))
            kind, _, rest = scope.partition(":")
            name, _, _actions = rest.rpartition(":")
            if kind == "repository" and (user or not name.startswith("private/")):
                access.append({"type": "repository", "name": name, "actions": ["pull"]})
        now = int(time.time())
        claims = {
            "iss": ISSUER,
            "sub": user or "",
            "aud": service,
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now,
            "jti": str(uuid.uuid4()),
            "access": access,
        }
        return self._sign(claims)

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get("/token", self._token)
        app.router.add_post("/token", self._oauth_token)
        self._runner, self.host = await serve_tls(app, self.tls)
        return self.host

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def auth_options(self, bundle: Path) -> dict[str, str]:
        return {
            "realm": f"https://{self.host}/token",
            "service": SERVICE,
            "issuer": ISSUER,
            "rootcertbundle": str(bundle),
        }


def skip_reason() -> str:
    return (
        "no registry binary: build it with ../shared/tools/registry/build.sh (default "
        f"~/.cache/registry/registry) or set {ENV_BINARY}"
    )


class LoopThread:
    """An event loop in a daemon thread, for servers that outlive one test's loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
