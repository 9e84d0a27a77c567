"""HTTP to registries: TLS (system CAs plus --registry-ca), proxies from the environment, the
host guard before every request, the registries' auth flows, redirects and size caps.

Auth as containerd's remotes/docker does it (authorizer.go, auth/fetch.go): try the request;
on a 401 read the WWW-Authenticate challenge; for `Bearer`, GET a token from its realm with
its service and scope (the token spec's GET form, with Basic credentials when there are some)
and retry; for `Basic`, retry with the credentials. A credential that is an `identitytoken`
(an OAuth2 refresh token) is exchanged at the realm with the OAuth2 POST instead
(distribution docs/spec/auth/oauth.md "Example refreshing an Access Token": form
grant_type=refresh_token, refresh_token, service, client_id, scope; answer `access_token`),
as containerd's doBearerAuth does (FetchTokenWithOAuth when a secret is set), falling back to
the GET form with that secret only where containerd does (POST answered 400, 401 or 404).
Tokens are kept per registry and repository until they expire (expires_in, default 60 s as
the token spec says), Basic headers for CREDENTIAL_SECONDS; at most MAX_AUTH_ENTRIES of them
(least recently used dropped first: Docker Hub issues a token for any repository name, so the
names alone must not grow memory), each dropped as soon as the auth file no longer holds the
credential it was made from.

Credentials go only to their own registry and to a token realm of the same site (see
`realm_may_get_credentials`) or one the admin listed; a realm elsewhere is asked anonymously.
No ~/.netrc (aiohttp's trust_env would read it and send its passwords to registries and realms:
proxies are read from the environment here instead) and no cookies (each registry is a
different party). Redirects (blob downloads go to CDNs) are followed without credentials, at most
MAX_REDIRECTS, each target checked by the guard; HTTPS only, except for insecure-listed hosts.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
import ssl
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
from aiohttp.abc import AbstractResolver
from yarl import URL

from webhook.registry.challenge import Challenge, parse_challenges
from webhook.registry.credentials import Credential, Keyring
from webhook.registry.documents import parse
from webhook.registry.guard import (
    AddressRefused,
    GuardResolver,
    HostPolicy,
    env_proxy,
    ip_literal,
)
from webhook.registry.reference import ImageRef
from webhook.registry.results import INVALID, NOT_FOUND, UNAUTHORIZED, UNREACHABLE, LookupFailure

MAX_REDIRECTS = 3
MAX_TOKEN_BYTES = 1024 * 1024
DEFAULT_TOKEN_SECONDS = 60  # the token spec's default when expires_in is absent
# A token is reused at most this long, whatever its expires_in says.
MAX_TOKEN_SECONDS = 3600
# How long a Basic header (or an auth file's registrytoken) is reused without a new challenge.
CREDENTIAL_SECONDS = 300
# Authorization headers kept at most (per registry and repository).
MAX_AUTH_ENTRIES = 1024
# A bearer token as RFC 6750 writes it (b64token), leniently: visible ASCII, no space, so it
# can never carry a line break into a header.
_TOKEN = re.compile(r"[\x21-\x7e]+")
# Realms on another host of a two-label site that the public defaults need (Docker Hub's token
# service: the WWW-Authenticate of registry-1.docker.io names https://auth.docker.io/token).
_KNOWN_REALMS = {"registry-1.docker.io": frozenset({"auth.docker.io"})}
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "gpu-admission-webhook (image CUDA lookup)"
# The OAuth2 client_id: "does not need to be registered [...] but should be set to a meaningful
# value in order to allow auditing" (distribution docs/spec/auth/oauth.md).
CLIENT_ID = "gpu-admission-webhook"
# containerd authorizer.go doBearerAuth: "Registries without support for POST may return 404
# [GCR] ... 401 [Artifactory] ... 400 [ACR]": then the GET form (405 only with a username).
_POST_FALLBACK = frozenset({400, 401, 404})

ConnectorFactory = Callable[[GuardResolver, ssl.SSLContext], aiohttp.BaseConnector]


@dataclass(frozen=True, slots=True)
class Response:
    body: bytearray
    content_type: str
    digest: str  # Docker-Content-Digest, when sent


@dataclass(frozen=True, slots=True)
class _Auth:
    header: str
    expiry: float  # time.monotonic()
    credential: Credential | None


def _later(seconds: float) -> float:
    return time.monotonic() + seconds


def ssl_context(ca_file: Path | None) -> ssl.SSLContext:
    """System CAs, plus the PEM bundle of --registry-ca; ValueError when it is unusable."""
    context = ssl.create_default_context()
    if ca_file is not None:
        try:
            context.load_verify_locations(cafile=str(ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"cannot load CA certificates from {ca_file}: {exc}") from None
    return context


def realm_may_get_credentials(realm: str, registry: str) -> bool:
    """Whether a token realm on host `realm` is the registry's own site (`registry` is the
    registry's host, without its port).

    Without the public suffix list a two-label parent cannot be told apart from a public
    suffix (`docker.io` from `co.uk`), so the rule is conservative: the registry's own host;
    Docker Hub's auth.docker.io; or the registry's parent domain (its host without the first
    label) and hosts below it when that parent has at least three labels — `auth.corp.example.com`
    for `registry.corp.example.com`, never `evil.co.uk` for `example.co.uk` (whose parent is
    `co.uk`), nor any `*.amazonaws.com` for an ECR registry beyond its own regional endpoint.
    Any other realm gets credentials only when the admin lists its host (allowedRegistries)."""
    realm, registry = realm.strip("[]").lower(), registry.strip("[]").lower()
    if realm == registry:
        return True
    if ip_literal(realm) or ip_literal(registry):
        return False
    if realm in _KNOWN_REALMS.get(registry, ()):
        return True
    parent = registry.partition(".")[2]
    return parent.count(".") >= 2 and (realm == parent or realm.endswith("." + parent))


def _basic(credential: Credential) -> str:
    """Basic user:password; for an identity token, ":token" (containerd FetchToken:
    SetBasicAuth(to.Username, to.Secret) with the username empty)."""
    if credential.identity_token:
        raw = f":{credential.identity_token}".encode()
    else:
        raw = f"{credential.username}:{credential.password}".encode()
    return "Basic " + base64.b64encode(raw).decode("ascii")


async def _read(resp: aiohttp.ClientResponse, limit: int, what: str) -> bytearray:
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


def _status_failure(status: int, reason: str, ref: ImageRef, what: str) -> LookupFailure:
    if status == 404:
        return LookupFailure(NOT_FOUND, f"{what} not found (404)")
    # The reason phrase is the server's own text: a few words are kept, never its whole line.
    return LookupFailure(
        UNREACHABLE, f"the registry answered {status} {reason[:40]} for the {what}"
    )


class RegistryHttp:
    """One aiohttp session (made in the running loop on first use) for every registry."""

    def __init__(
        self,
        policy: HostPolicy,
        keyring: Callable[[], Keyring] = Keyring,
        *,
        ca_file: Path | None = None,
        resolver: AbstractResolver | None = None,
        connector_factory: ConnectorFactory | None = None,
    ) -> None:
        self.policy = policy
        self.keyring = keyring
        self.guard = GuardResolver(policy, resolver)
        self.ssl = ssl_context(ca_file)
        self._connector_factory = connector_factory
        self._session: aiohttp.ClientSession | None = None
        # (endpoint, repository) -> the Authorization header, its monotonic expiry, and the
        # credential it was made from (None: anonymous); least recently used first.
        self._auth: OrderedDict[tuple[str, str], _Auth] = OrderedDict()
        # One token request at a time per (endpoint, repository): lookups running together
        # (one image for several architectures, several tags of a repository) share it, as
        # containerd's authHandler does (scopedTokens: "only one fetch token job"). A lock
        # lives while someone holds or awaits it: [lock, users].
        self._auth_locks: dict[tuple[str, str], list[Any]] = {}

    @property
    def cached_authorizations(self) -> int:
        return len(self._auth)

    @property
    def auth_locks(self) -> int:
        return len(self._auth_locks)

    @contextlib.asynccontextmanager
    async def _auth_lock(self, key: tuple[str, str]) -> AsyncIterator[None]:
        entry = self._auth_locks.setdefault(key, [asyncio.Lock(), 0])
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del self._auth_locks[key]

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

    async def get(self, ref: ImageRef, path: str, accept: str, limit: int, what: str) -> Response:
        """GET /v2/<repository>/<path> with the registry's auth flow; LookupFailure otherwise."""
        url = URL(f"{self.scheme(ref.endpoint)}://{ref.endpoint}/v2/{ref.repository}/{path}")
        key = (ref.endpoint, ref.repository)
        credential = self.keyring().lookup(ref.registry, ref.repository)
        for attempt in range(2):
            header = self._cached_auth(key, credential)
            resp = await self._request(url, {"Accept": accept}, header)
            async with resp:
                if resp.status == 401 and attempt == 0:
                    challenges = parse_challenges(resp.headers.getall("WWW-Authenticate", []))
                    async with self._auth_lock(key):
                        fresh = self._cached_auth(key, credential)
                        if fresh is None or fresh == header:
                            made, expiry = await self._authorize(challenges, ref, credential)
                            self._remember(key, _Auth(made, expiry, credential))
                    continue
                if resp.status in (401, 403):
                    raise _denied(resp.status, ref, credential)
                if resp.status in _REDIRECTS:
                    return await self._follow(resp, accept, limit, what, ref)
                if resp.status != 200:
                    raise _status_failure(resp.status, resp.reason or "", ref, what)
                body = await _read(resp, limit, what)
                return Response(
                    body, resp.content_type, resp.headers.get("Docker-Content-Digest", "")
                )
        raise _denied(401, ref, credential)  # pragma: no cover - the loop always returns

    def _cached_auth(self, key: tuple[str, str], credential: Credential | None) -> str | None:
        """The header kept for `key`, unless it expired or the auth file's credential for it
        is no longer the one it was made from (removed, changed or added)."""
        cached = self._auth.get(key)
        if cached is None:
            return None
        if time.monotonic() >= cached.expiry or cached.credential != credential:
            del self._auth[key]
            return None
        self._auth.move_to_end(key)
        return cached.header

    def _remember(self, key: tuple[str, str], auth: _Auth) -> None:
        self._auth[key] = auth
        self._auth.move_to_end(key)
        now = time.monotonic()
        for old in [k for k, v in self._auth.items() if v.expiry <= now]:
            del self._auth[old]
        while len(self._auth) > MAX_AUTH_ENTRIES:
            self._auth.popitem(last=False)

    async def _request(
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

    async def _follow(
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
            nxt = await self._request(target, {"Accept": accept}, None, "redirect to")
            if current is not resp:
                current.release()
            current = nxt
            if current.status in _REDIRECTS:
                continue
            try:
                if current.status != 200:
                    raise _status_failure(current.status, current.reason or "", ref, what)
                body = await _read(current, limit, what)
                return Response(body, current.content_type, "")
            finally:
                current.release()
        current.release()
        raise LookupFailure(INVALID, f"more than {MAX_REDIRECTS} redirects for the {what}")

    async def _authorize(
        self, challenges: list[Challenge], ref: ImageRef, credential: Credential | None
    ) -> tuple[str, float]:
        for challenge in challenges:
            if challenge.scheme == "bearer":
                if credential is not None and credential.registry_token:
                    # moby existingTokenHandler: the token as it is, no token service asked.
                    if not _TOKEN.fullmatch(credential.registry_token):
                        raise LookupFailure(
                            UNAUTHORIZED, "the --registry-auth registrytoken is not a token"
                        )
                    return f"Bearer {credential.registry_token}", _later(CREDENTIAL_SECONDS)
                return await self._token(challenge, ref, credential)
            if challenge.scheme == "basic" and credential is not None:
                # Only a token, no password: containerd doBasicAuth "missing username or secret".
                token = (
                    "a registrytoken"
                    if credential.registry_token
                    else "an identitytoken"
                    if credential.identity_token
                    else ""
                )
                if token:
                    raise LookupFailure(
                        UNAUTHORIZED,
                        f"the registry asks for a password; its --registry-auth entry has only "
                        f"{token}",
                    )
                return _basic(credential), _later(CREDENTIAL_SECONDS)
        raise _denied(401, ref, credential)

    async def _token(
        self, challenge: Challenge, ref: ImageRef, credential: Credential | None
    ) -> tuple[str, float]:
        realm = challenge.params.get("realm", "")
        try:
            url = URL(realm)
        except ValueError:
            url = URL()
        host = url.host or ""
        if not url.is_absolute() or not (
            url.scheme == "https" or (url.scheme == "http" and self.policy.insecure(host))
        ):
            raise LookupFailure(INVALID, "the registry sent an unusable token realm")
        service = challenge.params.get("service", "")
        scopes = challenge.params.get("scope", "").split() or [f"repository:{ref.repository}:pull"]
        query = [("service", service)] if service else []
        query += [("scope", scope) for scope in scopes]
        # Credentials (an identity token too) only to a realm of the registry's own site or a
        # listed host; elsewhere the realm is asked anonymously, with the GET form.
        same_site = realm_may_get_credentials(host, ref.hostname) or self.policy.listed(host)
        secret = credential if credential is not None and same_site else None
        started = time.monotonic()
        resp = None
        if secret is not None and secret.identity_token:
            form = {
                "grant_type": "refresh_token",
                "refresh_token": secret.identity_token,
                "service": service,
                "client_id": CLIENT_ID,
                "scope": " ".join(scopes),
            }
            resp = await self._request(url, {}, None, "token realm", form)
            if resp.status in _POST_FALLBACK:
                resp.release()
                resp = None
        if resp is None:
            authorization = _basic(secret) if secret is not None else None
            resp = await self._request(url.update_query(query), {}, authorization, "token realm")
        async with resp:
            if resp.status in (401, 403):
                raise _denied(resp.status, ref, credential)
            if resp.status != 200:
                raise LookupFailure(
                    UNREACHABLE,
                    f"the token service answered {resp.status} {(resp.reason or '')[:40]}",
                )
            body = await _read(resp, MAX_TOKEN_BYTES, "token")
        # Bounded by structure like every registry document (small: parsed here, on the loop).
        try:
            data: dict[str, Any] | None = parse(body, "token answer")
        except LookupFailure as failure:
            if not failure.detail.endswith("is not a JSON object"):
                raise
            data = None
        token = data.get("token") or data.get("access_token") if data is not None else None
        if not isinstance(token, str) or not token:
            raise LookupFailure(INVALID, "the token service sent no token")
        if not _TOKEN.fullmatch(token):
            raise LookupFailure(INVALID, "the token service sent no usable token")
        expires = data.get("expires_in") if data is not None else None
        seconds = expires if isinstance(expires, int) and expires > 0 else DEFAULT_TOKEN_SECONDS
        seconds = min(seconds, MAX_TOKEN_SECONDS)
        # Renewed a little early, so a token never expires between two requests of a lookup.
        return f"Bearer {token}", started + max(seconds - 5, 1)


def _denied(status: int, ref: ImageRef, credential: Credential | None) -> LookupFailure:
    if credential is None:
        return LookupFailure(
            UNAUTHORIZED, f"{status} from the registry: add credentials for it to --registry-auth"
        )
    return LookupFailure(
        UNAUTHORIZED, f"the registry refused the --registry-auth credentials ({status})"
    )
