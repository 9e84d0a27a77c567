"""`identitytoken` entries of a dockerconfigjson: the refresh token is exchanged at the token
realm with the OAuth2 POST (distribution docs/spec/auth/oauth.md), and goes to no other host.
An in-process registry and token service over TLS on 127.0.0.1; no other address is used."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from tests.fakeregistry import FakeRegistry
from tests.ociimages import image
from tests.registryhelpers import client
from webhook.core.base.versions import CudaVersion
from webhook.registry.results import FOUND, UNAUTHORIZED, LookupResult
from webhook.tls.certs import CertPaths, write_certificates

CUDA_12_1 = ["NVIDIA_REQUIRE_CUDA=cuda>=12.1"]


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> CertPaths:
    return write_certificates(tmp_path_factory.mktemp("tls"), ["localhost"], ["127.0.0.1"])


def identity_file(tmp_path: Path, host: str, token: str) -> Path:
    """As `docker login` leaves it when the token service gave a refresh token."""
    path = tmp_path / "config.json"
    entry = {"auth": base64.b64encode(b"alice:").decode(), "identitytoken": token}
    path.write_text(json.dumps({"auths": {host: entry}}))
    return path


async def lookup(tls: CertPaths, image_ref: str, *allowed: str, **kw: Any) -> LookupResult:
    c = client(tls.ca_cert, *allowed, **kw)
    try:
        return await c.lookup(image_ref, "amd64")
    finally:
        await c.close()


async def test_an_identity_token_is_exchanged_with_the_oauth2_refresh_token_post(
    tls: CertPaths, tmp_path: Path
) -> None:
    fake = FakeRegistry(tls, auth="bearer")
    await fake.start()
    try:
        fake.push("private/pytorch", "1", image(CUDA_12_1))
        result = await lookup(
            tls,
            f"{fake.host}/private/pytorch:1",
            auth_file=identity_file(tmp_path, fake.host, "rt-alice-1"),
        )
        assert result.status == FOUND
        assert result.requirement is not None
        assert result.requirement.version == CudaVersion(12, 1)
        # One POST to the realm, the form as the OAuth2 spec's "refreshing an Access Token".
        assert [h.path for h in fake.token_hits] == ["/token"]
        assert fake.token_hits[0].authorization is None
        assert fake.token_forms == [
            {
                "grant_type": "refresh_token",
                "refresh_token": "rt-alice-1",
                "service": "fake",
                "client_id": "gpu-admission-webhook",
                "scope": "repository:private/pytorch:pull",
            }
        ]
        # The registry itself sees the access token only, never the refresh token.
        assert [h.authorization for h in fake.hits] == [
            None,
            *["Bearer alice|repository:private/pytorch:pull"] * (len(fake.hits) - 1),
        ]
    finally:
        await fake.close()


async def test_a_refused_identity_token_falls_back_to_the_get_form_then_says_so(
    tls: CertPaths, tmp_path: Path
) -> None:
    """containerd's doBearerAuth: a POST answered 401 is retried with the GET form (the secret
    as Basic password, no username), still on the realm of the registry's own host."""
    fake = FakeRegistry(tls, auth="bearer")
    await fake.start()
    try:
        fake.push("private/pytorch", "1", image(CUDA_12_1))
        result = await lookup(
            tls,
            f"{fake.host}/private/pytorch:1",
            auth_file=identity_file(tmp_path, fake.host, "rt-revoked"),
        )
        assert (result.status, result.detail) == (
            UNAUTHORIZED,
            "the registry refused the --registry-auth credentials (401)",
        )
        assert [h.path for h in fake.token_hits] == [
            "/token",
            "/token?service=fake&scope=repository:private/pytorch:pull",
        ]
        basic = "Basic " + base64.b64encode(b":rt-revoked").decode()
        assert [h.authorization for h in fake.token_hits] == [None, basic]
    finally:
        await fake.close()


async def test_an_identity_token_never_goes_to_a_token_realm_on_another_host(
    tls: CertPaths, tmp_path: Path
) -> None:
    # The realm is `localhost:PORT`, another host than the registry's 127.0.0.1: listed (with
    # its port) only so that lookups may reach it at all; it gets an anonymous GET.
    elsewhere = FakeRegistry(tls)
    await elsewhere.start()
    realm = "localhost:" + elsewhere.host.rsplit(":", 1)[1]
    fake = FakeRegistry(tls, auth="bearer", realm=realm)
    await fake.start()
    try:
        fake.push("private/pytorch", "1", image(CUDA_12_1))
        result = await lookup(
            tls,
            f"{fake.host}/private/pytorch:1",
            realm,
            auth_file=identity_file(tmp_path, fake.host, "rt-alice-1"),
        )
        assert (result.status, result.detail) == (
            UNAUTHORIZED,
            "the registry refused the --registry-auth credentials (401)",
        )
        assert elsewhere.token_forms == []
        assert [h.path for h in elsewhere.token_hits] == [
            "/token?service=fake&scope=repository:private/pytorch:pull"
        ]
        assert elsewhere.token_hits[0].authorization is None
        assert fake.token_hits == []
        assert not any("rt-alice-1" in (h.authorization or "") for h in fake.hits)
    finally:
        await fake.close()
        await elsewhere.close()


@pytest.mark.parametrize(
    ("secret", "only"),
    [("identitytoken", "an identitytoken"), ("registrytoken", "a registrytoken")],
)
async def test_a_basic_challenge_with_only_a_token_says_what_is_missing(
    tls: CertPaths, tmp_path: Path, secret: str, only: str
) -> None:
    fake = FakeRegistry(tls, auth="basic")
    await fake.start()
    try:
        fake.push("team/app", "1", image(CUDA_12_1))
        token_file = identity_file if secret == "identitytoken" else registry_token_file
        result = await lookup(
            tls,
            f"{fake.host}/team/app:1",
            auth_file=token_file(tmp_path, fake.host, "alice|repository:team/app:pull"),
        )
        assert (result.status, result.detail) == (
            UNAUTHORIZED,
            f"the registry asks for a password; its --registry-auth entry has only {only}",
        )
        assert [h.authorization for h in fake.hits] == [None]
    finally:
        await fake.close()


def registry_token_file(tmp_path: Path, host: str, token: str) -> Path:
    """A `registrytoken` entry: a bearer token for the registry itself (Docker engine's
    AuthConfig.RegistryToken), beside a password that must not be used."""
    path = tmp_path / "config.json"
    entry = {"auth": base64.b64encode(b"alice:secret").decode(), "registrytoken": token}
    path.write_text(json.dumps({"auths": {host: entry}}))
    return path


async def test_a_registry_token_is_sent_as_the_bearer_token_and_no_token_service_is_asked(
    tls: CertPaths, tmp_path: Path
) -> None:
    fake = FakeRegistry(tls, auth="bearer")
    await fake.start()
    try:
        fake.push("private/pytorch", "1", image(CUDA_12_1))
        token = "alice|repository:private/pytorch:pull"
        result = await lookup(
            tls,
            f"{fake.host}/private/pytorch:1",
            auth_file=registry_token_file(tmp_path, fake.host, token),
        )
        assert result.status == FOUND
        assert result.requirement is not None
        assert result.requirement.version == CudaVersion(12, 1)
        assert fake.token_hits == []
        assert [h.authorization for h in fake.hits] == [
            None,
            *[f"Bearer {token}"] * (len(fake.hits) - 1),
        ]
    finally:
        await fake.close()


async def test_a_refused_registry_token_says_so_with_the_image(
    tls: CertPaths, tmp_path: Path
) -> None:
    fake = FakeRegistry(tls, auth="bearer")
    await fake.start()
    try:
        fake.push("private/pytorch", "1", image(CUDA_12_1))
        result = await lookup(
            tls,
            f"{fake.host}/private/pytorch:1",
            auth_file=registry_token_file(tmp_path, fake.host, "alice|repository:other:pull"),
        )
        assert result.status == UNAUTHORIZED
        assert fake.token_hits == []
    finally:
        await fake.close()
