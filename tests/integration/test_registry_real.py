"""Registry lookups against the real CNCF distribution registry on 127.0.0.1 (TLS), with the
Bearer-token flow real registries use (a token server in the test signs the JWTs the registry
verifies). Skipped, saying why, when the registry binary is absent (CI)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.fakeregistry import docker_config
from tests.helpers import GPU, REQUIRED_12_4_TERMS, container, node_terms, pod, standard_policies
from tests.integration.test_admission import admission_review, apply_patch
from tests.ociimages import image
from tests.realregistry import LoopThread, Registry, TokenServer, push, registry_binary, skip_reason
from tests.registryhelpers import client
from webhook.admission.app import create_app
from webhook.core.base.versions import CudaVersion
from webhook.registry.client import RegistryClient
from webhook.registry.resolver import ImageResolver
from webhook.registry.results import FOUND, UNAUTHORIZED
from webhook.sources.store import PolicyStore
from webhook.tls.certs import CertPaths, write_certificates

BINARY = registry_binary()
pytestmark = pytest.mark.skipif(BINARY is None, reason=skip_reason())

PUBLIC = image({"arm64": ["CUDA_VERSION=12.6.0"], "amd64": ["CUDA_VERSION=12.4.1"]})
PRIVATE = image(["NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla,driver>=470,driver<471"], docker=True)


@dataclass
class Setup:
    tls: CertPaths
    open: Registry  # no auth: where the test pushes
    secured: Registry  # token auth, same storage: where lookups go
    tokens: TokenServer
    auth_file: Path


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    assert BINARY is not None
    work = tmp_path_factory.mktemp("registry")
    tls = write_certificates(work / "tls", ["localhost"], ["127.0.0.1"])
    thread = LoopThread()
    tokens = TokenServer(tls, {"alice": "s3cret"}, refresh_tokens={"rt-alice-1": "alice"})
    thread.run(tokens.start())
    storage = work / "storage"
    opened = Registry(BINARY, tls, storage)
    secured = Registry(
        BINARY, tls, storage, tokens.auth_options(tokens.bundle(work / "bundle.pem"))
    )
    try:
        opened.start(work)
        secured.start(work)
        asyncio.run(push(opened.host, tls.ca_cert, "public/trainer", "v3", PUBLIC))
        asyncio.run(push(opened.host, tls.ca_cert, "private/trainer", "v3", PRIVATE))
        auth = work / "auth.json"
        auth.write_text(json.dumps(docker_config(secured.host, "alice", "s3cret")))
        yield Setup(tls, opened, secured, tokens, auth)
    finally:
        opened.stop()
        secured.stop()
        thread.run(tokens.close())
        thread.stop()


def lookup_client(real: Setup, *, auth: bool = False) -> RegistryClient:
    # The token server is another loopback host: listed too (unlisted, it would be refused).
    auth_file = real.auth_file if auth else None
    return client(real.tls.ca_cert, real.secured.host, real.tokens.host, auth_file=auth_file)


async def lookup(real: Setup, image_ref: str, *, auth: bool = False, arch: str = "amd64") -> Any:
    c = lookup_client(real, auth=auth)
    try:
        return await c.lookup(image_ref, arch)
    finally:
        await c.close()


async def test_public_image_by_cuda_version_through_an_index_whose_first_entry_is_not_amd64(
    real: Setup,
) -> None:
    result = await lookup(real, f"{real.secured.host}/public/trainer:v3")
    assert result.status == FOUND
    assert result.requirement.version == CudaVersion(12, 4)
    assert result.requirement.source == "image config CUDA_VERSION=12.4.1"
    assert result.digest == PUBLIC.digest
    # Anonymous: the token was asked without credentials.
    assert ("repository:public/trainer:pull", None) in real.tokens.requests
    arm = await lookup(real, f"{real.secured.host}/public/trainer:v3", arch="arm64")
    assert arm.requirement.version == CudaVersion(12, 6)


async def test_private_image_by_nvidia_require_cuda_with_credentials(real: Setup) -> None:
    result = await lookup(real, f"{real.secured.host}/private/trainer:v3", auth=True)
    assert result.status == FOUND
    assert result.requirement.version == CudaVersion(12, 4)
    assert result.requirement.source == "image config NVIDIA_REQUIRE_CUDA"
    assert ("repository:private/trainer:pull", "alice") in real.tokens.requests


async def test_an_unlisted_loopback_token_realm_is_refused(real: Setup) -> None:
    c = client(real.tls.ca_cert, real.secured.host)
    try:
        result = await c.lookup(f"{real.secured.host}/public/trainer:v3", "amd64")
    finally:
        await c.close()
    assert (result.status, result.detail) == (
        "refused",
        "token realm 127.0.0.1 is not a public address; allow it in allowedRegistries",
    )


async def test_private_image_without_credentials_is_refused(real: Setup) -> None:
    result = await lookup(real, f"{real.secured.host}/private/trainer:v3")
    assert (result.status, result.detail) == (
        UNAUTHORIZED,
        "401 from the registry: add credentials for it to --registry-auth",
    )


async def test_private_image_with_an_identity_token(real: Setup, tmp_path: Path) -> None:
    """A docker config whose entry is an `identitytoken`: exchanged at the realm with the
    OAuth2 refresh-token POST; the registry accepts the access token it yields."""
    auth = tmp_path / "identity.json"
    entry = {"auth": base64.b64encode(b"alice:").decode(), "identitytoken": "rt-alice-1"}
    auth.write_text(json.dumps({"auths": {real.secured.host: entry}}))
    c = client(real.tls.ca_cert, real.secured.host, real.tokens.host, auth_file=auth)
    try:
        result = await c.lookup(f"{real.secured.host}/private/trainer:v3", "amd64")
    finally:
        await c.close()
    assert result.status == FOUND
    assert result.requirement is not None
    assert result.requirement.version == CudaVersion(12, 4)
    assert {
        "grant_type": "refresh_token",
        "refresh_token": "rt-alice-1",
        "service": "gpu-webhook-test-registry",
        "client_id": "gpu-admission-webhook",
        "scope": "repository:private/trainer:pull",
    } in real.tokens.oauth_forms


async def test_digest_reference(real: Setup) -> None:
    result = await lookup(real, f"{real.secured.host}/private/trainer@{PRIVATE.digest}", auth=True)
    assert result.status == FOUND and result.requirement.version == CudaVersion(12, 4)


async def test_admission_places_forty_pods_with_one_lookup_and_warns_without_credentials(
    real: Setup,
) -> None:
    c = lookup_client(real)
    store = PolicyStore()
    store.replace(standard_policies())
    resolver = ImageResolver(c, c.config.registry_lookups)
    http: TestClient[Any, Any] = TestClient(
        TestServer(create_app(c.config, store, images=resolver))
    )
    await http.start_server()
    try:
        tokens_before = len(real.tokens.requests)

        async def mutate(image_ref: str) -> tuple[dict[str, Any], list[str]]:
            obj = pod(container("main", image_ref, limits={GPU: "1"}))
            reply = await http.post("/mutate", json=admission_review(obj))
            response = (await reply.json())["response"]
            return apply_patch(obj, response), response.get("warnings", [])

        public = f"{real.secured.host}/public/trainer:v3"
        started = time.perf_counter()
        results = await asyncio.gather(*(mutate(public) for _ in range(40)))
        elapsed = time.perf_counter() - started
        assert all(node_terms(stored) == REQUIRED_12_4_TERMS for stored, _ in results)
        # One lookup: one token for the repository, whatever the number of pods.
        assert len(real.tokens.requests) - tokens_before == 1
        assert elapsed < c.config.registry_lookups.budget_seconds + 5

        private = f"{real.secured.host}/private/trainer:v3"
        stored, warnings = await mutate(private)
        assert node_terms(stored) is None
        assert (
            f"CUDA lookup of {private}: 401 from the registry: add credentials for it to "
            "--registry-auth" in warnings
        )
    finally:
        await http.close()
