"""CRL resource rules (SPEC §3): defaults for limits/requests and the checks on their values."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from webhook.core.crl import LimitsPolicy, RequestsPolicy, ResourceLimitation, bound_problem
from webhook.core.errors import ObjectShapeError, QuantityError
from webhook.core.policyset import PolicySet
from webhook.core.quantity import format_quantity, parse_quantity

_EMPTY: Mapping[str, Any] = {}


@dataclass(slots=True)  # not frozen: built per review, and frozen __init__ is ~5x slower
class ResourceLists:
    """A container's `resources.limits` and `resources.requests` (empty when absent)."""

    limits: Mapping[str, Any]
    requests: Mapping[str, Any]

    @classmethod
    def of(cls, container: Mapping[str, Any], where: str) -> ResourceLists:
        resources = container.get("resources")
        if resources is None:
            return cls(_EMPTY, _EMPTY)
        if not isinstance(resources, Mapping):
            raise ObjectShapeError(f"{where}.resources must be an object")
        limits = resources.get("limits") or _EMPTY
        requests = resources.get("requests") or _EMPTY
        if not isinstance(limits, Mapping):
            raise ObjectShapeError(f"{where}.resources.limits must be an object")
        if not isinstance(requests, Mapping):
            raise ObjectShapeError(f"{where}.resources.requests must be an object")
        return cls(limits, requests)

    def keys(self) -> set[str]:
        return set(self.limits) | set(self.requests)


@dataclass(frozen=True, slots=True)
class ResourceDefault:
    """Set resources.<field>[key] = value (field is "limits" or "requests")."""

    field: str
    key: str
    value: Any
    kind: str  # "resource-default" or "requests-from-limits"


@dataclass(frozen=True, slots=True)
class ResourceProblem:
    """One broken rule; the caller adds object and container to make the message."""

    policy: ResourceLimitation
    field: str  # "limits" or "requests"
    value: Any  # as written, or None when the problem is a missing value
    problem: str  # "is required but not set", "is not a whole number", ...
    rule: str  # "limits: required", "dataType: integer", "max: 8", ...


def used_policies(keys: Iterable[str], policies: PolicySet) -> list[ResourceLimitation]:
    """Every policy of every group the container uses; O(keys in the container).

    Groups go in name order: `keys` is a set, whose order changes with the hash seed and once
    defaults add keys, and messages must come out in the same order on every evaluation.
    """
    groups: set[str] = set()
    for key in keys:
        limitation = policies.by_key.get(key)
        if limitation is not None:
            groups.add(limitation.group)
    return [lim for group in sorted(groups) for lim in policies.by_group[group]]


def defaults(lists: ResourceLists, used: Iterable[ResourceLimitation]) -> list[ResourceDefault]:
    """The defaults to apply, in order (a defaulted limit feeds `requests: fromLimits`)."""
    changes: list[ResourceDefault] = []
    for policy in used:
        lim = lists.limits.get(policy.key)
        req = lists.requests.get(policy.key)
        if (
            lim is None
            and req is None
            and policy.default is not None
            and policy.limits is not LimitsPolicy.DISABLED
        ):
            lim = policy.default_text or str(policy.default)
            changes.append(ResourceDefault("limits", policy.key, lim, "resource-default"))
        if policy.requests is RequestsPolicy.FROM_LIMITS and lim is not None and req is None:
            changes.append(ResourceDefault("requests", policy.key, lim, "requests-from-limits"))
    return changes


def _value_problems(
    policy: ResourceLimitation, field: str, raw: Any
) -> tuple[Fraction | None, list[ResourceProblem]]:
    try:
        value = parse_quantity(raw)
    except QuantityError:
        return None, [
            ResourceProblem(policy, field, raw, "is not a valid quantity", "dataType: integer")
        ]
    if value.denominator != 1 or value < 0:
        return value, [
            ResourceProblem(
                policy, field, raw, "is not a whole number ≥ 0", f"dataType: {policy.data_type}"
            )
        ]
    problem = bound_problem(int(value), policy.min, policy.max, policy.whole_unit)
    if not problem:
        return value, []
    if "minimum" in problem:
        rule = f"min: {policy.min}"
    elif "maximum" in problem:
        rule = f"max: {policy.max}"
    else:
        rule = f"wholeUnit: {policy.whole_unit}"
    return value, [ResourceProblem(policy, field, raw, problem, rule)]


def check(
    lists: ResourceLists, used: Iterable[ResourceLimitation], *, is_pod: bool
) -> list[ResourceProblem]:
    """Every rule the container breaks (SPEC §3 checks), in policy order."""
    problems: list[ResourceProblem] = []
    for policy in used:
        key = policy.key
        lim = lists.limits.get(key)
        req = lists.requests.get(key)
        if policy.limits is LimitsPolicy.REQUIRED and lim is None:
            problems.append(
                ResourceProblem(
                    policy, "limits", None, "is required but not set", "limits: required"
                )
            )
        if policy.limits is LimitsPolicy.DISABLED and lim is not None:
            problems.append(
                ResourceProblem(policy, "limits", lim, "is not allowed", "limits: disabled")
            )
        if policy.requests is RequestsPolicy.REQUIRED and req is None and lim is None:
            problems.append(
                ResourceProblem(
                    policy,
                    "requests",
                    None,
                    "is required but not set (a limit also satisfies it)",
                    "requests: required",
                )
            )
        lim_value = req_value = None
        if lim is not None:
            lim_value, found = _value_problems(policy, "limits", lim)
            problems += found
        if req is not None:
            req_value, found = _value_problems(policy, "requests", req)
            problems += found
        # The API server defaults a Pod container's requests from its limits before
        # admission (SetDefaults_Pod in kubernetes pkg/apis/core/v1/defaults.go: "only on a
        # v1.Pod and not a v1.PodTemplate"), and defaults again after each mutating webhook's
        # patch (apiserver admission/plugin/webhook/mutating/dispatcher.go calls
        # GetObjectDefaulter().Default on the patched object). So on a Pod a request equal to
        # the limit is indistinguishable from "not set", including for a limit this webhook
        # defaulted. Workload templates are not defaulted that way: there a request is explicit.
        defaulted_by_apiserver = is_pod and lim_value is not None and lim_value == req_value
        if (
            policy.requests is RequestsPolicy.DISABLED
            and req is not None
            and not defaulted_by_apiserver
        ):
            problems.append(
                ResourceProblem(policy, "requests", req, "is not allowed", "requests: disabled")
            )
        if lim_value is not None and req_value is not None and lim_value != req_value:
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
