"""An image reference is user input: lookups go only to allowed registries and never to
non-public addresses unless the admin listed the host. Every refusal here is asserted before
any connection: the clients' sockets fail the test if one is ever about to be opened."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.registryhelpers import FakeResolver, client, no_connection
from webhook.core.config import WebhookConfig, load_config
from webhook.core.config_registry import RegistryLookups
from webhook.core.errors import ConfigError
from webhook.registry.guard import HostPolicy, public_address
from webhook.registry.results import REFUSED


def policy(**settings: Any) -> HostPolicy:
    return HostPolicy(RegistryLookups(**settings), proxies=frozenset())


@pytest.mark.parametrize(
    "registry",
    [
        "docker.io",
        "registry-1.docker.io",
        "index.docker.io",
        "nvcr.io",
        "ghcr.io",
        "quay.io",
        "registry.k8s.io",
        "gcr.io",
        "us.gcr.io",
        "us-docker.pkg.dev",
        "public.ecr.aws",
        "mcr.microsoft.com",
    ],
)
def test_the_common_public_registries_are_allowed_by_default(registry: str) -> None:
    assert policy().registry_refusal(registry) == ""


def test_public_registries_can_be_switched_off() -> None:
    assert policy(public_registries=False).registry_refusal("nvcr.io") == (
        "its registry is not in registryLookups.allowedRegistries"
    )


@pytest.mark.parametrize(
    ("registry", "reason"),
    [
        (
            "169.254.169.254",
            "non-public address; allow it in registryLookups.allowedRegistries",
        ),
        (
            "127.0.0.1:5000",
            "non-public address; allow it in registryLookups.allowedRegistries",
        ),
        (
            "10.0.0.8",
            "non-public address; allow it in registryLookups.allowedRegistries",
        ),
        (
            "[::1]:5000",
            "non-public address; allow it in registryLookups.allowedRegistries",
        ),
        (
            "registry.corp.example",
            "its registry is not in registryLookups.allowedRegistries",
        ),
        ("8.8.8.8", "its registry is not in registryLookups.allowedRegistries"),
        (
            "nvcr.io.evil.example",
            "its registry is not in registryLookups.allowedRegistries",
        ),
    ],
)
def test_other_registries_are_refused_with_the_reason(registry: str, reason: str) -> None:
    assert policy().registry_refusal(registry) == reason


def test_listed_hosts_are_allowed_whatever_their_address() -> None:
    listed = policy(
        allowed_registries=("registry.corp.example", "10.0.0.8:5000", "*.corp.example"),
        insecure_registries=("build-cache:5000",),
    )
    for registry in (
        "registry.corp.example",
        "registry.corp.example:443",
        "10.0.0.8:5000",
        "mirror.corp.example",
        "build-cache:5000",
    ):
        assert listed.registry_refusal(registry) == "", registry
    # A port in the list is that port only.
    assert listed.registry_refusal("10.0.0.8:6000") != ""
    assert listed.insecure("build-cache:5000") and not listed.insecure("build-cache:5001")


def test_hosts_of_the_auth_file_are_allowed() -> None:
    with_auth = HostPolicy(
        RegistryLookups(), lambda: frozenset({"registry.corp.example"}), frozenset()
    )
    assert with_auth.registry_refusal("registry.corp.example") == ""
    assert with_auth.listed("registry.corp.example")


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "::1",
        "fe80::1",
        "fd00::1",
        "::ffff:169.254.169.254",
        "224.0.0.1",
        "240.0.0.1",
    ],
)
def test_non_public_addresses(address: str) -> None:
    assert not public_address(address)


def test_public_addresses() -> None:
    assert public_address("8.8.8.8") and public_address("2606:4700::1111")


def test_config_refuses_a_host_that_is_not_one() -> None:
    with pytest.raises(ConfigError, match="'http://x/y z' is not a registry host"):
        load_config({"registryLookups": {"allowedRegistries": ["http://x/y z"]}})
    config = load_config({"registryLookups": {"allowedRegistries": ["HTTPS://Registry:5000/"]}})
    assert config.registry_lookups.allowed_registries == ("registry:5000",)


async def test_a_metadata_address_in_the_reference_is_refused_at_once() -> None:
    # No DNS (a resolver that fails the test if asked) and no socket (likewise).
    resolver = FakeResolver({})
    c = client(None, resolver=resolver, connector=no_connection)
    try:
        started = time.perf_counter()
        result = await c.lookup("169.254.169.254/latest/meta-data:1", "amd64")
        elapsed = time.perf_counter() - started
    finally:
        await c.close()
    assert (result.status, result.detail) == (
        REFUSED,
        "non-public address; allow it in registryLookups.allowedRegistries",
    )
    assert elapsed < 0.1
    assert resolver.asked == []


async def test_an_allowed_name_resolving_to_a_metadata_address_is_refused_before_connecting() -> (
    None
):
    # registry.k8s.io is allowed by default; here its DNS answer is the metadata endpoint.
    resolver = FakeResolver({"registry.k8s.io": ["169.254.169.254"]})
    c = client(None, resolver=resolver, connector=no_connection)
    try:
        result = await c.lookup("registry.k8s.io/pause:3.9", "amd64")
    finally:
        await c.close()
    assert (result.status, result.detail) == (
        REFUSED,
        "registry.k8s.io resolves to non-public address(es) 169.254.169.254",
    )


async def test_docker_hub_is_asked_at_its_api_endpoint() -> None:
    resolver = FakeResolver({"registry-1.docker.io": ["10.9.9.9"]})
    c = client(None, resolver=resolver, connector=no_connection)
    try:
        result = await c.lookup("vllm/vllm-openai:v0.8.5", "amd64")
    finally:
        await c.close()
    assert resolver.asked == ["registry-1.docker.io"]
    assert result.detail == "registry-1.docker.io resolves to non-public address(es) 10.9.9.9"


async def test_an_unlisted_registry_is_refused_without_dns_or_connection() -> None:
    resolver = FakeResolver({})
    c = client(None, resolver=resolver, connector=no_connection)
    try:
        result = await c.lookup("registry.corp.example/team/app:1", "amd64")
    finally:
        await c.close()
    assert result.status == REFUSED
    assert resolver.asked == []


async def test_a_proxy_host_may_be_private(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp.example:3128")
    guard_policy = HostPolicy(WebhookConfig().registry_lookups)
    assert guard_policy.trusted_name("proxy.corp.example", 3128)
    assert not guard_policy.trusted_name("nvcr.io", 443)
