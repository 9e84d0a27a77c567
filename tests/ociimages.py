"""Small OCI/Docker images as registries store them (config, manifests, index), for the fake
registry and for pushes to a real one. Each config's Env is the only thing that matters here."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
# An empty layer (the OCI "empty" blob would do as well): the registry must hold each
# referenced blob before it accepts a manifest.
EMPTY_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def dumps(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


@dataclass
class Built:
    """Blobs and manifests of one image; `top` is (media type, body) of what the tag names."""

    blobs: dict[str, bytes] = field(default_factory=dict)
    manifests: list[tuple[str, bytes]] = field(default_factory=list)  # children first
    top: tuple[str, bytes] = ("", b"")

    @property
    def digest(self) -> str:
        return digest(self.top[1])

    def config_digest(self, index: int = 0) -> str:
        return str(json.loads(self.manifests[index][1])["config"]["digest"])


def _manifest(env: Sequence[str], arch: str, docker: bool, built: Built) -> tuple[str, bytes]:
    config = dumps(
        {
            "architecture": arch,
            "os": "linux",
            "config": {"Env": ["PATH=/usr/local/bin:/usr/bin", *env]},
            "rootfs": {"type": "layers", "diff_ids": []},
        }
    )
    built.blobs[digest(config)] = config
    media = DOCKER_MANIFEST if docker else OCI_MANIFEST
    body = dumps(
        {
            "schemaVersion": 2,
            "mediaType": media,
            "config": {
                "mediaType": DOCKER_CONFIG if docker else OCI_CONFIG,
                "digest": digest(config),
                "size": len(config),
            },
            "layers": [],
        }
    )
    built.manifests.append((media, body))
    return media, body


def image(
    env: Sequence[str] | Mapping[str, Sequence[str]],
    *,
    docker: bool = False,
    index: bool = True,
) -> Built:
    """An image whose config Env is `env` (per architecture when a mapping: its keys are the
    index's entries in order, so the first entry need not be amd64), as an index (with an
    attestation entry first, as BuildKit writes) or, with index=False, a single manifest."""
    built = Built()
    per_arch = env if isinstance(env, Mapping) else {"amd64": env}
    if not index:
        ((arch, values),) = per_arch.items()
        built.top = _manifest(values, arch, docker, built)
        return built
    entries: list[dict[str, Any]] = []
    for arch, values in per_arch.items():
        media, body = _manifest(values, arch, docker, built)
        platform: dict[str, str] = {"architecture": arch, "os": "linux"}
        if arch == "arm64":
            platform["variant"] = "v8"
        entries.append(
            {"mediaType": media, "digest": digest(body), "size": len(body), "platform": platform}
        )
    # BuildKit's provenance attestation: a manifest for platform unknown/unknown.
    attestation = dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.empty.v1+json",
                "digest": digest(b"{}"),
                "size": 2,
            },
            "layers": [],
        }
    )
    built.blobs[digest(b"{}")] = b"{}"
    built.manifests.append((OCI_MANIFEST, attestation))
    entries.insert(
        0,
        {
            "mediaType": OCI_MANIFEST,
            "digest": digest(attestation),
            "size": len(attestation),
            "platform": {"architecture": "unknown", "os": "unknown"},
        },
    )
    media = DOCKER_LIST if docker else OCI_INDEX
    built.top = (media, dumps({"schemaVersion": 2, "mediaType": media, "manifests": entries}))
    return built


def config_image(config: bytes, *, config_size: int | None = None) -> Built:
    """A single OCI manifest whose config blob is `config` as it is (hostile configs)."""
    built = Built()
    built.blobs[digest(config)] = config
    body = dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": OCI_CONFIG,
                "digest": digest(config),
                "size": len(config) if config_size is None else config_size,
            },
            "layers": [],
        }
    )
    built.top = (OCI_MANIFEST, body)
    return built


def raw_top(media: str, body: bytes) -> Built:
    """What a tag names is `body` as it is (hostile manifests and indexes)."""
    built = Built()
    built.top = (media, body)
    return built


# --- hostile documents (issue 29 part 2): cheap in bytes, costly once parsed -------------------


def env_config(env: Sequence[str]) -> bytes:
    """An image config whose Env is `env` exactly (no PATH added)."""
    return dumps({"architecture": "amd64", "os": "linux", "config": {"Env": list(env)}})


def bloated_config(entries: int = 1_700_000) -> bytes:
    """The issue's config: `entries` empty Env strings (1.7 million: < 8 MiB, ~460 MiB parsed)."""
    return env_config([""] * entries)


def empty_objects_index(entries: int = 1_300_000) -> bytes:
    """An index of `entries` empty objects (1.3 million: under 4 MiB, ~860 MiB for eight parsed)."""
    return b'{"schemaVersion":2,"manifests":[' + b",".join([b"{}"] * entries) + b"]}"


def padded_cuda_config(spaces: int = 6 * 1024 * 1024) -> bytes:
    """A config whose CUDA_VERSION is "12.4" followed by `spaces` spaces."""
    return env_config(["CUDA_VERSION=12.4" + " " * spaces])
