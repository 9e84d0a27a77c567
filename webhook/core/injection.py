"""Writing a placement plan into a pod spec (SPEC §4 "Injection"): required node selector terms
crossed with the user's own, the major-skew preference beside the user's preferred terms, each
part left alone when the user's nodeSelector or affinity already names its label keys, and
nothing written twice (an object we mutated before gives no patch)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.core.config import WebhookConfig
from webhook.core.decision import PodState, short
from webhook.core.errors import ObjectShapeError
from webhook.core.rules.cuda import Range
from webhook.core.rules.terms import (
    Term,
    already_injected,
    cross,
    mentioned_key,
    merge_preferred,
    merge_terms,
    required_terms,
)
from webhook.core.wording import Message

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


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
    forward_note: Message = ""


def _mentions(state: PodState, config: WebhookConfig, plan: Plan) -> tuple[str, str]:
    """(CUDA key, compute key) the user's nodeSelector or required affinity already names,
    for the parts the plan holds ('' when none)."""
    spec = state.pod.spec
    # Most pods carry no node constraints at all: skip the inspection of their terms.
    if not (spec.get("affinity") or spec.get("nodeSelector")):
        return "", ""
    return (
        mentioned_key(spec, config.cuda_label_keys) if plan.cuda else "",
        mentioned_key(spec, config.compute_label_keys) if plan.compute else "",
    )


def _injected_before(
    state: PodState, config: WebhookConfig, plan: Plan, options: list[tuple[bool, bool]]
) -> bool:
    """Whether the spec already holds what one of the `options` (with CUDA, with compute)
    injects: our own earlier mutation (reinvocation, an object applied again)."""
    for with_cuda, with_compute in options:
        keys: frozenset[str] = frozenset()
        if with_cuda:
            keys |= config.cuda_label_keys | plan.forward_keys
        if with_compute:
            keys |= config.compute_label_keys
        required = cross(plan.cuda if with_cuda else [], plan.compute if with_compute else [])
        preferred = plan.preferred if with_cuda else None
        if required and already_injected(state.pod.spec, keys, required, preferred):
            return True
    return False


def inject(state: PodState, config: WebhookConfig, plan: Plan) -> None:
    """Write the plan's terms into the pod spec, leaving alone each part (CUDA, compute
    capability) whose label keys the user's own nodeSelector or affinity already names."""
    with_cuda, with_compute = bool(plan.cuda), bool(plan.compute)
    mentioned_cuda, mentioned_compute = _mentions(state, config, plan)
    if mentioned_cuda or mentioned_compute:
        # Our own earlier injection names these keys too: then the terms are exactly ours.
        options = [(with_cuda, with_compute)]
        if mentioned_compute and with_cuda:
            options.append((True, False))
        if mentioned_cuda and with_compute:
            options.append((False, True))
        if _injected_before(state, config, plan, options):
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
    spec = state.pod.spec
    existing = required_terms(spec) if spec.get("affinity") else None
    merged = merge_terms(existing, injected)
    if merged == existing:
        return  # only empty user terms: they stay empty, and the pod can run nowhere anyway
    path = (*state.pod.spec_path, "affinity", "nodeAffinity")
    node_affinity = state.draft.writable(path)
    if not isinstance(node_affinity, dict):
        raise ObjectShapeError(f"{state.ref}: affinity.nodeAffinity must be an object")
    required = node_affinity.get(_REQUIRED)
    # A new NodeSelector (its other fields kept): nothing of the user's object is changed.
    selector = {**(required if isinstance(required, Mapping) else {}), "nodeSelectorTerms": merged}
    state.draft.set_in(node_affinity, path, _REQUIRED, selector)
    current = node_affinity.get(_PREFERRED)
    if with_cuda and plan.preferred and (current is None or isinstance(current, list)):
        # (A malformed preferred list is the user's to fix; the API server rejects it anyway.)
        state.draft.set_in(
            node_affinity, path, _PREFERRED, merge_preferred(current, plan.preferred)
        )
    if with_cuda:
        state.note("cuda-affinity", plan.cuda_note)
        if plan.forward_note:
            state.note("forward-compatibility-affinity", plan.forward_note)
    if with_compute:
        state.note("compute-capability-affinity", plan.compute_note)
