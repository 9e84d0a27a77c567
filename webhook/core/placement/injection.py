"""Writing a placement plan into a pod spec (SPEC §4 "Injection"): required node selector terms
crossed with the user's own, the major-skew preference beside the user's preferred terms, each
part left alone when the user's nodeSelector or affinity already names its label keys, and
nothing written twice (an object we mutated before gives no patch)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.core.base.errors import ObjectShapeError
from webhook.core.base.nodeaffinity import required_terms
from webhook.core.base.shapes import is_mapping
from webhook.core.base.wording import Message
from webhook.core.config.model import ANNOTATION_INJECTED_AFFINITY, WebhookConfig
from webhook.core.outcome.decision import PodState, short
from webhook.core.placement.cuda import Range
from webhook.core.placement.terms import (
    FIELD,
    Forward,
    Own,
    Term,
    already_injected,
    cross,
    digest,
    mentioned_key,
    merge_preferred,
    merge_terms,
    own_terms,
    preferred_of,
    same_terms,
)

_NO_KEYS: frozenset[str] = frozenset()
_FIELDS = frozenset({FIELD})
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


# Decision.placements values: the rule behind each node affinity part injected.
# "rocm" and "cann": a vendor gate's driver-release terms (gate.py, SPEC §13).
PLACEMENT_RULES = (
    "backward",
    "minorVersion",
    "forward",
    "architecture-floor",
    "compute",
    "rocm",
    "cann",
)


@dataclass(slots=True)
class Plan:
    """What placement decided for one pod spec, by part: CUDA and compute capability."""

    cuda: list[Term] = field(default_factory=list)  # required terms of the CUDA part
    preferred: list[dict[str, Any]] = field(default_factory=list)  # and its preferred terms
    compute: list[Term] = field(default_factory=list)
    cuda_note: Message = ""  # "required GPU nodes with CUDA ≥ 12.4 (...), preferably < 14.0"
    compute_note: Message = ""
    cuda_want: str = ""  # "CUDA ≥ 12.4, preferably < 14.0", for the kept-affinity warning
    compute_want: str = ""
    fits: Range | None = None  # set when some inventory node meets it (or no inventory)
    # Forward compatibility: the label keys its terms (part of `cuda`) use, and its note.
    forward_keys: frozenset[str] = frozenset()
    # minorVersion on CUDA 11.0 nodes: the driver version label keys its terms (part of
    # `cuda`) use (terms.driver_11_0_terms).
    driver_keys: frozenset[str] = frozenset()
    forward_note: Message = ""
    # The rule that set each part's range (Decision.placements): "backward" or "minorVersion"
    # for the CUDA part, "compute" or "architecture-floor" for the compute capability part.
    cuda_rule: str = "backward"
    compute_rule: str = "compute"
    # The label keys of the first part when it is not CUDA's (a vendor gate's terms, SPEC
    # §13; empty: the config's CUDA label keys), and the note kind it is reported under.
    keys: frozenset[str] = frozenset()
    note_kind: str = "cuda-affinity"

    # Written out: @dataclass's own __init__ stays interpreted under mypyc (pods.ContainerRef).
    def __init__(
        self,
        cuda: list[Term] | None = None,
        preferred: list[dict[str, Any]] | None = None,
        compute: list[Term] | None = None,
        cuda_note: Message = "",
        compute_note: Message = "",
        cuda_want: str = "",
        compute_want: str = "",
        fits: Range | None = None,
        forward_keys: frozenset[str] = frozenset(),
        driver_keys: frozenset[str] = frozenset(),
        forward_note: Message = "",
        cuda_rule: str = "backward",
        compute_rule: str = "compute",
        keys: frozenset[str] = frozenset(),
        note_kind: str = "cuda-affinity",
    ) -> None:
        self.cuda = [] if cuda is None else cuda
        self.preferred = [] if preferred is None else preferred
        self.compute = [] if compute is None else compute
        self.cuda_note = cuda_note
        self.compute_note = compute_note
        self.cuda_want = cuda_want
        self.compute_want = compute_want
        self.fits = fits
        self.forward_keys = forward_keys
        self.driver_keys = driver_keys
        self.forward_note = forward_note
        self.cuda_rule = cuda_rule
        self.compute_rule = compute_rule
        self.keys = keys
        self.note_kind = note_kind


def _mentions(spec: Mapping[str, Any], config: WebhookConfig, plan: Plan) -> tuple[str, str]:
    """(CUDA key, compute key) the user's nodeSelector or required affinity already names,
    for the parts the plan holds ('' when none)."""
    # Most pods carry no node constraints at all: skip the inspection of their terms.
    if not (spec.get("affinity") or spec.get("nodeSelector")):
        return "", ""
    # A term naming nodes (DRA-described ones) is on metadata.name: one already there is ours
    # from before (reinvocation) or the user's own choice of nodes, kept either way.
    cuda = (plan.keys or config.cuda_label_keys) | (
        _FIELDS if _names_nodes(plan.cuda) else _NO_KEYS
    )
    compute = config.compute_label_keys | (_FIELDS if _names_nodes(plan.compute) else _NO_KEYS)
    return (
        mentioned_key(spec, cuda) if plan.cuda else "",
        mentioned_key(spec, compute) if plan.compute else "",
    )


def _names_nodes(terms: list[Term]) -> bool:
    return any(e.get("key") == FIELD for term in terms for e in term)


def _own(state: PodState, config: WebhookConfig) -> Own | None:
    """The spec's node affinity without what the webhook injected earlier and marked (a
    mutated template, and the pods made from it), or None when there is no such mark or the
    terms are not exactly the user's crossed with what it says (then they are the user's)."""
    mark = state.pod.annotations.get(ANNOTATION_INJECTED_AFFINITY)
    if not mark:
        return None
    forward = _forward(config)
    cuda, compute = config.cuda_label_keys | config.driver_version_keys, config.compute_label_keys
    if forward is not None:
        cuda = cuda | {forward.anchor}
    vendors = config.accelerators.keys
    key_sets: tuple[tuple[frozenset[str], frozenset[str]], ...] = (
        (cuda | compute, cuda),
        (cuda, cuda),
        (compute, _NO_KEYS),
        (vendors, vendors),
    )
    # Terms naming DRA-described nodes are on metadata.name (matchFields); a user's own
    # expression on it is not ours, and the digest tells which shape it was.
    key_sets += tuple((keys | _FIELDS, preferred) for keys, preferred in key_sets)
    return own_terms(state.pod.spec, mark, key_sets, forward)


def _forward(config: WebhookConfig) -> Forward | None:
    """How the forward-compatibility term ranges.cuda_terms writes is recognised (None: the
    config names no forward-compatible nodes, so no such term is ever written)."""
    term = config.forward_compatible_nodes
    if term is None:
        return None
    fixed = tuple(json.dumps(e.as_expression(), sort_keys=True) for e in term.match_expressions)
    return Forward(config.driver_branch_label, fixed)


def _without_own(spec: Mapping[str, Any], own: Own) -> dict[str, Any]:
    """The spec as the user wrote it, for the mention checks (nothing is written into it)."""
    node: dict[str, Any] = {}
    if own.required:
        node[_REQUIRED] = {"nodeSelectorTerms": own.required}
    if own.preferred:
        node[_PREFERRED] = own.preferred
    return {**spec, "affinity": {"nodeAffinity": node}}


def _injected_before(
    state: PodState, config: WebhookConfig, plan: Plan, options: list[tuple[bool, bool]]
) -> bool:
    """Whether the spec already holds what one of the `options` (with CUDA, with compute)
    injects: our own earlier mutation (reinvocation, an object applied again)."""
    for with_cuda, with_compute in options:
        keys: frozenset[str] = frozenset()
        forward = _forward(config) if with_cuda and plan.forward_keys else None
        if with_cuda:
            keys |= (plan.keys or config.cuda_label_keys) | plan.driver_keys
        if forward is not None:
            keys |= {forward.anchor}
        if with_compute:
            keys |= config.compute_label_keys
        required = cross(plan.cuda if with_cuda else [], plan.compute if with_compute else [])
        if _names_nodes(required):
            keys |= _FIELDS
        preferred = plan.preferred if with_cuda else None
        if required and already_injected(state.pod.spec, keys, required, preferred, forward):
            return True
    return False


def inject(state: PodState, config: WebhookConfig, plan: Plan) -> None:
    """Write the plan's terms into the pod spec, leaving alone each part (CUDA, compute
    capability) whose label keys the user's own nodeSelector or affinity already names.

    Terms the webhook injected earlier and marked (a template mutated with `mutateTemplates`,
    whose image then changed: SPEC §4 "The webhook's own terms are its own") are replaced, not
    taken for the user's."""
    with_cuda, with_compute = bool(plan.cuda), bool(plan.compute)
    spec = state.pod.spec
    own = _own(state, config) if spec.get("affinity") else None
    view = spec if own is None else _without_own(spec, own)
    mentioned_cuda, mentioned_compute = _mentions(view, config, plan)
    if mentioned_cuda or mentioned_compute:
        # Our own earlier injection names these keys too: then the terms are exactly ours.
        options = [(with_cuda, with_compute)]
        if mentioned_compute and with_cuda:
            options.append((True, False))
        if mentioned_cuda and with_compute:
            options.append((False, True))
        if own is None and _injected_before(state, config, plan, options):
            return
        for key, want in ((mentioned_cuda, plan.cuda_want), (mentioned_compute, plan.compute_want)):
            if key:
                state.warnings.append(
                    short(f"your node affinity on {key} is kept as is; this pod needs {want}")
                )
        with_cuda = with_cuda and not mentioned_cuda
        with_compute = with_compute and not mentioned_compute
    injected = cross(plan.cuda if with_cuda else [], plan.compute if with_compute else [])
    if not injected:
        return
    current = required_terms(spec) if spec.get("affinity") else None
    existing = own.required if own is not None else current
    merged = merge_terms(existing, injected)
    if merged == existing:
        return  # only empty user terms: they stay empty, and the pod can run nowhere anyway
    ours_preferred = plan.preferred if with_cuda else []
    now_preferred = preferred_of(spec)
    user_preferred = own.preferred if own is not None else now_preferred
    preferred: Any = user_preferred
    if ours_preferred and (user_preferred is None or isinstance(user_preferred, list)):
        # (A malformed preferred list is the user's to fix; the API server rejects it anyway.)
        preferred = merge_preferred(user_preferred, ours_preferred)
    # A template carries the mark (and so do the pods made from it): the next evaluation
    # knows these terms are the webhook's, whatever the template's image becomes.
    has_mark = ANNOTATION_INJECTED_AFFINITY in state.pod.annotations
    marked = state.pod.is_template or has_mark
    # The digest (a canonical JSON of the terms, the costliest step of an injection) is needed
    # to compare with a mark the spec carries, or to write one into a patch: a plain pod, and a
    # template that is not mutated (its draft records nothing) and carries none, never pay it.
    written = marked and state.draft.writes is not None
    mark = digest(injected, ours_preferred) if has_mark or written else ""
    if (
        current is not None
        and same_terms(merged, current)
        and preferred == now_preferred
        and (not marked or state.pod.annotations.get(ANNOTATION_INJECTED_AFFINITY) == mark)
    ):
        return  # what we injected before (another webhook may have added to each term since)
    path = (*state.pod.spec_path, "affinity", "nodeAffinity")
    node_affinity = state.draft.writable(path)
    if not isinstance(node_affinity, dict):
        raise ObjectShapeError(f"{state.ref}: affinity.nodeAffinity must be an object")
    required = node_affinity.get(_REQUIRED)
    # A new NodeSelector (its other fields kept): nothing of the user's object is changed.
    selector = {**(required if is_mapping(required) else {}), "nodeSelectorTerms": merged}
    state.draft.set_in(node_affinity, path, _REQUIRED, selector)
    if preferred is not now_preferred and preferred is not None:
        state.draft.set_in(node_affinity, path, _PREFERRED, preferred)
    if marked and mark:
        meta = (*state.pod.template_path, "metadata", "annotations")
        state.draft.set(meta, ANNOTATION_INJECTED_AFFINITY, mark)
    if with_cuda and plan.cuda_note:
        state.note(plan.note_kind, plan.cuda_note)
        state.placements.append(plan.cuda_rule)
        if plan.forward_note:
            state.note("forward-compatibility-affinity", plan.forward_note)
            state.placements.append("forward")
    if with_compute:
        state.note("compute-capability-affinity", plan.compute_note)
        state.placements.append(plan.compute_rule)
