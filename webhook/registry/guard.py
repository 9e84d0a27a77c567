"""Which hosts a lookup may talk to (SPEC §4 step 6): an image reference is user input, and a pod
naming `169.254.169.254/x:1` must not make the webhook fetch from a cloud metadata endpoint.

Two checks, both before any connection:
- the registry of the image must be allowed: the common public registries (unless switched
  off), the hosts of the --registry-auth file, and `allowedRegistries`/`insecureRegistries`;
- every address a host resolves to must be public (not loopback, private, link-local, shared,
  reserved or multicast) unless the host is *listed* (named by the admin: the auth file or the
  config). The check runs before each request (IP literals never reach a resolver: aiohttp's
  TCPConnector._resolve_host returns them as they are) and again inside the connector's
  resolver, so a name that changes its answer between the two (DNS rebinding) is refused too.
Token realms and redirect targets (blob downloads go to CDNs) need not be allowed registries,
but their addresses are checked the same way.
"""

from __future__ import annotations

import ipaddress
import socket
import urllib.request
from base64 import b64encode
from collections.abc import Callable

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from yarl import URL

from webhook.core.config.registry import PUBLIC_REGISTRIES, RegistryLookups
from webhook.registry.reference import DOCKER_HUB, DOCKER_HUB_ENDPOINT

_HUB_NAMES = frozenset({DOCKER_HUB, DOCKER_HUB_ENDPOINT, "index.docker.io"})


class AddressRefused(OSError):
    """A host resolved only to addresses lookups may not reach (an OSError, so aiohttp reports
    it as a connection error, never as a crash)."""


def _split(host: str) -> tuple[str, str]:
    """`Registry:5000` -> ("registry", "5000"); `[::1]:5000` -> ("::1", "5000")."""
    host = host.lower()
    if host.startswith("["):
        end = host.find("]")
        return host[1:end], host[end + 2 :]
    name, _, port = host.partition(":") if host.count(":") == 1 else (host, "", "")
    return name, port


def _canonical(name: str) -> str:
    return DOCKER_HUB if name in _HUB_NAMES else name


def _matches(pattern: str, host: str) -> bool:
    """`registry:5000` matches that port only; `registry` any port; `*.pkg.dev` any host below."""
    p_name, p_port = _split(pattern)
    name, port = _split(host)
    if p_port and p_port != port:
        return False
    if p_name.startswith("*."):
        return name.endswith(p_name[1:])
    return _canonical(p_name) == _canonical(name)


# IPv6 prefixes that carry an IPv4 address in their last 32 bits, reaching it through a
# translator or a tunnel: NAT64's well-known prefix (RFC 6052) and its local-use prefix
# (RFC 8215), and the deprecated IPv4-compatible addresses ::a.b.c.d (RFC 4291 §2.5.5.1).
_EMBEDDING = (
    ipaddress.IPv6Network("64:ff9b::/96"),
    ipaddress.IPv6Network("64:ff9b:1::/48"),
    ipaddress.IPv6Network("::/96"),
)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address leads to: ::ffff:a.b.c.d, NAT64, ::a.b.c.d, 6to4
    (2002::/16) and Teredo (2001::/32: its server and its client)."""
    found: list[ipaddress.IPv4Address] = []
    if address.ipv4_mapped is not None:
        found.append(address.ipv4_mapped)
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)
    if any(address in net for net in _EMBEDDING):
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def public_address(text: str) -> bool:
    """True for an address on the public internet (what an unlisted host must resolve to); an
    IPv6 address that embeds an IPv4 one is judged by both."""
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return False
    candidates: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        candidates += _embedded_ipv4(address)
    return all(a.is_global and not a.is_multicast for a in candidates)


def ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _proxy_url(value: str) -> URL | None:
    try:
        url = URL(value if "://" in value else f"http://{value}")
    except ValueError:
        return None
    return url if url.host else None


def proxy_hosts() -> frozenset[str]:
    """Hosts of HTTPS_PROXY/HTTP_PROXY (what env_proxy uses): named by the admin, so they may
    be private (a corporate proxy usually is). NO_PROXY (getproxies' "no" entry) names hosts
    that are *not* proxies."""
    hosts = set()
    for scheme, value in urllib.request.getproxies_environment().items():
        url = _proxy_url(value) if scheme in ("http", "https") else None
        if url is not None and url.host:
            hosts.add(url.host.lower())
    return frozenset(hosts)


def env_proxy(url: URL) -> tuple[URL | None, dict[str, str]]:
    """The proxy for `url` from HTTPS_PROXY/HTTP_PROXY/NO_PROXY (upper or lower case), as
    aiohttp's trust_env reads them (helpers.get_env_proxy_for_url: urllib's proxy_bypass, then
    the proxy of the URL's scheme, http:// proxies only) but never with ~/.netrc: a proxy's
    credentials come only from its URL (sent as Proxy-Authorization, aiohttp's proxy_auth
    being deprecated)."""
    proxies = urllib.request.getproxies_environment()
    host = url.raw_host or ""
    if not host or urllib.request.proxy_bypass(host):
        return None, {}
    value = proxies.get(url.scheme)
    proxy = _proxy_url(value) if value else None
    if proxy is None or proxy.scheme != "http":
        return None, {}
    if not proxy.user:
        return proxy, {}
    raw = f"{proxy.user}:{proxy.password or ''}".encode()
    return proxy.with_user(None), {"Proxy-Authorization": "Basic " + b64encode(raw).decode()}


class HostPolicy:
    """The allow-list and the address rule; `auth_hosts` is read at each check (the auth file
    may change while the server runs)."""

    def __init__(
        self,
        settings: RegistryLookups,
        auth_hosts: Callable[[], frozenset[str]] = frozenset,
        proxies: frozenset[str] | None = None,
    ) -> None:
        self.settings = settings
        self._auth_hosts = auth_hosts
        self.proxies = proxy_hosts() if proxies is None else proxies

    def _admin_listed(self) -> tuple[str, ...]:
        return (
            *self.settings.allowed_registries,
            *self.settings.insecure_registries,
            *self._auth_hosts(),
        )

    def listed(self, host: str) -> bool:
        """Named by the admin (config or auth file): may resolve to any address."""
        return any(_matches(pattern, host) for pattern in self._admin_listed())

    def insecure(self, host: str) -> bool:
        return any(_matches(pattern, host) for pattern in self.settings.insecure_registries)

    def registry_refusal(self, registry: str) -> str:
        """'' when lookups may ask `registry`, else the reason (no I/O: answered at once)."""
        if self.listed(registry):
            return ""
        name, _ = _split(registry)
        if ip_literal(name) and not public_address(name):
            return "non-public address; allow it in registryLookups.allowedRegistries"
        if self.settings.public_registries and any(
            _matches(pattern, registry) for pattern in PUBLIC_REGISTRIES
        ):
            # The public registries serve HTTPS on 443: no other port of theirs is asked.
            if _split(registry)[1] in ("", "443"):
                return ""
            return "only port 443 of a public registry is asked; list it in allowedRegistries"
        return "its registry is not in registryLookups.allowedRegistries"

    def literal_refusal(self, host: str) -> str:
        """For a URL's host before a request: an unlisted IP literal must be public."""
        name, _ = _split(host)
        if ip_literal(name) and not self.listed(host) and not public_address(name):
            return f"{name} is not a public address"
        return ""

    def trusted_name(self, name: str, port: int) -> bool:
        """A resolved name whose addresses need no check: listed, or the proxy's."""
        return (
            name.lower() in self.proxies
            or self.listed(name)
            or (port > 0 and self.listed(f"{name}:{port}"))
        )


class GuardResolver(AbstractResolver):
    """The connector's resolver: answers of unlisted names keep their public addresses only,
    and a name with none left is refused (AddressRefused) before any connection."""

    def __init__(self, policy: HostPolicy, inner: AbstractResolver | None = None) -> None:
        self.policy = policy
        # aiohttp's resolvers bind the running loop when made: the default one is made on
        # first use, inside the loop that uses it.
        self._inner = inner

    @property
    def inner(self) -> AbstractResolver:
        if self._inner is None:
            self._inner = DefaultResolver()
        return self._inner

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self.inner.resolve(host, port, family)
        if self.policy.trusted_name(host, port):
            return results
        kept = [r for r in results if public_address(r["host"])]
        if not kept:
            shown = ", ".join(sorted({r["host"] for r in results})[:3])
            raise AddressRefused(f"{host} resolves to non-public address(es) {shown}")
        return kept

    async def check(self, host: str, port: int) -> None:
        """Raise AddressRefused unless `host`:`port` (a URL's) may be reached: the pre-request
        check, also when a proxy resolves the name instead of us."""
        refusal = self.policy.literal_refusal(
            f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        )
        if refusal:
            raise AddressRefused(refusal)
        if ip_literal(host):
            return
        await self.resolve(host, port, socket.AF_UNSPEC)

    async def close(self) -> None:
        if self._inner is not None:
            await self._inner.close()
