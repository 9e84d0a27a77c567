"""The CEL expressions of the native CRL policy (SPEC §9 `export-policies`): the checks of
crl.py and resources.py, written over one CRL ConfigMap param and the admitted object.

CEL environment (apiserver pkg/cel/environment/base.go): the Quantity library and optional
types since 1.28, ext strings v2 (`join`, `substring`) since 1.29; homogeneous aggregate
literals are enforced, so lists built here hold one type.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from webhook.core.policies.crl import CRL_NAMESPACE, LABEL_GROUP

_LIMITS = ("disabled", "required", "optional")
_REQUESTS = ("disabled", "required", "fromLimits")


def _q(text: str) -> str:
    """A CEL string literal (JSON escaping is valid CEL for the characters keys may hold)."""
    return json.dumps(text, ensure_ascii=True)


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
        # equal to the limit is "not set"; a template is judged as its pods (SPEC §3): one
        # that writes requests = limits makes pods that are admitted, so it is admitted too
        # (resources.py `defaulted_by_apiserver`, the same test on Pods and templates).
        f"({used} && {P}.requests == 'disabled' && {req_has} && "
        f"!({lim_has} && {qlim}.compareTo({qreq}) == 0) ? "
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


@dataclass(frozen=True)
class UpdateReads:
    """What the webhook compares on an UPDATE to find a template unchanged (webhook.core.
    evaluation.updates `_evaluated_part`; `update_reads(config)` there builds it from a config)."""

    env_names: tuple[str, ...]
    env_prefixes: tuple[str, ...]
    exact_resources: tuple[str, ...]
    annotations: tuple[str, ...]
    access: bool
    cdi_prefixes: tuple[str, ...]


def template(obj: str) -> str:
    """The pod template of a workload `obj` (an UPDATE's object or oldObject)."""
    return (
        f"request.kind.kind == 'CronJob' ? {obj}.spec.jobTemplate.spec.template : "
        f"{obj}.spec.template"
    )


def _same_resources(c: str, o: str, fld: str, exact: str) -> str:
    """Container `c`'s extended resources in `fld` (limits or requests: every domain-qualified
    key, and the exact GPU names of the config) equal `o`'s: linear in the keys, whatever
    order the maps iterate in (a Go map's, so random)."""
    m, n = f"{c}.?resources.?{fld}.orValue({{}})", f"{o}.?resources.?{fld}.orValue({{}})"
    read = f"(k.contains('/') || k in {exact})"
    # Equal maps first (cpu and memory included): what nearly every UPDATE has, and cheaper.
    return (
        f"({m} == {n} || {m}.all(k, !{read} || (k in {n} && string({n}[k]) == string({m}[k]))) "
        f"&& {n}.all(k, !{read} || k in {m}))"
    )


def unchanged(reads: UpdateReads) -> str:
    """True on an UPDATE whose pod template is unchanged in everything the webhook reads
    (webhook.core.evaluation.updates `templates_equal`): such an update passes untouched.

    Containers are compared position by position, as the webhook does (a reorder is a change),
    with a two-variable comprehension (`all(i, c, ...)`, Kubernetes ≥ 1.32: apiserver
    pkg/cel/environment/base.go, ext.TwoVarComprehensions introduced in 1.32), so the cost is
    linear in the containers (a name lookup per container would be quadratic). Not compared,
    unlike the webhook: the arguments a compute-capability rule of the config reads, and the
    pod's architecture where an image's CUDA depends on it; an UPDATE changing only those
    passes here and is judged by the webhook."""
    new, old = "variables.template", "variables.oldTemplate"
    exact = json.dumps(list(reads.exact_resources))
    names = json.dumps(list(reads.env_names))
    prefixes = json.dumps(list(reads.env_prefixes))
    env = f"e.name in {names} || {prefixes}.exists(p, e.name.startsWith(p))"

    def same(c: str, o: str) -> str:
        parts = [
            f"{c}.name == {o}.name",
            f"{c}.?image.orValue('') == {o}.?image.orValue('')",
            _same_resources(c, o, "limits", exact),
            _same_resources(c, o, "requests", exact),
            f"{c}.?resources.?claims.orValue([]) == {o}.?resources.?claims.orValue([])",
            f"({c}.?env.orValue([]) == {o}.?env.orValue([]) || "
            f"{c}.?env.orValue([]).filter(e, {env}) == {o}.?env.orValue([]).filter(e, {env}))",
            f"{c}.?envFrom.orValue([]) == {o}.?envFrom.orValue([])",
        ]
        if reads.access:
            parts += [
                f"{c}.?securityContext.?privileged.orValue(false) == "
                f"{o}.?securityContext.?privileged.orValue(false)",
                f"{c}.?volumeMounts.orValue([]) == {o}.?volumeMounts.orValue([])",
            ]
        return " && ".join(parts)

    lists = [
        f"size({new}.spec.?{lst}.orValue([])) == size({old}.spec.?{lst}.orValue([])) && "
        f"{new}.spec.?{lst}.orValue([]).all(i, c, "
        f"{same('c', f'{old}.spec.{lst}[i]')})"
        for lst in ("containers", "initContainers")
    ]
    na = f"{new}.?metadata.?annotations.orValue({{}})"
    oa = f"{old}.?metadata.?annotations.orValue({{}})"

    def same_annotations(selected: str) -> str:
        return (
            f"{na}.filter(a, {selected}).all(a, a in {oa} && {oa}[a] == {na}[a]) && "
            f"{oa}.filter(a, {selected}).all(a, a in {na})"
        )

    pod = [
        f"{new}.spec.?resourceClaims.orValue([]) == {old}.spec.?resourceClaims.orValue([])",
        same_annotations(f"a in {json.dumps(list(reads.annotations))}"),
    ]
    if reads.access:
        cdi = json.dumps(list(reads.cdi_prefixes))
        pod += [
            f"{new}.spec.?volumes.orValue([]).filter(v, has(v.hostPath)) == "
            f"{old}.spec.?volumes.orValue([]).filter(v, has(v.hostPath))",
            f"{new}.spec.?runtimeClassName.orValue('') == {old}.spec.?runtimeClassName.orValue('')",
            same_annotations(f"{cdi}.exists(p, a.startsWith(p))"),
        ]
    body = " && ".join(f"({part})" for part in [*lists, *pod])
    return f"request.operation == 'UPDATE' && oldObject != null && {body}"


def policy_variables(groups: Mapping[str, Sequence[str]]) -> list[tuple[str, str]]:
    """The policy's variables (name, expression), in order: the param's validity, the
    admitted object's pod spec and reference, and every problem of its containers."""
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
    return [
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
