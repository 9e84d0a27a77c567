"""Read an image's CUDA version from its configuration in its registry (OCI distribution API):
tag or digest → manifest or index → the entry for the pod's platform → config blob → `Env`.

Media types negotiated with Accept (OCI image-spec media-types.md; Docker's manifest v2 schema
2 and manifest list): an index is resolved to linux/<arch> — never simply its first entry,
which in multi-arch images is often arm64 or an attestation (`unknown/unknown`). Every body
fetched by digest is checked against it (blobs may come from a CDN).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver

from webhook.core.config import WebhookConfig
from webhook.core.rules import cuda
from webhook.core.wording import fit
from webhook.registry.credentials import AuthFile, Keyring
from webhook.registry.guard import AddressRefused, HostPolicy
from webhook.registry.http import ConnectorFactory, RegistryHttp
from webhook.registry.reference import ImageRef, ReferenceError, parse_reference
from webhook.registry.results import (
    FOUND,
    INVALID,
    NO_CUDA,
    REFUSED,
    TIMEOUT,
    UNREACHABLE,
    LookupFailure,
    LookupResult,
)

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_LIST})
MANIFEST_TYPES = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})
CONFIG_TYPES = frozenset(
    {"application/vnd.oci.image.config.v1+json", "application/vnd.docker.container.image.v1+json"}
)
ACCEPT = ", ".join((OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST))
# distribution refuses manifests over 4 MiB (registry/handlers/manifests.go
# maxManifestBodySize); an image config is a few KiB to a few hundred (its history).
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
MAX_CONFIG_BYTES = 8 * 1024 * 1024

# The version of a cached digest's lookup, to skip the config when a moved tag did not move.
Known = Callable[[str], LookupResult | None]


def _digest_of(body: bytes, algorithm: str = "sha256") -> str:
    return f"{algorithm}:{hashlib.new(algorithm, body).hexdigest()}"


def _json(body: bytes, what: str) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise LookupFailure(INVALID, f"the {what} is not a JSON object")
    return data


def _verify(body: bytes, digest: str, what: str) -> None:
    algorithm = digest.split(":", 1)[0]
    if algorithm not in ("sha256", "sha512") or _digest_of(body, algorithm) != digest:
        raise LookupFailure(INVALID, f"the {what} does not match its digest")


def _platform_entry(index: Mapping[str, Any], arch: str) -> Mapping[str, Any]:
    """The index entry for linux/<arch> (arm64: variant v8 or none first; arm: v7 first)."""
    entries = index.get("manifests")
    candidates = [
        m
        for m in (entries if isinstance(entries, list) else [])
        if isinstance(m, Mapping)
        and isinstance(m.get("platform"), Mapping)
        and m["platform"].get("os") == "linux"
        and m["platform"].get("architecture") == arch
        and isinstance(m.get("digest"), str)
    ]
    if not candidates:
        raise LookupFailure(INVALID, f"no linux/{arch} image in its index")
    preferred = {"arm64": ("v8", None), "arm": ("v7", None)}.get(arch, (None,))
    for variant in preferred:
        for entry in candidates:
            if entry["platform"].get("variant") == variant:
                return entry
    return candidates[0]


def config_requirement(config_blob: Mapping[str, Any], config: WebhookConfig) -> LookupResult:
    """CUDA_VERSION / NVIDIA_REQUIRE_CUDA of an image config's Env, read exactly as the same
    variables in a container's env are (cuda.detect): CUDA_VERSION first."""
    inner = config_blob.get("config")
    env = inner.get("Env") if isinstance(inner, Mapping) else None
    entries = [e for e in env if isinstance(e, str)] if isinstance(env, list) else []
    container = {
        "env": [{"name": k, "value": v} for k, _, v in (e.partition("=") for e in entries)]
    }
    detection = cuda.detect(container, config)
    if detection.requirement is None:
        detail = fit(detection.warnings[0]) if detection.warnings else ""
        return LookupResult(NO_CUDA, detail=detail or "its config sets no CUDA_VERSION")
    source = detection.requirement.source.removeprefix("env ")
    # The forward-compatible driver branches the image declares travel with it (SPEC §4).
    requirement = detection.requirement._replace(source=f"image config {source}")
    return LookupResult(FOUND, requirement, detail=source)


class RegistryClient:
    """Lookups of images' CUDA versions; `precheck` answers at once what needs no network."""

    def __init__(
        self,
        config: WebhookConfig,
        *,
        auth_file: Path | None = None,
        ca_file: Path | None = None,
        resolver: AbstractResolver | None = None,
        connector_factory: ConnectorFactory | None = None,
        policy: HostPolicy | None = None,
    ) -> None:
        """Raises CredentialsError or ValueError (unusable --registry-auth/--registry-ca)."""
        self.config = config
        self.settings = config.registry_lookups
        auth = AuthFile(auth_file) if auth_file is not None else None
        keyring: Callable[[], Keyring] = (lambda: auth.keyring) if auth is not None else Keyring
        self.policy = policy or HostPolicy(self.settings, lambda: keyring().registries)
        self.http = RegistryHttp(
            self.policy,
            keyring,
            ca_file=ca_file,
            resolver=resolver,
            connector_factory=connector_factory,
        )

    async def close(self) -> None:
        await self.http.close()

    def precheck(self, image: str) -> tuple[ImageRef | None, LookupResult | None]:
        """(parsed reference, None) when a lookup may go ahead; (None, result) when it may not:
        an invalid reference or a registry that may not be asked (no I/O, no wait)."""
        try:
            ref = parse_reference(image)
        except ReferenceError as exc:
            return None, LookupResult(INVALID, detail=str(exc))
        refusal = self.policy.registry_refusal(ref.registry)
        if refusal:
            return None, LookupResult(REFUSED, detail=refusal)
        return ref, None

    async def lookup(self, image: str, arch: str, known: Known | None = None) -> LookupResult:
        """Never raises (but CancelledError): every failure is a LookupResult."""
        ref, refused = self.precheck(image)
        if ref is None:
            assert refused is not None
            return refused
        timeout = self.settings.timeout_seconds
        try:
            async with asyncio.timeout(timeout):
                return await self._lookup(ref, arch, known)
        except LookupFailure as exc:
            return LookupResult(exc.status, detail=exc.detail)
        except TimeoutError:
            detail = f"the registry did not answer within {timeout:g} s"
            return LookupResult(TIMEOUT, detail=detail)
        except AddressRefused as exc:
            return LookupResult(REFUSED, detail=str(exc))
        except aiohttp.ClientConnectorCertificateError:
            return LookupResult(
                UNREACHABLE,
                detail="its TLS certificate is not trusted: add its CA with --registry-ca",
            )
        except aiohttp.ClientConnectorError as exc:
            error = exc.os_error
            if isinstance(error, AddressRefused):
                return LookupResult(REFUSED, detail=str(error))
            reason = os.strerror(error.errno) if error.errno else str(error)
            return LookupResult(UNREACHABLE, detail=f"cannot connect to {exc.host}: {reason}")
        except (aiohttp.ClientError, OSError) as exc:
            return LookupResult(UNREACHABLE, detail=str(exc) or type(exc).__name__)

    async def _lookup(self, ref: ImageRef, arch: str, known: Known | None) -> LookupResult:
        response = await self.http.get(
            ref, f"manifests/{ref.reference}", ACCEPT, MAX_MANIFEST_BYTES, "manifest"
        )
        if ref.digest:
            _verify(response.body, ref.digest, "manifest")
        top_digest = ref.digest or _digest_of(response.body)
        if known is not None and (cached := known(top_digest)) is not None:
            return cached
        document = _json(response.body, "manifest")
        media = response.content_type
        if media not in INDEX_TYPES and media not in MANIFEST_TYPES:
            # Servers that send a generic type: the document's own mediaType, else its shape.
            declared = document.get("mediaType")
            media = declared if isinstance(declared, str) else ""
            if not media:
                media = OCI_INDEX if "manifests" in document else OCI_MANIFEST
        if media in INDEX_TYPES:
            entry = _platform_entry(document, arch)
            response = await self.http.get(
                ref, f"manifests/{entry['digest']}", ACCEPT, MAX_MANIFEST_BYTES, "manifest"
            )
            _verify(response.body, entry["digest"], "manifest")
            document = _json(response.body, "manifest")
            if "manifests" in document:
                raise LookupFailure(INVALID, "its index points at another index")
        elif media not in MANIFEST_TYPES:
            raise LookupFailure(INVALID, f"unsupported manifest type {media[:60]}")
        descriptor = document.get("config")
        if not isinstance(descriptor, Mapping) or not isinstance(descriptor.get("digest"), str):
            raise LookupFailure(INVALID, "its manifest has no config")
        config_type = descriptor.get("mediaType")
        if config_type not in CONFIG_TYPES:
            raise LookupFailure(INVALID, "not a container image (its config type is unknown)")
        size = descriptor.get("size")
        if isinstance(size, int) and size > MAX_CONFIG_BYTES:
            raise LookupFailure(INVALID, f"its config is larger than {MAX_CONFIG_BYTES >> 20} MiB")
        blob = await self.http.get(
            ref, f"blobs/{descriptor['digest']}", "*/*", MAX_CONFIG_BYTES, "image config"
        )
        _verify(blob.body, descriptor["digest"], "image config")
        result = config_requirement(_json(blob.body, "image config"), self.config)
        return LookupResult(result.status, result.requirement, result.detail, top_digest)
