"""What one lookup found, and the warnings admission shows when it found nothing."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from webhook.core.images.facts import Requirement
from webhook.core.images.references import normalize

# LookupResult.status values; also the `result` label of gpu_webhook_image_lookups_total.
FOUND = "found"  # the config names a CUDA version
NO_CUDA = "no-cuda"  # read, and it names none
REFUSED = "refused"  # the registry or its address may not be asked
UNAUTHORIZED = "unauthorized"
NOT_FOUND = "not-found"
UNREACHABLE = "unreachable"  # connection refused, DNS, TLS
TIMEOUT = "timeout"
INVALID = "invalid"  # the reference, or what the registry sent, is not usable
BUSY = "busy"  # too many lookups in progress: not looked up
STATUSES = (FOUND, NO_CUDA, REFUSED, UNAUTHORIZED, NOT_FOUND, UNREACHABLE, TIMEOUT, INVALID, BUSY)

# The shortest name a warning may show of an image; longer references show their last part.
_NAME_CHARS = 60


class LookupFailure(Exception):
    """Raised inside a lookup; becomes LookupResult(status, detail)."""

    def __init__(self, status: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass(frozen=True, slots=True)
class LookupResult:
    status: str
    requirement: Requirement | None = None
    detail: str = ""  # why it failed, or the env entry the version came from
    digest: str = ""  # the digest the reference resolved to (index or manifest)
    seconds: float = 0.0
    # The image's linux architectures (SPEC §14): its index's, or a single manifest's config's.
    platforms: tuple[str, ...] = ()
    # Other vendors' variables its config sets (documents.ACCELERATOR_VARIABLES, SPEC §13):
    # ((name, value), ...), what the driver-release gate reads as the image's own.
    env: tuple[tuple[str, str], ...] = ()

    @property
    def cacheable_long(self) -> bool:
        """An answer about the image itself (kept for the tag TTL), not a failure."""
        return self.status in (FOUND, NO_CUDA)


def unresolved_detail(error: OSError) -> str:
    """Why a registry's name did not resolve, and the way out: the image's CUDA version from the
    config's imageCudaTable, or registryLookups (a private registry to allow, or lookups off).
    Short, so that the warning keeps it whole for image names of up to ~45 characters; the
    resolver's own words (`[Errno -2] Name or service not known`) name no way out."""
    if getattr(error, "errno", None) == socket.EAI_AGAIN:
        return "DNS did not answer for its registry: set imageCudaTable or registryLookups"
    return "DNS does not know its registry: set imageCudaTable or registryLookups"


def image_name(image: str) -> str:
    """The image as a warning shows it: normalised, or its last component when very long."""
    ref = normalize(image) or image
    if len(ref) <= _NAME_CHARS:
        return ref
    last = ref.rsplit("/", 1)[-1]
    return last if len(last) <= _NAME_CHARS else last[: _NAME_CHARS - 1] + "…"


def warning(image: str, detail: str, limit: int = 120, runtime: str = "CUDA") -> str:
    """`CUDA lookup of <image>: <detail>` within `limit`: the detail is cut, never the image."""
    head = f"{runtime} lookup of {image_name(image)}: "
    room = limit - len(head)
    if len(detail) > room:
        detail = detail[: max(room - 1, 0)] + "…"
    return head + detail
