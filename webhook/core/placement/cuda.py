"""CUDA and compute-capability requirements of GPU containers (SPEC §4) and the compatibility
rule that turns a requirement into the set of node versions that can run it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from webhook.core.base.shapes import is_mapping
from webhook.core.base.versions import CudaVersion, label_int
from webhook.core.base.wording import Message
from webhook.core.config.labels import DRIVER_VERSION_LABELS
from webhook.core.config.model import (
    ANNOTATION_CUDA_VERSION,
    ANNOTATION_MIN_COMPUTE,
    ComputeCapabilityRule,
    ImageRules,
    WebhookConfig,
)
from webhook.core.images.facts import DEFAULT_ARCH, Requirement
from webhook.core.images.references import (
    MAX_REFERENCE_LENGTH,
    image_repository,
    image_version,
    strip_digest,
)
from webhook.core.images.requires import forward_branches, requirements_disabled

__all__ = [
    "CudaVersion",
    "Detection",
    "Range",
    "Requirement",
    "annotation_requirement",
    "architecture_floor",
    "compatible",
    "compute_requirement",
    "container_requirement",
    "detect",
    "env_values",
    "image_repository",
    "strip_digest",
]

# `cuda>=12.4 brand=tesla,driver>=470,...` (the CUDA images' NVIDIA_REQUIRE_CUDA); a literal
# prefix and bounded digits keep the search linear.
_REQUIRE_CUDA = re.compile(r"cuda\s{0,8}>=\s{0,8}([0-9]{1,6})(?:\.([0-9]{1,6}))?")


# NamedTuples rather than frozen dataclasses: built per review, and a frozen dataclass's
# __init__ (object.__setattr__ per field) costs several times more.


# The minimum compute capability each CUDA major supports (SPEC §4 "architecture floor"), from
# NVIDIA's CUDA Toolkit release notes, "Deprecated or Dropped Architectures":
# - CUDA 11.0 dropped Kepler sm_30 and sm_32 ("Support for Kepler sm_30 and sm_32 architecture
#   based products is dropped"; cuFFT's "Deprecated Functionality": "Starting from CUDA 11.0:
#   GPU architecture SM30 is no longer supported. The minimum required architecture is SM35"):
#   ≥ 3.5;
# - CUDA 12.0 removed Kepler sm_35 and sm_37 (cuFFT, same page: "Starting from CUDA 12.0: GPU
#   architectures SM35 and SM37 are no longer supported. The minimum required architecture is
#   SM50"; LLVM's D152027 records the same for both majors): ≥ 5.0;
# - CUDA 13.0 removed Maxwell, Pascal and Volta, announced in the 12.8/12.9 notes ("offline
#   compilation and library support will be removed in the next major CUDA Toolkit version");
#   Turing sm_75 is the oldest a 13.x toolkit targets (13.0 release notes, "Deprecated
#   Architectures"; NVIDIA's "CUDA Toolkit, driver and architecture matrix"): ≥ 7.5.
# Older majors (10.x supports Kepler sm_30) get no floor: no cluster runs anything older.
# A major newer than the table gets the newest floor: NVIDIA has never re-added an
# architecture, so it is at least that.
ARCHITECTURE_FLOORS: Mapping[int, CudaVersion] = MappingProxyType(
    {11: CudaVersion(3, 5), 12: CudaVersion(5, 0), 13: CudaVersion(7, 5)}
)
_NEWEST_FLOOR = max(ARCHITECTURE_FLOORS)
# The same as a dict: compiled, a lookup in it is a direct call, in a Mapping a generic one.
_FLOORS: dict[int, CudaVersion] = dict(ARCHITECTURE_FLOORS)


# NVIDIA's minor-version compatibility (CUDA Compatibility guide, "Minor Version
# Compatibility", docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html)
# holds "on systems having at least the minimum required driver version": for CUDA 11.x that is
# 450.80.02 ("CUDA 11.0 was released with an earlier driver version, but by upgrading to Tesla
# Recommended Drivers 450.80.02 (Linux) / 452.39 (Windows) as indicated, minor version
# compatibility is possible across the CUDA 11.x family of toolkits"). The 11.0 GA drivers
# (450.36.06, 450.51.06: the release notes' toolkit/driver table) report CUDA 11.0 as 450.80.02
# does, so a node advertising CUDA 11.0 runs an 11.x (x ≥ 1) image under minorVersion only
# where its driver version labels say ≥ 450.80.02; every driver reporting 11.1 or newer is
# ≥ 455.23 and qualifies.
MINOR_VERSION_DRIVER_11 = (450, 80, 2)
CUDA_11_0 = CudaVersion(11, 0)


def driver_11_0(labels: Mapping[str, str] | None) -> bool | None:
    """Whether a CUDA 11.0 node's driver runs 11.x images under minorVersion, read on GFD's
    driver version labels exactly as minor_version_11_0_terms select it: branch 450 with a
    minor above 80, or 80 with a revision above 1. None when the node does not label its
    driver version (major and minor)."""
    major_key, minor_key, revision_key = DRIVER_VERSION_LABELS
    labels = labels or {}
    major, minor = label_int(labels.get(major_key)), label_int(labels.get(minor_key))
    if major is None or minor is None:
        return None
    revision = label_int(labels.get(revision_key))
    floor_major, floor_minor, floor_revision = MINOR_VERSION_DRIVER_11
    return major == floor_major and (
        minor > floor_minor
        or (minor == floor_minor and revision is not None and revision >= floor_revision)
    )


_NO_ARCHS: Mapping[str, Requirement] = MappingProxyType({})


def architecture_floor(runtime: CudaVersion) -> CudaVersion | None:
    """The lowest compute capability CUDA `runtime` supports; None below CUDA 11."""
    if runtime.major > _NEWEST_FLOOR:
        return _FLOORS[_NEWEST_FLOOR]
    return _FLOORS.get(runtime.major)


class Detection:
    """A container's CUDA requirement (None: unknown) and warnings met on the way."""

    # Written out: a NamedTuple's constructor and fields are generic calls under mypyc (issue
    # 40); a plain class's are direct. Read-only once built.
    def __init__(
        self,
        requirement: Requirement | None,
        warnings: tuple[Message, ...] = (),
        by_arch: Mapping[str, Requirement] = _NO_ARCHS,
    ) -> None:
        self.requirement = requirement  # on linux/amd64 when by_arch is set
        self.warnings = warnings
        # Architecture -> requirement, for an image whose CUDA differs by architecture
        # (shipped knowledge: one tag, a multi-platform index); an architecture not listed is
        # unknown. Built once per image (the detection cache), read-only.
        self.by_arch = by_arch


class Range(NamedTuple):
    """Node versions V with V ≥ low and (max_major None or V.major ≤ max_major)."""

    low: CudaVersion
    max_major: int | None

    @property
    def empty(self) -> bool:
        return self.max_major is not None and self.low.major > self.max_major

    def holds(self, version: CudaVersion) -> bool:
        return version >= self.low and (self.max_major is None or version.major <= self.max_major)

    def __and__(self, other: Range) -> Range:
        highs = [h for h in (self.max_major, other.max_major) if h is not None]
        return Range(max(self.low, other.low), min(highs) if highs else None)

    def text(self) -> str:
        if self.max_major is None:
            return f"≥ {self.low}"
        return f"≥ {self.low} and < {self.max_major + 1}.0"


# cuda_range's answers by its arguments (all it reads): a NamedTuple's constructor stays
# interpreted under mypyc (~5k instructions), a dict lookup does not. Bounded: emptied when
# full (the runtimes come from what pods write).
_RANGES: dict[tuple[CudaVersion, bool, int | None], Range] = {}
_MAX_RANGES = 1024


def cuda_range(runtime: CudaVersion, *, vgpu: bool, skew: int | None) -> Range:
    """Node driver versions D for a container needing CUDA `runtime` R (SPEC §4, the
    reference's rules): D ≥ R always; vGPU: D.major = R.major too; a physical GPU: at most
    `skew` majors newer, or no upper bound when `skew` is None (the skew as a preference)."""
    key = (runtime, vgpu, skew)
    found = _RANGES.get(key)
    if found is not None:
        return found
    if vgpu:
        found = Range(runtime, runtime.major)
    else:
        found = Range(runtime, None if skew is None else runtime.major + skew)
    if len(_RANGES) >= _MAX_RANGES:
        _RANGES.clear()
    _RANGES[key] = found
    return found


def compatible(driver: CudaVersion, runtime: CudaVersion, *, vgpu: bool, skew: int) -> bool:
    return cuda_range(runtime, vgpu=vgpu, skew=skew).holds(driver)


def env_values(container: Mapping[str, Any]) -> dict[str, str | None]:
    """name -> literal value; when a name appears twice the last entry wins, as in the kubelet
    (pkg/kubelet/kubelet_pods.go makeEnvironmentVariables fills a map in list order)."""
    env = container.get("env")
    values: dict[str, str | None] = {}
    if not isinstance(env, list):
        return values
    for item in env:
        if type(item) is dict:
            # The decoded JSON's own type: a direct lookup compiled (the same reads as below).
            name = item.get("name")
            if isinstance(name, str):
                value = item.get("value")
                values[name] = value if isinstance(value, str) else None
        elif is_mapping(item) and isinstance(item.get("name"), str):
            value = item.get("value")
            values[item["name"]] = value if isinstance(value, str) else None
    return values


def _implausible(what: str, version: CudaVersion) -> str:
    return f"{what} gives CUDA {version}, not a plausible CUDA version (1.0 to 99.x); ignored"


def detect(
    container: Mapping[str, Any],
    config: WebhookConfig,
    env: dict[str, str | None] | None = None,
    facts: Mapping[str, Requirement] | None = None,
    archs: tuple[str, ...] | None = None,
) -> Detection:
    """CUDA runtime a container needs (SPEC §4 steps 2-6; the pod annotation, step 1, is the
    caller's): env CUDA_VERSION / NVIDIA_REQUIRE_CUDA, then what the image reference says (the
    admin table, a version in the tag or path, the shipped knowledge), then `facts` (image ->
    requirement, read from the image's registry by the caller), the last resort. A None
    requirement means nothing knows the image yet: the caller may look it up.
    `env` is the container's env_values() when the caller has it already; `archs` the
    architectures the pod may run on (imagefacts.pod_archs; None: linux/amd64, not read yet),
    for images whose CUDA differs by architecture: the strictest of theirs, unknown when one
    of them is. (None rather than a default tuple: compiled, a default tuple is not the same
    object on every call, and an identity check on it would always fail.)"""
    warnings: list[Message] = []
    env = env_values(container) if env is None else env
    cuda_env = env.get("CUDA_VERSION")
    version = None if cuda_env is None else CudaVersion.parse(cuda_env)
    require = env.get("NVIDIA_REQUIRE_CUDA")
    match = _REQUIRE_CUDA.search(require) if require else None
    checked = not requirements_disabled(env)
    if version is not None:
        if version.plausible:
            forward = forward_branches(env) if require else ()
            # What the toolkit's legacy mode checks (cuda_image.go): NVIDIA_REQUIRE_CUDA when
            # set, else `cuda>=` CUDA_VERSION's major.minor (IsLegacy).
            declared = _declared(match) if require else version
            return Detection(
                Requirement(
                    version,
                    f"env CUDA_VERSION={cuda_env}",
                    forward,
                    declared if checked else None,
                )
            )
        warnings.append(_implausible("env CUDA_VERSION", version))
    if match:
        version = CudaVersion(int(match[1]), int(match[2] or 0))
        if version.plausible:
            requirement = Requirement(
                version,
                "env NVIDIA_REQUIRE_CUDA",
                forward_branches(env),
                version if checked else None,
            )
            return Detection(requirement, tuple(warnings))
        warnings.append(_implausible("env NVIDIA_REQUIRE_CUDA", version))
    image = _image_of(container)
    # Over-long references are no image (image_version); checked before the cache.
    if isinstance(image, str) and image and len(image) <= MAX_REFERENCE_LENGTH:
        found = _image_detection(image, config.image_rules)
        if archs is not None and found.by_arch:
            found = _for_archs(found, archs)
        if found.requirement is None and facts and image in facts:
            found = Detection(facts[image], found.warnings)
        if not warnings:  # most containers: the cached answer as it is
            return found
        return Detection(found.requirement, (*warnings, *found.warnings), found.by_arch)
    return Detection(None, tuple(warnings))


def _image_of(container: Mapping[str, Any]) -> Any:
    if isinstance(container, dict):
        # The decoded JSON: compiled, a direct lookup where a Mapping's is a method call.
        return container.get("image")
    return container.get("image")


def _declared(match: re.Match[str] | None) -> CudaVersion | None:
    """The `cuda>=X` NVIDIA_REQUIRE_CUDA declares (None: none, or not a plausible version)."""
    if match is None:
        return None
    version = CudaVersion(int(match[1]), int(match[2] or 0))
    return version if version.plausible else None


def _for_archs(found: Detection, archs: tuple[str, ...]) -> Detection:
    """The requirement for a pod that may run on any of `archs`: the strictest one, or None
    when an architecture is not known (a registry lookup for it may still tell)."""
    best: Requirement | None = None
    for arch in archs:
        requirement = found.by_arch.get(arch)
        if requirement is None:
            return Detection(None, found.warnings)
        if best is None or requirement.version > best.version:
            best = requirement
    return Detection(best, found.warnings, found.by_arch)


# _image_detection's answers by its arguments (all it reads). A dict rather than lru_cache:
# compiled, a call through lru_cache's wrapper costs ~2k instructions, a dict lookup a tenth.
# Bounded: emptied when full. The key holds the ImageRules, so its identity stays its own.
_DETECTIONS: dict[tuple[str, ImageRules], Detection] = {}
_MAX_DETECTIONS = 4096


def _image_detection(image: str, rules: ImageRules) -> Detection:
    """What the image alone says, built once per distinct (image, config): replicas and
    repeated submissions of the same image are most of the reviews. (Immutable: safe to
    share.) Keyed on the config's ImageRules, hashed by identity, not on its table."""
    key = (image, rules)
    found = _DETECTIONS.get(key)
    if found is None:
        found = _detect_image(image, rules)
        if len(_DETECTIONS) >= _MAX_DETECTIONS:
            _DETECTIONS.clear()
        _DETECTIONS[key] = found
    return found


def _detect_image(image: str, rules: ImageRules) -> Detection:
    guess = image_version(image, rules.patterns, rules.table, rules.knowledge)
    if guess is None:
        return Detection(None)
    warnings = (guess.problem,) if guess.problem else ()
    if guess.by_arch:
        by_arch = MappingProxyType({a: Requirement(v, source) for a, v, source in guess.by_arch})
        return Detection(by_arch.get(DEFAULT_ARCH), warnings, by_arch)
    if guess.version is None:
        return Detection(None, warnings)
    return Detection(Requirement(guess.version, guess.source), warnings)


def known_cuda_image(image: object, config: WebhookConfig) -> bool:
    """Whether the image alone (admin table, reference, shipped knowledge) says it is built on
    NVIDIA's CUDA images: those set NVIDIA_VISIBLE_DEVICES=all in their configuration (SPEC §12)."""
    if not isinstance(image, str) or not image or len(image) > MAX_REFERENCE_LENGTH:
        return False
    found = _image_detection(image, config.image_rules)
    return found.requirement is not None or bool(found.by_arch)


def container_requirement(
    container: Mapping[str, Any], config: WebhookConfig
) -> Requirement | None:
    return detect(container, config).requirement


def _annotation(
    annotations: Mapping[str, str], name: str, example: str
) -> tuple[Requirement | None, str]:
    raw = annotations.get(name)
    if raw is None:
        return None, ""
    version = CudaVersion.parse(raw)
    shown = raw if len(raw) <= 20 else raw[:19] + "…"
    if version is None:
        return None, f"annotation {name}={shown!r} is not a version like {example}; ignored"
    if not version.plausible:
        return None, f"annotation {name}={shown!r} is not plausible (1.0 to 99.x); ignored"
    return Requirement(version, f"annotation {name}"), ""


def annotation_requirement(annotations: Mapping[str, str]) -> tuple[Requirement | None, str]:
    """(requirement, warning): the pod annotation ("12" means 12.0), or why it is ignored."""
    return _annotation(annotations, ANNOTATION_CUDA_VERSION, "12.4")


def _command_line(container: Mapping[str, Any]) -> str:
    parts = []
    for field in ("command", "args"):
        items = container.get(field)
        if isinstance(items, list):
            parts += [item for item in items if isinstance(item, str)]
    return " ".join(parts)


def compute_requirement(
    container: Mapping[str, Any],
    rules: tuple[ComputeCapabilityRule, ...],
    where: str,
    env: dict[str, str | None] | None = None,
) -> Requirement | None:
    """The highest minimum compute capability among the config rules the container matches."""
    best: Requirement | None = None
    line: str | None = None
    for rule in rules:
        image_re, args_re, env_res, version = rule.compiled
        # Cheapest conditions first: most containers set no such env and no such flag.
        if env_res:
            env = env_values(container) if env is None else env
            if not all(
                isinstance(env.get(name), str) and regex.fullmatch(str(env[name]))
                for name, regex in env_res
            ):
                continue
        if args_re is not None:
            line = _command_line(container) if line is None else line
            if not line or not args_re.search(line):
                continue
        if image_re is not None:
            image = container.get("image")
            if not isinstance(image, str) or not image_re.search(image_repository(image)):
                continue
        if best is None or version > best.version:
            best = Requirement(version, f"rule {rule.name} for {where}")
    return best


def annotation_compute(annotations: Mapping[str, str]) -> tuple[Requirement | None, str]:
    return _annotation(annotations, ANNOTATION_MIN_COMPUTE, "8.0")
