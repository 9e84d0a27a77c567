"""Registry documents and answers built to stall or bloat the webhook (issue 29 part 2): each is
refused by its structure or read within bounds, and `lookup` never raises. Served by the
in-process registry on 127.0.0.1 only."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fakeregistry import FakeRegistry, docker_config
from tests.ociimages import (
    OCI_INDEX,
    OCI_MANIFEST,
    bloated_config,
    config_image,
    dumps,
    empty_objects_index,
    env_config,
    image,
    padded_cuda_config,
    raw_top,
)
from tests.registryhelpers import FakeResolver, client, no_connection
from webhook.registry import documents, http
from webhook.registry.results import (
    FOUND,
    INVALID,
    NO_CUDA,
    REFUSED,
    UNAUTHORIZED,
    UNREACHABLE,
    LookupFailure,
    LookupResult,
)
from webhook.tls.certs import CertPaths, write_certificates

CUDA_12_4 = ["CUDA_VERSION=12.4.1"]


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> CertPaths:
    return write_certificates(tmp_path_factory.mktemp("tls"), ["localhost"], ["127.0.0.1"])


@pytest.fixture
async def registry(tls: CertPaths) -> AsyncIterator[FakeRegistry]:
    fake = FakeRegistry(tls)
    await fake.start()
    yield fake
    await fake.close()


async def lookup(
    tls: CertPaths, host: str, image_ref: str, arch: str = "amd64", **kw: Any
) -> LookupResult:
    c = client(tls.ca_cert, host, **kw)
    try:
        return await c.lookup(image_ref, arch)
    finally:
        await c.close()


# --- 1. structure, not only bytes ------------------------------------------------------------


async def test_a_config_of_millions_of_tiny_env_entries_is_refused_by_its_structure(
    tls: CertPaths, registry: FakeRegistry
) -> None:
    # The 8 MiB config: ~1.7 million entries, ~460 MiB once parsed.
    config = bloated_config()
    assert len(config) < 8 * 1024 * 1024
    registry.push("team/bloat", "1", config_image(config))
    result = await lookup(tls, registry.host, f"{registry.host}/team/bloat:1")
    assert (result.status, result.detail) == (
        INVALID,
        f"the image config has more than {documents.MAX_JSON_VALUES} JSON values",
    )


async def test_too_many_env_entries_under_the_value_cap_are_refused(
    tls: CertPaths, registry: FakeRegistry
) -> None:
    config = env_config([f"V{i}=x" for i in range(documents.MAX_ENV_ENTRIES + 1)] + CUDA_12_4)
    registry.push("team/env", "1", config_image(config))
    result = await lookup(tls, registry.host, f"{registry.host}/team/env:1")
    assert (result.status, result.detail) == (
        INVALID,
        f"its config has more than {documents.MAX_ENV_ENTRIES} Env entries",
    )


async def test_an_index_of_empty_objects_is_refused_by_its_structure(
    tls: CertPaths, registry: FakeRegistry
) -> None:
    body = empty_objects_index()
    assert len(body) < 4 * 1024 * 1024
    registry.push("team/index", "1", raw_top(OCI_INDEX, body))
    result = await lookup(tls, registry.host, f"{registry.host}/team/index:1")
    assert (result.status, result.detail) == (
        INVALID,
        f"the manifest has more than {documents.MAX_JSON_VALUES} JSON values",
    )


async def test_an_index_with_too_many_manifests_is_refused(
    tls: CertPaths, registry: FakeRegistry
) -> None:
    entries = [{"digest": "sha256:" + "a" * 64}] * (documents.MAX_INDEX_MANIFESTS + 1)
    registry.push("team/index", "1", raw_top(OCI_INDEX, dumps({"manifests": entries})))
    result = await lookup(tls, registry.host, f"{registry.host}/team/index:1")
    assert (result.status, result.detail) == (
        INVALID,
        f"its index lists more than {documents.MAX_INDEX_MANIFESTS} manifests",
    )


@pytest.mark.parametrize(
    ("depth", "opening"), [(documents.MAX_DEPTH + 1, b"["), (10_000, b"[ "), (5_000, b'{"a":')]
)
async def test_deeply_nested_json_is_refused_not_raised(
    tls: CertPaths, registry: FakeRegistry, depth: int, opening: bytes
) -> None:
    closing = b"]" if opening.startswith(b"[") else b"}"
    body = b'{"schemaVersion":2,"x":' + opening * depth + closing * depth + b"}"
    registry.push("team/deep", "1", raw_top(OCI_MANIFEST, body))
    result = await lookup(tls, registry.host, f"{registry.host}/team/deep:1")
    assert (result.status, result.detail) == (
        INVALID,
        f"the manifest is nested deeper than {documents.MAX_DEPTH} levels",
    )


async def test_an_index_entry_whose_digest_is_not_one_is_not_fetched(
    tls: CertPaths, registry: FakeRegistry
) -> None:
    entries = [
        {
            "digest": "sha256:../../x" + "a" * 5000,
            "platform": {"os": "linux", "architecture": "amd64"},
        }
    ]
    registry.push("team/index", "1", raw_top(OCI_INDEX, dumps({"manifests": entries})))
    result = await lookup(tls, registry.host, f"{registry.host}/team/index:1")
    assert (result.status, result.detail) == (INVALID, "its linux/amd64 entry has no valid digest")
    assert registry.manifest_hits("team/index") == 1


async def test_a_legitimate_image_under_the_caps_is_still_read(
    tls: CertPaths, registry: FakeRegistry
) -> None:
    env = [f"V{i}=" + "x" * 100 for i in range(documents.MAX_ENV_ENTRIES - 2)] + CUDA_12_4
    registry.push("team/big", "1", image(env))
    result = await lookup(tls, registry.host, f"{registry.host}/team/big:1")
    assert result.status == FOUND and result.detail == "CUDA_VERSION=12.4.1"


async def test_documents_are_parsed_off_the_event_loop(
    tls: CertPaths, registry: FakeRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[int] = []
    loads = documents._loads

    def recording(body: bytes | bytearray) -> Any:
        threads.append(threading.get_ident())
        return loads(body)

    monkeypatch.setattr(documents, "_loads", recording)
    registry.push("team/app", "1", image(CUDA_12_4))
    result = await lookup(tls, registry.host, f"{registry.host}/team/app:1")
    assert result.status == FOUND
    # index, manifest, config: each parsed in the worker thread, none on the loop's.
    assert len(threads) == 3 and threading.get_ident() not in threads


# --- 3. CUDA text kept only as much as needed --------------------------------------------------


async def test_a_cuda_version_padded_with_megabytes_is_kept_short(
    tls: CertPaths, registry: FakeRegistry
) -> None:
    config = padded_cuda_config()
    registry.push("team/pad", "1", config_image(config))
    result = await lookup(tls, registry.host, f"{registry.host}/team/pad:1")
    assert (result.status, result.detail) == (FOUND, "CUDA_VERSION=12.4")
    assert result.requirement is not None
    assert result.requirement.source == "image config CUDA_VERSION=12.4"


async def test_a_long_unreadable_cuda_version_is_cut_in_what_is_kept(
    tls: CertPaths, registry: FakeRegistry
) -> None:
    config = env_config(["CUDA_VERSION=" + "9" * 100_000, "NVIDIA_REQUIRE_CUDA=" + "x" * 100_000])
    registry.push("team/pad", "1", config_image(config))
    result = await lookup(tls, registry.host, f"{registry.host}/team/pad:1")
    assert result.status == NO_CUDA
    assert len(result.detail) <= 120


# --- 5. lookup never raises --------------------------------------------------------------------


async def test_a_port_above_65535_is_invalid_not_raised(tls: CertPaths) -> None:
    result = await lookup(tls, "127.0.0.1", "127.0.0.1:70000/team/app:1")
    assert (result.status, result.detail) == (INVALID, "'127.0.0.1:70000' is not a registry host")


async def test_a_malformed_redirect_is_invalid_not_raised(
    tls: CertPaths, registry: FakeRegistry
) -> None:
    registry.push("team/app", "1", image(CUDA_12_4, index=False))
    registry.blob_location = "https://[::1/cdn"
    result = await lookup(tls, registry.host, f"{registry.host}/team/app:1")
    assert (result.status, result.detail) == (
        INVALID,
        "the registry redirected the image config to a malformed address",
    )


async def test_a_token_with_a_line_break_is_invalid_not_raised(tls: CertPaths) -> None:
    fake = FakeRegistry(tls, auth="bearer", token_value="abc\r\nX-Injected: 1")
    await fake.start()
    try:
        fake.push("public/app", "1", image(CUDA_12_4))
        result = await lookup(tls, fake.host, f"{fake.host}/public/app:1")
    finally:
        await fake.close()
    assert (result.status, result.detail) == (INVALID, "the token service sent no usable token")


async def test_a_long_reason_phrase_is_not_kept(tls: CertPaths, registry: FakeRegistry) -> None:
    registry.manifest_error = (503, "Busy " + "z" * 4000)
    result = await lookup(tls, registry.host, f"{registry.host}/team/app:1")
    assert (result.status, result.detail) == (
        UNREACHABLE,
        f"the registry answered 503 Busy {'z' * 35} for the manifest",
    )


async def test_a_token_answer_of_many_tiny_values_is_refused_by_its_structure(
    tls: CertPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeRegistry(tls, auth="bearer")
    answer = b'{"token":"t","x":[' + b",".join([b"0"] * 400_000) + b"]}"

    async def token(request: web.Request) -> web.Response:
        return web.Response(body=answer, content_type="application/json")

    monkeypatch.setattr(fake, "_token", token)
    await fake.start()
    try:
        fake.push("public/app", "1", image(CUDA_12_4))
        result = await lookup(tls, fake.host, f"{fake.host}/public/app:1")
    finally:
        await fake.close()
    assert (result.status, result.detail) == (
        INVALID,
        f"the token answer has more than {documents.MAX_JSON_VALUES} JSON values",
    )


# --- 5. credentials: netrc, removal, cookies ---------------------------------------------------


async def test_netrc_credentials_are_never_sent(
    tls: CertPaths, registry: FakeRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login root password hunter2\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    registry.push("team/app", "1", image(CUDA_12_4))
    result = await lookup(tls, registry.host, f"{registry.host}/team/app:1")
    assert result.status == FOUND
    assert registry.hits and all(hit.authorization is None for hit in registry.hits)


async def test_credentials_removed_from_the_auth_file_stop_being_sent(
    tls: CertPaths, tmp_path: Path
) -> None:
    fake = FakeRegistry(tls, auth="basic")
    await fake.start()
    try:
        fake.push("team/app", "1", image(CUDA_12_4))
        fake.push("team/app", "2", image(CUDA_12_4))
        path = tmp_path / "config.json"
        path.write_text(json.dumps(docker_config(fake.host, "alice", "s3cret")))
        c = client(tls.ca_cert, fake.host, auth_file=path)
        try:
            first = await c.lookup(f"{fake.host}/team/app:1", "amd64")
            path.write_text(json.dumps({"auths": {}, "comment": "alice removed"}))
            fake.hits.clear()
            second = await c.lookup(f"{fake.host}/team/app:2", "amd64")
        finally:
            await c.close()
    finally:
        await fake.close()
    assert first.status == FOUND
    assert second.status == UNAUTHORIZED
    assert all(hit.authorization is None for hit in fake.hits)


async def test_no_cookie_goes_from_one_registry_to_another(tls: CertPaths) -> None:
    first, second = FakeRegistry(tls, set_cookie="session=tenant-a; Path=/"), FakeRegistry(tls)
    await first.start()
    await second.start()
    try:
        for fake in (first, second):
            fake.push("team/app", "1", image(CUDA_12_4))
        port_a, port_b = first.host.split(":")[1], second.host.split(":")[1]
        names = FakeResolver({"localhost": ["127.0.0.1"]})
        c = client(tls.ca_cert, f"localhost:{port_a}", f"localhost:{port_b}", resolver=names)
        try:
            assert (await c.lookup(f"localhost:{port_a}/team/app:1", "amd64")).status == FOUND
            assert (await c.lookup(f"localhost:{port_b}/team/app:1", "amd64")).status == FOUND
            assert (await c.lookup(f"localhost:{port_a}/team/app:1", "amd64")).status == FOUND
        finally:
            await c.close()
    finally:
        await first.close()
        await second.close()
    assert all(hit.cookie is None for hit in first.hits + second.hits)


# --- 4. token and lock caches bounded and expiring ---------------------------------------------


async def test_tokens_of_many_repositories_are_bounded_and_locks_released(
    tls: CertPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http, "MAX_AUTH_ENTRIES", 4)
    fake = FakeRegistry(tls, auth="bearer")
    await fake.start()
    c = client(tls.ca_cert, fake.host)
    try:
        for i in range(10):
            fake.push(f"public/app{i}", "1", image(CUDA_12_4))
            assert (await c.lookup(f"{fake.host}/public/app{i}:1", "amd64")).status == FOUND
        assert c.http.cached_authorizations == 4
        assert c.http.auth_locks == 0
        # The most recent tokens are the ones kept: app9 needs no new token.
        before = len(fake.token_hits)
        assert (await c.lookup(f"{fake.host}/public/app9:1", "amd64")).status == FOUND
        assert len(fake.token_hits) == before
    finally:
        await c.close()
        await fake.close()


# --- 5. never raises: any bytes, any JSON, any reference --------------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=30,
)
_SHAPED = st.fixed_dictionaries(
    {},
    optional={
        "mediaType": st.sampled_from([OCI_INDEX, OCI_MANIFEST, "x"]) | st.text(max_size=5),
        "manifests": _JSON,
        "config": _JSON,
    },
)


@settings(max_examples=300, deadline=None)
@given(
    body=st.binary(max_size=200) | (_JSON | _SHAPED).map(lambda d: json.dumps(d).encode()),
    content_type=st.sampled_from([OCI_INDEX, OCI_MANIFEST, "application/json", ""]),
    arch=st.sampled_from(["amd64", "arm64", "arm"]),
    top=st.booleans(),
)
def test_reading_any_document_fails_only_with_a_lookup_failure(
    body: bytes, content_type: str, arch: str, top: bool
) -> None:
    failures: list[LookupFailure] = []
    for read in (
        lambda: documents.read_manifest(body, content_type, "", arch, top),
        lambda: documents.read_config(body, documents.digest_of(body)),
    ):
        try:
            read()
        except LookupFailure as failure:
            failures.append(failure)
    assert all(f.status == INVALID and len(f.detail) <= 120 for f in failures)


@settings(max_examples=200, deadline=None)
@given(image_ref=st.text(max_size=300), arch=st.text(max_size=30))
async def test_lookup_of_any_reference_returns_a_result(image_ref: str, arch: str) -> None:
    # Nothing allowed: every reference is answered before any connection (no_connection fails
    # the test if one is opened).
    c = client(None, connector=no_connection, public_registries=False)
    try:
        result = await c.lookup(image_ref, arch)
    finally:
        await c.close()
    assert isinstance(result, LookupResult) and result.status in (INVALID, REFUSED)


async def test_an_architecture_that_is_no_name_is_not_looked_up(tls: CertPaths) -> None:
    result = await lookup(tls, "127.0.0.1", "127.0.0.1:5000/team/app:1", arch="x" * 65536)
    assert (result.status, result.detail) == (INVALID, f"{'x' * 20!r} is not an architecture name")
