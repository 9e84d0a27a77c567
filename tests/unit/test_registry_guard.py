"""An image reference is user input: lookups go only to allowed registries and never to
non-public addresses unless the admin listed the host. Every refusal here is asserted before
any connection: the clients' sockets fail the test if one is ever about to be opened."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from yarl import URL

from tests.registryhelpers import FakeResolver, client, no_connection
from webhook.core.base.errors import ConfigError
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.config.registry import RegistryLookups
from webhook.registry.guard import HostPolicy, env_proxy, public_address
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
        # IPv4 embedded in IPv6, each leading to 169.254.169.254 or 10.0.0.1:
        "64:ff9b::a9fe:a9fe",  # NAT64 well-known prefix (RFC 6052)
        "64:ff9b::10.0.0.1",
        "64:ff9b:1::a9fe:a9fe",  # NAT64 local-use prefix (RFC 8215)
        "::a9fe:a9fe",  # IPv4-compatible ::a.b.c.d
        "::169.254.169.254",
        "2002:a9fe:a9fe::1",  # 6to4
        "2002:0a00:0001::1",
        "2001:0:a9fe:a9fe::1",  # Teredo, server 169.254.169.254
    ],
)
def test_non_public_addresses(address: str) -> None:
    assert not public_address(address)


def test_public_addresses() -> None:
    assert public_address("8.8.8.8") and public_address("2606:4700::1111")
    # The same forms leading to a public IPv4 address are public.
    assert public_address("64:ff9b::8.8.8.8") and public_address("2002:808:808::1")


@pytest.mark.parametrize(
    "registry", ["ghcr.io:22", "nvcr.io:8080", "docker.io:6379", "x.gcr.io:25"]
)
def test_public_registries_are_asked_on_port_443_only(registry: str) -> None:
    assert policy().registry_refusal(registry) == (
        "only port 443 of a public registry is asked; list it in allowedRegistries"
    )
    assert policy().registry_refusal(registry.split(":", maxsplit=1)[0] + ":443") == ""
    assert policy(allowed_registries=(registry,)).registry_refusal(registry) == ""


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


@pytest.mark.parametrize("no_proxy", ["metadata.internal", "metadata.internal,.svc"])
def test_a_no_proxy_name_is_not_taken_for_a_proxy(
    monkeypatch: pytest.MonkeyPatch, no_proxy: str
) -> None:
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", no_proxy)
    guard_policy = HostPolicy(WebhookConfig().registry_lookups)
    assert guard_policy.proxies == frozenset()
    assert not guard_policy.trusted_name("metadata.internal", 443)


def test_proxies_come_from_the_environment_without_netrc(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine proxy.corp.example login root password hunter2\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp.example:3128")
    monkeypatch.setenv("no_proxy", "registry.corp.example")
    assert env_proxy(URL("https://ghcr.io/v2/")) == (URL("http://proxy.corp.example:3128"), {})
    assert env_proxy(URL("https://registry.corp.example/v2/")) == (None, {})
    monkeypatch.setenv("HTTPS_PROXY", "http://user:pw@proxy.corp.example:3128")
    assert env_proxy(URL("https://ghcr.io/v2/")) == (
        URL("http://proxy.corp.example:3128"),
        {"Proxy-Authorization": "Basic dXNlcjpwdw=="},
    )
