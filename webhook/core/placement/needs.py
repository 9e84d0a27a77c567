"""What a pod's GPU containers need (SPEC §4): the CUDA range and compute capability of each,
under the compatibility mode the pod and the config choose."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from webhook.core.base.errors import QuantityError
from webhook.core.base.quantity import parse_quantity
from webhook.core.base.shapes import is_mapping
from webhook.core.base.versions import CudaVersion
from webhook.core.base.wording import Message, Wording, after
from webhook.core.config.model import (
    ANNOTATION_CUDA_COMPATIBILITY,
    ANNOTATION_CUDA_VERSION,
    WebhookConfig,
)
from webhook.core.images.facts import pod_archs
from webhook.core.images.references import shown_image
from webhook.core.images.requires import Branches, intersect, requirements_disabled
from webhook.core.outcome.decision import PodState, Violation, container_label, short
from webhook.core.placement import cuda
from webhook.core.policies.policyset import PolicySet
from webhook.core.workloads.pods import ContainerRef

_V12_4 = CudaVersion(12, 4)
_V11_4 = CudaVersion(11, 4)
NOT_ENFORCED_YET = (
    "CUDA placement is not enforced yet: the webhook is still listing the cluster's Nodes"
)


class Need:
    """What one GPU container needs (its CUDA range, and how it was set)."""

    # Written out: a NamedTuple's constructor stays interpreted under mypyc (~2k instructions
    # per container, issue 40). Read-only once built.
    def __init__(
        self,
        container: ContainerRef,
        requirement: cuda.Requirement,
        vgpu: bool,
        range: cuda.Range,
        recommended: cuda.Range,
        full: CudaVersion | None = None,
        checked: bool = False,
        driver_11_0: bool = False,
    ) -> None:
        self.container = container
        self.requirement = requirement
        self.vgpu = vgpu
        self.range = range  # required
        # Within maxMajorSkew: required, or preferred (majorSkew: prefer).
        self.recommended = recommended
        # Under minor-version compatibility: the version the full feature set needs (D ≥ R),
        # preferred; None when the required range already asks for it.
        self.full = full
        # minorVersion was in force but the image's own requirement (Requirement.declared,
        # which NVIDIA's toolkit checks in legacy mode) kept the container at D ≥ R.
        self.checked = checked
        # minorVersion for CUDA 11.x: nodes advertising CUDA 11.0 run it too when their driver
        # labels say ≥ 450.80.02 (cuda.MINOR_VERSION_DRIVER_11); the range starts at 11.1.
        self.driver_11_0 = driver_11_0


# NVIDIA's minor-version compatibility holds "from CUDA 11 onwards" (CUDA Compatibility guide,
# "Minor Version Compatibility": "CUDA 11 and Later Defaults to Minor Version Compatibility").
_MINOR_VERSION_FROM = 11
# For 11.x the family's drivers start at 11.1; a CUDA 11.0 node counts only with a driver
# ≥ 450.80.02 (cuda.MINOR_VERSION_DRIVER_11).
_V11_0, _V11_1 = cuda.CUDA_11_0, CudaVersion(11, 1)
_COMPATIBILITY_VALUES = ("backward", "minorVersion")


def _compatibility(state: PodState, config: WebhookConfig) -> str:
    """The rule in force for the pod: the config's, or `backward` when the pod asks for it; a
    pod can never relax the cluster's rule (SPEC §4)."""
    raw = state.pod.annotations.get(ANNOTATION_CUDA_COMPATIBILITY)
    if raw is None:
        return config.cuda_compatibility
    name = ANNOTATION_CUDA_COMPATIBILITY
    shown = raw if len(raw) <= 20 else raw[:19] + "…"
    if raw not in _COMPATIBILITY_VALUES:
        state.warnings.append(
            short(f"annotation {name}={shown!r} is not backward or minorVersion; ignored")
        )
        return config.cuda_compatibility
    if raw == "minorVersion" and config.cuda_compatibility == "backward":
        state.warnings.append(
            short(f"annotation {name}=minorVersion cannot relax the cluster's backward rule")
        )
        return "backward"
    return raw


def _value_in(resources: Any, key: str) -> Any:
    for field in ("limits", "requests"):
        values = resources.get(field) if is_mapping(resources) else None
        if is_mapping(values) and key in values:
            return values[key]
    return None


def _resource_value(state: PodState, c: ContainerRef, key: str) -> Any:
    value = _value_in(c.container.get("resources"), key)
    if value is not None or not state.draft.changed:
        return value
    # Not written by the user: a default the resource rule just wrote into the draft counts.
    node: Any = state.draft.root
    for part in state.container_path(c):
        node = node.get(part) if is_mapping(node) else node[part]
    return _value_in(node.get("resources") if is_mapping(node) else None, key)


class _WholeUnits:
    """The CRL wholeUnit of each vGPU resource key (0: none, or not a vGPU key) under one
    (policies, config) pair, worked out once per key: both are immutable snapshots (a reload
    makes new ones), and the unit reads nothing else. Bounded: emptied when full (the keys
    come from what pods write)."""

    def __init__(self, policies: PolicySet, config: WebhookConfig) -> None:
        self.policies = policies
        self.config = config
        self.units: dict[str, int] = {}

    def unit(self, key: str) -> int:
        found = self.units.get(key)
        if found is None:
            policy = self.policies.by_key.get(key)
            found = 0
            if policy is not None and policy.whole_unit and key in self.config.vgpu_resources:
                found = policy.whole_unit
            if len(self.units) >= _MAX_UNITS:
                self.units.clear()
            self.units[key] = found
        return found


_MAX_UNITS = 1024
# The last (policies, config) pair's units: every review passes the same snapshots until a
# reload, and the entry keeps them referenced (identity compared, never reused meanwhile).
_LAST_UNITS: list[_WholeUnits] = []


def _whole_units(policies: PolicySet, config: WebhookConfig) -> _WholeUnits:
    if _LAST_UNITS:
        last = _LAST_UNITS[0]
        if last.policies is policies and last.config is config:
            return last
    units = _WholeUnits(policies, config)
    _LAST_UNITS[:] = [units]
    return units


def _whole_card(
    state: PodState, c: ContainerRef, keys: set[str], policies: PolicySet, config: WebhookConfig
) -> bool:
    """GPU-Manager whole-card mode: a vGPU key at a positive multiple of its CRL wholeUnit
    (vcuda-core 100, 200, ...) hands the container whole GPUs, with native CUDA support."""
    units = _whole_units(policies, config)
    for key in keys:
        unit = units.unit(key)
        if not unit:
            continue
        raw = _resource_value(state, c, key)
        if isinstance(raw, str) and raw.isascii() and raw.isdigit():
            value: Fraction | int = int(raw)  # the common case, without the full grammar
        else:
            try:
                value = parse_quantity(raw)
            except QuantityError:
                continue
        if value > 0 and value % unit == 0:
            return True
    return False


def meta(state: PodState) -> Any:
    return state.draft.original.get("metadata")


def record_problem(state: PodState, config: WebhookConfig, text: Message, rule: str) -> bool:
    """Report a placement nobody can satisfy; True when it denies."""
    if config.no_compatible_node == "deny":
        whole = text.wordings[0] if isinstance(text, Wording) else text
        state.violations.append(Violation(f"{state.ref}: {whole}.", state.ref, rule=rule))
        return True
    state.warnings.append(text if isinstance(text, Wording) else short(text))
    return False


Envs = dict[int, dict[str, str | None]]


def container_env(envs: Envs, c: ContainerRef) -> dict[str, str | None]:
    """A container's env as a dict, built once per review for both CUDA and compute rules."""
    env = envs.get(id(c.container))
    if env is None:
        env = envs[id(c.container)] = cuda.env_values(c.container)
    return env


def container_needs(
    state: PodState,
    gpu: list[tuple[ContainerRef, set[str]]],
    config: WebhookConfig,
    policies: PolicySet,
    envs: Envs,
    facts: dict[str, cuda.Requirement] | None = None,
    archs: tuple[str, ...] | None = None,
) -> tuple[list[Need], list[ContainerRef], str]:
    """`archs`: the pod's architectures when the caller read them (None: read here only if an
    image's CUDA depends on them; `facts` is None then)."""
    pod_req, warning = cuda.annotation_requirement(state.pod.annotations)
    if warning:
        state.warnings.append(short(warning))
    needs: list[Need] = []
    unknown: list[ContainerRef] = []
    skew = config.max_major_skew
    require = config.major_skew == "require"
    compatibility = _compatibility(state, config) if gpu else config.cuda_compatibility
    minor_version = compatibility == "minorVersion"
    for c, keys in gpu:
        req = pod_req
        if req is None:
            env = container_env(envs, c)
            detection = cuda.detect(c.container, config, env, facts, archs)
            if detection.by_arch and archs is None:
                archs = pod_archs(state.pod.spec)
                detection = cuda.detect(c.container, config, env, facts, archs)
            if detection.warnings:
                where = container_label(c)
                state.warnings += [after(f"{where}: ", w) for w in detection.warnings]
            req = detection.requirement
        if req is None:
            # No image here, and the operator gives one (the ServingRuntime's, the training
            # runtime's): unknowable now, and the pods are checked when they are created, so
            # no advice the user could not follow.
            if not (c.image_from and not c.container.get("image")):
                unknown.append(c)
            continue
        version = req.version  # read once: a NamedTuple field is a generic lookup compiled
        whole = _whole_card(state, c, keys, policies, config)
        vgpu = not whole and config.vgpu_resources.any_of(keys)
        gpu_manager = not whole and config.gpu_manager_resources.any_of(keys)
        if gpu_manager and version >= _V12_4:
            state.warnings.append(
                short(
                    f"{container_label(c)} needs CUDA {version}: "
                    "GPU-Manager vGPU supports CUDA < 12.4"
                )
            )
        if version < _V11_4 and config.mps_memory_resources.any_of(keys):
            state.warnings.append(
                short(
                    f"{container_label(c)} needs CUDA {version}: MPS memory limits need CUDA ≥ 11.4"
                )
            )
        runtime, full, checked, driver_11_0 = version, None, False, False
        if minor_version and not vgpu and runtime.major >= _MINOR_VERSION_FROM:
            # Any driver of R's major family runs it (limited feature-set): required from
            # R.major.0 on; D ≥ R, the full feature set, is preferred. GFD and the manual
            # labels carry the driver's own CUDA version, so a node labelled R.major.x has a
            # driver of that family, at or above its minimum (release notes, Table 2) — but
            # for 11.0, see cuda.MINOR_VERSION_DRIVER_11.
            floor = CudaVersion(runtime.major, 0)
            if floor == _V11_0 and runtime > _V11_0:
                floor, driver_11_0 = _V11_1, True
            # Not below what the image declares: NVIDIA's toolkit refuses the container on
            # an older driver in legacy mode (Requirement.declared), whatever the rule says.
            declared = req.declared
            if declared is not None and _disabled(c, envs):
                declared = None  # the pod's own NVIDIA_DISABLE_REQUIRE turns the check off
            if declared is not None and declared > floor:
                floor, checked, driver_11_0 = min(declared, runtime), True, False
            if floor < runtime:
                runtime, full = floor, runtime
        recommended = cuda.cuda_range(runtime, vgpu=vgpu, skew=skew)
        required = (
            recommended if vgpu or require else cuda.cuda_range(runtime, vgpu=False, skew=None)
        )
        needs.append(Need(c, req, vgpu, required, recommended, full, checked, driver_11_0))
    return needs, unknown, compatibility


def _disabled(c: ContainerRef, envs: Envs) -> bool:
    """The container's spec env sets NVIDIA_DISABLE_REQUIRE to true: it overrides the image's
    configuration (the runtime appends the spec's env after the image's)."""
    return requirements_disabled(container_env(envs, c))


def forward_branches(needs: list[Need], config: WebhookConfig) -> Branches:
    """Driver branches on which every GPU container runs through forward compatibility, from
    what each image declares (SPEC §4); () unless the config names forward-compatible nodes
    and every container declares some. (A pod whose containers mix the two rules gets only
    the CUDA rule's terms: narrower than the exact union, never wider.) Not for vGPU."""
    if config.forward_compatible_nodes is None or not needs:
        return ()
    result: Branches | None = None
    for n in needs:
        if n.vgpu or not n.requirement.forward:
            return ()
        result = (
            n.requirement.forward if result is None else intersect(result, n.requirement.forward)
        )
    return result or ()


def unknown_warning(c: ContainerRef, others: bool, annotatable: bool) -> Wording:
    """CUDA's words for an image whose version nothing told (`runtime_unknown`)."""
    return runtime_unknown(
        c, others, annotatable, "CUDA", ANNOTATION_CUDA_VERSION, "imageCudaTable"
    )


def runtime_unknown(
    c: ContainerRef, others: bool, annotatable: bool, runtime: str, annotation: str, table: str
) -> Wording:
    """An image whose `runtime` version nothing told, in the same words for every family:
    names the image whole in every wording (SPEC §4), the fixed words get shorter; the way out
    is the pod `annotation` or the admin's image `table` (`annotatable` False: no annotation of
    this object reaches the pods, TrainJob's trainer)."""
    image = c.container.get("image")
    name = shown_image(image) if isinstance(image, str) and image else f"{c.name} (no image)"
    if others:
        return Wording(
            (
                f"{runtime} version of {name} unknown; node affinity uses the other containers",
                f"{runtime} of {name} unknown; affinity from the other containers",
                f"{runtime} of {name} unknown; affinity from others",
            )
        )
    if not annotatable:
        return Wording(
            (
                f"{runtime} version of {name} unknown, no affinity: add it to {table}",
                f"{runtime} of {name} unknown: add it to {table}",
            )
        )
    return Wording(
        (
            f"{runtime} version of {name} unknown, no affinity: set {annotation} or {table}",
            f"{runtime} version of {name} unknown: set {annotation} or {table}",
            f"{runtime} of {name} unknown: set {annotation}",
        )
    )
