"""CUDA node affinity (SPEC §4): required runtime version, compatibility rule, node terms."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from webhook.core.config import ANNOTATION_CUDA_VERSION, CudaLabels, ImageCudaEntry, WebhookConfig

_VERSION = re.compile(r"v?(\d{1,2})\.(\d{1,2})(?:\.\d+)*")
_REQUIRE_CUDA = re.compile(r"cuda\s*>=\s*(\d{1,2})\.(\d{1,2})")


@dataclass(frozen=True, slots=True, order=True)
class CudaVersion:
    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    @classmethod
    def parse(cls, text: object) -> CudaVersion | None:
        if not isinstance(text, str):
            return None
        match = _VERSION.fullmatch(text.strip())
        return cls(int(match[1]), int(match[2])) if match else None


@dataclass(frozen=True, slots=True)
class NodeInventory:
    """CUDA versions the cluster's nodes advertise (from node labels); input to evaluation."""

    versions: frozenset[CudaVersion]

    @property
    def labelled(self) -> bool:
        return bool(self.versions)


@dataclass(frozen=True, slots=True)
class Requirement:
    version: CudaVersion
    source: str  # where it came from, for the note


def compatible(driver: CudaVersion, runtime: CudaVersion, *, vgpu: bool, skew: int) -> bool:
    """NVIDIA: driver ≥ runtime, at most `skew` majors newer; vGPU: same major too."""
    if driver < runtime:
        return False
    if vgpu:
        return driver.major == runtime.major
    return driver.major - runtime.major <= skew


@lru_cache(maxsize=64)
def _compiled_patterns(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in patterns)


@lru_cache(maxsize=64)
def _compiled_table(
    table: tuple[ImageCudaEntry, ...],
) -> tuple[tuple[re.Pattern[str], CudaVersion], ...]:
    compiled = []
    for entry in table:
        version = CudaVersion.parse(entry.cuda_version)
        assert version is not None  # validated by the config model
        compiled.append((re.compile(fnmatch.translate(entry.image)), version))
    return tuple(compiled)


def strip_digest(image: str) -> str:
    return image.split("@", 1)[0]


def image_repository(image: str) -> str:
    """`registry:5000/team/paddle:2.6` -> `registry:5000/team/paddle`."""
    ref = strip_digest(image)
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    return ref[:colon] if colon > slash else ref


@lru_cache(maxsize=4096)
def _image_version(
    image: str, patterns: tuple[str, ...], table: tuple[ImageCudaEntry, ...]
) -> Requirement | None:
    ref = strip_digest(image)
    # The admin table wins over the heuristics: the admin knows their images.
    for regex, version in _compiled_table(table):
        if regex.match(ref):
            return Requirement(version, f"image table entry for {ref}")
    for regex in _compiled_patterns(patterns):
        match = regex.search(ref)
        if match:
            return Requirement(
                CudaVersion(int(match["major"]), int(match["minor"])), f"image {ref}"
            )
    return None


def _env_value(container: Mapping[str, Any], name: str) -> str | None:
    env = container.get("env")
    if not isinstance(env, list):
        return None
    for item in env:
        if isinstance(item, Mapping) and item.get("name") == name:
            value = item.get("value")
            return value if isinstance(value, str) else None
    return None


def container_requirement(
    container: Mapping[str, Any], config: WebhookConfig
) -> Requirement | None:
    """CUDA runtime a container needs: env CUDA_VERSION / NVIDIA_REQUIRE_CUDA, then image."""
    cuda_env = _env_value(container, "CUDA_VERSION")
    version = CudaVersion.parse(cuda_env)
    if version is not None:
        return Requirement(version, f"env CUDA_VERSION={cuda_env}")
    require = _env_value(container, "NVIDIA_REQUIRE_CUDA")
    if require:
        match = _REQUIRE_CUDA.search(require)
        if match:
            return Requirement(CudaVersion(int(match[1]), int(match[2])), "env NVIDIA_REQUIRE_CUDA")
    image = container.get("image")
    if isinstance(image, str) and image:
        return _image_version(image, config.image_patterns, config.image_cuda_table)
    return None


def annotation_requirement(annotations: Mapping[str, str]) -> tuple[Requirement | None, str]:
    """(requirement, warning): the pod annotation, or a warning when it cannot be parsed."""
    raw = annotations.get(ANNOTATION_CUDA_VERSION)
    if raw is None:
        return None, ""
    version = CudaVersion.parse(raw)
    if version is None:
        return None, (
            f"annotation {ANNOTATION_CUDA_VERSION}={raw!r} is not a version like 12.4; ignored"
        )
    return Requirement(version, f"annotation {ANNOTATION_CUDA_VERSION}"), ""


def _expr(key: str, operator: str, values: Sequence[int]) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": [str(v) for v in values]}


def injected_terms(
    runtime: CudaVersion, *, vgpu: bool, skew: int, labels: CudaLabels
) -> list[list[dict[str, Any]]]:
    """nodeSelectorTerms (as lists of matchExpressions) for nodes whose driver supports R.

    Terms are ORed, expressions in a term ANDed. Minor versions use `Gt`, which compares
    integers, so label values with leading zeros ("06") work; `Gt -1` is never needed because
    a minor of 0 drops the minor expression.
    """
    same_major = [_expr(labels.major, "In", [runtime.major])]
    if runtime.minor > 0:
        same_major.append(_expr(labels.minor, "Gt", [runtime.minor - 1]))
    newer = [] if vgpu else list(range(runtime.major + 1, runtime.major + skew + 1))
    if runtime.minor == 0 and newer:
        return [[_expr(labels.major, "In", [runtime.major, *newer])]]
    terms = [same_major]
    if newer:
        terms.append([_expr(labels.major, "In", newer)])
    return terms


def required_terms(spec: Mapping[str, Any]) -> list[Any] | None:
    affinity = spec.get("affinity")
    node = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = (
        node.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(node, Mapping)
        else None
    )
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    return terms if isinstance(terms, list) else None


def _cuda_expressions(term: Any, keys: frozenset[str]) -> list[Any]:
    if not isinstance(term, Mapping):
        return []
    exprs = term.get("matchExpressions")
    if not isinstance(exprs, list):
        return []
    # A malformed key (e.g. a list) is not hashable: test the type before the set lookup.
    return [
        e
        for e in exprs
        if isinstance(e, Mapping) and isinstance(e.get("key"), str) and e["key"] in keys
    ]


def existing_cuda_usage(
    spec: Mapping[str, Any], labels: CudaLabels, injected: list[list[dict[str, Any]]]
) -> str:
    """'' when the pod does not mention the CUDA labels, 'ours' when it carries exactly our
    injection (idempotence), 'user' when the user wrote their own CUDA placement."""
    keys = frozenset({labels.major, labels.minor})
    selector = spec.get("nodeSelector")
    if isinstance(selector, Mapping) and keys & set(selector):
        return "user"
    terms = required_terms(spec)
    if not terms:
        return ""
    found = [_cuda_expressions(term, keys) for term in terms]
    if not any(found):
        return ""
    ours = [list(t) for t in injected]
    if all(f in ours for f in found) and len({str(f) for f in found}) == len(injected):
        return "ours"
    return "user"


def merge_terms(
    existing: list[Any] | None, injected: list[list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Cross product: every user term AND every injected term (terms are ORed)."""
    if not existing:
        return [{"matchExpressions": list(term)} for term in injected]
    merged: list[dict[str, Any]] = []
    for user_term in existing:
        base = dict(user_term) if isinstance(user_term, Mapping) else {}
        user_exprs = base.get("matchExpressions")
        user_exprs = list(user_exprs) if isinstance(user_exprs, list) else []
        for term in injected:
            merged.append({**base, "matchExpressions": user_exprs + list(term)})
    return merged


def satisfying(
    inventory: NodeInventory, runtime: CudaVersion, *, vgpu: bool, skew: int
) -> list[CudaVersion]:
    return [v for v in inventory.versions if compatible(v, runtime, vgpu=vgpu, skew=skew)]


def uses_any(keys: Iterable[str], names: Iterable[str]) -> bool:
    wanted = set(names)
    return any(k in wanted for k in keys)
