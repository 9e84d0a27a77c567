"""The image-architecture fix (SPEC §14): an accelerator pod whose images are built for only
some architectures, in a cluster whose nodes have others too (Grace/GH200 arm64 beside x86),
gets required node affinity on the architectures its images have, instead of `exec format
error` when it starts on the other kind of node."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from webhook.core.base.errors import ObjectShapeError
from webhook.core.base.nodeaffinity import is_empty_term, required_terms
from webhook.core.base.shapes import is_mapping
from webhook.core.base.wording import Wording
from webhook.core.config.model import WebhookConfig
from webhook.core.config.runtime_fixes import ArchitectureFix
from webhook.core.envfix.fixes import repository_path
from webhook.core.images.facts import ARCH_LABELS
from webhook.core.images.knowledge import ImageKnowledge
from webhook.core.images.references import MAX_REFERENCE_LENGTH, normalize, shown_image, split_tag
from webhook.core.outcome.decision import PodState
from webhook.core.placement import fit
from webhook.core.placement.inventory import NodeInventory
from webhook.core.placement.needs import meta, record_problem
from webhook.core.workloads.pods import ContainerRef

ARCH_LABEL = ARCH_LABELS[0]  # kubernetes.io/arch, which the kubelet sets from GOARCH
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


@lru_cache(maxsize=4)
def arch_counts(inventory: NodeInventory) -> Mapping[str, int]:
    """Nodes per kubernetes.io/arch value, once per inventory snapshot (never per review)."""
    return dict(Counter(a for labels in inventory.nodes.values() if (a := labels.get(ARCH_LABEL))))


def image_archs(
    rule: ArchitectureFix, image: str, knowledge: ImageKnowledge | None
) -> tuple[str, ...] | None:
    """image_archs_uncached, remembered per config rule (pods of one workload share images)."""
    memo = rule.memo
    key = (image, knowledge is not None)
    if key in memo:
        return memo[key]
    if len(memo) >= _MEMO_SIZE:
        memo.clear()
    found = memo[key] = image_archs_uncached(rule, image, knowledge)
    return found


_MEMO_SIZE = 4096


def image_archs_uncached(
    rule: ArchitectureFix, image: str, knowledge: ImageKnowledge | None
) -> tuple[str, ...] | None:
    """The architectures an image is built for: the config table's first match, else the
    shipped knowledge's single-architecture tags (`v0.11.0-x86_64` is linux/amd64 only);
    None: not known, and an image whose platforms are unknown gets nothing."""
    if rule.images:
        repository = repository_path(image)
        for entry in rule.images:
            if entry.regex.search(repository):
                return entry.architectures
    if knowledge is not None and len(image) <= MAX_REFERENCE_LENGTH:
        ref = normalize(image)
        if ref:
            repository, tag = split_tag(ref)
            arch = knowledge.tag_architecture(repository, tag) if tag else None
            if arch is not None:
                return (arch,)
    return None


def _pod_archs(
    rule: ArchitectureFix,
    containers: Iterable[ContainerRef],
    knowledge: ImageKnowledge | None,
    platforms: Mapping[str, tuple[str, ...]] | None,
) -> tuple[frozenset[str], list[tuple[str, tuple[str, ...]]]] | None:
    """(architectures every known image has, [(image, its architectures)]); None: no image of
    the pod is known."""
    allowed: frozenset[str] | None = None
    known: list[tuple[str, tuple[str, ...]]] = []
    for c in containers:
        image = c.container.get("image")
        if not isinstance(image, str) or not image:
            continue
        archs = image_archs(rule, image, knowledge)
        if archs is None and platforms:
            # What the image's registry index lists, or a single manifest's config names (a
            # lookup made for its CUDA or ROCm version).
            archs = platforms.get(image)
        if archs is None:
            continue
        known.append((image, archs))
        allowed = frozenset(archs) if allowed is None else allowed & frozenset(archs)
    return None if allowed is None else (allowed, known)


def _narrow(term: Mapping[str, Any], allowed: frozenset[str]) -> bool:
    """Whether a term already keeps to `allowed` with an `In` on the arch label."""
    exprs = term.get("matchExpressions")
    for e in exprs if isinstance(exprs, list) else ():
        if (
            is_mapping(e)
            and e.get("key") in ARCH_LABELS
            and e.get("operator") == "In"
            and isinstance(e.get("values"), list)
            and set(e["values"]) <= allowed
        ):
            return True
    return False


def _current_spec(state: PodState) -> Mapping[str, Any]:
    """The pod spec as the rules before left it (CUDA placement writes into the draft)."""
    node: Any = state.draft.root
    for part in state.pod.spec_path:
        node = node[part]
    return node if is_mapping(node) else state.pod.spec


def _lacking(known: list[tuple[str, tuple[str, ...]]], arch: str) -> str:
    return next((image for image, archs in known if arch not in archs), "")


def apply_architecture(
    state: PodState,
    rule: ArchitectureFix,
    config: WebhookConfig,
    inventory: NodeInventory | None,
    daemonset: bool,
    platforms: Mapping[str, tuple[str, ...]] | None = None,
) -> None:
    """Require the architectures the pod's images are built for, when the inventory holds a
    node of another one; warn (or deny, `noCompatibleNode: deny`) when no node has one."""
    if inventory is None or inventory.pending or daemonset:
        return
    counts = arch_counts(inventory)
    if len(counts) < 1:
        return
    knowledge = config.image_rules.knowledge if config.shipped_image_knowledge else None
    found = _pod_archs(rule, state.pod.containers, knowledge, platforms)
    if found is None:
        return
    allowed, known = found
    cluster = set(counts)
    if cluster <= allowed:
        return  # every node runs the images
    spec = _current_spec(state)
    if fit.bound_node(spec) is not None or fit.daemonset_node(meta(state), spec) is not None:
        return  # pinned to a node: an affinity could only fail the pod (SPEC §4)
    shown = ", ".join(sorted(allowed)) or "none"
    if not allowed & cluster:
        image = shown_image(known[0][0]) if len(known) == 1 else "the pod's images"
        have = ", ".join(sorted(cluster))
        text = Wording(
            (
                f"no node of architecture {shown} for {image} (nodes are {have})",
                f"no {shown} node for {image}",
            )
        )
        record_problem(state, config, text, "architecture")
        return
    selector = spec.get("nodeSelector")
    pinned = next(
        (
            selector[k]
            for k in ARCH_LABELS
            if is_mapping(selector) and isinstance(selector.get(k), str)
        ),
        None,
    )
    if pinned is not None:
        if pinned not in allowed:
            image = shown_image(_lacking(known, pinned))
            record_problem(
                state,
                config,
                f"nodeSelector asks for {pinned}; {image} has no linux/{pinned}",
                "architecture",
            )
        return
    expr = {"key": ARCH_LABEL, "operator": "In", "values": sorted(allowed)}
    terms = required_terms(spec) if spec.get("affinity") else None
    if terms:
        merged: list[Any] = []
        for term in terms:
            if is_empty_term(term) or _narrow(term, allowed):
                merged.append(term)  # an empty term matches nothing and stays so
                continue
            exprs = term.get("matchExpressions")
            exprs = list(exprs) if isinstance(exprs, list) else []
            merged.append({**term, "matchExpressions": [*exprs, expr]})
        if merged == terms:
            return  # already required (our earlier mutation, or the user's own)
    else:
        merged = [{"matchExpressions": [expr]}]
    path = (*state.pod.spec_path, "affinity", "nodeAffinity")
    node_affinity = state.draft.writable(path)
    if not isinstance(node_affinity, dict):
        raise ObjectShapeError(f"{state.ref}: affinity.nodeAffinity must be an object")
    required = node_affinity.get(_REQUIRED)
    selector_obj = {**(required if is_mapping(required) else {}), "nodeSelectorTerms": merged}
    state.draft.set_in(node_affinity, path, _REQUIRED, selector_obj)
    missing = sorted(cluster - allowed)
    image = shown_image(_lacking(known, missing[0]))
    state.note(
        "architecture-affinity",
        Wording(
            (
                f"required nodes of architecture {shown}: {image} has no linux/{missing[0]} "
                "(architecture fix)",
                f"required {shown} nodes: {image} has no linux/{missing[0]}",
                f"required {shown} nodes ({image})",
            )
        ),
    )
