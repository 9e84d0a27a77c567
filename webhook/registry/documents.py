"""Registry documents (manifests, indexes, image configs) read as untrusted input: bounded by
their structure, not only their bytes, and parsed off the event loop.

JSON costs far more than its size: 8 MiB of `"A=",` is 1.7 million strings (~460 MiB parsed),
4 MiB of `{},` 1.3 million dicts. So before any parse a cheap count (bytes.count, C speed, a few
ms for 8 MiB) of `,`, `[` and `{` — at least one per value beyond the first, strings' own
included — refuses a document that may hold more than MAX_JSON_VALUES values; a parsed document
is then walked (bounded by that count) for its depth, and only what a lookup needs leaves this
module: a manifest's config descriptor or an index's entry for one platform, an image config's
CUDA variables and other vendors' (cut to their useful length) and its architecture. The parsed
document is dropped before the next request, and parsing runs in the client's one worker
thread, one document at a time, so at most one parsed document is in memory.

json.loads holds the GIL for the whole call: a worker thread keeps the event loop free to run
between documents, but not during one, so the caps, not the thread, bound the longest block
(bench/bench_hostile_registry.py measures it).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core.access.sources import FIRST_ENTRY_NAMES, TOO_MANY_OPEN, is_open_name
from webhook.core.images.facts import DEFAULT_ARCH, GPU_ARCHS
from webhook.registry.results import INVALID, LookupFailure

# Values (strings, numbers, objects, arrays...) a document may hold: a large real image config
# (long history, a hundred layers) holds a few thousand; parsed, 16,384 tiny values ~1.3 MiB.
MAX_JSON_VALUES = 16_384
# Real manifests and configs nest 4 levels deep (annotations, config.Labels).
MAX_DEPTH = 32
# Entries of an index: one per platform plus an attestation each; real ones hold a few dozen.
MAX_INDEX_MANIFESTS = 1024
# Env entries of an image config: real ones hold tens.
MAX_ENV_ENTRIES = 4096
# What is kept of the variables a lookup reads (cuda.detect): CUDA_VERSION is a version
# ("12.4.1"); NVIDIA_REQUIRE_CUDA lists brands and drivers (~1 KiB in NVIDIA's CUDA 12 images:
# cuda>=12.4 brand=tesla,driver>=470,driver<471 ...), read for its leading `cuda>=`.
CUDA_VARIABLES = {"CUDA_VERSION": 32, "NVIDIA_REQUIRE_CUDA": 4096, "NVIDIA_DISABLE_REQUIRE": 16}
# The other NVIDIA_REQUIRE_* variables (ANDed with NVIDIA_REQUIRE_CUDA for forward
# compatibility, core/images/requires.py): kept like it, at most this many.
REQUIRE_PREFIX = "NVIDIA_REQUIRE_"
MAX_REQUIRE_VARIABLES = 8
# Other vendors' variables the driver-release gate reads (SPEC §13; the shipped vendors'
# envVersion and envDevices, webhook/data/accelerators.yaml, a test checks they match). Set in
# image configs by PyTorch's ROCm images (pytorch/pytorch .ci/docker/ubuntu-rocm/Dockerfile:
# `ENV ROCM_VERSION=${ROCM_VERSION}`, `ENV PYTORCH_ROCM_ARCH ${PYTORCH_ROCM_ARCH}`) and vLLM's
# (vllm-project/vllm docker/Dockerfile.rocm_base: `ENV PYTORCH_ROCM_ARCH=${PYTORCH_ROCM_ARCH}`,
# nine gfx targets, ~80 characters). CANN images set no version variable (Ascend/
# cann-container-image cann/*/Dockerfile: ASCEND_TOOLKIT_HOME=.../latest), so none is read.
ACCELERATOR_VARIABLES = {"ROCM_VERSION": 32, "PYTORCH_ROCM_ARCH": 512}
# Device variables no written void closes (core/access/sources.py: AMD's DOCKER_RESOURCE_*, the
# variables of Neuron, Moore Threads and Enflame, and on first-entry runtime builds Ascend's
# ASCEND_VISIBLE_DEVICES): GPU access control reads them from a config it has (ImageEnv), to
# void each DOCKER_RESOURCE_* name there or deny. Kept: names up to
# MAX_OPEN_NAME characters, values cut to OPEN_VALUE; past MAX_OPEN_VARIABLES names (or a name
# too long) the key TOO_MANY_OPEN ("=", never a variable's name) says some were left out.
MAX_OPEN_VARIABLES = 16
MAX_OPEN_NAME = 128
OPEN_VALUE = 64
# The client's parsing threads: one, so parsed documents are never in memory side by side.
WORKER_THREADS = 1

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_LIST})
MANIFEST_TYPES = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})
CONFIG_TYPES = frozenset(
    {"application/vnd.oci.image.config.v1+json", "application/vnd.docker.container.image.v1+json"}
)
# go-digest's registered algorithms (what a registry accepts in a URL).
DIGEST = re.compile(r"sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128}")


@dataclass(frozen=True, slots=True)
class Manifest:
    """What a lookup needs of a manifest or an index (never the parsed document)."""

    digest: str  # of the body
    index: bool
    entry: str = ""  # an index's entry for the platform: the manifest digest to fetch
    config: str = ""  # a manifest's config digest
    config_size: int | None = None
    # An index's linux platforms (architectures, sorted): what the image is built for (the
    # runtime fixes' image architecture, SPEC §14); () for a single manifest (its config's
    # architecture is its one platform: ImageConfig.architecture).
    platforms: tuple[str, ...] = ()


def digest_of(body: bytes | bytearray, algorithm: str = "sha256") -> str:
    return f"{algorithm}:{hashlib.new(algorithm, body).hexdigest()}"


def verify(body: bytes | bytearray, digest: str, what: str) -> None:
    algorithm = digest.split(":", 1)[0]
    if algorithm not in ("sha256", "sha512") or digest_of(body, algorithm) != digest:
        raise LookupFailure(INVALID, f"the {what} does not match its digest")


def _depth_over(document: Any, limit: int) -> bool:
    """Whether `document` nests deeper than `limit` (iterative: no recursion to exhaust)."""
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node if isinstance(v, dict | list))
    return False


def _loads(body: bytes | bytearray) -> Any:
    return json.loads(body)


def parse(body: bytes | bytearray, what: str) -> dict[str, Any]:
    """A JSON object within the caps; LookupFailure otherwise (never another exception)."""
    values = body.count(b",") + body.count(b"[") + body.count(b"{")
    if values >= MAX_JSON_VALUES:
        raise LookupFailure(INVALID, f"the {what} has more than {MAX_JSON_VALUES} JSON values")
    # Nesting deeper than the cap shows as unbalanced brackets long before the parser recurses:
    # a run of MAX_DEPTH + 1 opening brackets is refused at once.
    if b"[" * (MAX_DEPTH + 1) in body or b"{" * (MAX_DEPTH + 1) in body:
        raise LookupFailure(INVALID, f"the {what} is nested deeper than {MAX_DEPTH} levels")
    try:
        data = _loads(body)
    except RecursionError:
        raise LookupFailure(
            INVALID, f"the {what} is nested deeper than {MAX_DEPTH} levels"
        ) from None
    except ValueError:  # UnicodeDecodeError included
        data = None
    if not isinstance(data, dict):
        raise LookupFailure(INVALID, f"the {what} is not a JSON object")
    if _depth_over(data, MAX_DEPTH):
        raise LookupFailure(INVALID, f"the {what} is nested deeper than {MAX_DEPTH} levels")
    return data


def _platform_entry(entries: list[Any], arch: str) -> Mapping[str, Any]:
    """The index entry for linux/<arch> (arm64: variant v8 or none first; arm: v7 first)."""
    candidates = [
        m
        for m in entries
        if isinstance(m, Mapping)
        and isinstance(m.get("platform"), Mapping)
        and m["platform"].get("os") == "linux"
        and m["platform"].get("architecture") == arch
    ]
    if not candidates:
        others = index_platforms(entries) if arch == DEFAULT_ARCH else ()
        if others:
            # The default architecture (the pod pins none: images.facts pod_archs) of an index
            # built for others only (an arm64-only Grace build): the image can run only on
            # those, so their image is the one read — its CUDA version, and its platforms for
            # the architecture fix, which then requires them (SPEC §14; issue 45).
            best = min(others, key=_preference)
            return _platform_entry(entries, best)
        raise LookupFailure(INVALID, f"no linux/{arch} image in its index")
    preferred = {"arm64": ("v8", None), "arm": ("v7", None)}.get(arch, (None,))
    for variant in preferred:
        for entry in candidates:
            if entry["platform"].get("variant") == variant:
                return entry
    return candidates[0]


_ARCHITECTURE = re.compile(r"[a-z0-9]{1,16}")


def _preference(arch: str) -> tuple[int, str]:
    """The architectures NVIDIA builds CUDA for first (images.facts GPU_ARCHS), then by name."""
    return (GPU_ARCHS.index(arch) if arch in GPU_ARCHS else len(GPU_ARCHS), arch)


def index_platforms(entries: list[Any]) -> tuple[str, ...]:
    """The architectures of an index's linux images (image-spec image-index.md: platform.os
    and platform.architecture, GOARCH values). Attestation manifests (BuildKit's, platform
    unknown/unknown) and other systems are not images a Linux node runs."""
    found = {
        platform["architecture"]
        for m in entries
        if isinstance(m, Mapping)
        and isinstance(platform := m.get("platform"), Mapping)
        and platform.get("os") == "linux"
        and isinstance(platform.get("architecture"), str)
        and _ARCHITECTURE.fullmatch(platform["architecture"])
    }
    return tuple(sorted(found))


def read_manifest(
    body: bytes | bytearray, content_type: str, expected: str, arch: str, top: bool
) -> Manifest:
    """A manifest or (when `top`) an index, checked against `expected` (a digest, or '').
    Runs in the worker thread: hashing (which releases the GIL) and parsing included."""
    if expected:
        verify(body, expected, "manifest")
    digest = expected or digest_of(body)
    document = parse(body, "manifest")
    media = content_type
    if media not in INDEX_TYPES and media not in MANIFEST_TYPES:
        # Servers that send a generic type: the document's own mediaType, else its shape.
        declared = document.get("mediaType")
        media = declared if isinstance(declared, str) else ""
        if not media:
            media = OCI_INDEX if "manifests" in document else OCI_MANIFEST
    if media in INDEX_TYPES:
        if not top:
            raise LookupFailure(INVALID, "its index points at another index")
        entries = document.get("manifests")
        entries = entries if isinstance(entries, list) else []
        if len(entries) > MAX_INDEX_MANIFESTS:
            raise LookupFailure(
                INVALID, f"its index lists more than {MAX_INDEX_MANIFESTS} manifests"
            )
        entry = _platform_entry(entries, arch).get("digest")
        if not isinstance(entry, str) or not DIGEST.fullmatch(entry):
            raise LookupFailure(INVALID, f"its linux/{arch} entry has no valid digest")
        return Manifest(digest, True, entry=entry, platforms=index_platforms(entries))
    if media not in MANIFEST_TYPES:
        raise LookupFailure(INVALID, f"unsupported manifest type {media[:60]}")
    if not top and "manifests" in document:
        raise LookupFailure(INVALID, "its index points at another index")
    descriptor = document.get("config")
    if not isinstance(descriptor, Mapping) or not isinstance(descriptor.get("digest"), str):
        raise LookupFailure(INVALID, "its manifest has no config")
    if descriptor.get("mediaType") not in CONFIG_TYPES:
        raise LookupFailure(INVALID, "not a container image (its config type is unknown)")
    config = descriptor["digest"]
    if not DIGEST.fullmatch(config):
        raise LookupFailure(INVALID, "its manifest's config has no valid digest")
    size = descriptor.get("size")
    return Manifest(digest, False, config=config, config_size=size if type(size) is int else None)


@dataclass(frozen=True, slots=True)
class ImageConfig:
    """What a lookup needs of an image config (never the parsed document)."""

    variables: dict[str, str]
    # The config's own platform (image-spec config.md: `architecture` and `os`, GOARCH and
    # GOOS values): the one architecture of an image that is a single manifest ('' when its
    # os is not linux or the value is no architecture name).
    architecture: str = ""


def read_config(body: bytes | bytearray, digest: str) -> dict[str, str]:
    """The variables of an image config's Env (read_image_config)."""
    return read_image_config(body, digest).variables


def read_image_config(body: bytes | bytearray, digest: str) -> ImageConfig:
    """The CUDA variables of an image config's Env (name -> value, cut to what is read; the
    last entry of a name wins, as for a container's env), checked against `digest`: CUDA_VERSION,
    the NVIDIA_REQUIRE_* variables (a few), NVIDIA_DISABLE_REQUIRE and the other vendors'
    ACCELERATOR_VARIABLES, and the OPEN device variables GPU access control voids or denies; and
    its linux architecture."""
    verify(body, digest, "image config")
    document = parse(body, "image config")
    arch = document.get("architecture")
    architecture = (
        arch
        if document.get("os") == "linux" and isinstance(arch, str) and _ARCHITECTURE.fullmatch(arch)
        else ""
    )
    inner = document.get("config")
    env = inner.get("Env") if isinstance(inner, Mapping) else None
    entries = env if isinstance(env, list) else []
    if len(entries) > MAX_ENV_ENTRIES:
        raise LookupFailure(INVALID, f"its config has more than {MAX_ENV_ENTRIES} Env entries")
    found: dict[str, str] = {}
    requires = 0
    opens = 0
    for entry in entries:
        if isinstance(entry, str):
            name, _, value = entry.partition("=")
            limit = CUDA_VARIABLES.get(name) or ACCELERATOR_VARIABLES.get(name)
            if limit is None and name.startswith(REQUIRE_PREFIX) and name not in found:
                requires += 1
                if requires <= MAX_REQUIRE_VARIABLES and len(name) <= 64:
                    limit = CUDA_VARIABLES["NVIDIA_REQUIRE_CUDA"]
            if limit is not None:
                # Leading and trailing blanks are no part of a version; what is past the cut
                # is never read.
                found[name] = value[: limit * 2].strip()[:limit]
            elif is_open_name(name):
                # Kept as written (the runtimes do not trim it): only its name is used.
                if name not in found and (opens >= MAX_OPEN_VARIABLES or len(name) > MAX_OPEN_NAME):
                    found[TOO_MANY_OPEN] = ""
                elif name in FIRST_ENTRY_NAMES and found.get(name):
                    # Read by first-entry runtime builds (core/access/sources.py): a value
                    # that may select devices is kept over a later entry of the name.
                    continue
                else:
                    opens += name not in found
                    found[name] = value[:OPEN_VALUE]
    return ImageConfig(found, architecture)
