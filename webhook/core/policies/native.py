"""CRL rules as native Kubernetes policies (SPEC §9 `export-policies`): pure generation.

One ValidatingAdmissionPolicy reads every enabled CRL ConfigMap of `kube-public` as a
**param** (`paramKind: v1 ConfigMap`, binding `paramRef.selector` on the CRL labels), so an
edit of a CRL changes enforcement at once, with no re-export. Kubernetes facts this relies on
(read in the 1.36.2 source):

- A `paramRef.selector` matching several params evaluates the policy once per param, each
  with its own runtime budget, and every denial counts (staging/src/k8s.io/apiserver/pkg/
  admission/plugin/policy/validating/dispatcher.go: `for _, param := range params {
  ... hook.Evaluator.Validate(..., p, ..., celconfig.RuntimeCELCostBudget, ...)}`). No
  params and `parameterNotFoundAction: Allow`: nothing is evaluated (generic/
  policy_dispatcher.go, CollectParams).
- Only the first denial is shown: "ValidatingAdmissionPolicy '<p>' with binding '<b>' denied
  request: <message>" (validating/dispatcher.go, `deniedDecisions[0]`). So one validation per
  param carries every problem of that CRL's key, joined, in its messageExpression.
- The ValidatingAdmissionPolicy admission plugin runs before ValidatingAdmissionWebhook
  (pkg/kubeapiserver/options/plugins.go order), and the validating chain stops at the first
  error (apiserver pkg/admission/chain.go): when both the policy and the webhook deny, users
  see the policy's denial only, never two.
- CEL environment (apiserver pkg/cel/environment/base.go): the Quantity library and optional
  types since 1.28, ext strings v2 (`join`, `substring`) since 1.29; homogeneous aggregate
  literals are enforced, so lists built here hold one type.
- Cost (apiserver pkg/apis/cel/config.go): PerCallLimit 1,000,000 per expression,
  RuntimeCELCostBudget 10,000,000 per binding evaluation (here: per param).

What one policy evaluation cannot see is decided at export: which keys make up a group (a
group is "used" when any of its keys is above zero, SPEC §3), read from the CRLs given to the
export. Adding, removing or disabling a key of a multi-key group needs a re-export.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.core.policies.crl import (
    CRL_NAMESPACE,
    LABEL_ENABLED,
    LABEL_GROUP,
    LABEL_TYPE,
    TYPE_VALUE,
    ResourceLimitation,
)

POLICY_NAME = "gpu-webhook-crl"
BINDING_NAME = "gpu-webhook-crl"
API_VERSION = "admissionregistration.k8s.io/v1"
PER_CALL_LIMIT = 1_000_000  # apiserver pkg/apis/cel/config.go PerCallLimit
RUNTIME_BUDGET = 10_000_000  # apiserver pkg/apis/cel/config.go RuntimeCELCostBudget

# What CEL cannot express, printed by the command and listed in the README.
NOT_EXPRESSED: tuple[str, ...] = (
    "defaults (defaultValue, requests fromLimits) are not applied: a policy only validates; "
    "a missing key that has a default is accepted, as the webhook would default it",
    "CUDA node affinity and compute-capability placement (need image facts and node labels)",
    "node inventory checks (a policy cannot read Nodes)",
    "registry facts (image CUDA versions from registries)",
    "DRA resource claims (a policy cannot read ResourceClaimTemplates)",
    "environment fixes and GPU access control",
    "operator workloads (Kubeflow, Ray, LWS, JobSet, Volcano, KServe, Knative): only Pods "
    "and Deployment, StatefulSet, DaemonSet, ReplicaSet, Job and CronJob templates",
    "group membership is fixed at export: re-export after adding, removing or disabling a "
    "key of a group with several keys",
    "two enabled CRLs with the same key: the webhook uses one, the policy enforces both",
)

_LIMITS = ("disabled", "required", "optional")
_REQUESTS = ("disabled", "required", "fromLimits")


def _q(text: str) -> str:
    """A CEL string literal (JSON escaping is valid CEL for the characters keys may hold)."""
    return json.dumps(text, ensure_ascii=True)


@dataclass(frozen=True)
class Export:
    """The generated objects and what the export could not express."""

    objects: list[dict[str, Any]]
    groups: dict[str, list[str]]
    not_expressed: tuple[str, ...] = NOT_EXPRESSED
    notes: list[str] = field(default_factory=list)


def group_keys(policies: Iterable[ResourceLimitation]) -> dict[str, list[str]]:
    """group -> its keys, for groups of two or more keys (a one-key group needs no table)."""
    groups: dict[str, set[str]] = {}
    for policy in policies:
        groups.setdefault(policy.group, set()).add(policy.key)
    return {g: sorted(keys) for g, keys in sorted(groups.items()) if len(keys) > 1}


# --- CEL building blocks -------------------------------------------------------------------
# `P` is the param's data, `K` the param's key; `c` a container; values are strings (every
# Quantity is a string in the object the API server gives CEL).
P = "params.data"
K = "variables.key"


def _opt(name: str) -> str:
    return f"{P}.?{name}.orValue('')"


def _whole_ok(name: str) -> str:
    """A CRL number field absent, or a whole number ≥ 0 (crl.py `_whole`)."""
    v = f"{P}[{_q(name)}]"
    return (
        f"(!({_q(name)} in {P}) || (isQuantity({v}) && quantity({v}).isInteger() && "
        f"sign(quantity({v})) >= 0))"
    )


def _num(name: str) -> str:
    return f"quantity({P}[{_q(name)}])"


def _has(name: str) -> str:
    return f"({_q(name)} in {P})"


def _bound_ok(value: str) -> str:
    """`value` (a Quantity) passes min/max/wholeUnit (crl.py bound_problem == "")."""
    return (
        f"(!{_has('min')} || {value}.compareTo({_num('min')}) >= 0) && "
        f"(!{_has('max')} || {value}.compareTo({_num('max')}) <= 0) && "
        f"(!{_has('wholeUnit')} || !{value}.isGreaterThan({_num('wholeUnit')}) || "
        f"{value}.asInteger() % {_num('wholeUnit')}.asInteger() == 0)"
    )


def _valid() -> str:
    """The param is a CRL the webhook would load (crl.py parse_configmap), as far as it bears
    on enforcement: an invalid CRL is skipped by the webhook, so it must be by the policy."""
    return " && ".join(
        [
            "has(params.data)",
            f"{_opt('key')}.contains('/')",
            f"{_opt('dataType')} == 'integer'",
            f"{_opt('group')} != ''",
            f"{_opt('group')} == params.metadata.?labels[?{_q(LABEL_GROUP)}].orValue('')",
            f"{_opt('limits')} in {json.dumps(list(_LIMITS))}",
            f"{_opt('requests')} in {json.dumps(list(_REQUESTS))}",
            f"({_opt('limits')} != 'disabled' || {_opt('requests')} == 'disabled')",
            _whole_ok("defaultValue"),
            _whole_ok("min"),
            _whole_ok("max"),
            _whole_ok("wholeUnit"),
            f"(!{_has('wholeUnit')} || sign({_num('wholeUnit')}) > 0)",
            f"(!{_has('min')} || !{_has('max')} || {_num('min')}.compareTo({_num('max')}) <= 0)",
            f"(!{_has('defaultValue')} || ({_bound_ok(_num('defaultValue'))}))",
        ]
    )


def _value_problems(field_name: str, value: str, prefix: str) -> str:
    """The list (0 or 1 message) of value problems of one written value (resources.py
    `_value_problems`). `value` is a CEL string expression."""
    q = f"quantity(string({value}))"

    def msg(problem: str, rule: str) -> str:
        return (
            f"[{prefix} + '{field_name}.' + {K} + \"='\" + string({value}) + \"' \" + "
            f"{problem} + ' (' + {rule} + ' in ConfigMap ' + variables.cm + ').' + "
            "variables.desc]"
        )

    unit = _num("wholeUnit")
    below = _q("is below the minimum ") + " + variables.min"
    above = _q("is above the maximum ") + " + variables.max"
    return (
        f"(!{q}.isInteger() || sign({q}) < 0 ? "
        f"{msg(_q('is not a whole number ≥ 0'), _q('dataType: integer'))} : "
        f"{_has('min')} && {q}.compareTo({_num('min')}) < 0 ? "
        f"{msg(below, _q('min: ') + ' + variables.min')} : "
        f"{_has('max')} && {q}.compareTo({_num('max')}) > 0 ? "
        f"{msg(above, _q('max: ') + ' + variables.max')} : "
        f"{_has('wholeUnit')} && {q}.isGreaterThan({unit}) && "
        f"{q}.asInteger() % {unit}.asInteger() != 0 ? "
        + msg(
            "'is above ' + variables.unit + ' but not a multiple of ' + variables.unit + "
            "' (values up to ' + variables.unit + ' are fractional shares; above it only whole "
            "units ' + variables.unit + ', ' + string(2 * int(variables.unit)) + ', ' + "
            "string(3 * int(variables.unit)) + '… are allowed)'",
            "'wholeUnit: ' + variables.unit",
        )
        + " : [])"
    )


def _container_problems(c: str, label: str, ref: str) -> str:
    """Every problem of the param's key in container `c` (resources.py `_policy_problems`
    with the webhook's defaults applied first, as `evaluate._resources` does), as one string
    ("" when none). `label` is "container" or "init container"."""
    lim_map = f"{c}.?resources.?limits.orValue({{}})"
    req_map = f"{c}.?resources.?requests.orValue({{}})"
    lim_has = f"({K} in {lim_map})"
    req_has = f"({K} in {req_map})"
    lim = f"string({lim_map}[{K}])"
    req = f"string({req_map}[{K}])"
    # The group is used when any of its keys is above zero in limits or requests (SPEC §3;
    # resources.py zero_keys: a value that does not parse is not zero).
    used = (
        f"({lim_map}.exists(k, k in variables.groupKeys && (!isQuantity(string({lim_map}[k])) "
        f"|| sign(quantity(string({lim_map}[k]))) != 0)) || "
        f"{req_map}.exists(k, k in variables.groupKeys && (!isQuantity(string({req_map}[k])) "
        f"|| sign(quantity(string({req_map}[k]))) != 0)))"
    )
    # Defaults the webhook applies in a used group (resources.py `defaults`): a default limit
    # when both are missing; a request from the limit with requests: fromLimits.
    lim_default = (
        f"({used} && !{lim_has} && !{req_has} && {_has('defaultValue')} && "
        f"{P}.limits != 'disabled')"
    )
    lim_eff = f"({lim_has} || {lim_default})"
    req_eff = f"({req_has} || ({used} && {P}.requests == 'fromLimits' && {lim_eff}))"
    prefix = f"{ref} + ', {label} \"' + {c}.name + '\": '"

    def fixed(field_name: str, problem: str, rule: str, value: str | None = None) -> str:
        shown = f'"=\'" + {value} + "\' "' if value else "' '"
        return (
            f"[{prefix} + '{field_name}.' + {K} + {shown} + {problem} + ' (' + {rule} + "
            "' in ConfigMap ' + variables.cm + ').' + variables.desc]"
        )

    qlim, qreq = f"quantity({lim})", f"quantity({req})"
    no_limit = (
        "'is not set but requests.' + "
        + K
        + " + ' is: the API server rejects every pod made from this template (\"Limit must be "
        "set for non overcommitable resources\"); set limits instead'"
    )
    mirrors = f"({lim_has} && ({req} == {lim} || {qreq}.compareTo({qlim}) == 0))"
    parts = [
        # limits: required / requests need limits (one or the other, as the webhook's elif)
        f"({used} && {P}.limits == 'required' && !{lim_eff} ? "
        + fixed("limits", _q("is required but not set"), _q("limits: required"))
        + f" : !variables.isPod && !{lim_has} && {req_has} ? "
        + fixed("limits", no_limit, _q("requests need limits"))
        + " : [])",
        f"({used} && {P}.limits == 'disabled' && {lim_has} ? "
        + fixed("limits", _q("is not allowed"), _q("limits: disabled"), lim)
        + " : [])",
        f"({used} && {P}.requests == 'required' && !{req_eff} && !{lim_eff} ? "
        + fixed(
            "requests",
            _q("is required but not set (a limit also satisfies it)"),
            _q("requests: required"),
        )
        + " : [])",
        f"({lim_has} ? {_value_problems('limits', lim_map + '[' + K + ']', prefix)} : [])",
        f"({req_has} && !{mirrors} ? "
        f"{_value_problems('requests', req_map + '[' + K + ']', prefix)} : [])",
        # The API server copies a Pod's limits into missing requests before admission
        # (kubernetes pkg/apis/core/v1/defaults.go SetDefaults_Pod), so on a Pod a request
        # equal to the limit is "not set" (resources.py).
        f"({used} && {P}.requests == 'disabled' && {req_has} && "
        f"!(variables.isPod && {lim_has} && {qlim}.compareTo({qreq}) == 0) ? "
        + fixed("requests", _q("is not allowed"), _q("requests: disabled"), req)
        + " : [])",
        f"({lim_has} && {req_has} && {qlim}.compareTo({qreq}) != 0 ? "
        + fixed(
            "requests",
            "'differs from limits (' + "
            + lim
            + " + '): extended resources cannot be overcommitted, set requests equal to "
            "limits or omit them'",
            _q("requests = limits"),
            req,
        )
        + " : [])",
    ]
    relevant = f"({lim_has} || {req_has} || {used})"
    return f"({relevant} ? ({' + '.join(parts)}).join('; ') : '')"


def _spec_expr() -> str:
    return (
        "request.kind.kind == 'Pod' ? object.spec : "
        "request.kind.kind == 'CronJob' ? object.spec.jobTemplate.spec.template.spec : "
        "object.spec.template.spec"
    )


def _resources_signature(obj: str) -> str:
    """The extended resources of every container of `obj`, as a list of strings (order-free
    comparison below: a map's iteration order is not stable)."""
    spec = (
        f"(request.kind.kind == 'CronJob' ? {obj}.spec.jobTemplate.spec.template.spec : "
        f"{obj}.spec.template.spec)"
    )
    lists = []
    for lst in ("containers", "initContainers"):
        for fld in ("limits", "requests"):
            m = f"c.?resources.?{fld}.orValue({{}})"
            lists.append(
                f"{spec}.?{lst}.orValue([]).map(c, {m}.filter(k, k.contains('/'))"
                f".map(k, c.name + '|{lst}|{fld}|' + k + '=' + string({m}[k]))).map(l, l.join(','))"
            )
    return " + ".join(lists)


def policy(groups: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy (the rules), reading one CRL ConfigMap per evaluation."""
    table = "{" + ", ".join(f"{_q(g)}: {json.dumps(list(keys))}" for g, keys in groups.items())
    table += "}"
    ref = "variables.ref"
    problems = {
        lst: (
            f"variables.spec.?{lst}.orValue([]).map(c, "
            f"{_container_problems('c', label, ref)}).filter(s, s != '')"
        )
        for lst, label in (("containers", "container"), ("initContainers", "init container"))
    }
    variables = [
        ("valid", _valid()),
        ("key", f"{P}.key"),
        ("isPod", "request.kind.kind == 'Pod'"),
        ("spec", _spec_expr()),
        (
            "groupKeys",
            f"(size({table}) > 0 && {P}.group in {table} ? {table}[{P}.group] : []) + [{P}.key]",
        ),
        ("cm", f"'{CRL_NAMESPACE}/' + params.metadata.name"),
        (
            "desc",
            f"{_opt('descriptionEn')}.trim() == '' ? '' : "
            f"' ' + {_opt('descriptionEn')}.trim() + "
            f"({_opt('descriptionEn')}.trim().endsWith('.') ? '' : '.')",
        ),
        (
            "ref",
            "request.kind.kind + ' ' + (has(object.metadata.namespace) ? "
            "object.metadata.namespace + '/' : request.namespace + '/') + "
            "(object.metadata.?name.orValue('') != '' ? object.metadata.name : "
            "object.metadata.?generateName.orValue('') + '*')",
        ),
        ("min", f"string({_num('min')}.asInteger())"),
        ("max", f"string({_num('max')}.asInteger())"),
        ("unit", f"string({_num('wholeUnit')}.asInteger())"),
        ("containerProblems", problems["containers"]),
        ("initContainerProblems", problems["initContainers"]),
    ]
    joined = "(variables.containerProblems + variables.initContainerProblems).join('; ')"
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {
            "name": POLICY_NAME,
            "labels": {"app.kubernetes.io/name": "gpu-admission-webhook"},
            "annotations": {
                "gpu-webhook.dev/groups": json.dumps(dict(groups), sort_keys=True),
            },
        },
        "spec": {
            # A CEL error (the cost limit, on an absurd object) denies: the policy is the
            # backstop of quotas, and a pod must not pass because it was made too big to check.
            "failurePolicy": "Fail",
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "operations": ["CREATE"],
                    },
                    {
                        "apiGroups": ["apps"],
                        "apiVersions": ["v1"],
                        "resources": ["deployments", "statefulsets", "daemonsets", "replicasets"],
                        "operations": ["CREATE", "UPDATE"],
                    },
                    {
                        "apiGroups": ["batch"],
                        "apiVersions": ["v1"],
                        "resources": ["jobs", "cronjobs"],
                        "operations": ["CREATE", "UPDATE"],
                    },
                ]
            },
            # SPEC §6: requests that pass untouched, as webhook/core/evaluation/updates.py decides.
            "matchConditions": [
                {
                    "name": "not-being-deleted",
                    "expression": "!has(object.metadata.deletionTimestamp)",
                },
                {
                    "name": "not-made-by-a-checked-owner",
                    "expression": (
                        "!(request.kind.kind in ['ReplicaSet', 'Job'] && "
                        "object.metadata.?ownerReferences.orValue([]).filter(r, "
                        "r.?controller.orValue(false)).exists(r, "
                        "(request.kind.kind == 'ReplicaSet' && r.kind == 'Deployment' && "
                        "r.apiVersion.startsWith('apps/')) || "
                        "(request.kind.kind == 'Job' && r.kind == 'CronJob' && "
                        "r.apiVersion.startsWith('batch/'))))"
                    ),
                },
                {
                    "name": "template-resources-changed",
                    "expression": (
                        "request.operation != 'UPDATE' || oldObject == null || "
                        f"!(({_resources_signature('object')}).all(x, x in "
                        f"({_resources_signature('oldObject')})) && "
                        f"({_resources_signature('oldObject')}).all(x, x in "
                        f"({_resources_signature('object')})))"
                    ),
                },
            ],
            "variables": [{"name": n, "expression": e} for n, e in variables],
            "validations": [
                {
                    "expression": (
                        "!variables.valid || (size(variables.containerProblems) == 0 && "
                        "size(variables.initContainerProblems) == 0)"
                    ),
                    # Kept under the API server's 5 KiB cap on an evaluated message
                    # (apiserver pkg/apis/cel/config.go MaxEvaluatedMessageExpressionSizeBytes).
                    "messageExpression": (
                        f"size({joined}) > 4000 ? {joined}.substring(0, 4000) + ' …' : {joined}"
                    ),
                    "message": "a CRL resource rule is broken (see the webhook's review)",
                    "reason": "Forbidden",
                }
            ],
        },
    }


def binding(
    exempt_namespaces: Sequence[str] = ("kube-system",),
    validation_actions: Sequence[str] = ("Deny",),
) -> dict[str, Any]:
    """The binding: every enabled CRL ConfigMap of kube-public is a param."""
    spec: dict[str, Any] = {
        "policyName": POLICY_NAME,
        "validationActions": list(validation_actions),
        "paramRef": {
            "namespace": CRL_NAMESPACE,
            "selector": {"matchLabels": {LABEL_TYPE: TYPE_VALUE, LABEL_ENABLED: "true"}},
            # No CRL: nothing to enforce, as for the webhook.
            "parameterNotFoundAction": "Allow",
        },
    }
    if exempt_namespaces:
        spec["matchResources"] = {
            "namespaceSelector": {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "NotIn",
                        "values": sorted(set(exempt_namespaces)),
                    }
                ]
            }
        }
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {
            "name": BINDING_NAME,
            "labels": {"app.kubernetes.io/name": "gpu-admission-webhook"},
        },
        "spec": spec,
    }


def export(
    policies: Iterable[ResourceLimitation],
    *,
    exempt_namespaces: Sequence[str] = ("kube-system",),
) -> Export:
    """The policy and its binding for a set of CRL policies (their group table)."""
    groups = group_keys(policies)
    return Export([policy(groups), binding(exempt_namespaces)], groups)


# Cost. The API server gives each expression PerCallLimit and each param's evaluation
# RuntimeCELCostBudget. The dominant expression is a container list's problems: per container
# it walks the limits and requests (each key tested against the group table, a linear `in`)
# and then a fixed set of rules. Model (an upper bound fitted on the real API server 1.36.2,
# tests/native): 300 per container plus 2·(group size + 10) per extended key. Measured: the
# shipped CRLs handle a Pod of 2,201 containers × 10 extended keys within PerCallLimit (the
# model says 1,785: it over-estimates).
REFERENCE_CONTAINERS = 64  # a Pod bigger than any real one (its containers and init containers)
REFERENCE_KEYS = 16  # extended resource keys in each of those containers


def estimated_cost(groups: Mapping[str, Sequence[str]]) -> int:
    """The model's cost of one container list's problems for the reference Pod."""
    largest = max((len(keys) for keys in groups.values()), default=1)
    per_container = 300 + 2 * REFERENCE_KEYS * (largest + 1 + 10)
    return REFERENCE_CONTAINERS * per_container


def cost_problem(groups: Mapping[str, Sequence[str]]) -> str:
    """Why the export must be refused for its cost, or ""."""
    cost = estimated_cost(groups)
    if cost <= PER_CALL_LIMIT:
        return ""
    largest = max(groups.items(), key=lambda item: len(item[1]))
    return (
        f"group {largest[0]!r} has {len(largest[1])} keys: a Pod of {REFERENCE_CONTAINERS} "
        f"containers × {REFERENCE_KEYS} keys would cost about {cost:,} CEL units per "
        f"expression, above the API server's limit of {PER_CALL_LIMIT:,}"
    )
