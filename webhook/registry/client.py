"""Read an image's CUDA version from its configuration in its registry (OCI distribution API):
tag or digest → manifest or index → the entry for the pod's platform → config blob → `Env`.

Media types negotiated with Accept (OCI image-spec media-types.md; Docker's manifest v2 schema
2 and manifest list): an index is resolved to linux/<arch> — never simply its first entry,
which in multi-arch images is often arm64 or an attestation (`unknown/unknown`). Every body
fetched by digest is checked against it (blobs may come from a CDN).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import aiohttp
from aiohttp.abc import AbstractResolver

from webhook.core.access.sources import is_open_name
from webhook.core.base.wording import fit
from webhook.core.config.model import WebhookConfig
from webhook.core.images.facts import KNOWN_ARCHS
from webhook.core.placement import cuda
from webhook.registry import documents
from webhook.registry.credentials import AuthFile, Keyring
from webhook.registry.documents import DOCKER_LIST, DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST
from webhook.registry.guard import AddressRefused, HostPolicy
from webhook.registry.http import RegistryHttp
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
    unresolved_detail,
)
from webhook.registry.transport import ConnectorFactory

log = logging.getLogger(__name__)

ACCEPT = ", ".join((OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST))
# distribution refuses manifests over 4 MiB (registry/handlers/manifests.go
# maxManifestBodySize); an image config is a few KiB to a few hundred (its history).
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
MAX_CONFIG_BYTES = 8 * 1024 * 1024

# The version of a cached digest's lookup, to skip the config when a moved tag did not move.
Known = Callable[[str], LookupResult | None]
T = TypeVar("T")


def config_requirement(variables: Mapping[str, str], config: WebhookConfig) -> LookupResult:
    """CUDA_VERSION / NVIDIA_REQUIRE_CUDA of an image config's Env (documents.read_config),
    read exactly as the same variables in a container's env are (cuda.detect): CUDA_VERSION
    first."""
    container = {"env": [{"name": k, "value": v} for k, v in variables.items()]}
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
        # Registry documents are parsed here, off the event loop, one at a time (documents).
        self._worker: ThreadPoolExecutor | None = None

    async def _in_worker(self, function: Callable[..., T], *args: object) -> T:
        if self._worker is None:
            self._worker = ThreadPoolExecutor(
                documents.WORKER_THREADS, thread_name_prefix="registry-documents"
            )
        return await asyncio.get_running_loop().run_in_executor(self._worker, function, *args)

    async def close(self) -> None:
        await self.http.close()
        if self._worker is not None:
            self._worker.shutdown(wait=False, cancel_futures=True)
            self._worker = None

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
        if arch not in KNOWN_ARCHS:
            return LookupResult(INVALID, detail=f"{arch[:20]!r} is not an architecture name")
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
        except socket.gaierror as exc:
            # The name of the registry did not resolve (the guard's check before the request).
            return LookupResult(UNREACHABLE, detail=unresolved_detail(exc))
        except aiohttp.ClientConnectorError as exc:
            error = exc.os_error
            if isinstance(error, AddressRefused):
                return LookupResult(REFUSED, detail=str(error))
            if isinstance(error, socket.gaierror):
                return LookupResult(UNREACHABLE, detail=unresolved_detail(error))
            reason = os.strerror(error.errno) if error.errno else str(error)
            return LookupResult(UNREACHABLE, detail=f"cannot connect to {exc.host}: {reason}")
        except (aiohttp.ClientError, OSError) as exc:
            return LookupResult(UNREACHABLE, detail=str(exc) or type(exc).__name__)
        except (ValueError, RecursionError) as exc:
            # What the registry sent reached a library that refused it (yarl, aiohttp's
            # header checks): the answer is unusable, never a crash of the review.
            log.warning("image lookup of %.300s: %s: %.300s", image, type(exc).__name__, exc)
            return LookupResult(INVALID, detail="the registry sent an unusable answer")

    async def _manifest(self, ref: ImageRef, reference: str, arch: str) -> documents.Manifest:
        """Fetch and read a manifest or index; its body and parsed form end here."""
        response = await self.http.get(
            ref, f"manifests/{reference}", ACCEPT, MAX_MANIFEST_BYTES, "manifest"
        )
        expected = reference if reference.startswith(("sha256:", "sha512:")) else ""
        top = reference == ref.reference
        return await self._in_worker(
            documents.read_manifest, response.body, response.content_type, expected, arch, top
        )

    async def _config(self, ref: ImageRef, digest: str) -> documents.ImageConfig:
        blob = await self.http.get(ref, f"blobs/{digest}", "*/*", MAX_CONFIG_BYTES, "image config")
        return await self._in_worker(documents.read_image_config, blob.body, digest)

    async def _lookup(self, ref: ImageRef, arch: str, known: Known | None) -> LookupResult:
        manifest = await self._manifest(ref, ref.reference, arch)
        top_digest = manifest.digest
        if known is not None and (cached := known(top_digest)) is not None:
            return cached
        platforms = manifest.platforms
        if manifest.index:
            manifest = await self._manifest(ref, manifest.entry, arch)
        size = manifest.config_size
        if size is not None and size > MAX_CONFIG_BYTES:
            raise LookupFailure(INVALID, f"its config is larger than {MAX_CONFIG_BYTES >> 20} MiB")
        image_config = await self._config(ref, manifest.config)
        variables = image_config.variables
        result = config_requirement(variables, self.config)
        if not platforms and image_config.architecture:
            # A single manifest: its config's platform is the image's only one (SPEC §14).
            platforms = (image_config.architecture,)
        env = tuple(
            (k, v)
            for k, v in variables.items()
            if k in documents.ACCELERATOR_VARIABLES or is_open_name(k)
        )
        return LookupResult(
            result.status,
            result.requirement,
            result.detail,
            top_digest,
            platforms=platforms,
            env=env,
        )
