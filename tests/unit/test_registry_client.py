"""The registry client against an in-process registry over TLS on 127.0.0.1: media types,
platform selection, auth flows, redirects, digests, failures. No other address is ever used."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakeregistry import FakeRegistry, HangingServer, closed_port, docker_config
from tests.ociimages import image
from tests.registryhelpers import client
from webhook.core.base.versions import CudaVersion
from webhook.registry.results import (
    FOUND,
    INVALID,
    NO_CUDA,
    NOT_FOUND,
    REFUSED,
    TIMEOUT,
    UNAUTHORIZED,
    UNREACHABLE,
    LookupResult,
)
from webhook.tls.certs import CertPaths, write_certificates

CUDA_12_4 = ["CUDA_VERSION=12.4.1", "NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla,driver>=470"]


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> CertPaths:
    return write_certificates(tmp_path_factory.mktemp("tls"), ["localhost"], ["127.0.0.1"])


@pytest.fixture
async def registry(tls: CertPaths) -> AsyncIterator[FakeRegistry]:
    fake = FakeRegistry(tls)
    await fake.start()
    yield fake
    await fake.close()


def auth_file(tmp_path: Path, host: str, user: str = "alice", password: str = "s3cret") -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(docker_config(host, user, password)))
    return path


async def lookup(
    tls: CertPaths, host: str, image_ref: str, arch: str = "amd64", **kw: Any
) -> LookupResult:
    c = client(tls.ca_cert, host, **kw)
    try:
        return await c.lookup(image_ref, arch)
    finally:
        await c.close()


async def test_an_index_is_resolved_to_amd64_even_when_its_first_entries_are_not(
    tls: CertPaths, registry: FakeRegistry
) -> None:
    registry.push(
        "nvidia/pytorch",
        "24.05-py3",
        image({"arm64": ["CUDA_VERSION=12.6.0"], "amd64": CUDA_12_4}),
    )
    result = await lookup(tls, registry.host, f"{registry.host}/nvidia/pytorch:24.05-py3")
    assert result.status == FOUND
    assert result.requirement is not None
    assert result.requirement.version == CudaVersion(12, 4)
    assert result.requirement.source == "image config CUDA_VERSION=12.4.1"


async def test_the_architecture_the_pod_pins_is_the_one_read(
    tls: CertPaths, registry: FakeRegistry
) -> None:
    registry.push("team/app", "1", image({"amd64": CUDA_12_4, "arm64": ["CUDA_VERSION=12.6.0"]}))
    result = await lookup(tls, registry.host, f"{registry.host}/team/app:1", arch="arm64")
    assert result.requirement is not None and result.requirement.version == CudaVersion(12, 6)
    missing = await lookup(tls, registry.host, f"{registry.host}/team/app:1", arch="ppc64le")
    assert (missing.status, missing.detail) == (INVALID, "no linux/ppc64le image in its index")


async def test_an_index_of_arm64_only_is_read_for_a_pod_that_pins_no_architecture(
    tls: CertPaths, registry: FakeRegistry
) -> None:
    # Issue 45: an index listing only linux/arm64 (a Grace build) lost its platforms and its
    # CUDA version for the default architecture; the image runs on arm64 only, so that image is
    # the one read, and its platform is what the architecture fix requires.
    registry.push("team/grace", "1", image({"arm64": ["CUDA_VERSION=12.6.0"]}))
    result = await lookup(tls, registry.host, f"{registry.host}/team/grace:1")
    assert result.status == FOUND
    assert result.requirement is not None
    assert result.requirement.version == CudaVersion(12, 6)
    assert result.platforms == ("arm64",)
    # Another architecture asked for by the pod itself is still said to be missing.
    missing = await lookup(tls, registry.host, f"{registry.host}/team/grace:1", arch="ppc64le")
    assert (missing.status, missing.detail) == (INVALID, "no linux/ppc64le image in its index")


@pytest.mark.parametrize("docker", [True, False], ids=["docker-v2", "oci"])
@pytest.mark.parametrize("index", [True, False], ids=["index", "manifest"])
async def test_docker_and_oci_media_types(
    tls: CertPaths, registry: FakeRegistry, docker: bool, index: bool
) -> None:
    registry.push("team/app", "1", image(CUDA_12_4, docker=docker, index=index))
    result = await lookup(tls, registry.host, f"{registry.host}/team/app:1")
    assert result.requirement is not None and result.requirement.version == CudaVersion(12, 4)


async def test_nvidia_require_cuda_is_read_when_cuda_version_is_absent(
    tls: CertPaths, registry: FakeRegistry
) -> None:
    registry.push("team/app", "1", image(["NVIDIA_REQUIRE_CUDA=cuda>=11.8 brand=tesla"]))
    result = await lookup(tls, registry.host, f"{registry.host}/team/app:1")
    assert result.requirement is not None
    assert (result.requirement.version, result.requirement.source) == (
        CudaVersion(11, 8),
        "image config NVIDIA_REQUIRE_CUDA",
    )


async def test_an_image_without_cuda_env_says_so(tls: CertPaths, registry: FakeRegistry) -> None:
    registry.push("library/python", "3.12", image(["LANG=C.UTF-8"]))
    result = await lookup(tls, registry.host, f"{registry.host}/library/python:3.12")
    assert (result.status, result.requirement) == (NO_CUDA, None)
    assert result.detail == "its config sets no CUDA_VERSION"


async def test_a_digest_reference_fetches_that_digest(
    tls: CertPaths, registry: FakeRegistry
) -> None:
    built = image(CUDA_12_4)
    registry.push("team/app", "moving", built)
    result = await lookup(tls, registry.host, f"{registry.host}/team/app@{built.digest}")
    assert result.requirement is not None and result.requirement.version == CudaVersion(12, 4)
    assert result.digest == built.digest
    assert registry.hits[0].path == f"/v2/team/app/manifests/{built.digest}"


async def test_a_body_that_does_not_match_its_digest_is_refused(
    tls: CertPaths, registry: FakeRegistry
) -> None:
    built = image(CUDA_12_4)
    registry.push("team/app", "1", built)
    registry.blobs[built.config_digest(0)] = b'{"config": {"Env": ["CUDA_VERSION=9.0"]}}'
    result = await lookup(tls, registry.host, f"{registry.host}/team/app:1")
    assert (result.status, result.detail) == (INVALID, "the image config does not match its digest")


async def test_an_unknown_tag_is_not_found(tls: CertPaths, registry: FakeRegistry) -> None:
    result = await lookup(tls, registry.host, f"{registry.host}/team/app:nope")
    assert (result.status, result.detail) == (
        NOT_FOUND,
        "manifest not found (404)",
    )


async def test_anonymous_bearer_token_flow(tls: CertPaths) -> None:
    fake = FakeRegistry(tls, auth="bearer")
    await fake.start()
    try:
        fake.push("public/cuda", "12.4", image(CUDA_12_4))
        result = await lookup(tls, fake.host, f"{fake.host}/public/cuda:12.4")
        assert result.status == FOUND
        # One token for the repository, asked without credentials, used for every request.
        assert len(fake.token_hits) == 1
        assert fake.token_hits[0].authorization is None
        assert fake.token_hits[0].path == "/token?service=fake&scope=repository:public/cuda:pull"
        assert all(h.authorization == "Bearer |repository:public/cuda:pull" for h in fake.hits[1:])
    finally:
        await fake.close()


async def test_private_image_with_credentials_through_the_token_flow(
    tls: CertPaths, tmp_path: Path
) -> None:
    fake = FakeRegistry(tls, auth="bearer")
    await fake.start()
    try:
        fake.push("private/pytorch", "1", image(["NVIDIA_REQUIRE_CUDA=cuda>=12.1"]))
        result = await lookup(
            tls,
            fake.host,
            f"{fake.host}/private/pytorch:1",
            auth_file=auth_file(tmp_path, fake.host),
        )
        assert result.requirement is not None and result.requirement.version == CudaVersion(12, 1)
        assert fake.token_hits[0].authorization == "Basic YWxpY2U6czNjcmV0"  # alice:s3cret
    finally:
        await fake.close()


async def test_private_image_without_credentials_is_unauthorized(tls: CertPaths) -> None:
    fake = FakeRegistry(tls, auth="bearer")
    await fake.start()
    try:
        fake.push("private/pytorch", "1", image(CUDA_12_4))
        result = await lookup(tls, fake.host, f"{fake.host}/private/pytorch:1")
        assert (result.status, result.detail) == (
            UNAUTHORIZED,
            "401 from the registry: add credentials for it to --registry-auth",
        )
    finally:
        await fake.close()


async def test_wrong_credentials_say_the_credentials_were_refused(
    tls: CertPaths, tmp_path: Path
) -> None:
    fake = FakeRegistry(tls, auth="bearer")
    await fake.start()
    try:
        fake.push("private/pytorch", "1", image(CUDA_12_4))
        wrong = auth_file(tmp_path, fake.host, password="wrong")
        result = await lookup(tls, fake.host, f"{fake.host}/private/pytorch:1", auth_file=wrong)
        assert (result.status, result.detail) == (
            UNAUTHORIZED,
            "the registry refused the --registry-auth credentials (401)",
        )
    finally:
        await fake.close()


async def test_basic_auth(tls: CertPaths, tmp_path: Path) -> None:
    fake = FakeRegistry(tls, auth="basic")
    await fake.start()
    try:
        fake.push("team/app", "1", image(CUDA_12_4))
        without = await lookup(tls, fake.host, f"{fake.host}/team/app:1")
        assert without.status == UNAUTHORIZED
        found = await lookup(
            tls, fake.host, f"{fake.host}/team/app:1", auth_file=auth_file(tmp_path, fake.host)
        )
        assert found.status == FOUND
        assert fake.hits[-1].authorization == "Basic YWxpY2U6czNjcmV0"
    finally:
        await fake.close()


async def test_blob_redirects_are_followed_without_credentials(
    tls: CertPaths, tmp_path: Path
) -> None:
    cdn = FakeRegistry(tls)
    await cdn.start()
    cdn_host = "localhost:" + cdn.host.rsplit(":", 1)[1]
    fake = FakeRegistry(tls, auth="basic", blob_redirect=cdn_host)
    await fake.start()
    try:
        built = image(CUDA_12_4)
        fake.push("team/app", "1", built)
        cdn.blobs.update(built.blobs)
        c = client(tls.ca_cert, fake.host, cdn_host, auth_file=auth_file(tmp_path, fake.host))
        try:
            result = await c.lookup(f"{fake.host}/team/app:1", "amd64")
        finally:
            await c.close()
        assert result.status == FOUND
        assert [h.path for h in cdn.hits] == [f"/cdn/{built.config_digest(0)}"]
        assert cdn.hits[0].authorization is None
    finally:
        await fake.close()
        await cdn.close()


async def test_redirects_are_capped(tls: CertPaths, registry: FakeRegistry) -> None:
    registry.redirect_loop = True
    registry.push("team/app", "1", image(CUDA_12_4))
    result = await lookup(tls, registry.host, f"{registry.host}/team/app:1")
    assert (result.status, result.detail) == (
        INVALID,
        "more than 3 redirects for the image config",
    )


async def test_a_refused_connection_is_unreachable(tls: CertPaths) -> None:
    host = closed_port()
    result = await lookup(tls, host, f"{host}/team/app:1")
    assert result.status == UNREACHABLE
    assert result.detail == "cannot connect to 127.0.0.1: Connection refused"


async def test_a_server_that_never_answers_times_out(tls: CertPaths) -> None:
    server = HangingServer()
    await server.start()
    try:
        result = await lookup(tls, server.host, f"{server.host}/team/app:1", timeout_seconds=0.3)
        assert (result.status, result.detail) == (
            TIMEOUT,
            "the registry did not answer within 0.3 s",
        )
        assert server.accepted == 1
    finally:
        await server.close()


async def test_an_untrusted_certificate_names_the_fix(registry: FakeRegistry) -> None:
    registry.push("team/app", "1", image(CUDA_12_4))
    c = client(None, registry.host)  # system CAs only: the test CA is unknown
    try:
        result = await c.lookup(f"{registry.host}/team/app:1", "amd64")
    finally:
        await c.close()
    assert (result.status, result.detail) == (
        UNREACHABLE,
        "its TLS certificate is not trusted: add its CA with --registry-ca",
    )


async def test_an_oversized_manifest_is_not_read(tls: CertPaths, registry: FakeRegistry) -> None:
    registry.manifests[("team/app", "1")] = (
        "application/vnd.oci.image.manifest.v1+json",
        b" " * (4 * 1024 * 1024 + 1),
    )
    result = await lookup(tls, registry.host, f"{registry.host}/team/app:1")
    assert (result.status, result.detail) == (INVALID, "manifest is larger than 4096 KiB")


async def test_a_redirect_to_a_metadata_address_is_refused_before_connecting(
    tls: CertPaths,
) -> None:
    fake = FakeRegistry(tls, blob_redirect="169.254.169.254")
    await fake.start()
    try:
        fake.push("team/app", "1", image(CUDA_12_4))
        # The client's sockets fail the test for any address but loopback.
        result = await lookup(tls, fake.host, f"{fake.host}/team/app:1")
        assert (result.status, result.detail) == (
            REFUSED,
            "redirect to 169.254.169.254 is not a public address; allow it in allowedRegistries",
        )
    finally:
        await fake.close()


async def test_a_single_manifest_has_its_configs_architecture_as_its_one_platform(
    tls: CertPaths, registry: FakeRegistry
) -> None:
    # SPEC §14 (issue 39 item 4): an image that is no index is built for one platform, the
    # one its config names (image-spec config.md `architecture`, `os`).
    registry.push("team/arm-only", "1", image({"arm64": CUDA_12_4}, index=False))
    registry.push("team/x86-only", "1", image(CUDA_12_4, index=False))
    registry.push("team/rocm", "1", image(["ROCM_VERSION=6.4.1", "PYTORCH_ROCM_ARCH=gfx942"]))
    arm = await lookup(tls, registry.host, f"{registry.host}/team/arm-only:1")
    assert (arm.status, arm.platforms) == (FOUND, ("arm64",))
    x86 = await lookup(tls, registry.host, f"{registry.host}/team/x86-only:1", arch="arm64")
    assert (x86.status, x86.platforms) == (FOUND, ("amd64",))
    # The other vendors' variables travel with the answer (SPEC §13), an index's platforms too.
    rocm = await lookup(tls, registry.host, f"{registry.host}/team/rocm:1")
    assert (rocm.status, rocm.platforms) == (NO_CUDA, ("amd64",))
    assert rocm.env == (("ROCM_VERSION", "6.4.1"), ("PYTORCH_ROCM_ARCH", "gfx942"))
