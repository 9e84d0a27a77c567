"""A registry whose name does not resolve: the warning names the way out (imageCudaTable,
registryLookups) instead of `[Errno -2] Name or service not known`. The resolver raises what
getaddrinfo raises for an unknown name; nothing leaves the machine."""

from __future__ import annotations

import socket

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from tests.registryhelpers import client, no_connection
from webhook.registry.results import UNREACHABLE, unresolved_detail, warning


class UnknownNames(AbstractResolver):
    """Every name is unknown, as getaddrinfo says for a `.invalid` name (RFC 6761)."""

    def __init__(self, error: socket.gaierror) -> None:
        self.error = error
        self.asked: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        raise self.error

    async def close(self) -> None:
        return None


@pytest.mark.parametrize(
    ("error", "detail"),
    [
        (
            socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
            "DNS does not know its registry: set imageCudaTable or registryLookups",
        ),
        (
            socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution"),
            "DNS did not answer for its registry: set imageCudaTable or registryLookups",
        ),
    ],
)
async def test_an_unresolvable_registry_names_the_way_out(
    error: socket.gaierror, detail: str
) -> None:
    resolver = UnknownNames(error)
    c = client(None, "registry.invalid", resolver=resolver, connector=no_connection)
    try:
        result = await c.lookup("registry.invalid/team/app:1", "amd64")
    finally:
        await c.close()
    assert resolver.asked == ["registry.invalid"]
    assert (result.status, result.detail) == (UNREACHABLE, detail)
    shown = warning("registry.invalid/team/app:1", result.detail)
    assert shown == f"CUDA lookup of registry.invalid/team/app:1: {detail}"
    assert "Errno" not in shown
    assert len(shown) <= 120


def test_any_other_resolver_failure_gets_the_same_way_out() -> None:
    assert unresolved_detail(socket.gaierror("no such host")) == (
        "DNS does not know its registry: set imageCudaTable or registryLookups"
    )
