"""Shipped image knowledge (SPEC §4, step 5): the CUDA runtime of widely used GPU images whose
reference does not spell it (`nvcr.io/nvidia/tritonserver:24.05-py3`, `tensorflow/serving:
2.13.1-gpu`), as data: webhook/data/images.yaml, validated and indexed once per process.

Every release carries its source (release notes, the release's Dockerfile at its tag): a wrong
version is worse than none, so the loader refuses an entry without one, and a file that does
not validate fails loudly rather than shipping half a table.

A lookup is a dict lookup by repository, one bounded regex full match on the tag (≤ 128
characters, distribution/reference) per family of that repository, and a dict lookup by
release: nothing here grows with the size of the table.

One tag may name images built with different CUDA versions per architecture (a multi-platform
index: vLLM v0.11.0 is CUDA 12.8 on linux/amd64 and 12.9 on linux/arm64). A release then says
so (`arch: {arm64: '12.9'}`), and the answer depends on the architecture the pod runs on.
A family may also push one single-architecture tag per architecture (`v0.11.0-aarch64`): its
tag pattern then has a group `arch`, and `arches` says which architecture each spelling is.
Such a tag names one image, so its architecture, not the pod's, decides.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from webhook.core.base.errors import ManifestError
from webhook.core.base.manifests import load_yaml_documents
from webhook.core.base.versions import MIN_IMAGE_GUESS, CudaVersion

DATA_FILE = "images.yaml"
# Sources are links a reader can open: release notes, or a file of the release at its tag.
_SOURCE = re.compile(r"https://[^\s]{8,400}")
_CUDA = re.compile(r"[0-9]{1,2}\.[0-9]{1,2}")
# The architectures a release may name: GOARCH values, as the kubelet sets kubernetes.io/arch
# and as OCI image indexes name platforms (image-spec image-index.md: "platform.architecture
# ... values SHOULD be ... GOARCH"). `x86_64`/`aarch64` (uname's names) are refused: no node or
# index carries them, so such an entry could never match.
ARCHITECTURES = frozenset({"amd64", "arm64", "ppc64le", "s390x", "arm", "386", "riscv64"})
# A repository as it is matched: normalised (no docker.io/, no library/), lowercase, no tag.
_REPOSITORY = re.compile(r"[a-z0-9][a-z0-9._:/-]{0,250}[a-z0-9]")


class KnowledgeError(ValueError):
    """The knowledge file is not valid; the message names the entry and what is wrong."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class KnownRelease(_Model):
    """One release of a family: its CUDA runtime, and where that was read."""

    release: str = Field(min_length=1, max_length=64)
    # Every architecture `arch` does not list; None: only those `arch` lists are known.
    cuda: str | None = None
    # Architecture -> CUDA, where the release's images differ by architecture.
    arch: dict[str, str] = Field(default_factory=dict, max_length=len(ARCHITECTURES))
    source: str | None = None  # None: the family's source, with {release} filled in
    # None: the family's. Set when this release was read elsewhere than the family's kind of
    # source (an NGC release known from NVIDIA's build files, not its notes): notes must not
    # name a source the version was not read in.
    cite: str | None = Field(default=None, min_length=1, max_length=40)
    note: str = ""

    @field_validator("cuda")
    @classmethod
    def _cuda(cls, value: str | None) -> str | None:
        return None if value is None else _cuda_version("cuda", value)

    @field_validator("arch")
    @classmethod
    def _arch(cls, value: dict[str, str]) -> dict[str, str]:
        for name, version in value.items():
            _architecture(f"arch {name!r}", name)
            _cuda_version(f"arch {name}", version)
        return value

    @model_validator(mode="after")
    def _some_version(self) -> KnownRelease:
        if self.cuda is None and not self.arch:
            raise ValueError(f"release {self.release} needs cuda, arch, or both")
        return self


def _architecture(what: str, name: str) -> None:
    if name not in ARCHITECTURES:
        raise ValueError(
            f"{what} is not an architecture as kubernetes.io/arch names it "
            f"({', '.join(sorted(ARCHITECTURES))})"
        )


def _cuda_version(what: str, value: str) -> str:
    version = CudaVersion.parse(value)
    if not _CUDA.fullmatch(value) or version is None:
        raise ValueError(f"{what} must look like 12.4, got {value!r}")
    if not version.plausible or version < MIN_IMAGE_GUESS:
        raise ValueError(f"{what} {value!r} is not a plausible CUDA runtime (7.0 to 99.x)")
    return value


class KnownFamily(_Model):
    """Images of one family: repositories, how a tag names a release, and the releases."""

    name: str = Field(min_length=1, max_length=40)  # shown in notes: "NGC Triton"
    cite: str = Field(min_length=1, max_length=40)  # shown in notes: "NVIDIA release notes"
    repositories: tuple[str, ...] = Field(min_length=1)
    # Full match on the tag; the named group `release` is looked up in `releases`. An optional
    # group `arch` names a single-architecture tag's architecture, spelled as `arches` lists.
    tag: str
    # The tag's spelling of an architecture -> the architecture (`aarch64: arm64`).
    arches: dict[str, str] = Field(default_factory=dict, max_length=16)
    source: str | None = None
    releases: tuple[KnownRelease, ...]

    @field_validator("repositories")
    @classmethod
    def _repositories(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for repository in value:
            if not _REPOSITORY.fullmatch(repository) or repository.startswith(
                ("docker.io/", "index.docker.io/", "library/")
            ):
                raise ValueError(
                    f"repository {repository!r} must be a normalised repository without a "
                    "tag (no docker.io/ or library/ prefix, lowercase)"
                )
        return value

    @field_validator("releases")
    @classmethod
    def _releases(cls, value: tuple[KnownRelease, ...]) -> tuple[KnownRelease, ...]:
        if not value:  # not min_length=1, which also fires when an entry is invalid
            raise ValueError("at least one release is required")
        return value

    @field_validator("tag")
    @classmethod
    def _tag(cls, value: str) -> str:
        try:
            compiled = re.compile(value)
        except re.error as exc:
            raise ValueError(f"tag is not a valid regular expression ({exc})") from None
        if "release" not in compiled.groupindex:
            raise ValueError("tag must define the named group (?P<release>...)")
        return value

    @field_validator("arches")
    @classmethod
    def _arches(cls, value: dict[str, str]) -> dict[str, str]:
        for spelling, name in value.items():
            _architecture(f"arches {spelling!r}: {name!r}", name)
        return value

    @model_validator(mode="after")
    def _arch_group(self) -> KnownFamily:
        if ("arch" in re.compile(self.tag).groupindex) != bool(self.arches):
            raise ValueError("a tag group (?P<arch>...) and `arches` go together")
        return self

    @model_validator(mode="after")
    def _sourced(self) -> KnownFamily:
        seen: set[str] = set()
        for entry in self.releases:
            if entry.release in seen:
                raise ValueError(f"release {entry.release} is listed twice")
            seen.add(entry.release)
            source = entry.source or self.source
            if source is None:
                raise ValueError(f"release {entry.release} has no source (nor has the family)")
            if not _SOURCE.fullmatch(source.replace("{release}", entry.release)):
                raise ValueError(f"release {entry.release}: source must be an https:// link")
        return self


class KnowledgeFile(_Model):
    families: tuple[KnownFamily, ...]

    @field_validator("families")
    @classmethod
    def _some(cls, value: tuple[KnownFamily, ...]) -> tuple[KnownFamily, ...]:
        # Not Field(min_length=1): that one also fires, confusingly, when an entry is invalid.
        if not value:
            raise ValueError("at least one family is required")
        return value


@dataclass(frozen=True, slots=True)
class Known:
    """What the shipped knowledge says about one image."""

    version: CudaVersion | None  # every architecture not in by_arch; None: those unknown
    family: str
    release: str
    cite: str
    source: str  # the link, for `gpu-webhook images` and the docs
    # When the release's images differ by architecture: (architecture, version, note text)
    # for every architecture with a version (those of `arch`, and `cuda` for the others),
    # sorted; built once at load time. () otherwise: `version` holds for every architecture.
    by_arch: tuple[tuple[str, CudaVersion, str], ...] = ()
    arch: str = ""  # a single-architecture tag's architecture (`v0.11.0-aarch64`: arm64)

    @property
    def text(self) -> str:
        """How notes name it: `shipped knowledge: NGC Triton 24.05, NVIDIA release notes`."""
        where = f" for linux/{self.arch}" if self.arch else ""
        return f"shipped knowledge: {self.family} {self.release}{where}, {self.cite}"


# A family's tag pattern, its releases, and (when its tags may name one architecture) the
# spelling -> architecture map and the single-architecture entries by (release, architecture).
_Indexed = tuple[
    re.Pattern[str], Mapping[str, Known], Mapping[str, str], Mapping[tuple[str, str], Known]
]


class ImageKnowledge:
    """The validated file, indexed by repository. Immutable after construction; hashed by
    identity (it keys the per-image detection cache with the config's other image rules)."""

    __slots__ = ("_index", "families")

    def __init__(self, families: tuple[KnownFamily, ...]) -> None:
        self.families = families
        index: dict[str, list[_Indexed]] = {}
        for family in families:
            releases = {r.release: _known(family, r) for r in family.releases}
            single = {
                (r.release, arch): known
                for r in family.releases
                for arch in set(family.arches.values())
                if (known := _single_arch(releases[r.release], r, arch)) is not None
            }
            entry = (re.compile(family.tag), releases, family.arches, single)
            for repository in family.repositories:
                index.setdefault(repository, []).append(entry)
        self._index = {repo: tuple(families) for repo, families in index.items()}

    def __len__(self) -> int:
        return sum(len(f.releases) for f in self.families)

    def lookup(self, repository: str, tag: str) -> Known | None:
        """The entry for `repository:tag` (normalised repository, tag without digest)."""
        for tag_re, releases, arches, single in self._index.get(repository, ()):
            match = tag_re.fullmatch(tag)
            if match:
                spelled = match["arch"] if arches else None
                if spelled is None:
                    known = releases.get(match["release"])
                else:  # a spelling `arches` does not list is no architecture known here
                    arch = arches.get(spelled)
                    known = single.get((match["release"], arch)) if arch else None
                if known is not None:
                    return known
        return None

    def tag_architecture(self, repository: str, tag: str) -> str | None:
        """The one architecture a single-architecture tag names (`vllm/vllm-openai:
        v0.11.0-aarch64`: arm64), for a release the knowledge lists; None for any other tag
        (a plain tag may name a multi-platform index: its platforms are not known here)."""
        for tag_re, releases, arches, _ in self._index.get(repository, ()):
            match = tag_re.fullmatch(tag)
            if match and arches and match["release"] in releases:
                spelled = match["arch"]
                if spelled is not None and spelled in arches:
                    return arches[spelled]
        return None

    @classmethod
    def from_mapping(cls, data: Any, where: str) -> ImageKnowledge:
        if not isinstance(data, Mapping):
            raise KnowledgeError(f"{where} must be a YAML mapping with a `families` list")
        try:
            parsed = KnowledgeFile.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(_problem(data, err) for err in exc.errors())
            raise KnowledgeError(f"{where} is invalid: {problems}") from None
        return cls(parsed.families)

    @classmethod
    def from_yaml(cls, text: str, where: str) -> ImageKnowledge:
        try:
            documents = load_yaml_documents(text, where)
        except ManifestError as exc:
            raise KnowledgeError(str(exc)) from None
        if len(documents) != 1:
            raise KnowledgeError(f"{where} must hold one YAML document, got {len(documents)}")
        return cls.from_mapping(documents[0], where)


def _known(family: KnownFamily, release: KnownRelease) -> Known:
    version = _parsed(release.cuda) if release.cuda is not None else None
    cite = release.cite or family.cite
    by_arch: tuple[tuple[str, CudaVersion, str], ...] = ()
    if release.arch:
        prefix = f"shipped knowledge: {family.name} {release.release} for linux/"
        by_arch = tuple(
            (arch, arch_version, f"{prefix}{arch}, {cite}")
            for arch in sorted(ARCHITECTURES)
            if (arch_version := _arch_version(release, arch, version)) is not None
        )
    source = (release.source or family.source or "").replace("{release}", release.release)
    return Known(version, family.name, release.release, cite, source, by_arch)


def _single_arch(known: Known, release: KnownRelease, arch: str) -> Known | None:
    """The entry for a tag naming one architecture's image of a release (`known` is the
    release's own entry): that architecture's version, or None when the release lacks it."""
    version = _arch_version(release, arch, known.version)
    if version is None:
        return None
    # Notes name the architecture only where the release's images differ by it.
    shown = arch if release.arch else ""
    return Known(version, known.family, known.release, known.cite, known.source, (), shown)


def _arch_version(
    release: KnownRelease, arch: str, default: CudaVersion | None
) -> CudaVersion | None:
    listed = release.arch.get(arch)
    return _parsed(listed) if listed is not None else default


def _parsed(version: str) -> CudaVersion:
    return CudaVersion.parse(version) or MIN_IMAGE_GUESS  # the model checked it parses


def _problem(data: Any, err: Mapping[str, Any]) -> str:
    """`families[3] (NGC Triton): releases.2: cuda '3.1' is not ...`: the family by name."""
    loc = list(err["loc"])
    where = ".".join(str(p) for p in loc) or "(top level)"
    if len(loc) >= 2 and loc[0] == "families" and isinstance(loc[1], int):
        families = data.get("families") if isinstance(data, Mapping) else None
        family = families[loc[1]] if isinstance(families, list) else None
        name = family.get("name") if isinstance(family, Mapping) else None
        rest = ".".join(str(p) for p in loc[2:])
        where = f"families[{loc[1]}]" + (f" ({name})" if name else "")
        where += f": {rest}" if rest else ""
    return f"{where}: {err['msg']}"


@lru_cache(maxsize=1)
def shipped_knowledge() -> ImageKnowledge:
    """The package's own file, read and indexed once per process (KnowledgeError if broken:
    a test loads it, so a bad entry never ships)."""
    text = resources.files("webhook").joinpath("data", DATA_FILE).read_text(encoding="utf-8")
    return ImageKnowledge.from_yaml(text, f"webhook/data/{DATA_FILE}")
