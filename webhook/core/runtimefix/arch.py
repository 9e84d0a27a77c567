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
from webhook.core.config.runtime_fixes import ANNOTATION_INJECTED_ARCHITECTURE, ArchitectureFix
from webhook.core.envfix.fixes import repository_path
from webhook.core.families.catalog import family_named
from webhook.core.images.facts import ARCH_LABELS, KNOWN_ARCHS, term_archs
from webhook.core.images.knowledge import ImageKnowledge
from webhook.core.images.references import MAX_REFERENCE_LENGTH, normalize, shown_image, split_tag
from webhook.core.outcome.decision import PodState, short
from webhook.core.placement import fit
from webhook.core.placement.inventory import DRA_AMD_DRIVER, NodeInventory
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


def _current_spec(state: PodState) -> Mapping[str, Any]:
    """The pod spec as the rules before left it (CUDA placement writes into the draft)."""
    node: Any = state.draft.root
    for part in state.pod.spec_path:
        node = node[part]
    return node if is_mapping(node) else state.pod.spec


def _lacking(known: list[tuple[str, tuple[str, ...]]], arch: str) -> str:
    return next((image for image, archs in known if arch not in archs), "")


def _vendor_counts(
    inventory: NodeInventory, config: WebhookConfig, families: frozenset[str]
) -> tuple[Mapping[str, int], str]:
    """(nodes per architecture, how messages name them): the nodes of the pod's accelerator
    vendors, known by the labels their placement reads (GFD's and the CUDA schemes for
    NVIDIA, the ROCm and CANN gates' for AMD and Ascend) or their DRA ResourceSlices; a CPU
    node's architecture says nothing about where an accelerator pod can run. When no node
    is known to be the vendors' (no such label anywhere), every node counts."""
    keys: set[str] = set()
    nvidia = amd = False
    shown: list[str] = []
    for name in sorted(families):
        family = family_named(name)
        if family is None:
            continue
        shown.append(f"{family.vendor} {family.noun}")
        if family.placement == "cuda":
            nvidia = True
            keys |= config.cuda_label_keys | config.compute_label_keys
            keys |= config.driver_version_keys
        elif (gate := config.accelerators.gate(family.placement)) is not None:
            amd = amd or family.placement == "rocm"
            keys |= gate.keys
    if not keys:
        return arch_counts(inventory), ""
    if amd:
        keys.add(DRA_AMD_DRIVER)  # with_dra_labels: nodes whose slices publish a driver
    frozen = frozenset(keys)

    def build(nodes: Mapping[str, Mapping[str, str]]) -> Mapping[str, int]:
        found: Counter[str] = Counter()
        for name, labels in nodes.items():
            arch = labels.get(ARCH_LABEL)
            if not arch:
                continue
            dra = inventory.dra.get(name) if nvidia else None
            if any(k in labels for k in frozen) or (dra is not None and dra.cuda is not None):
                found[arch] += 1
        return dict(found)

    counts = inventory.memo(("runtimefix-arch", frozen, nvidia), build)
    if not counts:
        return arch_counts(inventory), ""
    return counts, " and ".join(shown)


def _own_values(state: PodState) -> tuple[str, ...] | None:
    """The architectures the webhook required earlier and marked (a template, and the pods
    made from it): its own term, never the user's (SPEC §4 "The webhook's own terms")."""
    mark = state.pod.annotations.get(ANNOTATION_INJECTED_ARCHITECTURE)
    if not mark:
        return None
    values = tuple(v for v in mark.split(",") if v)
    return values or None


def _is_own(expr: Any, own: tuple[str, ...] | None) -> bool:
    return (
        own is not None
        and is_mapping(expr)
        and expr.get("key") == ARCH_LABEL
        and expr.get("operator") == "In"
        and isinstance(expr.get("values"), list)
        and tuple(sorted(expr["values"])) == own
    )


def _without_own(terms: list[Any], own: tuple[str, ...] | None) -> list[Any]:
    """The terms without the webhook's own arch expression."""
    if own is None:
        return terms
    kept: list[Any] = []
    for term in terms:
        exprs = term.get("matchExpressions") if is_mapping(term) else None
        if not isinstance(exprs, list) or not any(_is_own(e, own) for e in exprs):
            kept.append(term)
            continue
        rest = [e for e in exprs if not _is_own(e, own)]
        if rest:
            kept.append({**term, "matchExpressions": rest})
        elif term.get("matchFields"):
            kept.append({k: v for k, v in term.items() if k != "matchExpressions"})
        # else: a term that was the webhook's expression alone (the user had no terms)
    return kept


def _users_archs(terms: list[Any] | None) -> set[str] | None:
    """The architectures the user's own required terms allow, when one of them names the arch
    label (the user's choice, like a nodeSelector): those its `In` lists allow (KNOWN_ARCHS
    names), or every known one when some term has no `In` on it (a `NotIn` alone); None: no
    term names the label."""
    if not terms:
        return None
    mentioned = False
    allowed: set[str] = set()
    for term in terms:
        if is_empty_term(term):
            continue
        exprs = term.get("matchExpressions")
        if isinstance(exprs, list) and any(
            is_mapping(e) and e.get("key") in ARCH_LABELS for e in exprs
        ):
            mentioned = True
        archs = term_archs(term)
        allowed |= set(KNOWN_ARCHS) if archs is None else archs
    return allowed if mentioned else None


def apply_architecture(
    state: PodState,
    rule: ArchitectureFix,
    config: WebhookConfig,
    inventory: NodeInventory | None,
    daemonset: bool,
    platforms: Mapping[str, tuple[str, ...]] | None = None,
    families: frozenset[str] = frozenset({"nvidia"}),
    violations_only: bool = False,
) -> None:
    """Require the architectures the pod's images are built for, when the pod's vendors'
    nodes (`families`) have another one too; warn (or deny, `noCompatibleNode: deny`) when
    no such node has one. The user's own arch requirement (nodeSelector or a required
    expression) is the user's choice: kept, with a warning where the images lack it.
    `violations_only`: only what denies (nothing is written)."""
    if inventory is None or inventory.pending or daemonset:
        return
    if len(arch_counts(inventory)) < 1:
        return
    knowledge = config.image_rules.knowledge if config.shipped_image_knowledge else None
    found = _pod_archs(rule, state.pod.containers, knowledge, platforms)
    if found is None:
        return
    allowed, known = found
    counts, nodes = _vendor_counts(inventory, config, families)
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
        where = f"{nodes} nodes" if nodes else "nodes"
        text = Wording(
            (
                f"no node of architecture {shown} for {image} ({where} are {have})",
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
    own = _own_values(state)
    current = required_terms(spec) if spec.get("affinity") else None
    terms = _without_own(current, own) if current else []
    users = _users_archs(terms)
    if users is not None:
        # The user's own arch requirement decides, as a nodeSelector would.
        # Only the architectures some node of the vendors has can matter.
        lacking = sorted((users & cluster) - allowed)
        stranded = not users & allowed & cluster  # no node the user allows runs the images
        if lacking and (stranded or not violations_only):
            image = shown_image(_lacking(known, lacking[0]))
            said = f"your node affinity allows {lacking[0]}; {image} has no linux/{lacking[0]}"
            if stranded:
                record_problem(state, config, said, "architecture")
            else:
                state.warnings.append(short(said))
        return
    if violations_only:
        return
    expr = {"key": ARCH_LABEL, "operator": "In", "values": sorted(allowed)}
    if terms:
        merged: list[Any] = []
        for term in terms:
            if is_empty_term(term):
                merged.append(term)  # an empty term matches nothing and stays so
                continue
            exprs = term.get("matchExpressions")
            exprs = list(exprs) if isinstance(exprs, list) else []
            merged.append({**term, "matchExpressions": [*exprs, expr]})
    else:
        merged = [{"matchExpressions": [expr]}]
    mark = ",".join(sorted(allowed))
    marked = state.pod.annotatable and (state.pod.is_template or own is not None)
    if merged == current and (not marked or own == tuple(sorted(allowed))):
        return  # already required (our earlier mutation)
    path = (*state.pod.spec_path, "affinity", "nodeAffinity")
    node_affinity = state.draft.writable(path)
    if not isinstance(node_affinity, dict):
        raise ObjectShapeError(f"{state.ref}: affinity.nodeAffinity must be an object")
    required = node_affinity.get(_REQUIRED)
    selector_obj = {**(required if is_mapping(required) else {}), "nodeSelectorTerms": merged}
    state.draft.set_in(node_affinity, path, _REQUIRED, selector_obj)
    if marked:
        # A template carries the mark (and so do the pods made from it): the next evaluation
        # knows this expression is the webhook's, whatever the template's image becomes.
        annotations = (*state.pod.template_path, "metadata", "annotations")
        state.draft.set(annotations, ANNOTATION_INJECTED_ARCHITECTURE, mark)
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
