"""Clients for registry tests that can only ever connect to loopback: every socket goes through
a factory that fails the test before it opens one to any other address."""

from __future__ import annotations

import ipaddress
import socket
import ssl
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from webhook.core.config.model import WebhookConfig
from webhook.core.config.registry import RegistryLookups
from webhook.registry.client import RegistryClient
from webhook.registry.guard import GuardResolver

AddrInfo = tuple[Any, ...]


def loopback_socket(addr_info: AddrInfo) -> socket.socket:
    family, kind, proto, _, address = addr_info
    if not ipaddress.ip_address(address[0]).is_loopback:
        pytest.fail(f"a connection to {address[0]} was about to be opened")
    return socket.socket(family, kind, proto)


def loopback_connector(guard: GuardResolver, context: ssl.SSLContext) -> aiohttp.BaseConnector:
    return aiohttp.TCPConnector(resolver=guard, ssl=context, socket_factory=loopback_socket)


def no_socket(addr_info: AddrInfo) -> socket.socket:
    pytest.fail(f"a connection to {addr_info[4][0]} was about to be opened")


def no_connection(guard: GuardResolver, context: ssl.SSLContext) -> aiohttp.BaseConnector:
    """For guard tests: any socket at all fails the test."""
    return aiohttp.TCPConnector(resolver=guard, ssl=context, socket_factory=no_socket)


class FakeResolver(AbstractResolver):
    """Names -> addresses without DNS; a name it does not know fails the test."""

    def __init__(self, answers: dict[str, Sequence[str]]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        if host not in self.answers:
            pytest.fail(f"unexpected DNS lookup of {host}")
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for address in self.answers[host]
        ]

    async def close(self) -> None:
        return None


def lookups(*allowed: str, **settings: Any) -> WebhookConfig:
    return WebhookConfig(registry_lookups=RegistryLookups(allowed_registries=allowed, **settings))


def client(
    ca: Path | None,
    *allowed: str,
    auth_file: Path | None = None,
    resolver: AbstractResolver | None = None,
    connector: Callable[[GuardResolver, ssl.SSLContext], aiohttp.BaseConnector] = (
        loopback_connector
    ),
    **settings: Any,
) -> RegistryClient:
    return RegistryClient(
        lookups(*allowed, **settings),
        auth_file=auth_file,
        ca_file=ca,
        resolver=resolver,
        connector_factory=connector,
    )
