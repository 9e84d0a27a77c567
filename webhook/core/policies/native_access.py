"""GPU access control's rules as native Kubernetes policies (SPEC §12 "Enforcement that survives
the webhook"; `gpu-webhook export-policies --access`): pure generation.

Two policies, each with its binding, built from the same data the webhook judges with (the
families catalog, core/families; the routes' constants, core/access; the webhook config):

- a ValidatingAdmissionPolicy denying, on Pod CREATE and on the `pods/ephemeralcontainers`
  subresource (new ephemeral containers only), what `enforce` denies and CEL can see: device
  variables whose value names devices as the vendor's runtime reads it (core/families/
  visible.py, one CEL parser per `Family.selection`; the vendors' documented patterns of
  core/access/patterns.py pass), a device container's sharing-limiter controls, `envFrom` where
  no void closes it, privileged containers and `SYS_ADMIN`/`ALL`, hostPath volumes of device
  nodes and device-list mounts, device annotations, and vendor runtime classes;
- a MutatingAdmissionPolicy writing, on Pod CREATE, the voids and pins `enforce` writes
  (voidImageDevices `all`): each family's void in every container that requests none of its
  devices and sets no value of it, the void of a family no plugin sets in its own device
  containers (AMD), and a share's safe limiter value. JSONPatch `add` at `env/-`, never an
  apply configuration: a container with two env entries of one name (valid in a Pod) would
  make a server-side-apply merge fail.

Kubernetes facts this relies on (1.36.2, checked on the real API server by tests/native):
admissionregistration.k8s.io/v1 serves MutatingAdmissionPolicy (GA in 1.36); a policy's
mutations are applied in order, each to the object the previous ones produced; CEL's
`trim()` is Go's unicode.IsSpace trimming (cel-go ext/strings.go), the same as the toolkit's
strings.TrimSpace; two-variable comprehensions (`exists(i, c, ...)`, `transformList`) since
1.32; the validating policies run after every mutation, so they judge the voided pod.

What CEL cannot express is `NOT_EXPRESSED`; the webhook still judges it when it is up.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.core.access import patterns
from webhook.core.access.routes import _PRIVILEGED_CAPS as PRIVILEGED_CAPABILITIES
from webhook.core.access.routes import DEVICE_LIST_MOUNT_ROOT
from webhook.core.config.model import WebhookConfig
from webhook.core.families.catalog import DEVICE_PATHS, FAMILIES, Family, family_named
from webhook.core.workloads.devices import DEVICE_ANNOTATION_PREFIXES

DEFAULT_NAME = "gpu-webhook-access"
API_VERSION = "admissionregistration.k8s.io/v1"
_LABELS = {"app.kubernetes.io/name": "gpu-admission-webhook"}
_CUDA_ENV = ("CUDA_VERSION", "NVIDIA_REQUIRE_CUDA")

NOT_EXPRESSED: tuple[str, ...] = (
    "DRA claims: a policy cannot read ResourceClaims, so a container with resource claims "
    "gets no void from the policy and its envFrom is not judged by it",
    "voidImageDevices known (image facts): only `all` is exported as a mutation",
    "a Pod UPDATE that swaps an image into a container without its voids",
    "ephemeral containers get no void from the policy (they are still judged)",
    "a hostPath or mountPath with a `..` part is denied when mounted, without resolving it",
    "workload templates and operator objects (their pods are judged when created)",
)


def _q(text: str) -> str:
    """A CEL string literal."""
    return json.dumps(text, ensure_ascii=True)


def _list(items: Sequence[str]) -> str:
    return "[" + ", ".join(_q(i) for i in items) + "]"


def _unbind(text: str) -> str:
    """`text` with every `cel.bind(x, e, body)` written `[e].exists(x, body)`: the API server's
    CEL environment has no bindings library, and a one-item list binds the same way."""
    start = text.find("cel.bind(")
    while start >= 0:
        at = start + len("cel.bind(")
        comma = text.index(", ", at)
        name = text[at:comma]
        parts: list[str] = []
        depth, quote, i, mark = 0, "", comma + 2, comma + 2
        while True:
            ch = text[i]
            if quote:
                if ch == "\\":
                    i += 1
                elif ch == quote:
                    quote = ""
            elif ch in "'\"":
                quote = ch
            elif ch in "([{":
                depth += 1
            elif ch in ")]}":
                if depth == 0:
                    parts.append(text[mark:i])
                    break
                depth -= 1
            elif ch == "," and depth == 0 and not parts:
                parts.append(text[mark:i])
                mark = i + 2
            i += 1
        expr, body = parts
        text = f"{text[:start]}[{expr}].exists({name}, {body}){text[i + 1 :]}"
        start = text.find("cel.bind(")
    return text


def _any(terms: Sequence[str]) -> str:
    return "(" + " || ".join(terms) + ")" if terms else "false"


# --- the runtimes' parsers (core/families/visible.py PARSERS), over a string `v` ------------

_ATOI = "'^[+-]?[0-9]+$'"
# nvidia_selects: items split on ",", Go-trimmed, empty ones dropped; `void`/`none` win.
_NVIDIA = (
    "cel.bind(items, v.split(',').map(x, x.trim()).filter(x, x != ''), "
    "size(items) > 0 && !('void' in items) && !('none' in items))"
)
# amd_selects: `all`/`All`/`ALL`, else any untrimmed item that is a unique id, a range of
# non-negative integers or a non-negative index.
_AMD = (
    "(v in ['all', 'All', 'ALL'] || v.split(',').exists(x, "
    "x.startsWith('0x') || x.startsWith('0X') || (size(x) > 8 && x.matches('^[0-9a-fA-F]+$')) || "
    "(x.contains('-') ? cel.bind(lo, x.substring(0, x.indexOf('-')), "
    "cel.bind(hi, x.substring(x.indexOf('-') + 1), "
    f"lo.matches({_ATOI}) && hi.matches({_ATOI}) && int(lo) >= 0 && int(lo) <= int(hi))) : "
    f"(x.matches({_ATOI}) && int(x) >= 0))))"
)
CEL_PARSERS: dict[str, str] = {
    "nvidia": _NVIDIA,
    "amd": _AMD,
    "ascend": "!(v in ['', 'void'])",
    "any": "true",
}
# LIMITER_PARSERS: whether a value raises or switches the limit off (a control not listed:
# every value does).
CEL_LIMITER_PARSERS: dict[str, str] = {
    "GPU_CORE_UTILIZATION_POLICY": "v in ['disable', 'DISABLE']",
}


def _value_selects(family: Family) -> str:
    """CEL over an env entry `e`: its value names devices as `family`'s runtime reads it."""
    parser = CEL_PARSERS.get(family.selection, "true")
    return f"(has(e.valueFrom) || cel.bind(v, e.?value.orValue(''), {parser}))"


def _name_is(names: Sequence[str], prefixes: Sequence[str], of: str = "e.name") -> list[str]:
    terms = [f"{of} in {_list(names)}"] if names else []
    terms += [f"{of}.startsWith({_q(p)})" for p in prefixes]
    return terms


def _resource_of(family: Family, key: str) -> str:
    exact = [p for p in family.resources if not p.endswith("*")]
    prefixes = [p[:-1] for p in family.resources if p.endswith("*")]
    return _any(_name_is(exact, prefixes, key))


def _requests(c: str, match: str) -> str:
    """CEL: container `c` asks a nonzero amount of a resource `k` matching `match`."""
    return (
        "(['limits', 'requests'].exists(l, cel.bind(m, "
        f"{c}.?resources[?l].orValue({{}}), m.exists(k, {match} && "
        "quantity(string(m[k])).compareTo(quantity('0')) != 0))))"
    )


def owns(family: Family, c: str = "c") -> str:
    """CEL: container `c` requests a device of `family` (control.container_families)."""
    return _requests(c, _resource_of(family, "k"))


def _any_device(c: str = "c") -> str:
    return _any([owns(f, c) for f in FAMILIES])


def _claims(c: str = "c") -> str:
    return f"(size({c}.?resources.?claims.orValue([])) > 0)"


# --- the vendors' patterns (core/access/patterns.py counted) -------------------------------

_MINDCLUSTER_FIELD = r"^metadata\.annotations\['huawei\.com/Ascend[0-9A-Za-z]+'\]$"


def _mindcluster() -> str:
    """An ASCEND_VISIBLE_DEVICES entry `e` from the pod's own huawei.com/<type> annotation, in a
    container `c` requesting that type, scheduled by Volcano (patterns.mindcluster_counted)."""
    return (
        f"(e.name == {_q(patterns.ASCEND_VARIABLE)} && "
        "cel.bind(p, e.?valueFrom.?fieldRef.?fieldPath.orValue(''), "
        f"p.matches({_q(_MINDCLUSTER_FIELD)}) && "
        "cel.bind(r, p.substring(22, size(p) - 2), "
        "['limits', 'requests'].exists(l, cel.bind(m, c.?resources[?l].orValue({}), "
        "r in m && quantity(string(m[r])).compareTo(quantity('0')) > 0)))) && "
        f"object.spec.?schedulerName.orValue('') == {_q(patterns.VOLCANO)})"
    )


def _kai(list_name: str) -> str:
    """An NVIDIA_VISIBLE_DEVICES entry `e` in container `c` (index `i` of `list_name`) from key
    NVIDIA_VISIBLE_DEVICES of the pod's own KAI sharing ConfigMap, in the container KAI's
    scheduler accounts the fraction to (patterns.kai_counted, kai_fraction_container)."""
    if list_name not in ("containers", "initContainers"):
        return "false"
    ann = "object.metadata.?annotations.orValue({})"
    named = f"{ann}[?{_q(patterns.KAI_CONTAINER_ANNOTATION)}]"
    if list_name == "containers":
        # The named container: the first init container of that name, else this one.
        fraction = (
            f"({named}.hasValue() ? ({named}.value() == c.name && "
            "!object.spec.?initContainers.orValue([]).exists(o, o.name == c.name)) : i == 0)"
        )
        index = "string(i)"
    else:
        fraction = f"({named}.hasValue() && {named}.value() == c.name)"
        index = "'i' + string(i)"
    cm = f"{ann}[?{_q(patterns.KAI_CONFIGMAP_ANNOTATION)}].orValue('')"
    return (
        f"(e.name == {_q(patterns.NVIDIA_VARIABLE)} && "
        f"e.?valueFrom.?configMapKeyRef.?key.orValue('') == {_q(patterns.NVIDIA_VARIABLE)} && "
        f"object.spec.?schedulerName.orValue('') == {_q(patterns.KAI_SCHEDULER)} && "
        f"{_list(patterns.KAI_FRACTION_ANNOTATIONS)}.exists(a, a in {ann}) && {fraction} && "
        f"{cm} != '' && e.?valueFrom.?configMapKeyRef.?name.orValue('') == {cm} + '-' + {index})"
    )


# --- the per-container checks -----------------------------------------------------------------

_DEVICE_FAMILIES = tuple(f for f in FAMILIES if f.device_env or f.device_env_prefixes)
_LIMITER_FAMILIES = tuple(f for f in FAMILIES if f.limiter_env)
_VOID_FAMILIES = tuple(f for f in FAMILIES if f.void is not None and f.void_env)
_UNVOIDABLE = tuple(n for f in _DEVICE_FAMILIES if f.void is None for n in f.device_env)
_DEVICE_PREFIXES = tuple(p for f in _DEVICE_FAMILIES for p in f.device_env_prefixes)


def _device_variable(list_name: str) -> str:
    """CEL over container `c`: an env entry of a device variable names devices, and is no
    vendor pattern (control._env_findings)."""
    terms = []
    for family in _DEVICE_FAMILIES:
        named = _any(_name_is(family.device_env, family.device_env_prefixes))
        terms.append(f"({named} && {_value_selects(family)})")
    counted = f"({_mindcluster()} || {_kai(list_name)})"
    return f"c.?env.orValue([]).exists(e, {_any(terms)} && !{counted})"


def _limiter() -> str:
    """CEL over container `c`: a device container's sharing-limiter control that raises or
    switches off its limit (control._limits_raised)."""
    terms = []
    device_names = _any(
        _name_is(
            [n for f in _DEVICE_FAMILIES for n in f.device_env] + list(_CUDA_ENV),
            _DEVICE_PREFIXES,
        )
    )
    for family in _LIMITER_FAMILIES:
        exact = [p for p in family.limiter_env if not p.endswith("*")]
        prefixes = [p[:-1] for p in family.limiter_env if p.endswith("*")]
        parsed = [
            f"(e.name == {_q(n)} && !has(e.valueFrom) && !cel.bind(v, e.?value.orValue(''), {p}))"
            for n, p in CEL_LIMITER_PARSERS.items()
        ]
        raised = f"!{_any(parsed)}"
        terms.append(
            f"({owns(family)} && c.?env.orValue([]).exists(e, !{device_names} && "
            f"{_any(_name_is(exact, prefixes))} && {raised}))"
        )
    return _any(terms)


def _env_from(config: WebhookConfig) -> str:
    """CEL over container `c`: envFrom no void closes (control.container_findings; evaluation
    containers._void with its unvoidable prefixes)."""
    ignored = config.gpu_access.node_settings.env_ignored
    guarded = [
        owns(f)
        for f in FAMILIES
        if (f.device_env or f.limiter_env or f.device_env_prefixes) and f.name not in ignored
    ]
    has_from = "size(c.?envFrom.orValue([])) > 0"
    device = f"({has_from} && {_any(guarded)})"
    if config.gpu_access.void_image_devices != "all":
        plain = f"({has_from} && !{_any_device()})"
    else:
        prefix = "x.?prefix.orValue('')"
        unvoidable = _any(
            [f"{_q(n)}.startsWith({prefix})" for n in _UNVOIDABLE]
            + [
                f"({_q(p)}.startsWith({prefix}) || {prefix}.startsWith({_q(p)}))"
                for p in _DEVICE_PREFIXES
            ]
        )
        plain = (
            f"(!{_any_device()} && c.?envFrom.orValue([]).exists(x, {prefix} != '' && "
            f"{unvoidable}))"
        )
    return f"(!{_claims()} && ({device} || {plain}))"


def _privileged() -> str:
    caps = _list(sorted(PRIVILEGED_CAPABILITIES))
    return (
        "(c.?securityContext.?privileged.orValue(false) == true || "
        "c.?securityContext.?capabilities.?add.orValue([]).exists(n, "
        f"n.trim().upperAscii() in {caps}))"
    )


def _path_parts(path: str) -> str:
    return f"{path}.trim().split('/').filter(x, x != '' && x != '.')"


def _device_path(path: str) -> str:
    """CEL: a hostPath reaches device nodes (routes.device_host_path; a `..` part: yes)."""
    return (
        f"({path}.trim() != '' && cel.bind(parts, {_path_parts(path)}, "
        "'..' in parts || cel.bind(n, '/' + parts.join('/'), "
        f"n in ['/', '/dev'] || {_any([f'n.startsWith({_q(p)})' for p in DEVICE_PATHS])})))"
    )


def _mounts() -> str:
    """CEL over container `c`: it mounts a device-node volume or at the device-list prefix."""
    return (
        "c.?volumeMounts.orValue([]).exists(m, m.name in variables.deviceVolumes || "
        f"cel.bind(parts, {_path_parts('m.mountPath')}, '..' in parts || "
        f"('/' + parts.join('/')).startsWith({_q(DEVICE_LIST_MOUNT_ROOT)})))"
    )


_LISTS = (
    ("containers", "variables.containers"),
    ("initContainers", "variables.initContainers"),
    ("ephemeralContainers", "variables.ephemeral"),
)


def _every_container(check: str | dict[str, str]) -> str:
    """`check` (CEL over `i`, `c`; per list name when a dict) in no container of the lists."""
    terms = []
    for name, var in _LISTS:
        text = check[name] if isinstance(check, dict) else check
        terms.append(f"{var}.exists(i, c, {text})")
    return "!" + _any(terms)


def _runtime_class(config: WebhookConfig) -> str:
    terms = []
    every = "(variables.containers + variables.initContainers)"
    for runtime, name in sorted(config.gpu_access.runtime_class_families.items()):
        family = family_named(name)
        if family is None:
            continue
        requested = f"{every}.exists(c, {owns(family)} || {_claims()})"
        if family.name == "nvidia":
            ann = "object.metadata.?annotations.orValue({})"
            requested += (
                f" || (object.spec.?schedulerName.orValue('') == {_q(patterns.KAI_SCHEDULER)} && "
                f"{_list(patterns.KAI_FRACTION_ANNOTATIONS)}.exists(a, a in {ann}))"
            )
        terms.append(
            f"(object.spec.?runtimeClassName.orValue('') == {_q(runtime)} && !({requested}))"
        )
    return "!(!has(request.subResource) && " + _any(terms) + ")"


def _validations(config: WebhookConfig) -> list[dict[str, str]]:
    annotations = _any([f"k.startsWith({_q(p)})" for p in DEVICE_ANNOTATION_PREFIXES])
    rules = [
        (
            _every_container({n: _device_variable(n) for n, _ in _LISTS}),
            "a container sets a device-selection variable that names devices it does not "
            "request: request the device's resource, or set the variable to its void",
        ),
        (
            _every_container(_privileged()),
            "a container is privileged or adds SYS_ADMIN or ALL, which gives it every device "
            "of its node: drop it or exempt its namespace in gpuAccess",
        ),
        (
            _every_container(_mounts()),
            "a container mounts a host path of device nodes or the device-list path: request "
            "the device's resource instead",
        ),
        (
            _every_container(_limiter()),
            "a device container sets its sharing limiter's controls: remove them, the device "
            "plugin sets the limits",
        ),
        (
            _every_container(_env_from(config)),
            "a container's envFrom can choose devices no void closes: list its variables in env",
        ),
        (
            "!(!has(request.subResource) && object.metadata.?annotations.orValue({}).exists(k, "
            f"{annotations}))",
            "an annotation names devices or host mounts (CDI, NRI, CRI-O): request the device's "
            "resource or a DRA claim instead",
        ),
        (
            _runtime_class(config),
            "the pod's runtimeClassName runs a vendor's device runtime but the pod requests "
            "none of its devices: request one or drop the runtime class",
        ),
    ]
    return [
        {
            "expression": _unbind(expression),
            "message": f"gpuAccess: {message}.",
            "reason": "Forbidden",
        }
        for expression, message in rules
    ]


def _selector(exempt: Sequence[str]) -> dict[str, Any]:
    return {
        "namespaceSelector": {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": sorted(set(exempt)),
                }
            ]
        }
    }


def exempt_namespaces(config: WebhookConfig) -> tuple[str, ...]:
    """The namespaces neither policy judges: the webhook's and gpuAccess's exempt lists."""
    return tuple(sorted(set(config.exempt_namespaces) | set(config.gpu_access.exempt_namespaces)))


def validating_policy(config: WebhookConfig, name: str = DEFAULT_NAME) -> dict[str, Any]:
    variables = [
        (
            "containers",
            "!has(request.subResource) ? object.spec.containers : "
            "object.spec.containers.filter(c, false)",
        ),
        (
            "initContainers",
            "!has(request.subResource) ? object.spec.?initContainers.orValue([]) : "
            "object.spec.containers.filter(c, false)",
        ),
        # On the subresource only the ephemeral containers the update adds (the webhook judges
        # what an update introduces; a Pod cannot be created with ephemeral containers).
        (
            "ephemeral",
            "has(request.subResource) ? "
            "object.spec.?ephemeralContainers.orValue([]).filter(c, "
            "!oldObject.spec.?ephemeralContainers.orValue([]).exists(o, o.name == c.name)) : "
            "object.spec.?ephemeralContainers.orValue([]).filter(c, false)",
        ),
        (
            "deviceVolumes",
            "object.spec.?volumes.orValue([]).filter(v, has(v.hostPath) && "
            f"{_device_path('v.hostPath.path')}).map(v, v.name)",
        ),
    ]
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": dict(_LABELS)},
        "spec": {
            # A CEL error (the cost limit on an absurd pod) denies: never an unreviewed route.
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "operations": ["CREATE"],
                    },
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods/ephemeralcontainers"],
                        "operations": ["UPDATE"],
                    },
                ]
            },
            "variables": [{"name": n, "expression": _unbind(e)} for n, e in variables],
            "validations": _validations(config),
        },
    }


def voids() -> list[tuple[str, str, Family, bool]]:
    """(variable, value, family, share) the mutating policy may write, in the order it writes:
    each family's void (core/access/control.py _VOIDS), then the share values."""
    found = [(n, f.void or "", f, False) for f in _VOID_FAMILIES for n in f.void_env]
    found += [(n, v, f, True) for f in FAMILIES if f.share_env for n, v in f.share_env]
    return found


def _writes(family: Family, share: bool) -> str:
    """CEL over container `c`: whether it gets the family's variable."""
    if share:
        keys = _any(
            _name_is(
                [p for p in family.share_resources if not p.endswith("*")],
                [p[:-1] for p in family.share_resources if p.endswith("*")],
                "k",
            )
        )
        return _requests("c", keys)
    if family.void_in_devices:
        return "true"
    return f"!{owns(family)}"


def _needs(variable: str, family: Family, share: bool) -> str:
    """CEL over container `c`: it gets `variable` (no claims, no entry of that name)."""
    return (
        f"!{_claims()} && !c.?env.orValue([]).exists(e, e.name == {_q(variable)}) && "
        f"{_writes(family, share)}"
    )


def mutating_policy(name: str = DEFAULT_NAME) -> dict[str, Any]:
    mutations = []
    written = voids()
    for list_name in ("containers", "initContainers"):
        at = f"'/spec/{list_name}/' + string(i) + '/env'"
        for variable, value, family, share in written:
            entry = f"Object.spec.{list_name}.env{{name: {_q(variable)}, value: {_q(value)}}}"
            # Where the container has no env yet, the list is written as plain maps: a JSONPatch
            # value that is a list of typed objects makes the 1.36.2 API server panic (cel-go
            # baseList.ConvertToNative into structpb.Value), and an empty env is dropped before
            # the next mutation. Mutations apply in order, so the next variable finds the env.
            plain = f"[{{'name': {_q(variable)}, 'value': {_q(value)}}}]"
            mutations.append(
                f"object.spec.?{list_name}.orValue([]).transformList(i, c, "
                f"{_needs(variable, family, share)}, has(c.env) ? "
                f"JSONPatch{{op: 'add', path: {at} + '/-', value: {entry}}} : "
                f"JSONPatch{{op: 'add', path: {at}, value: {plain}}})"
            )
    return {
        "apiVersion": API_VERSION,
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name, "labels": dict(_LABELS)},
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "operations": ["CREATE"],
                    }
                ]
            },
            "mutations": [
                {"patchType": "JSONPatch", "jsonPatch": {"expression": _unbind(m)}}
                for m in mutations
            ],
        },
    }


@dataclass(frozen=True)
class AccessExport:
    objects: list[dict[str, Any]]
    not_expressed: tuple[str, ...] = NOT_EXPRESSED
    notes: list[str] = field(default_factory=list)


def export_access(config: WebhookConfig, name: str = DEFAULT_NAME) -> AccessExport:
    """The validating policy and, where voidImageDevices is `all`, the mutating one, each with
    its binding (all named `name`), for `config`'s gpuAccess under `enforce`."""
    selector = _selector(exempt_namespaces(config))
    objects = [
        validating_policy(config, name),
        {
            "apiVersion": API_VERSION,
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name, "labels": dict(_LABELS)},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": selector,
            },
        },
    ]
    notes = []
    if config.gpu_access.void_image_devices == "all":
        objects += [
            mutating_policy(name),
            {
                "apiVersion": API_VERSION,
                "kind": "MutatingAdmissionPolicyBinding",
                "metadata": {"name": name, "labels": dict(_LABELS)},
                "spec": {"policyName": name, "matchResources": selector},
            },
        ]
    else:
        notes.append(
            f"no MutatingAdmissionPolicy: gpuAccess.voidImageDevices is "
            f"{config.gpu_access.void_image_devices}, and envFrom in a container without a "
            "device is denied instead"
        )
    if config.gpu_access.mode != "enforce":
        notes.append(
            f"gpuAccess.mode is {config.gpu_access.mode}: the policies enforce what `enforce` "
            "would; install them only with the webhook under enforce"
        )
    return AccessExport(objects, notes=notes)
