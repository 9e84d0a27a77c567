"""CRL resource rules (SPEC §3): defaults for limits/requests and the checks on their values."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from webhook.core.base.errors import ObjectShapeError
from webhook.core.base.quantity import Parsed, format_quantity, parsed
from webhook.core.base.shapes import as_dict, is_mapping
from webhook.core.policies.crl import (
    LimitsPolicy,
    RequestsPolicy,
    ResourceLimitation,
    bound_problem,
)
from webhook.core.policies.policyset import PolicySet

# The policy values the checks compare with, as Final module constants: mypyc reads them
# from a C static, where `LimitsPolicy.REQUIRED` is a global lookup and an attribute read.
_LIMITS_REQUIRED: Final = LimitsPolicy.REQUIRED
_LIMITS_DISABLED: Final = LimitsPolicy.DISABLED
_REQUESTS_REQUIRED: Final = RequestsPolicy.REQUIRED
_REQUESTS_DISABLED: Final = RequestsPolicy.DISABLED
_FROM_LIMITS: Final = RequestsPolicy.FROM_LIMITS
_EMPTY: dict[str, Any] = {}  # never written to: the caller copies before defaulting


class _Missing:
    """The value of a key that is not in the list (a JSON null is a value: zero)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


@dataclass(slots=True)  # not frozen: built per review, and frozen __init__ is ~5x slower
class ResourceLists:
    """A container's `resources.limits` and `resources.requests` (empty when absent), as
    dicts: decoded JSON's own (shapes.as_dict), whose reads are direct dict calls."""

    limits: dict[str, Any]
    requests: dict[str, Any]

    # Written out: @dataclass's own __init__ stays interpreted under mypyc (pods.ContainerRef).
    def __init__(self, limits: dict[str, Any], requests: dict[str, Any]) -> None:
        self.limits = limits
        self.requests = requests

    @classmethod
    def of(cls, container: Mapping[str, Any], ref: str, where: str) -> ResourceLists:
        """`ref` and `where` name the container in a shape error (`Pod ns/a container "x"`:
        the text is built only then)."""
        resources = as_dict(container).get("resources")
        if resources is None:
            return cls(_EMPTY, _EMPTY)
        if not is_mapping(resources):
            raise ObjectShapeError(f"{ref} {where}.resources must be an object")
        found = as_dict(resources)
        limits = found.get("limits") or _EMPTY
        requests = found.get("requests") or _EMPTY
        if not is_mapping(limits):
            raise ObjectShapeError(f"{ref} {where}.resources.limits must be an object")
        if not is_mapping(requests):
            raise ObjectShapeError(f"{ref} {where}.resources.requests must be an object")
        return cls(as_dict(limits), as_dict(requests))

    def keys(self) -> set[str]:
        keys = set(self.limits)
        keys.update(self.requests)
        return keys

    def zero_keys(self, candidates: Iterable[str]) -> set[str]:
        """The candidates whose values are all zero: a key set to "0" (or null) asks for no
        device. A value that does not parse is not zero, so its own checks report it."""
        return {
            key for key in candidates if _is_zero(self.limits, key) and _is_zero(self.requests, key)
        }


def _is_zero(values: dict[str, Any], key: str) -> bool:
    if key not in values:
        return True
    value = parsed(values[key])
    return value.error == 0 and value.numerator == 0  # Fraction truth: non-zero numerator


@dataclass(frozen=True, slots=True)
class ResourceDefault:
    """Set resources.<field>[key] = value (field is "limits" or "requests")."""

    field: str
    key: str
    value: Any
    kind: str  # "resource-default" or "requests-from-limits"

    # Written out, frozen: as wording.Wording's.
    def __init__(self, field: str, key: str, value: Any, kind: str) -> None:
        object.__setattr__(self, "field", field)
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "kind", kind)


@dataclass(frozen=True, slots=True)
class ResourceProblem:
    """One broken rule; the caller adds object and container to make the message."""

    policy: ResourceLimitation
    field: str  # "limits" or "requests"
    value: Any  # as written, or MISSING when the problem is a missing value
    problem: str  # "is required but not set", "is not a whole number", ...
    rule: str  # "limits: required", "dataType: integer", "max: 8", ...

    # Written out, frozen: as wording.Wording's.
    def __init__(
        self, policy: ResourceLimitation, field: str, value: Any, problem: str, rule: str
    ) -> None:
        object.__setattr__(self, "policy", policy)
        object.__setattr__(self, "field", field)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "problem", problem)
        object.__setattr__(self, "rule", rule)


def used_policies(keys: Iterable[str], policies: PolicySet) -> list[ResourceLimitation]:
    """Every policy of every group the container uses; O(keys in the container).

    Groups go in name order: `keys` is a set, whose order changes with the hash seed and once
    defaults add keys, and messages must come out in the same order on every evaluation.
    """
    # The usual container uses one group: no set, no sort (`in` then `[]` on the snapshot's
    # mapping proxy: most keys, cpu and memory, are in no group).
    by_key = policies.by_key
    first: str | None = None
    groups: set[str] | None = None
    for key in keys:
        if key in by_key:
            group = by_key[key].group
            if first is None:
                first = group
            elif group != first:
                if groups is None:
                    groups = {first}
                groups.add(group)
    if first is None:
        return []
    if groups is None:
        return list(policies.by_group[first])
    return [lim for group in sorted(groups) for lim in policies.by_group[group]]


def defaults(lists: ResourceLists, used: Iterable[ResourceLimitation]) -> list[ResourceDefault]:
    """The defaults to apply, in order (a defaulted limit feeds `requests: fromLimits`)."""
    changes: list[ResourceDefault] = []
    for policy in used:
        lim = lists.limits.get(policy.key, MISSING)
        req = lists.requests.get(policy.key, MISSING)
        if (
            lim is MISSING
            and req is MISSING
            and policy.default is not None
            and policy.limits is not _LIMITS_DISABLED
        ):
            lim = policy.default_text or str(policy.default)
            changes.append(ResourceDefault("limits", policy.key, lim, "resource-default"))
        if policy.requests is _FROM_LIMITS and lim is not MISSING and req is MISSING:
            changes.append(ResourceDefault("requests", policy.key, lim, "requests-from-limits"))
    return changes


_NO_PROBLEMS: tuple[ResourceProblem, ...] = ()
# No (field, key) set by the webhook (one object: mypyc evaluates a default per call).
NO_DERIVED: frozenset[tuple[str, str]] = frozenset()


def _value_problems(
    policy: ResourceLimitation, field: str, raw: Any
) -> tuple[Parsed, tuple[ResourceProblem, ...]]:
    # parsed(): parse_quantity's value as native ints, kept per text (quantity.Parsed).
    value = parsed(raw)
    if value.error:
        # A Kubernetes quantity of 10^4000 or more is valid but not evaluated: say which.
        problem = "is too large to evaluate" if value.error == 2 else "is not a valid quantity"
        return value, (ResourceProblem(policy, field, raw, problem, "dataType: integer"),)
    # A Fraction keeps its sign on the numerator: the same test as `value < 0`, without
    # Fraction's generic comparison (this runs for every value of every used key).
    if value.denominator != 1 or value.numerator < 0:
        return value, (
            ResourceProblem(
                policy, field, raw, "is not a whole number ≥ 0", f"dataType: {policy.data_type}"
            ),
        )
    # A whole value: its numerator is int(value).
    problem = bound_problem(value.numerator, policy.min, policy.max, policy.whole_unit)
    if not problem:
        return value, _NO_PROBLEMS
    if "minimum" in problem:
        rule = f"min: {policy.min}"
    elif "maximum" in problem:
        rule = f"max: {policy.max}"
    else:
        rule = f"wholeUnit: {policy.whole_unit}"
    return value, (ResourceProblem(policy, field, raw, problem, rule),)


# kubernetes pkg/apis/core/validation/validation.go, ValidateResourceRequirements: a request
# for a resource that is not overcommitable (every extended resource) without a limit is
# field.Required(limPath, "Limit must be set for non overcommitable resources").
_NO_LIMIT = (
    "is not set but requests.{key} is: the API server rejects every pod made from this "
    'template ("Limit must be set for non overcommitable resources"); set limits instead'
)


def _policy_problems(
    policy: ResourceLimitation,
    lists: ResourceLists,
    *,
    is_pod: bool,
    derived: frozenset[tuple[str, str]],
    presence: bool,
) -> list[ResourceProblem]:
    """The rules one policy's key breaks; `presence=False` skips required/disabled rules."""
    problems: list[ResourceProblem] = []
    key = policy.key
    lim = lists.limits.get(key, MISSING)
    req = lists.requests.get(key, MISSING)
    if presence and policy.limits is _LIMITS_REQUIRED and lim is MISSING:
        problems.append(
            ResourceProblem(
                policy, "limits", MISSING, "is required but not set", "limits: required"
            )
        )
    elif not is_pod and lim is MISSING and req is not MISSING:
        problems.append(
            ResourceProblem(
                policy, "limits", MISSING, _NO_LIMIT.format(key=key), "requests need limits"
            )
        )
    if presence and policy.limits is _LIMITS_DISABLED and lim is not MISSING:
        problems.append(
            ResourceProblem(policy, "limits", lim, "is not allowed", "limits: disabled")
        )
    if presence and policy.requests is _REQUESTS_REQUIRED and req is MISSING and lim is MISSING:
        problems.append(
            ResourceProblem(
                policy,
                "requests",
                MISSING,
                "is required but not set (a limit also satisfies it)",
                "requests: required",
            )
        )
    # Parsed values (None: not set); `same` compares two that parsed as Fraction's == does.
    lim_value: Parsed | None = None
    req_value: Parsed | None = None
    if lim is not MISSING:
        # A limit the webhook defaulted comes from a linted policy: nothing to report on it.
        lim_value, found = _value_problems(policy, "limits", lim)
        if found and ("limits", key) not in derived:
            problems += found
    if req is not MISSING:
        req_value, found = _value_problems(policy, "requests", req)
        # Reported once, on the field the user wrote: a request the webhook copied from the
        # limit, or one equal to the limit (on a Pod the API server copies it there), shares
        # the limit's problems, which are already reported on limits.
        if found:
            mirrors_limit = lim_value is not None and (req == lim or req_value.same(lim_value))
            if ("requests", key) not in derived and not mirrors_limit:
                problems += found
    # The API server defaults a Pod container's requests from its limits before
    # admission (SetDefaults_Pod in kubernetes pkg/apis/core/v1/defaults.go: for each
    # container with limits, every key missing from requests is set to the limit, "only on a
    # v1.Pod and not a v1.PodTemplate"), and defaults again after each mutating webhook's
    # patch (apiserver admission/plugin/webhook/mutating/dispatcher.go calls
    # GetObjectDefaulter().Default on the patched object). So on a Pod a request equal to
    # the limit is indistinguishable from "not set", including for a limit this webhook
    # defaulted. A template is judged as its pods will be (SPEC §6): every pod made from a
    # template that writes requests = limits has requests = limits, and is admitted, so the
    # template is too. (`is_pod` still matters above: a template's request without a limit.)
    same = lim_value is not None and req_value is not None and lim_value.same(req_value)
    defaulted_by_apiserver = same
    if (
        presence
        and policy.requests is _REQUESTS_DISABLED
        and req is not MISSING
        and not defaulted_by_apiserver
    ):
        problems.append(
            ResourceProblem(policy, "requests", req, "is not allowed", "requests: disabled")
        )
    if (
        lim_value is not None
        and req_value is not None
        and lim_value.error == 0
        and req_value.error == 0
        and not same
    ):
        problems.append(
            ResourceProblem(
                policy,
                "requests",
                req,
                f"differs from limits ({format_quantity(lim)}): extended resources "
                "cannot be overcommitted, set requests equal to limits or omit them",
                "requests = limits",
            )
        )
    return problems


def check(
    lists: ResourceLists,
    used: Iterable[ResourceLimitation],
    *,
    is_pod: bool,
    derived: frozenset[tuple[str, str]] = NO_DERIVED,
) -> list[ResourceProblem]:
    """Every rule the container breaks (SPEC §3 checks), in policy order.

    `derived` holds the (field, key) pairs the webhook itself set (defaults, requests from
    limits): a problem is reported on the field the user wrote, never again on those.
    """
    problems: list[ResourceProblem] = []
    for policy in used:
        problems += _policy_problems(policy, lists, is_pod=is_pod, derived=derived, presence=True)
    return problems


def value_checks(
    lists: ResourceLists, policies: Iterable[ResourceLimitation], *, is_pod: bool
) -> list[ResourceProblem]:
    """The checks on a key set to zero outside any used group (SPEC §3: "only its own value
    checks apply"): its value, requests = limits and the missing limit, never the
    required/disabled rules of a group the container does not use."""
    problems: list[ResourceProblem] = []
    for policy in policies:
        problems += _policy_problems(
            policy, lists, is_pod=is_pod, derived=NO_DERIVED, presence=False
        )
    return problems
