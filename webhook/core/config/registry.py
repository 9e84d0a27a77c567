"""The webhook config's `registryLookups` part: reading an image's CUDA version from its registry
(SPEC §4 step 6) — the switch, the admission budget, the caches and which registries may be asked.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from webhook.core.config.fields import ConfigModel

# The registries most GPU images come from, asked without being listed (SPEC §4 step 6): Docker
# Hub, NVIDIA NGC, GitHub, Quay, Kubernetes, Google (Container Registry and its regional hosts,
# Artifact Registry `<region>-docker.pkg.dev`), Amazon ECR Public, Microsoft. A pattern
# `*.example.com` matches any host below example.com (not example.com itself).
PUBLIC_REGISTRIES: tuple[str, ...] = (
    "docker.io",
    "nvcr.io",
    "ghcr.io",
    "quay.io",
    "registry.k8s.io",
    "gcr.io",
    "*.gcr.io",
    "*.pkg.dev",
    "public.ecr.aws",
    "mcr.microsoft.com",
)

# host[:port] as image references spell it (distribution/reference: a DNS name or an IP, an
# optional port), or `*.` and a domain. Lowercase: registry hosts are compared case-insensitively.
_HOST = re.compile(
    r"(\*\.)?(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*"
    r"(?::[0-9]{1,5})?|\[[0-9a-f:.]+\](?::[0-9]{1,5})?"
)


def _hosts(value: tuple[str, ...]) -> tuple[str, ...]:
    cleaned = []
    for written in value:
        host = written.strip().lower().removeprefix("https://").removeprefix("http://")
        host = host.rstrip("/")
        if not _HOST.fullmatch(host):
            raise ValueError(
                f"{written!r} is not a registry host: write it as in an image reference, "
                "e.g. registry.example.com, registry.example.com:5000 or *.example.com"
            )
        cleaned.append(host)
    return tuple(cleaned)


class RegistryLookups(ConfigModel):
    """Lookups of an image's configuration in its registry, when nothing else tells its CUDA."""

    # Look images up at all (false: the other sources only).
    enabled: bool = True
    # Admission waits at most this long for lookups (all of one review's images together); an
    # answer that comes later is cached and serves the next pod with the image.
    budget_seconds: float = Field(default=2.0, gt=0, le=25)
    # One lookup (token, manifests, config) is abandoned after this long, then counts as a
    # failure for negativeTtlSeconds.
    timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    # How long an answer for a tag is kept (tags move).
    tag_ttl_seconds: float = Field(default=3600.0, ge=0)
    # How long an answer for a digest is kept (it never changes; every cache still expires,
    # SPEC §12, so an entry no pod asks about again leaves even a cache that never fills).
    digest_ttl_seconds: float = Field(default=86400.0, ge=0)
    # How long a failure is kept: an unreachable registry costs one budget per image per this.
    negative_ttl_seconds: float = Field(default=600.0, ge=0)
    # Lookups running at once at most, across every registry.
    max_concurrent: int = Field(default=8, ge=1, le=256)
    # Distinct images being looked up at once at most; more are answered "busy" at once.
    max_pending: int = Field(default=256, ge=1, le=100_000)
    # Answers (and failures) kept at most; the oldest go first.
    max_cache_entries: int = Field(default=4096, ge=1, le=1_000_000)
    # Ask the common public registries (PUBLIC_REGISTRIES) without listing them.
    public_registries: bool = True
    # More registries that may be asked (hosts of the --registry-auth file always may). Listed
    # hosts may resolve to private, loopback or link-local addresses; others may not.
    allowed_registries: tuple[str, ...] = ()
    # Registries asked over plain HTTP (allowed too). Never for anything on a shared network.
    insecure_registries: tuple[str, ...] = ()

    @field_validator("allowed_registries", "insecure_registries")
    @classmethod
    def _valid_hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _hosts(value)
