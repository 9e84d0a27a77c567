"""Image references as the registry API needs them: registry host, repository, tag or digest.

The grammar and the Docker Hub defaults follow distribution/reference (regexp.go, normalize.go
splitDockerDomain): a first component with "." or ":", "localhost", or an upper-case letter is
a host; otherwise the image is on Docker Hub (`docker.io`, legacy `index.docker.io`), where a
one-component name is an official image under `library/`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from webhook.core.images.references import MAX_REFERENCE_LENGTH

DOCKER_HUB = "docker.io"
_LEGACY_HUB = "index.docker.io"
# Docker Hub's API endpoint: `docker.io` names the registry, not a host that serves /v2/.
DOCKER_HUB_ENDPOINT = "registry-1.docker.io"

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
_TAG = re.compile(r"[\w][\w.-]{0,127}", re.ASCII)
# go-digest's registered algorithms: sha256 (64 hex digits) and sha512 (128).
_DIGEST = re.compile(r"sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128}")
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = re.compile(rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?")


class ReferenceError(ValueError):
    """Not an image reference a registry could answer for."""


@dataclass(frozen=True, slots=True)
class ImageRef:
    """`registry` as written (lower case; docker.io for Docker Hub), `repository` with
    `library/` for official images, and a tag or a digest (both when the reference has both:
    the digest is what is fetched)."""

    registry: str
    repository: str
    tag: str = ""
    digest: str = ""

    @property
    def endpoint(self) -> str:
        """host[:port] that serves /v2/ for this registry."""
        return DOCKER_HUB_ENDPOINT if self.registry == DOCKER_HUB else self.registry

    @property
    def reference(self) -> str:
        """What /v2/<name>/manifests/<reference> asks for: the digest when there is one."""
        return self.digest or self.tag

    @property
    def hostname(self) -> str:
        """The endpoint without its port (and without IPv6 brackets)."""
        host = self.endpoint
        if host.startswith("["):
            return host[1 : host.index("]")]
        return host.rsplit(":", 1)[0] if ":" in host else host

    def canonical(self) -> str:
        """`docker.io/library/ubuntu:22.04`, `ghcr.io/x/y@sha256:…`: one key per image."""
        name = f"{self.registry}/{self.repository}"
        return f"{name}@{self.digest}" if self.digest else f"{name}:{self.tag}"

    def with_digest(self, digest: str) -> ImageRef:
        return ImageRef(self.registry, self.repository, "", digest)


def parse_reference(image: str) -> ImageRef:
    """Parse a container's `image`; raises ReferenceError saying what is wrong with it."""
    if len(image) > MAX_REFERENCE_LENGTH:
        raise ReferenceError("the reference is longer than any valid image reference")
    text = image.strip()
    if not text:
        raise ReferenceError("the image is empty")
    name, _, digest = text.partition("@")
    if digest and not _DIGEST.fullmatch(digest):
        raise ReferenceError(f"{digest[:80]!r} is not a sha256 or sha512 digest")
    tag = ""
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
        if not _TAG.fullmatch(tag):
            raise ReferenceError(f"{tag[:80]!r} is not a valid tag")
    first, sep, rest = name.partition("/")
    if sep and (
        first in ("localhost", _LEGACY_HUB)
        or any(ch in first for ch in ".:")
        or first.lower() != first
    ):
        registry, repository = first.lower(), rest
        if registry == _LEGACY_HUB:
            registry = DOCKER_HUB
        port = first.rpartition(":")[2] if not first.endswith("]") else ""
        if not _HOST.fullmatch(first) or (port.isdigit() and int(port) > 65535):
            raise ReferenceError(f"{first[:80]!r} is not a registry host")
    else:
        registry, repository = DOCKER_HUB, name
    if not _REPOSITORY.fullmatch(repository) or len(repository) > 255:
        raise ReferenceError(f"{repository[:80]!r} is not a valid repository name")
    if registry == DOCKER_HUB and "/" not in repository:
        repository = f"library/{repository}"
    if not digest and not tag:
        tag = "latest"
    return ImageRef(registry, repository, tag, digest)
