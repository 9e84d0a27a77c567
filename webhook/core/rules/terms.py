"""Node selector terms for version ranges, and how they combine with the user's own terms.

Kubernetes semantics (k8s.io/api core/v1 NodeSelector; component-helpers
scheduling/corev1/nodeaffinity): `nodeSelectorTerms` are ORed, the expressions inside a term
ANDed, and a null or empty term matches no node. `In` compares strings; `Gt`/`Lt` take exactly
one value and compare integers parsed with strconv.ParseInt (apimachinery pkg/labels
selector.go, NewRequirement and Requirement.Matches), so `Gt`/`Lt` are what lets a padded label
value such as "012" or "06" match. A term may hold several expressions on the same key: the
API server validates each requirement on its own (pkg/apis/core/validation
ValidateNodeSelectorTerm), and the values we write are never negative (Range.low ≥ 1.0), so
they are valid label values too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from webhook.core.config import CudaLabels
from webhook.core.rules.versions import CudaVersion
from webhook.core.shapes import is_mapping

Term = list[dict[str, Any]]  # the matchExpressions of one term


def _expr(key: str, operator: str, value: int) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": [str(value)]}


def range_terms(scheme: CudaLabels, low: CudaVersion, max_major: int | None) -> list[Term]:
    """Terms selecting exactly the nodes whose version V (on `scheme`) has
    V ≥ low and, when `max_major` is set, V.major ≤ max_major."""
    major, minor = scheme.major, scheme.minor
    upper = [] if max_major is None else [_expr(major, "Lt", max_major + 1)]
    if low.minor == 0:
        return [[_expr(major, "Gt", low.major - 1), *upper]]
    same_major = [
        _expr(major, "Gt", low.major - 1),
        _expr(major, "Lt", low.major + 1),
        _expr(minor, "Gt", low.minor - 1),
    ]
    if max_major is not None and max_major <= low.major:
        return [same_major]
    return [same_major, [_expr(major, "Gt", low.major), *upper]]


def union_terms(
    schemes: Iterable[CudaLabels], low: CudaVersion, max_major: int | None
) -> list[Term]:
    """One scheme's terms after the other: a node matches if any scheme it carries fits."""
    return [term for scheme in schemes for term in range_terms(scheme, low, max_major)]


# The weight of the major-skew preference: the highest the API server accepts (k8s.io/api
# core/v1 PreferredSchedulingTerm "in the range 1-100"; pkg/apis/core/validation
# ValidatePreferredSchedulingTerms rejects anything outside), so the scheduler's NodeAffinity
# score favours a recommended driver over other preferences when one has room.
PREFERRED_WEIGHT = 100
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def preferred_terms(schemes: Iterable[CudaLabels], max_major: int) -> list[dict[str, Any]]:
    """Preferred scheduling terms for nodes whose driver major is at most `max_major`, one per
    scheme (a node carrying a scheme's label matches that scheme's term)."""
    return [
        {
            "weight": PREFERRED_WEIGHT,
            "preference": {"matchExpressions": [_expr(scheme.major, "Lt", max_major + 1)]},
        }
        for scheme in schemes
    ]


def preferred_range_terms(schemes: Iterable[CudaLabels], low: CudaVersion) -> list[dict[str, Any]]:
    """Preferred scheduling terms for nodes whose version is ≥ `low` (minor-version
    compatibility prefers the full version): the terms of range_terms, each weighted. A node
    matches at most one term per scheme (the same major with a minor ≥ low's, or a newer
    major), so the weight it gets is the same either way."""
    return [
        {"weight": PREFERRED_WEIGHT, "preference": {"matchExpressions": term}}
        for scheme in schemes
        for term in range_terms(scheme, low, None)
    ]


def preferred_of(spec: Mapping[str, Any]) -> Any:
    """The pod's preferredDuringScheduling node affinity as written (None when absent)."""
    affinity = spec.get("affinity")
    node = affinity.get("nodeAffinity") if is_mapping(affinity) else None
    return node.get(_PREFERRED) if is_mapping(node) else None


def merge_preferred(existing: Sequence[Any] | None, ours: list[dict[str, Any]]) -> list[Any]:
    """The user's preferred terms, then ours (an earlier copy of ours is not kept twice)."""
    return [term for term in existing or () if term not in ours] + ours


def cross(left: list[Term], right: list[Term]) -> list[Term]:
    """Both conditions: every left term AND every right term (either side empty: the other)."""
    if not left:
        return right
    if not right:
        return left
    return [[*a, *b] for a in left for b in right]


def required_terms(spec: Mapping[str, Any]) -> list[Any] | None:
    affinity = spec.get("affinity")
    node = affinity.get("nodeAffinity") if is_mapping(affinity) else None
    required = (
        node.get("requiredDuringSchedulingIgnoredDuringExecution") if is_mapping(node) else None
    )
    terms = required.get("nodeSelectorTerms") if is_mapping(required) else None
    return terms if isinstance(terms, list) else None


def is_empty_term(term: Any) -> bool:
    """A null or empty node selector term matches no node (k8s.io/component-helpers
    scheduling/corev1/nodeaffinity isEmptyNodeSelectorTerm)."""
    if not is_mapping(term):
        return True
    return not term.get("matchExpressions") and not term.get("matchFields")


def merge_terms(existing: Sequence[Any] | None, injected: list[Term]) -> list[dict[str, Any]]:
    """Cross product: every user term AND every injected term (terms are ORed).

    An empty user term matches no node; it stays empty, because adding our expressions to it
    would make it match nodes and widen the user's placement.
    """
    if not existing:
        return [{"matchExpressions": list(term)} for term in injected]
    merged: list[dict[str, Any]] = []
    for user_term in existing:
        if is_empty_term(user_term):
            merged.append(user_term)
            continue
        base = dict(user_term)
        user_exprs = base.get("matchExpressions")
        user_exprs = list(user_exprs) if isinstance(user_exprs, list) else []
        for term in injected:
            merged.append({**base, "matchExpressions": user_exprs + list(term)})
    return merged


def _mentions(term: Any, keys: frozenset[str]) -> bool:
    exprs = term.get("matchExpressions") if is_mapping(term) else None
    if not isinstance(exprs, list):
        return False
    # A malformed key (e.g. a list) is not hashable: test the type before the set lookup.
    return any(is_mapping(e) and isinstance(e.get("key"), str) and e["key"] in keys for e in exprs)


def _without(term: Any, keys: frozenset[str]) -> dict[str, Any] | None:
    """The term with our expressions removed; None when nothing of the user's is left."""
    assert isinstance(term, Mapping)
    exprs = [
        e
        for e in term["matchExpressions"]
        if not (isinstance(e, Mapping) and isinstance(e.get("key"), str) and e["key"] in keys)
    ]
    rest = {**term, "matchExpressions": exprs}
    if not exprs:
        del rest["matchExpressions"]
    return rest or None


def mentioned_key(spec: Mapping[str, Any], keys: frozenset[str]) -> str:
    """The first placement label key the pod's nodeSelector or required affinity uses, or ''."""
    selector = spec.get("nodeSelector")
    if is_mapping(selector):
        for key in selector:
            if key in keys:
                return str(key)
    for term in required_terms(spec) or ():
        if _mentions(term, keys):
            for e in term["matchExpressions"]:
                if isinstance(e, Mapping) and isinstance(e.get("key"), str) and e["key"] in keys:
                    return str(e["key"])
    return ""


def already_injected(
    spec: Mapping[str, Any],
    keys: frozenset[str],
    injected: list[Term],
    preferred: list[dict[str, Any]] | None = None,
) -> bool:
    """True when the pod's terms are exactly what merging `injected` into the user's own
    terms gives, and its preferred terms end with `preferred`: the object was mutated by us
    already (idempotence, reinvocation). `keys`: the label keys of what `injected` holds."""
    if preferred:
        current = preferred_of(spec)
        if not isinstance(current, list) or current != merge_preferred(current, preferred):
            return False
    terms = required_terms(spec)
    if not terms:
        return False
    base: list[Any] = []
    for term in terms:
        stripped = _without(term, keys) if _mentions(term, keys) else term
        if stripped not in base:
            base.append(stripped)
    if base == [None]:
        return merge_terms(None, injected) == terms
    if None in base:
        return False
    return merge_terms(base, injected) == terms
