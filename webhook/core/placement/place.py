"""GPU placement (SPEC §4): what a pod's GPU containers need (CUDA, compute capability), checked
against the node inventory when there is one, and injected as required node affinity."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from functools import reduce
from typing import Any, NamedTuple

from webhook.core.base.annotations import parse_opt_out
from webhook.core.base.errors import QuantityError
from webhook.core.base.quantity import parse_quantity
from webhook.core.base.shapes import is_mapping
from webhook.core.base.versions import CudaVersion
from webhook.core.base.wording import Message, Wording, after
from webhook.core.config.model import (
    ANNOTATION_CUDA_AFFINITY,
    ANNOTATION_CUDA_COMPATIBILITY,
    ANNOTATION_CUDA_VERSION,
    WebhookConfig,
)
from webhook.core.images.facts import ImageFacts, ImageQuery, facts_for_archs, pod_archs
from webhook.core.images.references import image_repository, shown_image
from webhook.core.images.requires import Branches, branch_list, intersect
from webhook.core.outcome.decision import PodState, Violation, container_label, short
from webhook.core.placement import cuda, fit
from webhook.core.placement.injection import Plan, inject
from webhook.core.placement.inventory import InventoryFacts, NodeInventory
from webhook.core.placement.terms import (
    preferred_range_terms,
    preferred_terms,
    range_terms,
    union_terms,
)
from webhook.core.policies.policyset import PolicySet
from webhook.core.workloads.pods import ContainerRef

_V12_4 = CudaVersion(12, 4)
_V11_4 = CudaVersion(11, 4)
_NOT_ENFORCED_YET = (
    "CUDA placement is not enforced yet: the webhook is still listing the cluster's Nodes"
)


class _Need(NamedTuple):
    container: ContainerRef
    requirement: cuda.Requirement
    vgpu: bool
    range: cuda.Range  # required
    recommended: cuda.Range  # within maxMajorSkew: required, or preferred (majorSkew: prefer)
    # Under minor-version compatibility: the version the full feature set needs (D ≥ R),
    # preferred; None when the required range already asks for it.
    full: CudaVersion | None = None


# NVIDIA's minor-version compatibility holds "from CUDA 11 onwards" (CUDA Compatibility guide,
# "Minor Version Compatibility": "CUDA 11 and Later Defaults to Minor Version Compatibility").
_MINOR_VERSION_FROM = 11
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
        node = node.get(part) if isinstance(node, Mapping) else node[part]
    return _value_in(node.get("resources") if isinstance(node, Mapping) else None, key)


def _whole_card(
    state: PodState, c: ContainerRef, keys: set[str], policies: PolicySet, config: WebhookConfig
) -> bool:
    """GPU-Manager whole-card mode: a vGPU key at a positive multiple of its CRL wholeUnit
    (vcuda-core 100, 200, ...) hands the container whole GPUs, with native CUDA support."""
    for key in keys:
        policy = policies.by_key.get(key)
        if policy is None or not policy.whole_unit or key not in config.vgpu_resources:
            continue
        raw = _resource_value(state, c, key)
        if isinstance(raw, str) and raw.isascii() and raw.isdigit():
            value: Fraction | int = int(raw)  # the common case, without the full grammar
        else:
            try:
                value = parse_quantity(raw)
            except QuantityError:
                continue
        if value > 0 and value % policy.whole_unit == 0:
            return True
    return False


def meta(state: PodState) -> Any:
    return state.draft.original.get("metadata")


def _problem(state: PodState, config: WebhookConfig, text: Message, rule: str) -> bool:
    """Report a placement nobody can satisfy; True when it denies."""
    if config.no_compatible_node == "deny":
        whole = text.wordings[0] if isinstance(text, Wording) else text
        state.violations.append(Violation(f"{state.ref}: {whole}.", state.ref, rule=rule))
        return True
    state.warnings.append(text if isinstance(text, Wording) else short(text))
    return False


Envs = dict[int, dict[str, str | None]]


def _env(envs: Envs, c: ContainerRef) -> dict[str, str | None]:
    """A container's env as a dict, built once per review for both CUDA and compute rules."""
    env = envs.get(id(c.container))
    if env is None:
        env = envs[id(c.container)] = cuda.env_values(c.container)
    return env


def _needs(
    state: PodState,
    gpu: list[tuple[ContainerRef, set[str]]],
    config: WebhookConfig,
    policies: PolicySet,
    envs: Envs,
    facts: dict[str, cuda.Requirement] | None = None,
    archs: tuple[str, ...] | None = None,
) -> tuple[list[_Need], list[ContainerRef], str]:
    """`archs`: the pod's architectures when the caller read them (None: read here only if an
    image's CUDA depends on them; `facts` is None then)."""
    pod_req, warning = cuda.annotation_requirement(state.pod.annotations)
    if warning:
        state.warnings.append(short(warning))
    needs: list[_Need] = []
    unknown: list[ContainerRef] = []
    skew = config.max_major_skew
    require = config.major_skew == "require"
    compatibility = _compatibility(state, config) if gpu else config.cuda_compatibility
    minor_version = compatibility == "minorVersion"
    for c, keys in gpu:
        req = pod_req
        if req is None:
            env = _env(envs, c)
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
        whole = _whole_card(state, c, keys, policies, config)
        vgpu = not whole and config.vgpu_resources.any_of(keys)
        gpu_manager = not whole and config.gpu_manager_resources.any_of(keys)
        if gpu_manager and req.version >= _V12_4:
            state.warnings.append(
                short(
                    f"{container_label(c)} needs CUDA {req.version}: "
                    "GPU-Manager vGPU supports CUDA < 12.4"
                )
            )
        if req.version < _V11_4 and config.mps_memory_resources.any_of(keys):
            state.warnings.append(
                short(
                    f"{container_label(c)} needs CUDA {req.version}: "
                    "MPS memory limits need CUDA ≥ 11.4"
                )
            )
        runtime, full = req.version, None
        if minor_version and not vgpu and runtime.major >= _MINOR_VERSION_FROM:
            # Any driver of R's major family runs it (limited feature-set): required from
            # R.major.0 on; D ≥ R, the full feature set, is preferred. GFD and the manual
            # labels carry the driver's own CUDA version, so a node labelled R.major.x has a
            # driver of that family, at or above its minimum (release notes, Table 2).
            runtime, full = CudaVersion(runtime.major, 0), (runtime if runtime.minor else None)
        recommended = cuda.cuda_range(runtime, vgpu=vgpu, skew=skew)
        required = (
            recommended if vgpu or require else cuda.cuda_range(runtime, vgpu=False, skew=None)
        )
        needs.append(_Need(c, req, vgpu, required, recommended, full))
    return needs, unknown, compatibility


def _forward_branches(needs: list[_Need], config: WebhookConfig) -> Branches:
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


def _unknown_warning(c: ContainerRef, others: bool, annotatable: bool) -> Wording:
    """Names the image whole in every wording (SPEC §4); the fixed words get shorter."""
    image = c.container.get("image")
    name = shown_image(image) if isinstance(image, str) and image else f"{c.name} (no image)"
    if others:
        return Wording(
            (
                f"CUDA version of {name} unknown; node affinity uses the other containers",
                f"CUDA of {name} unknown; affinity from the other containers",
                f"CUDA of {name} unknown; affinity from others",
            )
        )
    if not annotatable:  # no annotation of this object reaches the pods (TrainJob's trainer)
        return Wording(
            (
                f"CUDA version of {name} unknown, no affinity: add it to imageCudaTable",
                f"CUDA of {name} unknown: add it to imageCudaTable",
            )
        )
    return Wording(
        (
            f"CUDA version of {name} unknown, no affinity: set {ANNOTATION_CUDA_VERSION} "
            "or imageCudaTable",
            f"CUDA version of {name} unknown: set {ANNOTATION_CUDA_VERSION} or imageCudaTable",
            f"CUDA of {name} unknown: set {ANNOTATION_CUDA_VERSION}",
        )
    )


def _intersection(ranges: list[cuda.Range]) -> cuda.Range:
    if len(ranges) == 1:
        return ranges[0]
    return reduce(lambda a, b: a & b, ranges)


def _intersection_violation(state: PodState, needs: list[_Need], rng: cuda.Range | None) -> bool:
    """The pod needs one node for all its containers: an empty intersection is a violation."""
    if rng is None or not rng.empty:
        return False
    listed = "; ".join(
        f"{container_label(n.container)} needs CUDA {n.requirement.version}"
        f"{' on vGPU' if n.vgpu else ''} (driver {n.range.text()})"
        for n in needs
    )
    state.violations.append(
        Violation(
            f"{state.ref}: no node driver can run all GPU containers: {listed}; "
            "align their CUDA versions or split them into separate pods.",
            state.ref,
            rule="cuda",
        )
    )
    return True


def _preference(
    state: PodState, needs: list[_Need], rng: cuda.Range, config: WebhookConfig
) -> cuda.Range | None:
    """The major-skew range to prefer within the required `rng` (None: nothing to prefer).
    When the containers' recommended ranges do not meet, every node is beyond the skew of
    one of them: admitted with a warning, as the reference calls that "Unstable"."""
    if config.major_skew == "require":
        return None
    recommended = _intersection([n.recommended for n in needs])
    if recommended.empty:
        behind = min(needs, key=lambda n: n.recommended.max_major or 0)
        ahead = max(needs, key=lambda n: n.requirement.version)
        skew = config.max_major_skew
        state.warnings.append(
            short(
                f"{container_label(behind.container)} needs CUDA {behind.requirement.version} "
                f"and {container_label(ahead.container)} CUDA {ahead.requirement.version}, more "
                f"than {skew} major{'s' if skew != 1 else ''} apart: the application may "
                "malfunction"
            )
        )
        return None
    return recommended if recommended.max_major != rng.max_major else None


def _cuda_terms(
    state: PodState,
    needs: list[_Need],
    rng: cuda.Range | None,
    unknown: list[ContainerRef],
    config: WebhookConfig,
    facts: InventoryFacts | None,
    plan: Plan,
    compatibility: str = "backward",
) -> bool:
    """Add the CUDA part to `plan` (`rng`: the needs' intersection); False when denied.
    `compatibility`: the rule in force for the pod (config, or the pod's stricter ask)."""
    for c in unknown:
        state.warnings.append(_unknown_warning(c, bool(needs), state.pod.annotatable))
    if rng is None:
        return True
    top = max(needs, key=lambda n: n.requirement.version)
    vgpu = any(n.vgpu for n in needs)
    prefer = _preference(state, needs, rng, config)
    # Minor-version compatibility: the full version the containers would need under the
    # backward rule, preferred (None when the required range asks for it already).
    full = max((n.full for n in needs if n.full is not None), default=None)
    if full is not None and full <= rng.low:
        full = None
    forward = _forward_branches(needs, config)
    if facts is not None:
        if not facts.labelled:
            state.warnings.append(
                "CUDA placement is not enforced: no node advertises its CUDA version"
            )
            return True
        if forward and not any(b in branch_list(forward) for b in facts.forward):
            forward = ()  # no forward-compatible node with a branch the image lists
        wanted = ""
        if full is not None:
            wanted = f"{rng.low.major}.x (minorVersion, for {full})"
        text = fit.cuda_problem(facts, rng, vgpu, wanted)
        if text and forward:
            # None by the CUDA rule, but forward-compatible nodes with a listed branch exist.
            text, plan.fits = "", None
        elif text and _problem(state, config, text, "cuda"):
            return False
        else:
            plan.fits = None if text or forward else rng
        if not text and full is not None:
            warning = fit.full_version_warning(facts, rng, full)
            if warning:
                state.warnings.append(short(warning))
        if not text and prefer is not None:
            runtime = min(n.requirement.version for n in needs)
            warning = fit.skew_warning(facts, rng, prefer, runtime)
            if warning:
                state.warnings.append(short(warning))
    schemes = config.schemes[:1] if facts is None else facts.carried
    plan.cuda = union_terms(schemes, rng.low, rng.max_major)
    if forward and config.forward_compatible_nodes is not None:
        branches = [str(b) for b in branch_list(forward)]
        plan.cuda.append(
            [
                *(e.as_expression() for e in config.forward_compatible_nodes.match_expressions),
                {"key": config.driver_branch_label, "operator": "In", "values": branches},
            ]
        )
        plan.forward_keys = config.forward_label_keys
        listed = ", ".join(branches)
        plan.forward_note = Wording(
            (
                f"or driver {listed} on forwardCompatibleNodes "
                "(forward compatibility the image declares)",
                f"or forwardCompatibleNodes with driver {listed}",
            )
        )
    preferably = ""
    if full is not None:
        plan.preferred = preferred_range_terms(schemes, full)
        preferably = f", preferably ≥ {full}"
    if prefer is not None and prefer.max_major is not None:
        plan.preferred = plan.preferred + preferred_terms(schemes, prefer.max_major)
        below = f"< {prefer.max_major + 1}.0"
        preferably = f"{preferably} and {below}" if preferably else f", preferably {below}"
    # The upper bound is said when the other containers set it: "vGPU" already says "the
    # same major", and a physical GPU alone has none.
    bound = ""
    if rng.max_major is not None and rng.max_major != top.range.max_major:
        bound = f" and < {rng.max_major + 1}.0"
    mode, source = "vGPU" if vgpu else "GPU", top.requirement.source  # source: the image whole
    # Which rule placed the pod (SPEC §4), said when the cluster is not on the default one.
    if compatibility == "minorVersion" and rng.low < top.requirement.version:
        source = f"minorVersion: {source}"
        plan.cuda_rule = "minorVersion"
    elif config.cuda_compatibility == "minorVersion" and compatibility == "backward":
        source = f"backward, as annotated: {source}"
    # The preference goes last and goes first when a wording must be shorter (a long image, a
    # template's "will apply to replica Worker pods: "): never the version's source.
    wordings: tuple[str, ...] = (
        f"required {mode} nodes with CUDA ≥ {rng.low}{bound} ({source})",
        f"required CUDA ≥ {rng.low}{bound} ({source})",
        f"CUDA ≥ {rng.low}{bound} ({source})",
    )
    if preferably:
        wordings = (wordings[0] + preferably, wordings[1] + preferably, *wordings)
    plan.cuda_note = Wording(wordings)
    plan.cuda_want = f"CUDA {rng.text()}{preferably}"
    return True


# A digest no image has: what a reference by digest tells without a registry (SPEC §4: a
# digest-only reference is matched by its name).
_SOME_DIGEST = "@sha256:" + "0" * 64


def _tag_only(state: PodState, needs: list[_Need], config: WebhookConfig) -> bool:
    """For pods their operator runs by digest (Knative, PodSpecRef.by_digest): warn for each
    container whose CUDA only its tag tells, and True then (the template's note must not
    promise a placement the pods will not get). A version the pods' reference by digest gives
    too (env, a pod annotation, an image table entry or a path that names the repository) is
    what the pods get; so is a registry answer for the tag (the digest is that image)."""
    if cuda.annotation_requirement(state.pod.annotations)[0] is not None:
        return False
    tag_only = False
    for need in needs:
        container = need.container.container
        image = container.get("image")
        if not isinstance(image, str) or "@" in image:
            continue  # already by digest: the pods run it as it is
        by_tag = cuda.detect(container, config).requirement
        if by_tag is None:
            continue  # read from the registry for the tag: the digest names that image
        pinned = cuda.detect({**container, "image": image_repository(image) + _SOME_DIGEST}, config)
        got = pinned.requirement
        if got is not None and got.version == by_tag.version:
            continue
        tag_only = True
        name, want, fix = shown_image(image), f"CUDA ≥ {by_tag.version}", ANNOTATION_CUDA_VERSION
        head = f"Knative runs {name} by digest: "
        if got is not None:
            said = f"CUDA ≥ {got.version}, not {want}"
        elif config.registry_lookups.enabled:
            said = f"{want} only if its registry says so"
        else:
            said = "no CUDA affinity"
        # Shorter wordings for a long image: without "its pods get", then without the advice.
        state.warnings.append(
            Wording(
                (
                    f"{head}its pods get {said}; set {fix}",
                    f"{head}{said}; set {fix}",
                    f"{head}its pods get {said}",
                    f"{head}set {fix}",
                )
            )
        )
    return tag_only


def _compute_requirement(
    state: PodState, gpu: list[tuple[ContainerRef, set[str]]], config: WebhookConfig, envs: Envs
) -> cuda.Requirement | None:
    req, warning = cuda.annotation_compute(state.pod.annotations)
    if warning:
        state.warnings.append(short(warning))
    if req is not None or not config.compute_capability_rules:
        return req
    found = [
        cuda.compute_requirement(
            c.container, config.compute_capability_rules, container_label(c), _env(envs, c)
        )
        for c, _ in gpu
    ]
    return max((r for r in found if r is not None), key=lambda r: r.version, default=None)


class _Floor(NamedTuple):
    """The architecture floor of the pod's CUDA (SPEC §4): the strictest of its containers'."""

    low: CudaVersion  # minimum compute capability
    runtime: CudaVersion  # the CUDA version that sets it
    image: str  # the image that needs that CUDA, for the warning

    @property
    def requirement(self) -> cuda.Requirement:
        return cuda.Requirement(self.low, f"architecture floor of CUDA {self.runtime}")

    def problem(self) -> Wording:
        """No node at or above the floor: names the image whole, the fixed words get shorter."""
        head = f"no node with compute capability ≥ {self.low} for CUDA {self.runtime}"
        return Wording(
            (
                f"{head} (image {self.image})",
                f"{head} ({self.image})",
                f"no GPU ≥ {self.low} for CUDA {self.runtime} ({self.image})",
            )
        )


def _floor(needs: list[_Need]) -> _Floor | None:
    best: _Floor | None = None
    for n in needs:
        low = cuda.architecture_floor(n.requirement.version)
        if low is not None and (best is None or low > best.low):
            image = n.container.container.get("image")
            name = shown_image(image) if isinstance(image, str) and image else n.container.name
            best = _Floor(low, n.requirement.version, name)
    return best


def _stricter(req: cuda.Requirement | None, floor: _Floor | None) -> cuda.Requirement | None:
    """The compute-capability requirement in force: the rule's or the floor's, the higher."""
    if floor is not None and (req is None or floor.low > req.version):
        return floor.requirement
    return req


def _compute_terms(
    state: PodState,
    asked: cuda.Requirement | None,
    floor: _Floor | None,
    config: WebhookConfig,
    facts: InventoryFacts | None,
    plan: Plan,
) -> bool:
    """Add the compute-capability part to `plan`: the annotation's or a rule's minimum
    (`asked`) and the architecture floor of the pod's CUDA (`floor`, when it excludes some
    node), the stricter of the two; False when denied."""
    req = _stricter(asked, floor)
    if req is None:
        return True
    by_floor = floor is not None and req is not asked
    low = req.version
    if facts is not None:
        if not facts.compute:
            state.warnings.append(
                "compute capability placement is not enforced: no node advertises it"
            )
            return True
        text = fit.compute_problem(facts, low)
        if text and by_floor and floor is not None:
            if _problem(state, config, floor.problem(), "compute capability"):
                return False
        elif text and _problem(state, config, text, "compute capability"):
            return False
        if not text and plan.fits is not None:
            # Each is met somewhere; check that some node meets both.
            text = fit.joint_problem(facts, plan.fits, low)
            if text and _problem(state, config, text, "compute capability"):
                return False
    plan.compute = range_terms(config.compute_capability_labels, low, None)
    if by_floor:
        plan.compute_rule = "architecture-floor"
    plan.compute_note = f"required compute capability ≥ {low} ({req.source})"
    plan.compute_want = f"compute capability ≥ {low}"
    return True


def _daemonset_template(
    state: PodState,
    rng: cuda.Range | None,
    compute: cuda.Requirement | None,
    facts: InventoryFacts | None,
) -> None:
    """A DaemonSet's template (SPEC §4 "DaemonSet pods"): its pods are pinned to their nodes
    and get no affinity, so say that, and which nodes cannot run them. Notes, not mutations:
    nothing is written into the template."""
    low = compute.version if compute is not None else None
    state.notes += fit.daemonset_notes(rng, low)
    if facts is not None:
        state.warnings += [short(w) for w in fit.daemonset_unfit(facts, rng, low)]


def place(
    state: PodState,
    gpu: list[tuple[ContainerRef, set[str]]],
    config: WebhookConfig,
    inventory: NodeInventory | None,
    policies: PolicySet | None = None,
    *,
    violations_only: bool = False,
    images: ImageFacts | None = None,
    daemonset: bool = False,
) -> None:
    """Placement for a pod spec whose GPU containers are `gpu` (container, resource keys).

    `violations_only` (/validate): stop once nothing else can deny, i.e. after the
    intersection check unless an inventory with `noCompatibleNode: deny` is in force.
    `images`: CUDA versions read from the images' registries (last resort, SPEC §4 step 6).
    `daemonset`: the spec is a DaemonSet's pod template that is not mutated (its pods are
    pinned to their nodes and get no affinity)."""
    pending = inventory is not None and inventory.pending
    if pending:
        inventory = None
    deny_mode = inventory is not None and config.no_compatible_node == "deny"
    if violations_only and len(gpu) < 2 and not deny_mode:
        # One container's compatible set is never empty (some driver ≥ R within the skew, or
        # of the same major for vGPU): only two or more can leave an empty intersection, so
        # /validate has nothing to find here for most pods.
        return
    opted_out, warning = parse_opt_out(
        ANNOTATION_CUDA_AFFINITY, state.pod.annotations.get(ANNOTATION_CUDA_AFFINITY)
    )
    if warning:
        state.warnings.append(short(warning))
    envs: Envs = {}
    # The architectures the pod may run on, which registry answers and shipped knowledge may
    # depend on (one tag, a multi-platform index). Only read when one does (~2 µs compiled).
    archs = pod_archs(state.pod.spec) if images else None
    known = facts_for_archs(images, archs) if images and archs else None
    needs, unknown, compatibility = _needs(
        state, gpu, config, policies or PolicySet.empty(), envs, known, archs
    )
    # The required intersection; None: no container with a known CUDA version. Computed once
    # for every step below.
    rng = _intersection([n.range for n in needs]) if needs else None
    if not config.cuda_affinity or opted_out:
        return
    if unknown:
        # Counted (Decision.cuda_unknown) where placement would have used the version.
        state.cuda_unknown += [
            image if isinstance(image := c.container.get("image"), str) else "" for c in unknown
        ]
        # What a registry lookup could still tell (only when placement would use the answer),
        # for every architecture the pod may run on (the strictest answer is used).
        archs = archs or pod_archs(state.pod.spec)
        state.unresolved += [
            ImageQuery(image, arch)
            for c in unknown
            if isinstance(image := c.container.get("image"), str) and image
            for arch in archs
        ]
    if _intersection_violation(state, needs, rng):
        return
    if violations_only and not deny_mode:
        return
    if pending:
        # Not listed yet is not "no inventory": the first scheme may be one no node carries
        # (a GFD-only cluster), and the pod would stay Pending forever. Inject nothing.
        state.warnings.append(_NOT_ENFORCED_YET)
        return
    facts = inventory.facts(config) if inventory is not None else None
    asked = _compute_requirement(state, gpu, config, envs)
    floor = _floor(needs)
    if floor is not None and (facts is None or all(v >= floor.low for v in facts.compute)):
        # The floor alone is placed only where it makes a difference: with an inventory in
        # which some node advertises a compute capability below it. Otherwise every node that
        # advertises one meets it, and a term on every CUDA pod would only say so again (and
        # without an inventory, nothing says the nodes carry GFD's compute labels at all).
        floor = None
    compute = _stricter(asked, floor)
    if state.pod.is_template:
        if daemonset:
            _daemonset_template(state, rng, compute, facts)
            return
        pinned = None
    else:
        pinned = fit.daemonset_node(meta(state), state.pod.spec)
    who = "this DaemonSet pod"
    if pinned is None and not state.pod.is_template:
        # Bound with spec.nodeName (SPEC §4): the kubelet would fail it on an affinity.
        pinned, who = fit.bound_node(state.pod.spec), "this pod"
    if pinned is not None:
        # Pinned to one node by the controller, and created for every node the DaemonSet
        # selects: an affinity would only leave the pods on unfit nodes Pending.
        if facts is not None and pinned:
            low = compute.version if compute is not None else None
            for text, rule in fit.pinned_problems(facts, pinned, rng, low, who):
                if _problem(state, config, text, rule):
                    break
        return
    plan = Plan()
    if not _cuda_terms(state, needs, rng, unknown, config, facts, plan, compatibility):
        return
    if state.pod.by_digest and needs and _tag_only(state, needs, config):
        plan.cuda_note = ""  # the pods' own evaluation decides (SPEC §4, Knative)
    if _compute_terms(state, asked, floor, config, facts, plan):
        inject(state, config, plan)
