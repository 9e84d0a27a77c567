"""Can the cluster run a pod? Checks against the node inventory's precomputed facts (SPEC §4).

Every check iterates distinct label values (a handful of versions), never nodes, so a review
costs the same with 10 and 10,000 nodes. Each returns "" when some node fits, else the sentence
to warn or deny with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.base.nodeaffinity import required_terms
from webhook.core.base.shapes import is_mapping
from webhook.core.base.versions import CudaVersion, label_int
from webhook.core.base.wording import Message, Wording
from webhook.core.config.model import WebhookConfig
from webhook.core.images.requires import Branches, holds
from webhook.core.placement.cuda import CUDA_11_0, Range, driver_11_0
from webhook.core.placement.inventory import InventoryFacts


def highest(counts: Mapping[CudaVersion, int]) -> str:
    """`12.4 (12 nodes)`: the highest version present and how many nodes have it."""
    top = max(counts)
    n = counts[top]
    return f"{top} ({n} node{'s' if n != 1 else ''})"


def cuda_problem(facts: InventoryFacts, rng: Range, vgpu: bool, wanted: str = "") -> str:
    """`wanted`: how to name what the pod needs when it is not `rng.low` (minor-version
    compatibility: "12.x (minorVersion, for 12.4)")."""
    if any(rng.holds(v) for counts in facts.by_scheme for v in counts):
        return ""
    return (
        f"no node supports CUDA {wanted or rng.low}{' on vGPU' if vgpu else ''}; "
        f"highest available is {highest(facts.cuda)}"
    )


def full_version_warning(facts: InventoryFacts, rng: Range, full: CudaVersion) -> str:
    """Some node meets the minor-version rule `rng` but none has CUDA ≥ `full`: the pod runs
    with NVIDIA's "limited feature-set" (SPEC §4)."""
    fitting = {v for counts in facts.by_scheme for v in counts if rng.holds(v)}
    if not fitting or any(v >= full for v in fitting):
        return ""
    span = _span(min(fitting), max(fitting))
    return (
        f"no node has CUDA ≥ {full}: minorVersion places it on CUDA {span} nodes, "
        "with a limited feature-set"
    )


def _span(low: int | CudaVersion, high: int | CudaVersion) -> str:
    return str(low) if low == high else f"{low} to {high}"


def skew_warning(
    facts: InventoryFacts, required: Range, preferred: Range, runtime: CudaVersion
) -> str:
    """Some node meets `required` but none the recommended `preferred` skew range: the pod
    runs on a driver more majors ahead of `runtime` than recommended (the reference's
    "Unstable": may malfunction, not blocked)."""
    fitting = {v for counts in facts.by_scheme for v in counts if required.holds(v)}
    if not fitting or any(preferred.holds(v) for v in fitting):
        return ""
    low, high = min(fitting), max(fitting)
    ahead = _span(low.major - runtime.major, high.major - runtime.major)
    plural = "s" if ahead != "1" else ""
    return (
        f"only CUDA {_span(low, high)} nodes, {ahead} major{plural} ahead of {runtime}: "
        "the application may malfunction"
    )


def daemonset_notes(
    rng: Range | None, low: CudaVersion | None, listed: str = "", on_11_0: bool = False
) -> list[Message]:
    """What a DaemonSet's (unmutated) template says its pods will get: no affinity, and the
    nodes that cannot run them. `listed`: the driver branches on forwardCompatibleNodes that
    run them too ("535, 550"; "" for none); `on_11_0`: minorVersion's CUDA 11.0 nodes with a
    driver ≥ 450.80.02 run them too."""
    notes: list[Message] = []
    if rng is not None:
        unfit = f"below CUDA {rng.low}" if rng.max_major is None else f"outside CUDA {rng.text()}"
        notes.append(
            Wording(
                (
                    "no CUDA affinity (DaemonSet pods are pinned to their node); "
                    f"nodes {unfit} cannot run them",
                    f"no CUDA affinity (DaemonSet pods are pinned); nodes {unfit} cannot run them",
                )
            )
        )
        if on_11_0:
            notes.append("CUDA 11.0 nodes with driver ≥ 450.80.02 run them too (minorVersion)")
        if listed:
            notes.append(
                Wording(
                    (
                        f"forwardCompatibleNodes with driver {listed} run them too "
                        "(forward compatibility the image declares)",
                        f"forwardCompatibleNodes with driver {listed} run them too",
                    )
                )
            )
    if low is not None:
        notes.append(
            "no compute capability affinity (DaemonSet pods are pinned); "
            f"nodes below {low} cannot run them"
        )
    return notes


def daemonset_unfit(
    facts: InventoryFacts,
    rng: Range | None,
    low: CudaVersion | None,
    forward: Branches = (),
    on_11_0: bool = False,
) -> list[str]:
    """How many of the nodes that advertise a version cannot run a DaemonSet's pods (its
    template: the pods get no affinity, so each lands on its node whatever that node has).
    `forward`: the branches the images declare; forwardCompatibleNodes with one run them.
    `on_11_0`: so do CUDA 11.0 nodes with a driver ≥ 450.80.02 (minorVersion, `rng` from 11.1:
    each of them is outside it)."""
    problems = []
    if rng is not None and facts.labelled:
        unfit = sum(
            n
            for (cuda, _), n in facts.combos.items()
            if cuda and not any(rng.holds(v) for _, v in cuda)
        )
        if on_11_0:
            unfit -= facts.driver_11_0
        if forward:
            unfit -= sum(
                n
                for (branch, cuda), n in facts.forward_nodes.items()
                if cuda and holds(forward, branch) and not any(rng.holds(v) for _, v in cuda)
            )
        if unfit:
            problems.append(
                f"{unfit} of {facts.labelled} CUDA nodes cannot run these DaemonSet pods: "
                f"they need CUDA {rng.text()}"
            )
    if low is not None and facts.compute:
        unfit = sum(n for (_, cc), n in facts.combos.items() if cc is not None and cc < low)
        if unfit:
            problems.append(
                f"{unfit} of {sum(facts.compute.values())} GPU nodes cannot run these DaemonSet "
                f"pods: they need compute capability ≥ {low}"
            )
    return problems


def compute_problem(facts: InventoryFacts, low: CudaVersion) -> str:
    if any(v >= low for v in facts.compute):
        return ""
    return f"no node has compute capability ≥ {low}; highest is {highest(facts.compute)}"


def joint_problem(facts: InventoryFacts, rng: Range, low: CudaVersion) -> str:
    """Both requirements are met somewhere, but maybe never on the same node."""
    for cuda, compute in facts.combos:
        if compute is not None and compute >= low and any(rng.holds(v) for _, v in cuda):
            return ""
    return f"no node supports CUDA {rng.text()} with compute capability ≥ {low}"


def daemonset_node(meta: Any, spec: Mapping[str, Any]) -> str | None:
    """The node a DaemonSet's pod is pinned to ('' when not found); None for other pods."""
    owners = meta.get("ownerReferences") if is_mapping(meta) else None
    if not isinstance(owners, list) or not any(
        is_mapping(o) and o.get("controller") is True and o.get("kind") == "DaemonSet"
        for o in owners
    ):
        return None
    if isinstance(spec.get("nodeName"), str) and spec["nodeName"]:
        return str(spec["nodeName"])
    # The DaemonSet controller pins its pods with one required term holding
    # matchFields metadata.name In [node] (pkg/controller/daemon/util/daemonset_util.go,
    # ReplaceDaemonSetPodNodeNameNodeAffinity; GetTargetNodeName reads it back the same way).
    for term in required_terms(spec) or ():
        fields = term.get("matchFields") if is_mapping(term) else None
        for e in fields if isinstance(fields, list) else ():
            if (
                is_mapping(e)
                and e.get("key") == "metadata.name"
                and e.get("operator") == "In"
                and isinstance(e.get("values"), list)
                and len(e["values"]) == 1
            ):
                return str(e["values"][0])
    return ""


def bound_node(spec: Mapping[str, Any]) -> str | None:
    """The node a pod created with `spec.nodeName` is bound to (None: the scheduler places it).
    Such a pod skips the scheduler, and the kubelet checks its required node affinity on
    admission and fails it with reason NodeAffinity when the node does not match
    (kubernetes pkg/kubelet/lifecycle/predicate.go generalFilter -> scheduler.AdmissionCheck
    in pkg/scheduler/eventhandlers.go, which matches nodeaffinity.GetRequiredNodeAffinity(pod)
    against the node), so an injected affinity could only fail it."""
    node = spec.get("nodeName")
    return node if isinstance(node, str) and node else None


def pinned_problems(
    facts: InventoryFacts,
    node: str,
    rng: Range | None,
    low: CudaVersion | None,
    pod: str = "this DaemonSet pod",
) -> list[tuple[str, str]]:
    """(sentence, rule) for each requirement the pinned node does not meet; a node that
    advertises nothing (or is not known yet) gives nothing to check against. `pod`: how the
    sentence names the pod ("this pod" for one bound with spec.nodeName)."""
    pinned = facts.nodes.get(node)
    if pinned is None:
        return []
    problems = []
    if rng is not None and pinned.cuda and not any(rng.holds(v) for _, v in pinned.cuda):
        version = pinned.cuda[0][1]
        problems.append(
            (
                f"node {node} supports CUDA {version}; {pod} needs CUDA {rng.text()}",
                "cuda",
            )
        )
    if low is not None and pinned.compute is not None and pinned.compute < low:
        problems.append(
            (
                f"node {node} has compute capability {pinned.compute}; {pod} needs ≥ {low}",
                "compute capability",
            )
        )
    return problems


def forward_node(
    labels: Mapping[str, str] | None, config: WebhookConfig, forward: Branches
) -> bool:
    """Whether a node (its kept labels) runs the pod through forward compatibility: it matches
    forwardCompatibleNodes and its driver branch is one the pod's images declare (`forward`).
    The same condition as the term ranges.cuda_terms injects, so a node pinned pods land on is
    judged as the scheduler would judge an unpinned one (SPEC §4, issue 37 defect 4)."""
    term = config.forward_compatible_nodes
    if term is None or not forward or labels is None:
        return False
    branch = label_int(labels.get(config.driver_branch_label))
    return branch is not None and holds(forward, branch) and term.matches(labels)


def driver_11_0_node(facts: InventoryFacts, node: str, labels: Mapping[str, str] | None) -> bool:
    """Whether a node advertises CUDA 11.0 with a driver ≥ 450.80.02 (cuda.driver_11_0): one
    that runs an 11.x image under minorVersion."""
    pinned = facts.nodes.get(node)
    if pinned is None or not any(v == CUDA_11_0 for _, v in pinned.cuda):
        return False
    return driver_11_0(labels) is True
