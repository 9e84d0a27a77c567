"""Image references: normalisation and the CUDA version an image implies (SPEC §4, steps 3-5:
the admin's table, a version spelled in the tag or repository path, the shipped knowledge).

Every step is linear in the reference length, and a reference longer than any valid one is
not looked at: the webhook sits on the pod-creation path, and one hostile image string must
not stall every review behind it.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

from webhook.core.base.versions import MIN_IMAGE_GUESS, CudaVersion
from webhook.core.base.wording import Message, Wording
from webhook.core.images.knowledge import ImageKnowledge


class TableEntry(Protocol):
    """An admin table entry (the config's imageCudaTable, config.image_rules.ImageCudaEntry): images
    matching `image` (shell-style glob) need CUDA `cuda_version`."""

    @property
    def image(self) -> str: ...

    @property
    def cuda_version(self) -> str: ...


# distribution/reference (reference.go, regexp.go): the repository path is at most 255
# characters (RepositoryNameTotalLengthMax), the tag at most 128 (`[\w][\w.-]{0,127}`), and
# go-digest only accepts registered algorithms, the longest being sha512 (7 + 128). The host
# is a DNS name (≤ 253) with an optional port (≤ 5 digits). Anything longer is not a valid
# image reference, whatever it contains.
MAX_REFERENCE_LENGTH = 253 + 1 + 5 + 1 + 255 + 1 + 128 + 1 + 7 + 128

# Docker Hub spellings of the same repository (distribution/reference normalize.go:
# "docker.io" is the default domain, "index.docker.io" its legacy alias, "library/" the
# official-images namespace).
_HUB_PREFIXES = ("docker.io/", "index.docker.io/")


@dataclass(frozen=True, slots=True)
class ImageGuess:
    """What an image reference says about CUDA: a version, or a problem to warn about."""

    version: CudaVersion | None  # None with by_arch: only those architectures are known
    source: str
    problem: Message = ""
    # (architecture, version, source) for every architecture with a version, where the shipped
    # knowledge says the release's images differ by architecture; one not listed is unknown.
    by_arch: tuple[tuple[str, CudaVersion, str], ...] = ()


def normalize(image: str) -> str | None:
    """`docker.io/library/ubuntu:22.04@sha256:…` -> `ubuntu:22.04`; None when over-long."""
    if len(image) > MAX_REFERENCE_LENGTH:
        return None
    ref = image.strip().split("@", 1)[0]
    for prefix in _HUB_PREFIXES:
        if ref.startswith(prefix):
            ref = ref[len(prefix) :]
            break
    if ref.startswith("library/"):
        ref = ref[len("library/") :]
    return ref


def normalize_glob(pattern: str) -> str:
    """An admin table glob in the same normal form as the references it is matched against."""
    return normalize(pattern) or pattern


def strip_digest(image: str) -> str:
    return image.split("@", 1)[0]


def image_repository(image: str) -> str:
    """`registry:5000/team/paddle:2.6` -> `registry:5000/team/paddle`."""
    return split_tag(strip_digest(image))[0]


def split_tag(ref: str) -> tuple[str, str]:
    """`registry:5000/team/paddle:2.6` -> (`registry:5000/team/paddle`, `2.6`); no tag: ""."""
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    return (ref[:colon], ref[colon + 1 :]) if colon > slash else (ref, "")


def shown_image(image: str) -> str:
    """An image for messages: the reference as written, whole (SPEC §4: never cut out of a
    message); a string longer than any valid reference names no image and is cut."""
    if len(image) <= MAX_REFERENCE_LENGTH:
        return image
    return f"{image[:40]}… ({len(image)} characters)"


@lru_cache(maxsize=64)
def _compiled_patterns(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in patterns)


@lru_cache(maxsize=64)
def _compiled_table(
    table: tuple[TableEntry, ...],
) -> tuple[tuple[re.Pattern[str], CudaVersion], ...]:
    compiled = []
    for entry in table:
        version = CudaVersion.parse(entry.cuda_version)
        assert version is not None  # validated by the config model
        # fnmatch.translate turns each `*` into an atomic lazy group (no catastrophic
        # backtracking), and the input is bounded by MAX_REFERENCE_LENGTH anyway.
        compiled.append((re.compile(fnmatch.translate(normalize_glob(entry.image))), version))
    return tuple(compiled)


def image_version(
    image: str,
    patterns: tuple[str, ...],
    table: tuple[TableEntry, ...],
    knowledge: ImageKnowledge | None = None,
) -> ImageGuess | None:
    """The CUDA version an image reference implies, or None: the admin table first, then a
    version spelled in the reference, then the shipped knowledge."""
    # Checked before the cache: 4096 cached megabyte-long keys would be 4 GiB.
    if len(image) > MAX_REFERENCE_LENGTH:
        return None
    return _image_version(image, patterns, table, knowledge)


@lru_cache(maxsize=4096)
def _image_version(
    image: str,
    patterns: tuple[str, ...],
    table: tuple[TableEntry, ...],
    knowledge: ImageKnowledge | None,
) -> ImageGuess | None:
    ref = normalize(image)
    if not ref:
        return None
    # The admin table wins over the rest: the admin knows their images.
    for regex, version in _compiled_table(table):
        if regex.match(ref):
            return ImageGuess(version, f"image table entry for {ref}")
    for regex in _compiled_patterns(patterns):
        match = regex.search(ref)
        if match:
            version = CudaVersion(int(match["major"]), int(match["minor"]))
            if version < MIN_IMAGE_GUESS or not version.plausible:
                shown = shown_image(image)
                return ImageGuess(
                    None,
                    f"image {ref}",
                    Wording(
                        (
                            f"CUDA {version} read from image {shown} is implausible; ignored",
                            f"image {shown}: implausible CUDA {version} ignored",
                        )
                    ),
                )
            return ImageGuess(version, f"image {ref}")
    if knowledge is not None:
        repository, tag = split_tag(ref)
        known = knowledge.lookup(repository, tag) if tag else None
        if known is not None:
            return ImageGuess(known.version, known.text, by_arch=known.by_arch)
    return None
