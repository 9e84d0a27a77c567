"""An in-process OCI registry on 127.0.0.1 over TLS (the project's own certificates), with the
auth flows real registries use, a CDN for blob redirects, and servers that hang or refuse:
the protocol edges CI can test without a registry binary."""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

from tests.ociimages import Built
from webhook.tls.certs import CertPaths

Auth = Literal["none", "bearer", "basic"]


async def serve_tls(app: web.Application, tls: CertPaths) -> tuple[web.AppRunner, str]:
    """Serve `app` over TLS on 127.0.0.1, an ephemeral port: (runner, "127.0.0.1:PORT")."""
    runner = web.AppRunner(app)
    await runner.setup()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert, tls.key)
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    server = site._server
    assert isinstance(server, asyncio.Server)
    return runner, f"127.0.0.1:{server.sockets[0].getsockname()[1]}"


@dataclass
class Hit:
    path: str
    authorization: str | None
    cookie: str | None = None


@dataclass
class FakeRegistry:
    tls: CertPaths
    auth: Auth = "none"
    users: Mapping[str, str] = field(default_factory=lambda: {"alice": "s3cret"})
    # Repositories under these prefixes need a user's token (bearer) or credentials (basic).
    private: tuple[str, ...] = ("private/",)
    blob_redirect: str = ""  # host:port of a CDN (another FakeRegistry) serving /cdn/<digest>
    redirect_loop: bool = False
    delay: float = 0.0  # seconds before each manifest answer
    blobs: dict[str, bytes] = field(default_factory=dict)
    manifests: dict[tuple[str, str], tuple[str, bytes]] = field(default_factory=dict)
    # OAuth2 refresh tokens (dockerconfigjson `identitytoken`) the POST /token accepts -> user.
    identity_tokens: Mapping[str, str] = field(default_factory=lambda: {"rt-alice-1": "alice"})
    realm: str = ""  # host:port of the token service its challenges name ("" = its own)
    # Hostile answers: a raw Location for blob redirects, the token the token service issues
    # (default: user|scope), a Set-Cookie on every answer.
    blob_location: str = ""
    token_value: str | None = None
    set_cookie: str = ""
    manifest_error: tuple[int, str] | None = None  # (status, reason phrase) for every manifest
    hits: list[Hit] = field(default_factory=list)
    token_hits: list[Hit] = field(default_factory=list)
    token_forms: list[dict[str, str]] = field(default_factory=list)  # POST /token bodies
    host: str = ""
    _runner: web.AppRunner | None = None

    def push(self, repository: str, tag: str, built: Built) -> str:
        self.blobs.update(built.blobs)
        for media, body in [*built.manifests, built.top]:
            self.manifests[(repository, _digest(body))] = (media, body)
        self.manifests[(repository, tag)] = built.top
        return built.digest

    def manifest_hits(self, repository: str) -> int:
        return sum(h.path.startswith(f"/v2/{repository}/manifests/") for h in self.hits)

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get("/v2/{name:.+}/manifests/{ref}", self._manifest)
        app.router.add_get("/v2/{name:.+}/blobs/{digest}", self._blob)
        app.router.add_get("/cdn/{digest}", self._cdn)
        app.router.add_get("/token", self._token)
        app.router.add_post("/token", self._oauth_token)
        self._runner, self.host = await serve_tls(app, self.tls)
        return self.host

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _allowed(self, request: web.Request, name: str) -> web.Response | None:
        header = request.headers.get("Authorization")
        self.hits.append(Hit(request.path, header, request.headers.get("Cookie")))
        private = name.startswith(self.private)
        if self.auth == "none":
            return None
        if self.auth == "basic":
            if header and _basic_user(header, self.users):
                return None
            return web.Response(
                status=401, headers={"WWW-Authenticate": 'Basic realm="fake registry"'}
            )
        token = header.removeprefix("Bearer ") if header and header.startswith("Bearer ") else ""
        user, _, scope = token.partition("|")
        if token and f"repository:{name}:" in scope and (user or not private):
            return None
        challenge = (
            f'Bearer realm="https://{self.realm or self.host}/token",service="fake",'
            f'scope="repository:{name}:pull"'
        )
        if token:
            challenge += ',error="insufficient_scope"'
        return web.json_response(
            {"errors": [{"code": "UNAUTHORIZED"}]},
            status=401,
            headers={"WWW-Authenticate": challenge},
        )

    async def _token(self, request: web.Request) -> web.Response:
        header = request.headers.get("Authorization")
        self.token_hits.append(Hit(request.path_qs, header))
        user = ""
        if header:
            user = _basic_user(header, self.users)
            if not user:
                return web.json_response({"details": "bad credentials"}, status=401)
        scope = " ".join(request.query.getall("scope", []))
        token = f"{user}|{scope}" if self.token_value is None else self.token_value
        return web.json_response({"token": token, "expires_in": 300})

    async def _oauth_token(self, request: web.Request) -> web.Response:
        """distribution docs/spec/auth/oauth.md: the refresh-token grant, form-encoded."""
        self.token_hits.append(Hit(request.path_qs, request.headers.get("Authorization")))
        if request.content_type != "application/x-www-form-urlencoded":
            return web.json_response({"error": "unsupported_content_type"}, status=400)
        form = {k: str(v) for k, v in (await request.post()).items()}
        self.token_forms.append(form)
        user = self.identity_tokens.get(form.get("refresh_token", ""), "")
        if form.get("grant_type") != "refresh_token" or not form.get("client_id"):
            return web.json_response({"error": "invalid_request"}, status=400)
        if not user:
            return web.json_response({"error": "invalid_grant"}, status=401)
        scope = form.get("scope", "")
        return web.json_response(
            {"access_token": f"{user}|{scope}", "expires_in": 300, "scope": scope}
        )

    async def _manifest(self, request: web.Request) -> web.Response:
        name, ref = request.match_info["name"], request.match_info["ref"]
        if self.delay:
            await asyncio.sleep(self.delay)
        refused = self._allowed(request, name)
        if refused is not None:
            return refused
        if self.manifest_error is not None:
            return web.Response(status=self.manifest_error[0], reason=self.manifest_error[1])
        found = self.manifests.get((name, ref))
        if found is None:
            return web.json_response({"errors": [{"code": "MANIFEST_UNKNOWN"}]}, status=404)
        media, body = found
        headers = {"Content-Type": media, "Docker-Content-Digest": _digest(body)}
        if self.set_cookie:
            headers["Set-Cookie"] = self.set_cookie
        return web.Response(body=body, headers=headers)

    async def _blob(self, request: web.Request) -> web.Response:
        name, digest = request.match_info["name"], request.match_info["digest"]
        refused = self._allowed(request, name)
        if refused is not None:
            return refused
        if self.blob_location:
            return web.Response(status=307, headers={"Location": self.blob_location})
        if self.redirect_loop:
            raise web.HTTPTemporaryRedirect(f"https://{self.host}/v2/{name}/blobs/{digest}")
        if self.blob_redirect:
            raise web.HTTPTemporaryRedirect(f"https://{self.blob_redirect}/cdn/{digest}?sig=x")
        body = self.blobs.get(digest)
        if body is None:
            return web.json_response({"errors": [{"code": "BLOB_UNKNOWN"}]}, status=404)
        return web.Response(body=body, content_type="application/octet-stream")

    async def _cdn(self, request: web.Request) -> web.Response:
        self.hits.append(Hit(request.path, request.headers.get("Authorization")))
        body = self.blobs.get(request.match_info["digest"])
        if body is None:
            return web.Response(status=404)
        return web.Response(body=body, content_type="application/octet-stream")


def _digest(body: bytes) -> str:
    from tests.ociimages import digest

    return digest(body)


def _basic_user(header: str, users: Mapping[str, str]) -> str:
    if not header.startswith("Basic "):
        return ""
    try:
        user, _, password = base64.b64decode(header[6:]).decode().partition(":")
    except ValueError:
        return ""
    return user if users.get(user) == password else ""


class HangingServer:
    """Accepts TCP connections on 127.0.0.1 and never answers (not even the TLS handshake)."""

    def __init__(self) -> None:
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self.host = ""

    async def start(self) -> str:
        async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.accepted += 1
            self._writers.append(writer)
            await reader.read()  # until the client gives up

        self._server = await asyncio.start_server(hold, "127.0.0.1", 0)
        self.host = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self.host

    async def close(self) -> None:
        for writer in self._writers:
            writer.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


def closed_port() -> str:
    """127.0.0.1:<a port nobody listens on> (bound, then closed: connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"127.0.0.1:{port}"


def docker_config(host: str, user: str, password: str) -> dict[str, Any]:
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"auths": {host: {"auth": auth}}}


@contextmanager
def in_thread(fake: FakeRegistry) -> Iterator[FakeRegistry]:
    """Run `fake` on its own loop in a thread, for code under test that runs asyncio.run()."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(fake.start(), loop).result(10)
    try:
        yield fake
    finally:
        asyncio.run_coroutine_threadsafe(fake.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
