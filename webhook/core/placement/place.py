"""NVIDIA's CUDA as a description the placement engine evaluates (engine.py, SPEC §4 and §13):
what a pod's GPU containers need (CUDA, compute capability), checked against the node inventory
when there is one, and the terms of required node affinity the engine injects."""

from __future__ import annotations

from webhook.core.base.annotations import parse_opt_out
from webhook.core.base.versions import CudaVersion
from webhook.core.base.wording import Message, Wording
from webhook.core.config.model import (
    ANNOTATION_CUDA_AFFINITY,
    WebhookConfig,
)
from webhook.core.images.facts import ImageFacts, ImageQuery, facts_for_archs, pod_archs
from webhook.core.images.references import shown_image
from webhook.core.images.requires import Branches, branch_count, branch_list, holds
from webhook.core.outcome.decision import CUDA, PodState, container_label, short
from webhook.core.placement import cuda, fit, nodeclass
from webhook.core.placement.engine import Family, Problem
from webhook.core.placement.injection import Plan
from webhook.core.placement.inventory import InventoryFacts, NodeInventory
from webhook.core.placement.needs import (
    NOT_ENFORCED_YET,
    Envs,
    Need,
    container_env,
    container_needs,
    forward_branches,
    record_problem,
)
from webhook.core.placement.ranges import (
    MAX_LISTED_BRANCHES,
    cuda_terms,
    dra_terms,
    intersect_ranges,
    intersection_violation,
    tag_only_problem,
)
from webhook.core.placement.terms import (
    range_terms,
)
from webhook.core.policies.policyset import PolicySet
from webhook.core.workloads.pods import ContainerRef


def _compute_requirement(
    state: PodState, gpu: list[tuple[ContainerRef, set[str]]], config: WebhookConfig, envs: Envs
) -> cuda.Requirement | None:
    req, warning = cuda.annotation_compute(state.pod.annotations)
    if warning:
        state.warnings.append(short(warning))
    if req is not None or not config.compute_capability_rules:
        return req
    # The highest, the first of equals (a loop: max with a lambda costs ~6k compiled).
    rules = config.compute_capability_rules
    best: cuda.Requirement | None = None
    for c, _ in gpu:
        env = container_env(envs, c)
        found = cuda.compute_requirement(c.container, rules, "", env)
        if found is not None:
            # Matched (rarely): again with the container's label, which the source names.
            found = cuda.compute_requirement(c.container, rules, container_label(c), env)
        if found is not None and (best is None or found.version > best.version):
            best = found
    return best


class _Floor:
    """The architecture floor of the pod's CUDA (SPEC §4): the strictest of its containers'."""

    # Written out: a NamedTuple's constructor stays interpreted under mypyc (~2k instructions
    # per review); the image's name is worked out only for the warning.
    def __init__(self, low: CudaVersion, runtime: CudaVersion, need: Need) -> None:
        self.low = low  # minimum compute capability
        self.runtime = runtime  # the CUDA version that sets it
        self.need = need  # the container whose image needs that CUDA, for the warning

    @property
    def requirement(self) -> cuda.Requirement:
        return cuda.Requirement(self.low, f"architecture floor of CUDA {self.runtime}")

    def problem(self) -> Wording:
        """No node at or above the floor: names the image whole, the fixed words get shorter."""
        container = self.need.container
        image = container.container.get("image")
        name = shown_image(image) if isinstance(image, str) and image else container.name
        head = f"no node with compute capability ≥ {self.low} for CUDA {self.runtime}"
        return Wording(
            (
                f"{head} (image {name})",
                f"{head} ({name})",
                f"no GPU ≥ {self.low} for CUDA {self.runtime} ({name})",
            )
        )


def _floor(needs: list[Need]) -> _Floor | None:
    best: Need | None = None
    best_low: CudaVersion | None = None
    for n in needs:
        low = cuda.architecture_floor(n.requirement.version)
        if low is not None and (best_low is None or low > best_low):
            best, best_low = n, low
    if best is None or best_low is None:
        return None
    return _Floor(best_low, best.requirement.version, best)


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
    avoid = False
    if facts is not None:
        if not facts.compute:
            state.warnings.append(
                "compute capability placement is not enforced: no node advertises it"
            )
            return True
        text = fit.compute_problem(facts, low)
        unknown = facts.unknown_compute
        labels = config.compute_capability_labels
        hints = nodeclass.version_hints(labels.major, labels.minor) if unknown else ()
        # None advertising one meets it, some GPU nodes advertise none (SPEC §13 "Never
        # strand a pod"): they may run it too.
        verdict, warning = nodeclass.judge(
            0 if text else 1,
            unknown,
            sum(facts.compute.values()) if text else 0,
            config.unknown_nodes,
            "GPU nodes",
            "compute capability",
            f"compute capability ≥ {low}" if text else "",
            hints,
            avoid_what="capability",
        )
        if verdict == nodeclass.AVOID:
            avoid = True
        elif verdict == nodeclass.NONE:
            problem = floor.problem() if by_floor and floor is not None else text
            if record_problem(state, config, problem, "compute capability"):
                return False
        if warning:
            state.warnings.append(warning)
        if verdict == nodeclass.REQUIRE and plan.fits is not None:
            # Each is met somewhere; check that some node meets both.
            text = fit.joint_problem(facts, plan.fits, low)
            if text and record_problem(state, config, text, "compute capability"):
                return False
    plan.compute = range_terms(config.compute_capability_labels, low, None)
    if avoid:
        plan.compute += nodeclass.absent_terms([config.compute_capability_labels.major])
    if facts is not None and facts.dra_compute:
        # Nodes whose compute capability only their DRA ResourceSlices publish, by name.
        plan.compute += dra_terms(facts.dra_compute, cuda.Range(low, None))
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
    forward: Branches,
    on_11_0: bool,
) -> None:
    """A DaemonSet's template (SPEC §4 "DaemonSet pods"): its pods are pinned to their nodes
    and get no affinity, so say that, and which nodes cannot run them (forward compatibility
    counted, as for each pod: issue 37 defect 4). Notes, not mutations: nothing is written
    into the template."""
    low = compute.version if compute is not None else None
    if branch_count(forward) > MAX_LISTED_BRANCHES:
        forward = ()  # what a pod's text declares never sets the size of a message
    if facts is not None and not any(holds(forward, b) for b in facts.forward):
        forward = ()  # no forward-compatible node has a branch the images declare
    listed = ", ".join(str(b) for b in branch_list(forward))
    if facts is not None and not facts.driver_11_0:
        on_11_0 = False  # no node has such a driver
    state.notes += fit.daemonset_notes(rng, low, listed, on_11_0)
    if facts is not None:
        unfit = fit.daemonset_unfit(facts, rng, low, forward, on_11_0)
        state.warnings += [short(w) for w in unfit]


class CudaFamily(Family):
    """NVIDIA's CUDA as the engine's description (engine.Family, SPEC §4): one pod spec's GPU
    containers `gpu` (container, resource keys). `images`: CUDA versions read from the
    images' registries (last resort, SPEC §4 step 6). Compute capability is an extra axis the
    same plan carries (`_compute_terms`, decided by the same nodeclass.judge)."""

    # Set by `read` and `read_nodes` (the engine calls them first): none allocated for the
    # pods /validate stops early for.
    envs: Envs
    archs: tuple[str, ...] | None
    needs: list[Need]
    unknown: list[ContainerRef]
    compatibility: str
    rng: cuda.Range | None  # the required intersection; None: no known CUDA version
    inventory: NodeInventory | None
    facts: InventoryFacts | None
    asked: cuda.Requirement | None
    floor: _Floor | None
    compute: cuda.Requirement | None

    # Written out (no dataclass): a constructor mypyc compiles.
    def __init__(
        self,
        gpu: list[tuple[ContainerRef, set[str]]],
        policies: PolicySet | None = None,
        images: ImageFacts | None = None,
    ) -> None:
        self.gpu = gpu
        self.policies = policies
        self.images = images

    def may_conflict(self) -> bool:
        # One container's compatible set is never empty (some driver ≥ R within the skew, or
        # of the same major for vGPU): only two or more can leave an empty intersection, so
        # /validate has nothing to find here for most pods.
        return len(self.gpu) >= 2

    def read(self, state: PodState, config: WebhookConfig) -> bool:
        opted_out, warning = parse_opt_out(
            ANNOTATION_CUDA_AFFINITY, state.pod.annotations.get(ANNOTATION_CUDA_AFFINITY)
        )
        if warning:
            state.warnings.append(short(warning))
        images = self.images
        # The architectures the pod may run on, which registry answers and shipped knowledge
        # may depend on (one tag, a multi-platform index). Only read when one does (~2 µs
        # compiled).
        archs = pod_archs(state.pod.spec) if images else None
        known = facts_for_archs(images, archs) if images and archs else None
        self.archs = archs
        policies = self.policies or PolicySet.empty()
        envs: Envs = {}
        self.envs = envs
        self.needs, self.unknown, self.compatibility = container_needs(
            state, self.gpu, config, policies, envs, known, archs
        )
        # Computed once for every step below.
        needs = self.needs
        self.rng = intersect_ranges([n.range for n in needs]) if needs else None
        return config.cuda_affinity and not opted_out

    def unresolved(self, state: PodState) -> list[ImageQuery]:
        unknown = self.unknown
        if not unknown:
            return []
        # Counted (Decision.runtime_unknown) where placement would have used the version.
        state.unknown_runtime(CUDA, *unknown)
        # What a registry lookup could still tell (only when placement would use the answer),
        # for every architecture the pod may run on (the strictest answer is used).
        archs = self.archs or pod_archs(state.pod.spec)
        return [
            ImageQuery(image, arch)
            for c in unknown
            if isinstance(image := c.container.get("image"), str) and image
            for arch in archs
        ]

    def violation(self, state: PodState) -> bool:
        return intersection_violation(state, self.needs, self.rng)

    def placeable(self, state: PodState) -> bool:
        # The compute capability may be placed without a CUDA version: always something.
        return True

    def not_enforced_yet(self) -> Message:
        # The first scheme may be one no node carries (a GFD-only cluster).
        return NOT_ENFORCED_YET

    def without_inventory(self) -> Message:
        return ""  # the terms hold whatever the nodes are

    def read_nodes(
        self, state: PodState, config: WebhookConfig, inventory: NodeInventory | None
    ) -> Message:
        self.inventory = inventory
        facts = self.facts = inventory.facts(config) if inventory is not None else None
        self.asked = _compute_requirement(state, self.gpu, config, self.envs)
        floor = _floor(self.needs)
        if floor is not None and (facts is None or all(v >= floor.low for v in facts.compute)):
            # The floor alone is placed only where it makes a difference: with an inventory
            # in which some node advertises a compute capability below it. Otherwise every
            # node that advertises one meets it, and a term on every CUDA pod would only say
            # so again (and without an inventory, nothing says the nodes carry GFD's compute
            # labels at all).
            floor = None
        self.floor = floor
        self.compute = _stricter(self.asked, floor)
        # With no node advertising a CUDA version the plan says so (nodeclass.judge: the
        # unknown GPU nodes may run it): DaemonSet and bound pods are still checked.
        return ""

    def _on_11_0(self) -> bool:
        needs = self.needs
        return bool(needs) and all(n.driver_11_0 for n in needs)

    def daemonset_template(self, state: PodState, config: WebhookConfig) -> None:
        forward = forward_branches(self.needs, config)
        _daemonset_template(state, self.rng, self.compute, self.facts, forward, self._on_11_0())

    def pinned_problems(self, config: WebhookConfig, node: str, who: str) -> list[Problem]:
        facts, inventory = self.facts, self.inventory
        if facts is None or inventory is None:
            return []
        compute = self.compute
        low = compute.version if compute is not None else None
        labels = inventory.nodes.get(node)
        rng = self.rng
        if fit.forward_node(labels, config, forward_branches(self.needs, config)) or (
            self._on_11_0() and fit.driver_11_0_node(facts, node, labels)
        ):
            # Its driver runs the images: forward compatibility, or minorVersion on a CUDA
            # 11.0 node with a driver ≥ 450.80.02 (the rules the terms carry).
            rng = None
        return [
            (text, rule, False) for text, rule in fit.pinned_problems(facts, node, rng, low, who)
        ]

    def plan(self, state: PodState, config: WebhookConfig) -> Plan | None:
        plan = Plan()
        needs, facts = self.needs, self.facts
        if not cuda_terms(
            state, needs, self.rng, self.unknown, config, facts, plan, self.compatibility
        ):
            return None
        if state.pod.by_digest and needs and tag_only_problem(state, needs, config):
            plan.cuda_note = ""  # the pods' own evaluation decides (SPEC §4, Knative)
        if not _compute_terms(state, self.asked, self.floor, config, facts, plan):
            return None
        return plan
