"""Registry GETs with the auth flow around them, and the Authorization headers kept for reuse.

On a 401 the WWW-Authenticate challenge is answered (registry/auth.py) and the request tried
again; the requests themselves, redirects and size caps are registry/transport.py. Tokens are
kept per registry and repository until they expire (expires_in, default 60 s as the token spec
says), Basic headers for CREDENTIAL_SECONDS (registry/auth.py); at most MAX_AUTH_ENTRIES of
them (least recently used dropped first: Docker Hub issues a token for any repository name, so
the names alone must not grow memory), each dropped as soon as the auth file no longer holds
the credential it was made from.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp.abc import AbstractResolver
from yarl import URL

from webhook.registry.auth import authorize, denied
from webhook.registry.challenge import parse_challenges
from webhook.registry.credentials import Credential, Keyring
from webhook.registry.guard import HostPolicy
from webhook.registry.reference import ImageRef
from webhook.registry.transport import (
    REDIRECTS,
    ConnectorFactory,
    Response,
    Transport,
    read_limited,
    status_failure,
)

# Authorization headers kept at most (per registry and repository).
MAX_AUTH_ENTRIES = 1024


@dataclass(frozen=True, slots=True)
class _Auth:
    header: str
    expiry: float  # time.monotonic()
    credential: Credential | None


class RegistryHttp:
    """GETs from registries with their auth flow, over one Transport (one aiohttp session)."""

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
        self.transport = Transport(
            policy, ca_file=ca_file, resolver=resolver, connector_factory=connector_factory
        )
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

    async def close(self) -> None:
        await self.transport.close()

    def scheme(self, host: str) -> str:
        return self.transport.scheme(host)

    async def get(self, ref: ImageRef, path: str, accept: str, limit: int, what: str) -> Response:
        """GET /v2/<repository>/<path> with the registry's auth flow; LookupFailure otherwise."""
        url = URL(f"{self.scheme(ref.endpoint)}://{ref.endpoint}/v2/{ref.repository}/{path}")
        key = (ref.endpoint, ref.repository)
        credential = self.keyring().lookup(ref.registry, ref.repository)
        for attempt in range(2):
            header = self._cached_auth(key, credential)
            resp = await self.transport.request(url, {"Accept": accept}, header)
            async with resp:
                if resp.status == 401 and attempt == 0:
                    challenges = parse_challenges(resp.headers.getall("WWW-Authenticate", []))
                    async with self._auth_lock(key):
                        fresh = self._cached_auth(key, credential)
                        if fresh is None or fresh == header:
                            made, expiry = await authorize(
                                self.transport, challenges, ref, credential
                            )
                            self._remember(key, _Auth(made, expiry, credential))
                    continue
                if resp.status in (401, 403):
                    raise denied(resp.status, ref, credential)
                if resp.status in REDIRECTS:
                    return await self.transport.follow(resp, accept, limit, what, ref)
                if resp.status != 200:
                    raise status_failure(resp.status, resp.reason or "", ref, what)
                body = await read_limited(resp, limit, what)
                return Response(
                    body, resp.content_type, resp.headers.get("Docker-Content-Digest", "")
                )
        raise denied(401, ref, credential)  # pragma: no cover - the loop always returns

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
