"""The CUDA range a pod's GPU containers share (SPEC §4): its intersection, the preferred
range under majorSkew, its node terms, and what a tag-only image may pin."""

from __future__ import annotations

from collections.abc import Mapping
from functools import reduce
from typing import Any

from webhook.core.base.versions import CudaVersion
from webhook.core.base.wording import Wording
from webhook.core.config.labels import DRIVER_VERSION_LABELS
from webhook.core.config.model import (
    ANNOTATION_CUDA_VERSION,
    WebhookConfig,
)
from webhook.core.images.references import image_repository, shown_image
from webhook.core.images.requires import Branches, branch_count, branch_list, holds, only
from webhook.core.outcome.decision import PodState, Violation, container_label, short
from webhook.core.placement import cuda, fit, nodeclass
from webhook.core.placement.injection import Plan
from webhook.core.placement.inventory import DRA_SCHEME, InventoryFacts
from webhook.core.placement.needs import Need, forward_branches, record_problem, unknown_warning
from webhook.core.placement.terms import (
    Term,
    driver_11_0_terms,
    fresh_preferred,
    fresh_terms,
    name_term,
    preferred_range_terms,
    preferred_terms,
    union_terms,
)
from webhook.core.workloads.pods import ContainerRef


def dra_terms(names: Mapping[CudaVersion, tuple[str, ...]], rng: cuda.Range) -> list[Term]:
    """A term per DRA-described node (no labels to select it by) whose version is in `rng`: a
    pod's affinity grows with the number of such nodes, which labels (GFD, the manual scheme)
    avoid on large clusters."""
    return [name_term(n) for n in sorted(n for v, ns in names.items() if rng.holds(v) for n in ns)]


def intersect_ranges(ranges: list[cuda.Range]) -> cuda.Range:
    if len(ranges) == 1:
        return ranges[0]
    return reduce(lambda a, b: a & b, ranges)


def intersection_violation(state: PodState, needs: list[Need], rng: cuda.Range | None) -> bool:
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
    state: PodState, needs: list[Need], rng: cuda.Range, config: WebhookConfig
) -> cuda.Range | None:
    """The major-skew range to prefer within the required `rng` (None: nothing to prefer).
    When the containers' recommended ranges do not meet, every node is beyond the skew of
    one of them: admitted with a warning, as the reference calls that "Unstable"."""
    if config.major_skew == "require":
        return None
    recommended = intersect_ranges([n.recommended for n in needs])
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


# At most this many driver branches are listed in the forward-compatibility term: NVIDIA's own
# images declare five or six (nvidia/cuda 12.8.1: 470, 535, 550, 560, 565), so a pod declaring
# more is not asking for forward compatibility as NVIDIA's images do. With an inventory the
# branches its forward-compatible nodes have are listed instead; otherwise none.
MAX_LISTED_BRANCHES = 32


def _listed(state: PodState, forward: Branches, facts: InventoryFacts | None) -> Branches:
    """The declared branches the forward-compatibility term may list (SPEC §4; issue 37
    defect 1: what a pod writes must not set the size of its patch). Counted before any list
    is built; `forward` is already below requires.MAX_DRIVER_BRANCH."""
    count = branch_count(forward)
    if count <= MAX_LISTED_BRANCHES:
        return forward
    if facts is not None:
        present = only(forward, facts.forward)
        if branch_count(present) <= MAX_LISTED_BRANCHES:
            return present
    state.warnings.append(
        "forward compatibility not used: the image declares more than "
        f"{MAX_LISTED_BRANCHES} driver branches"
    )
    return ()


def _warn_11_0(
    state: PodState, facts: InventoryFacts, rng: cuda.Range, full: cuda.CudaVersion | None
) -> None:
    """minorVersion for an 11.x image, where no node has the full version: say which CUDA 11.0
    nodes it cannot use (no driver version labels) and where it lands (limited feature-set)."""
    want = full or rng.low
    if any(v >= want for counts in facts.by_scheme for v in counts):
        return
    if facts.unlabelled_11_0:
        n = facts.unlabelled_11_0
        state.warnings.append(
            f"{n} CUDA 11.0 node{'s' if n != 1 else ''} do{'es' if n == 1 else ''} not label "
            "the driver version: minorVersion uses them only with driver ≥ 450.80.02"
        )
    if facts.driver_11_0 and not any(rng.holds(v) for counts in facts.by_scheme for v in counts):
        state.warnings.append(
            f"no node has CUDA ≥ {want}: minorVersion places it on CUDA 11.0 nodes with driver "
            "≥ 450.80.02, with a limited feature-set"
        )


def _hints(config: WebhookConfig) -> tuple[nodeclass.Hint, nodeclass.Hint]:
    """The labels that make a node's CUDA version known: the first scheme's (the manual
    labels by default)."""
    scheme = config.schemes[0]
    return nodeclass.version_hints(scheme.major, scheme.minor)


def cuda_terms(
    state: PodState,
    needs: list[Need],
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
        state.warnings.append(unknown_warning(c, bool(needs), state.pod.annotatable))
    if rng is None:
        return True
    # One pass (a loop, not max/any/all with lambdas and generators: compiled, ~4k fewer
    # instructions per review): the first container needing the highest CUDA (`top`), any on
    # vGPU, the highest full version and whether all are 11.x under minorVersion.
    top = needs[0]
    vgpu = False
    # Minor-version compatibility: the full version the containers would need under the
    # backward rule, preferred (None when the required range asks for it already).
    full: CudaVersion | None = None
    # minorVersion for CUDA 11.x: CUDA 11.0 nodes with a driver ≥ 450.80.02 too (cuda.py).
    on_11_0 = True
    for n in needs:
        if n.requirement.version > top.requirement.version:
            top = n
        vgpu = vgpu or n.vgpu
        if n.full is not None and (full is None or n.full > full):
            full = n.full
        on_11_0 = on_11_0 and n.driver_11_0
    prefer = _preference(state, needs, rng, config)
    avoid = False
    if full is not None and full <= rng.low:
        full = None
    forward = _listed(state, forward_branches(needs, config), facts)
    if facts is not None:
        if not facts.labelled:
            # GPU nodes, none advertising its CUDA version: nothing to keep the pod off.
            hints = _hints(config) if facts.unknown else ()
            needed = f"CUDA {rng.low}{' on vGPU' if vgpu else ''}"
            verdict, warning = nodeclass.judge(
                0, facts.unknown, 0, config.unknown_nodes, "GPU nodes", "CUDA", needed, hints
            )
            state.warnings.append(
                warning
                if verdict == nodeclass.AVOID
                else "CUDA placement is not enforced: no node advertises its CUDA version"
            )
            return True
        if forward and not any(holds(forward, b) for b in facts.forward):
            forward = ()  # no forward-compatible node with a branch the image lists
        wanted = ""
        if full is not None:
            wanted = f"{rng.low.major}.x (minorVersion, for {full})"
        text = fit.cuda_problem(facts, rng, vgpu, wanted)
        if on_11_0:
            on_11_0 = bool(facts.driver_11_0)  # terms only where some node has such a driver
            _warn_11_0(state, facts, rng, full)
        # Some node fits by the CUDA rule; or none does, but forward-compatible nodes with a
        # listed branch exist, or (minorVersion) CUDA 11.0 nodes with a driver ≥ 450.80.02.
        fits = not text or bool(forward) or on_11_0
        needed = "" if fits else f"CUDA {wanted or rng.low}{' on vGPU' if vgpu else ''}"
        hints = _hints(config) if facts.unknown else ()
        verdict, warning = nodeclass.judge(
            1 if fits else 0,
            facts.unknown,
            facts.labelled,
            config.unknown_nodes,
            "GPU nodes",
            "CUDA",
            needed,
            hints,
        )
        if verdict == nodeclass.NONE:
            if record_problem(state, config, text, "cuda"):
                return False
            plan.fits = None
        elif verdict == nodeclass.AVOID:
            avoid, plan.fits = True, None
        else:
            plan.fits = None if text or forward else rng
            text = ""
        if warning:
            state.warnings.append(warning)
        if not text and full is not None:
            warning = fit.full_version_warning(facts, rng, full)
            if warning:
                state.warnings.append(short(warning))
        if not text and prefer is not None:
            runtime = min(n.requirement.version for n in needs)
            warning = fit.skew_warning(facts, rng, prefer, runtime)
            if warning:
                state.warnings.append(short(warning))
    # The terms and notes, once per distinct inputs of _build_cuda_part (a complete key: all
    # it reads; of `top`, its range's upper bound and its requirement's version and source).
    # The config and the facts (immutable snapshots, rebuilt rather than changed) by identity:
    # the entry keeps them referenced, so no other object takes their identity while it lives,
    # and a hit checks they are the very objects.
    req = top.requirement
    key = (
        id(config),
        id(facts),
        rng,
        on_11_0,
        forward,
        full,
        prefer,
        top.range.max_major,
        vgpu,
        req.version,
        req.source,
        top.checked,
        compatibility,
    )
    found = _PARTS.get(key)
    if found is not None and found[0] is config and found[1] is facts:
        part = found[2]
    else:
        part = _build_cuda_part(
            config, facts, rng, on_11_0, forward, full, prefer, top, vgpu, compatibility
        )
        if len(_PARTS) >= _MAX_PARTS:
            _PARTS.clear()
        _PARTS[key] = (config, facts, part)
    # Copies of its own: the part is shared by every review with the same inputs (issue 45).
    plan.cuda = fresh_terms(part.cuda)
    if avoid:
        # None is known to run it, some nodes are unknown (SPEC §13 "Never strand a pod"):
        # nodes advertising no CUDA version may run it too.
        plan.cuda += nodeclass.absent_terms([s.major for s in config.schemes])
    if on_11_0:
        plan.driver_keys = frozenset(DRIVER_VERSION_LABELS)
    if part.forward_note is not None:
        plan.forward_keys = config.forward_label_keys
        plan.forward_note = part.forward_note
    if part.full_preferred is not None:
        plan.preferred = fresh_preferred(part.full_preferred)
    if part.skew_preferred is not None:
        plan.preferred = plan.preferred + fresh_preferred(part.skew_preferred)
    if part.minor_version:
        plan.cuda_rule = "minorVersion"
    plan.cuda_note = part.note
    plan.cuda_want = part.want
    return True


class _CudaPart:
    """What cuda_terms writes into a plan past its checks (the terms, the notes): a pure
    function of _cuda_part's arguments, shared by the reviews that have the same ones
    (read-only: its lists are copied into a plan, never changed)."""

    # Written out: a NamedTuple's or @dataclass's constructor stays interpreted under mypyc.
    def __init__(
        self,
        cuda: tuple[Term, ...],
        forward_note: Wording | None,
        full_preferred: tuple[dict[str, Any], ...] | None,
        skew_preferred: tuple[dict[str, Any], ...] | None,
        minor_version: bool,
        note: Wording,
        want: str,
    ) -> None:
        self.cuda = cuda
        self.forward_note = forward_note
        self.full_preferred = full_preferred
        self.skew_preferred = skew_preferred
        self.minor_version = minor_version
        self.note = note
        self.want = want


# _build_cuda_part's answers by what it reads (config and inventory facts by identity: see
# cuda_terms).
# Bounded: emptied when full, a few hundred distinct (range, image source, rule) per config.
_PARTS: dict[tuple[object, ...], tuple[WebhookConfig, InventoryFacts | None, _CudaPart]] = {}
_MAX_PARTS = 1024


def _build_cuda_part(
    config: WebhookConfig,
    facts: InventoryFacts | None,
    rng: cuda.Range,
    on_11_0: bool,
    forward: Branches,
    full: CudaVersion | None,
    prefer: cuda.Range | None,
    need: Need,
    vgpu: bool,
    compatibility: str,
) -> _CudaPart:
    """The CUDA terms and notes of cuda_terms (SPEC §4), from what its checks decided (`need`:
    the container needing the highest CUDA)."""
    top, checked, top_max_major = need.requirement, need.checked, need.range.max_major
    schemes = config.schemes[:1] if facts is None else facts.carried
    dra = facts is not None and DRA_SCHEME in schemes
    if dra:
        schemes = tuple(s for s in schemes if s is not DRA_SCHEME)
    terms = union_terms(schemes, rng.low, rng.max_major)
    or_11_0 = ""
    if on_11_0:
        terms += driver_11_0_terms(schemes)
        or_11_0 = ", or 11.0 with driver ≥ 450.80.02"
    if dra and facts is not None:
        terms += dra_terms(facts.dra_cuda, rng)
        if not terms:
            # No DRA-described node fits and no node is labelled: terms no node meets (the
            # pod waits, as on a labelled cluster; the warning above says why).
            terms = union_terms(config.schemes[:1], rng.low, rng.max_major)
    forward_note: Wording | None = None
    if forward and config.forward_compatible_nodes is not None:
        branches = [str(b) for b in branch_list(forward)]
        terms.append(
            [
                *(e.as_expression() for e in config.forward_compatible_nodes.match_expressions),
                {"key": config.driver_branch_label, "operator": "In", "values": branches},
            ]
        )
        listed = ", ".join(branches)
        forward_note = Wording(
            (
                f"or driver {listed} on forwardCompatibleNodes "
                "(forward compatibility the image declares)",
                f"or forwardCompatibleNodes with driver {listed}",
            )
        )
    preferably = ""
    full_preferred: tuple[dict[str, Any], ...] | None = None
    skew_preferred: tuple[dict[str, Any], ...] | None = None
    if full is not None:
        full_preferred = tuple(preferred_range_terms(schemes, full))
        preferably = f", preferably ≥ {full}"
    if prefer is not None and prefer.max_major is not None:
        skew_preferred = tuple(preferred_terms(schemes, prefer.max_major))
        below = f"< {prefer.max_major + 1}.0"
        preferably = f"{preferably} and {below}" if preferably else f", preferably {below}"
    # The upper bound is said when the other containers set it: "vGPU" already says "the
    # same major", and a physical GPU alone has none.
    bound = ""
    if rng.max_major is not None and rng.max_major != top_max_major:
        bound = f" and < {rng.max_major + 1}.0"
    mode, source = "vGPU" if vgpu else "GPU", top.source  # source: the image whole
    # Which rule placed the pod (SPEC §4), said when the cluster is not on the default one.
    minor_version = False
    if compatibility == "minorVersion" and (rng.low < top.version or on_11_0):
        source = f"minorVersion: {source}"
        minor_version = True
    elif compatibility == "minorVersion" and checked:
        # The image's own requirement, which NVIDIA's toolkit checks (Requirement.declared).
        source = f"backward, as the image requires: {source}"
    elif config.cuda_compatibility == "minorVersion" and compatibility == "backward":
        source = f"backward, as annotated: {source}"
    # The preference goes last and goes first when a wording must be shorter (a long image, a
    # template's "will apply to replica Worker pods: "): never the version's source.
    bound += or_11_0
    wordings: tuple[str, ...] = (
        f"required {mode} nodes with CUDA ≥ {rng.low}{bound} ({source})",
        f"required CUDA ≥ {rng.low}{bound} ({source})",
        f"CUDA ≥ {rng.low}{bound} ({source})",
    )
    if preferably:
        wordings = (wordings[0] + preferably, wordings[1] + preferably, *wordings)
    return _CudaPart(
        tuple(terms),
        forward_note,
        full_preferred,
        skew_preferred,
        minor_version,
        Wording(wordings),
        f"CUDA {rng.text()}{preferably}",
    )


# A digest no image has: what a reference by digest tells without a registry (SPEC §4: a
# digest-only reference is matched by its name).
_SOME_DIGEST = "@sha256:" + "0" * 64


def tag_only_problem(state: PodState, needs: list[Need], config: WebhookConfig) -> bool:
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
