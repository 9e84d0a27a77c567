"""HTTP requests to registries: TLS, proxies, the host guard, redirects and size caps.

TLS trusts the system CAs plus --registry-ca. No ~/.netrc (aiohttp's trust_env would read it
and send its passwords to registries and realms: proxies are read from the environment here
instead) and no cookies (each registry is a different party). Redirects (blob downloads go to
CDNs) are followed without credentials, at most MAX_REDIRECTS, each target checked by the
guard; HTTPS only, except for insecure-listed hosts. The auth flow around these requests is
registry/http.py, answering a challenge registry/auth.py.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import aiohttp
from aiohttp.abc import AbstractResolver
from yarl import URL

from webhook.registry.guard import AddressRefused, GuardResolver, HostPolicy, env_proxy
from webhook.registry.reference import ImageRef
from webhook.registry.results import INVALID, NOT_FOUND, UNREACHABLE, LookupFailure

MAX_REDIRECTS = 3
REDIRECTS = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "gpu-admission-webhook (image CUDA lookup)"

ConnectorFactory = Callable[[GuardResolver, ssl.SSLContext], aiohttp.BaseConnector]


@dataclass(frozen=True, slots=True)
class Response:
    body: bytearray
    content_type: str
    digest: str  # Docker-Content-Digest, when sent


def ssl_context(ca_file: Path | None) -> ssl.SSLContext:
    """System CAs, plus the PEM bundle of --registry-ca; ValueError when it is unusable."""
    context = ssl.create_default_context()
    if ca_file is not None:
        try:
            context.load_verify_locations(cafile=str(ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"cannot load CA certificates from {ca_file}: {exc}") from None
    return context


async def read_limited(resp: aiohttp.ClientResponse, limit: int, what: str) -> bytearray:
    """The body, at most `limit` bytes (decompressed: aiohttp ≥ 3.13.3 bounds decompression),
    in one buffer (no list of chunks joined into a second copy)."""
    if resp.content_length is not None and resp.content_length > limit:
        raise LookupFailure(INVALID, f"{what} is larger than {limit // 1024} KiB")
    body = bytearray()
    async for chunk in resp.content.iter_chunked(64 * 1024):
        if len(body) + len(chunk) > limit:
            raise LookupFailure(INVALID, f"{what} is larger than {limit // 1024} KiB")
        body += chunk
    return body


def status_failure(status: int, reason: str, ref: ImageRef, what: str) -> LookupFailure:
    if status == 404:
        return LookupFailure(NOT_FOUND, f"{what} not found (404)")
    # The reason phrase is the server's own text: a few words are kept, never its whole line.
    return LookupFailure(
        UNREACHABLE, f"the registry answered {status} {reason[:40]} for the {what}"
    )


class Transport:
    """One aiohttp session (made in the running loop on first use) for every registry."""

    def __init__(
        self,
        policy: HostPolicy,
        *,
        ca_file: Path | None = None,
        resolver: AbstractResolver | None = None,
        connector_factory: ConnectorFactory | None = None,
    ) -> None:
        self.policy = policy
        self.guard = GuardResolver(policy, resolver)
        self.ssl = ssl_context(ca_file)
        self._connector_factory = connector_factory
        self._session: aiohttp.ClientSession | None = None

    def _session_now(self) -> aiohttp.ClientSession:
        if self._session is None:
            if self._connector_factory is not None:
                connector = self._connector_factory(self.guard, self.ssl)
            else:
                connector = aiohttp.TCPConnector(
                    resolver=self.guard, ssl=self.ssl, limit=64, ttl_dns_cache=30
                )
            # trust_env off: it would also send ~/.netrc passwords (aiohttp ClientSession._request
            # "Try netrc if auth is still None and trust_env is enabled"); proxies come from
            # env_proxy instead. No cookie jar: a cookie of one registry never goes to another.
            self._session = aiohttp.ClientSession(
                connector=connector,
                trust_env=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                headers={"User-Agent": USER_AGENT},
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def scheme(self, host: str) -> str:
        return "http" if self.policy.insecure(host) else "https"

    async def request(
        self,
        url: URL,
        headers: dict[str, str],
        authorization: str | None,
        role: str = "",
        form: dict[str, str] | None = None,
    ) -> aiohttp.ClientResponse:
        """GET `url` (POST `form`, url-encoded, when given) once the guard allowed its host;
        `role` ("token realm", "redirect") prefixes a refusal, since such hosts are not the
        image's registry."""
        try:
            await self.guard.check(url.host or "", url.port or 0)
        except AddressRefused as exc:
            if role:
                raise AddressRefused(f"{role} {exc}; allow it in allowedRegistries") from None
            raise
        if authorization:
            headers = {**headers, "Authorization": authorization}
        session = self._session_now()
        proxy, proxy_headers = env_proxy(url)
        if form is not None:
            headers = {
                **headers,
                "Content-Type": "application/x-www-form-urlencoded; charset=utf-8",
            }
            return await session.post(
                url,
                data=urlencode(form).encode(),
                headers=headers,
                allow_redirects=False,
                proxy=proxy,
                proxy_headers=proxy_headers,
            )
        return await session.get(
            url, headers=headers, allow_redirects=False, proxy=proxy, proxy_headers=proxy_headers
        )

    async def follow(
        self, resp: aiohttp.ClientResponse, accept: str, limit: int, what: str, ref: ImageRef
    ) -> Response:
        """Follow redirects without credentials (blob downloads go to CDNs)."""
        current = resp
        for _ in range(MAX_REDIRECTS):
            location = current.headers.get("Location")
            if not location:
                raise LookupFailure(INVALID, f"the registry redirected the {what} nowhere")
            try:
                target = current.url.join(URL(location))
                host = target.host or ""
            except ValueError:
                target, host = URL(), ""
            if not target.is_absolute() or not host:
                raise LookupFailure(
                    INVALID, f"the registry redirected the {what} to a malformed address"
                )
            if target.scheme != "https" and not (
                target.scheme == "http" and self.policy.insecure(host)
            ):
                raise LookupFailure(INVALID, f"the registry redirected the {what} off HTTPS")
            nxt = await self.request(target, {"Accept": accept}, None, "redirect to")
            if current is not resp:
                current.release()
            current = nxt
            if current.status in REDIRECTS:
                continue
            try:
                if current.status != 200:
                    raise status_failure(current.status, current.reason or "", ref, what)
                body = await read_limited(current, limit, what)
                return Response(body, current.content_type, "")
            finally:
                current.release()
        current.release()
        raise LookupFailure(INVALID, f"more than {MAX_REDIRECTS} redirects for the {what}")
