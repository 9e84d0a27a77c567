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

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from webhook.core.base.nodeaffinity import is_empty_term, required_terms
from webhook.core.base.shapes import is_mapping
from webhook.core.base.versions import CudaVersion
from webhook.core.config.labels import DRIVER_VERSION_LABELS
from webhook.core.config.model import CudaLabels

Term = list[dict[str, Any]]  # the expressions of one term (matchExpressions, and FIELD's)

# The one field a node selector term may select on (k8s.io/api core/v1 NodeSelectorTerm
# MatchFields: "A list of node selector requirements by node's fields"; the scheduler's
# nodeaffinity reads only metadata.name, pkg/apis/core/validation validateNodeFieldSelector-
# Requirement accepts only it). An expression on it in a Term is written into `matchFields`:
# how nodes that no label describes (DRA-only, SPEC §13) are selected, by name.
FIELD = "metadata.name"
_LISTS = ("matchExpressions", "matchFields")


def name_term(name: str) -> Term:
    """A term selecting the one node named. One term per node: the API server accepts exactly
    one value in a node field selector's `In` (pkg/apis/core/validation
    validateNodeFieldSelectorRequirement: "must be only one value when `operator` is 'In' or
    'NotIn' for node field selector"; seen on kube-apiserver 1.36.2 as a Job's pods failing to
    be created)."""
    return [{"key": FIELD, "operator": "In", "values": [name]}]


def _named(term: Term) -> str | None:
    for e in term:
        if e.get("key") == FIELD:
            return str(e["values"][0])
    return None


def selector_term(term: Term, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The NodeSelectorTerm of `term` ANDed with `base` (a user's term): label expressions
    after the user's matchExpressions, FIELD's after the user's matchFields."""
    if base is None and not any(e.get("key") == FIELD for e in term):
        return {"matchExpressions": list(term)}  # most pods: no term of their own, no name
    fields = [e for e in term if e.get("key") == FIELD]
    labels = [e for e in term if e.get("key") != FIELD] if fields else list(term)
    out = dict(base or {})
    user = out.get("matchExpressions")
    user = list(user) if isinstance(user, list) else []
    if labels or not fields:
        out["matchExpressions"] = user + labels
    if fields:
        own = out.get("matchFields")
        out["matchFields"] = (list(own) if isinstance(own, list) else []) + fields
    return out


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


def driver_11_0_terms(schemes: Iterable[CudaLabels]) -> list[Term]:
    """Terms selecting the CUDA 11.0 nodes whose driver is ≥ 450.80.02 on GFD's driver version
    labels (cuda.driver_11_0: branch 450 with a minor above 80, or 80 with a revision above
    1), one pair per scheme: what minorVersion adds for an 11.x image (SPEC §4)."""
    major, minor, revision = DRIVER_VERSION_LABELS
    branch = [_expr(major, "Gt", 449), _expr(major, "Lt", 451)]
    terms: list[Term] = []
    for scheme in schemes:
        node = [
            _expr(scheme.major, "Gt", 10),
            _expr(scheme.major, "Lt", 12),
            _expr(scheme.minor, "Lt", 1),
        ]
        terms.append([*node, *branch, _expr(minor, "Gt", 80)])
        terms.append(
            [
                *node,
                *branch,
                _expr(minor, "Gt", 79),
                _expr(minor, "Lt", 81),
                _expr(revision, "Gt", 1),
            ]
        )
    return terms


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


def fresh_terms(terms: Iterable[Term]) -> list[Term]:
    """Copies of node selector terms down to their values lists: a memo's terms (shared by
    every review with the same inputs) are never handed out, so no caller can change the
    next review's answer by changing its own."""
    return [
        [{**e, "values": list(e["values"])} if "values" in e else dict(e) for e in term]
        for term in terms
    ]


def fresh_preferred(terms: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of preferred scheduling terms (fresh_terms' reason)."""
    return [
        {
            **p,
            "preference": {
                **p["preference"],
                "matchExpressions": fresh_terms([p["preference"]["matchExpressions"]])[0],
            },
        }
        for p in terms
    ]


def cross(left: list[Term], right: list[Term]) -> list[Term]:
    """Both conditions: every left term AND every right term (either side empty: the other)."""
    if not left:
        return right
    if not right:
        return left
    crossed = []
    for a in left:
        one = _named(a)
        for b in right:
            other = _named(b)
            if one is None or other is None:
                crossed.append([*a, *b])
            elif one == other:
                # The same node on both sides: one expression naming it.
                crossed.append([*a, *(e for e in b if e.get("key") != FIELD)])
            # Two different nodes: a term no node matches, left out.
    return crossed


def merge_terms(existing: Sequence[Any] | None, injected: list[Term]) -> list[dict[str, Any]]:
    """Cross product: every user term AND every injected term (terms are ORed).

    An empty user term matches no node; it stays empty, because adding our expressions to it
    would make it match nodes and widen the user's placement.
    """
    if not existing:
        return [selector_term(term) for term in injected]
    merged: list[dict[str, Any]] = []
    for user_term in existing:
        if is_empty_term(user_term):
            merged.append(user_term)
            continue
        for term in injected:
            merged.append(selector_term(term, user_term))
    return merged


def _mentions(term: Any, keys: frozenset[str]) -> bool:
    if not is_mapping(term):
        return False
    for name in _LISTS:
        exprs = term.get(name)
        # A malformed key (e.g. a list) is not hashable: test the type before the set lookup.
        if isinstance(exprs, list) and any(
            is_mapping(e) and isinstance(e.get("key"), str) and e["key"] in keys for e in exprs
        ):
            return True
    return False


class Forward(NamedTuple):
    """How the forward-compatibility term (SPEC §4) is told apart from a user's expressions:
    it holds an expression on `anchor` (the driver branch label) and a copy of each of
    forwardCompatibleNodes' expressions (`fixed`, as canonical JSON). Those copies are on keys
    a user may use too (`nvidia.com/gpu.product`), so they are the webhook's only in a term
    that holds the anchor, and only one copy of each (issue 37 defect 2)."""

    anchor: str
    fixed: tuple[str, ...]


def _parts(
    exprs: list[Any], keys: frozenset[str], forward: Forward | None
) -> tuple[list[Any], list[Any]]:
    """(ours, the user's) of one term's expressions: ours are those on `keys`, and in the
    forward-compatibility term (`forward`), one copy of each of its fixed expressions."""
    ours = [e for e in exprs if _on(e, keys)]
    rest = [e for e in exprs if not _on(e, keys)]
    if (
        forward is not None
        and forward.anchor in keys
        and any(e["key"] == forward.anchor for e in ours)
    ):
        for fixed in forward.fixed:
            for i, e in enumerate(rest):
                if json.dumps(e, sort_keys=True) == fixed:
                    ours.append(rest.pop(i))
                    break
    return ours, rest


def _without(term: Any, keys: frozenset[str], forward: Forward | None) -> dict[str, Any] | None:
    """The term with our expressions removed; None when nothing of the user's is left."""
    assert is_mapping(term)
    rest = dict(term)
    for name in _LISTS:
        if not isinstance(term.get(name), list):
            continue
        if name == _LISTS[0]:
            _, exprs = _parts(term[name], keys, forward)
        else:
            exprs = [e for e in term[name] if not _on(e, keys)]
        rest[name] = exprs
        if not exprs:
            del rest[name]
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
            for name in _LISTS:
                exprs = term.get(name)
                for e in exprs if isinstance(exprs, list) else ():
                    if is_mapping(e) and isinstance(e.get("key"), str) and e["key"] in keys:
                        return str(e["key"])
    return ""


def canonical(term: Any) -> str:
    """A node selector term as a comparable value. Its expressions (and fields) are ANDed, so
    their order does not matter: another mutating webhook may append its own after ours
    (reinvocation), and the term selects the same nodes."""
    if not is_mapping(term):
        return json.dumps(term, sort_keys=True)
    shown = {
        key: sorted(json.dumps(e, sort_keys=True) for e in value)
        if key in ("matchExpressions", "matchFields") and isinstance(value, list)
        else value
        for key, value in term.items()
    }
    return json.dumps(shown, sort_keys=True)


def same_terms(left: Sequence[Any], right: Sequence[Any]) -> bool:
    """Whether two lists of node selector terms are the same terms (ORed: in any order)."""
    return len(left) == len(right) and sorted(map(canonical, left)) == sorted(map(canonical, right))


def digest(injected: list[Term], preferred: Sequence[Any]) -> str:
    """What the webhook writes beside terms it injects into a pod template (the injected-node-
    affinity annotation): a short digest of exactly those terms. Kubernetes' node affinity has
    no place for a mark per term, so the digest is what tells the webhook's own terms from a
    user's that happen to look the same (SPEC §4 "The webhook's own terms are its own")."""
    payload = json.dumps(
        [
            sorted(canonical({"matchExpressions": term}) for term in injected),
            sorted(json.dumps(p, sort_keys=True) for p in preferred),
        ]
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _on(expr: Any, keys: frozenset[str]) -> bool:
    return is_mapping(expr) and isinstance(expr.get("key"), str) and expr["key"] in keys


def _split(
    terms: Sequence[Any], keys: frozenset[str], forward: Forward | None = None
) -> tuple[list[Any], list[Term]] | None:
    """(the user's terms, our terms) when `terms` is what merge_terms(user's, ours) makes, our
    terms being each term's expressions on `keys` (and the forward-compatibility term's fixed
    expressions: _parts), in any order (see canonical); None when it is not (a term without
    such expressions, or user terms crossed with different lists)."""
    groups: dict[str, tuple[Any, list[Term]]] = {}
    empty: list[Any] = []
    for term in terms:
        if is_empty_term(term):
            empty.append(term)  # merge_terms keeps an empty user term as it is
            continue
        rest = dict(term)
        ours = []
        for name in _LISTS:
            exprs = term.get(name)
            if not isinstance(exprs, list):
                continue
            # Our FIELD expressions are in matchFields, our label ones (and the forward
            # term's fixed expressions: _parts) in matchExpressions.
            if name == _LISTS[0]:
                mine, users = _parts(exprs, keys - {FIELD}, forward)
            else:
                mine = [e for e in exprs if _on(e, keys) and e["key"] == FIELD]
                users = [e for e in exprs if not any(e is m for m in mine)]
            ours += mine
            rest[name] = users
            if not rest[name]:
                del rest[name]
        if not ours:
            return None
        groups.setdefault(canonical(rest), (rest, []))[1].append(ours)
    if not groups:
        return None
    lists = [sorted(canonical({"matchExpressions": t}) for t in g[1]) for g in groups.values()]
    if any(other != lists[0] for other in lists[1:]):
        return None
    user = [rest for rest, _ in groups.values()]
    if any(not rest for rest in user):
        if len(user) > 1:
            return None
        user = []  # the user had no terms: every term is ours alone
    return [*user, *empty], next(iter(groups.values()))[1]


class Own(NamedTuple):
    """A pod spec's node affinity with the webhook's own earlier injection taken out."""

    required: list[Any] | None  # the user's required terms (None: none)
    preferred: list[Any] | None  # the user's preferred terms (None: the field was absent)


def _our_preference(term: Any, keys: frozenset[str]) -> bool:
    """A preferred term of the shape preferred_terms() or preferred_range_terms() (minorVersion:
    "12.x with x ≥ 4" has three expressions) writes: every expression on one of `keys`."""
    if not is_mapping(term) or term.get("weight") != PREFERRED_WEIGHT:
        return False
    preference = term.get("preference")
    exprs = preference.get("matchExpressions") if is_mapping(preference) else None
    return isinstance(exprs, list) and bool(exprs) and all(_on(e, keys) for e in exprs)


def own_terms(
    spec: Mapping[str, Any],
    mark: str,
    key_sets: Sequence[tuple[frozenset[str], frozenset[str]]],
    forward: Forward | None = None,
) -> Own | None:
    """The spec without the terms the webhook injected when it wrote `mark` (digest()), or
    None when its affinity is not the user's terms crossed with exactly those.

    `key_sets`: (label keys of the required part, label keys of the preferred part) of each
    shape an injection may have had (CUDA and compute capability, either alone): a user's own
    expression on one of those keys is never ours, and the digest then tells which it was.
    `forward`: the forward-compatibility term's marks, for the key sets holding its anchor."""
    terms = required_terms(spec)
    if not terms:
        return None
    current = preferred_of(spec)
    preferred = current if isinstance(current, list) else []
    for keys, preferred_keys in key_sets:
        split = _split(terms, keys, forward)
        if split is None:
            continue
        user, ours = split
        mine = [p for p in preferred if _our_preference(p, preferred_keys)]
        for candidate in (mine, []) if mine else ([],):
            if digest(ours, candidate) == mark:
                rest = [p for p in preferred if p not in candidate]
                return Own(user or None, rest if current is not None else None)
    return None


def already_injected(
    spec: Mapping[str, Any],
    keys: frozenset[str],
    injected: list[Term],
    preferred: list[dict[str, Any]] | None = None,
    forward: Forward | None = None,
) -> bool:
    """True when the pod's terms are what merging `injected` into the user's own terms gives
    (expressions in any order: another webhook may have appended its own), and its preferred
    terms hold `preferred`: the object was mutated by us already (idempotence,
    reinvocation). `keys`: the label keys of what `injected` holds (with the driver branch
    label, when `forward` says how its forward-compatibility term is told apart)."""
    if preferred:
        current = preferred_of(spec)
        if not isinstance(current, list) or any(p not in current for p in preferred):
            return False
    terms = required_terms(spec)
    if not terms:
        return False
    base: list[Any] = []
    for term in terms:
        stripped = _without(term, keys, forward) if _mentions(term, keys) else term
        if stripped not in base:
            base.append(stripped)
    if base == [None]:
        return same_terms(merge_terms(None, injected), terms)
    if None in base:
        return False
    return same_terms(merge_terms(base, injected), terms)
