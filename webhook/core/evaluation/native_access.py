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
- a MutatingAdmissionPolicy writing, on Pod CREATE (and into the ephemeral containers the
  subresource adds), the voids and pins `enforce` writes
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

What CEL cannot express is `NOT_EXPRESSED`; the webhook still judges it when it is up. This
module sits in core/evaluation, beside the CRL export's core/policies/native*.py, because it
reads the access routes, the families and the config together (the import contracts allow that
only here). Offline only: the CLI and the tests, never a review (not compiled, setup.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.core.access import patterns
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.native_access_cel import (
    any_of,
    cel_list,
    claims,
    device_path,
    device_variable,
    env_from,
    limiter,
    mounts,
    name_is,
    open_readers,
    owns,
    privileged,
    quote,
    requests,
    unbind,
)
from webhook.core.families.catalog import FAMILIES, Family, family_named
from webhook.core.workloads.devices import (
    ACCESS_ENV_EXACT,
    ACCESS_ENV_PREFIXES,
    DEVICE_ANNOTATION_PREFIXES,
)

DEFAULT_NAME = "gpu-webhook-access"
API_VERSION = "admissionregistration.k8s.io/v1"
_LABELS = {"app.kubernetes.io/name": "gpu-admission-webhook"}

NOT_EXPRESSED: tuple[str, ...] = (
    "DRA claims: a policy cannot read ResourceClaims, so a container with resource claims "
    "gets no void from the policy and its envFrom is not judged by it, and AMD devices from a "
    "claim do not make the pod's other containers' unprefixed envFrom a finding",
    "voidImageDevices known (image facts): only `all` is exported as a mutation",
    "a Pod UPDATE that swaps an image into a container without its voids, under "
    "voidImageDevices known or off (under all it is denied)",
    "a hostPath or mountPath with a `..` part is denied when mounted, without resolving it",
    "workload templates and operator objects (their pods are judged when created)",
    "an image configuration's device variables a registry lookup read (DOCKER_RESOURCE_* "
    "written over with void, the variables of vendors without a void denied): a policy reads "
    "no registry",
    "an image configuration's ASCEND_VISIBLE_DEVICES in an Ascend pod under nodeSettings "
    "ascendRuntime first-entry (denied by the webhook where a registry lookup read it): a policy "
    "reads no registry, so on first-entry ascend-docker-runtime builds the image's value stands",
)


_VOID_FAMILIES = tuple(f for f in FAMILIES if f.void is not None and f.void_env)

_LISTS = (
    ("containers", "variables.containers"),
    ("initContainers", "variables.initContainers"),
    ("ephemeralContainers", "variables.ephemeral"),
)


_LABEL = {
    "containers": "'container \"'",
    "initContainers": "'init container \"'",
    "ephemeralContainers": "'ephemeral container \"'",
}


def _every_container(check: str | dict[str, str]) -> tuple[str, str]:
    """(`check` (CEL over `i`, `c`; per list name when a dict) in no container of the lists,
    the labels of the containers where it holds, joined: `container "app"`, as the webhook
    names them)."""
    terms = []
    names = []
    for name, var in _LISTS:
        text = check[name] if isinstance(check, dict) else check
        terms.append(f"{var}.exists(i, c, {text})")
        names.append(f"{var}.transformList(i, c, {text}, {_LABEL[name]} + c.name + '\"')")
    return "!" + any_of(terms), "(" + " + ".join(names) + ").join(', ')"


def _runtime_class(config: WebhookConfig) -> str:
    terms = []
    every = "(variables.containers + variables.initContainers)"
    for runtime, name in sorted(config.gpu_access.runtime_class_families.items()):
        family = family_named(name)
        if family is None:
            continue
        requested = f"{every}.exists(c, {owns(family)} || {claims()})"
        if family.name == "nvidia":
            ann = "object.metadata.?annotations.orValue({})"
            requested += (
                " || (object.spec.?schedulerName.orValue('') == "
                f"{quote(patterns.KAI_SCHEDULER)} && "
                f"{cel_list(patterns.KAI_FRACTION_ANNOTATIONS)}.exists(a, a in {ann}))"
            )
        terms.append(
            f"(object.spec.?runtimeClassName.orValue('') == {quote(runtime)} && !({requested}))"
        )
    return "!(request.operation == 'CREATE' && " + any_of(terms) + ")"


def _image_swap() -> str:
    """CEL: a Pod UPDATE (not a subresource) gives a container a new image while it lacks a void
    or pin the mutating policy would have written (evaluation/containers.py apply_access: the
    image config route of a pod created without them)."""
    needs = any_of([f"({_needs(v, f, s)})" for v, _, f, s in voids()])
    terms = [
        f"object.spec.?{lst}.orValue([]).exists(c, oldObject.spec.?{lst}.orValue([]).exists(o, "
        f"o.name == c.name && o.?image.orValue('') != c.?image.orValue('')) && {needs})"
        for lst in ("containers", "initContainers")
    ]
    return f"!(request.operation == 'UPDATE' && !has(request.subResource) && {any_of(terms)})"


# `metadata.annotations['<key>']`: the subscripted form the kubelet resolves (access/patterns.py).
_ANNOTATION_PATH = "metadata.annotations['"


def _annotation_write(config: WebhookConfig) -> str:
    """CEL: a Pod UPDATE (not a subresource) by none of gpuAccess.annotationWriters or
    annotationWriterGroups adds, changes or removes an annotation a container of the stored pod
    reads a device variable from through a `fieldRef` (evaluate.py annotation_writes)."""
    rules = config.gpu_access
    name = any_of(name_is(sorted(ACCESS_ENV_EXACT), ACCESS_ENV_PREFIXES))
    start = len(_ANNOTATION_PATH)
    changed = "((k in n) != (k in o) || (k in n && n[k] != o[k]))"
    reads = (
        f"{name} && cel.bind(p, e.?valueFrom.?fieldRef.?fieldPath.orValue(''), "
        f'p.startsWith({quote(_ANNOTATION_PATH)}) && p.endsWith("\']") && '
        f"size(p) >= {start + 2} && cel.bind(k, p.substring({start}, size(p) - 2), {changed}))"
    )
    every = (
        "(oldObject.spec.containers + oldObject.spec.?initContainers.orValue([]) + "
        "oldObject.spec.?ephemeralContainers.orValue([]))"
    )
    return (
        "!(request.operation == 'UPDATE' && !has(request.subResource) && "
        f"!(request.userInfo.username in {cel_list(rules.annotation_writers)}) && "
        "!request.userInfo.?groups.orValue([]).exists(g, g in "
        f"{cel_list(rules.annotation_writer_groups)}) && "
        "cel.bind(n, object.metadata.?annotations.orValue({}), "
        "cel.bind(o, oldObject.metadata.?annotations.orValue({}), "
        f"{every}.exists(c, c.?env.orValue([]).exists(e, {reads})))))"
    )


def _validations(config: WebhookConfig) -> list[dict[str, str]]:
    annotations = any_of([f"k.startsWith({quote(p)})" for p in DEVICE_ANNOTATION_PREFIXES])
    rules: list[tuple[str | tuple[str, str], str]] = [
        (
            _every_container({n: device_variable(n) for n, _ in _LISTS}),
            "a container sets a device-selection variable that names devices it does not "
            "request: request the device's resource, or set the variable to its void",
        ),
        (
            _every_container(privileged()),
            "a container is privileged or adds SYS_ADMIN or ALL, which gives it every device "
            "of its node: drop it or exempt its namespace in gpuAccess",
        ),
        (
            _every_container(mounts()),
            "a container mounts a host path of device nodes or the device-list path: request "
            "the device's resource instead",
        ),
        (
            _every_container(limiter()),
            "a device container sets its sharing limiter's controls: remove them, the device "
            "plugin sets the limits",
        ),
        (
            _every_container(env_from(config)),
            "a container's envFrom can choose devices no void closes: set an envFrom prefix "
            "or list its variables in env",
        ),
        (
            "!(request.operation == 'CREATE' && object.metadata.?annotations.orValue({}).exists(k, "
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
    rules.append(
        (
            _annotation_write(config),
            "an update changes an annotation a container reads a device variable from: only "
            "gpuAccess.annotationWriters (its scheduler) may change it",
        )
    )
    if config.gpu_access.void_image_devices == "all":
        rules.append(
            (
                _image_swap(),
                "a container changes its image while its device variables are not void: "
                "recreate the pod, env cannot change on update",
            )
        )
    found = []
    for rule_check, message in rules:
        rule = {"message": f"gpuAccess: {message}.", "reason": "Forbidden"}
        if isinstance(rule_check, tuple):
            # The containers named, as the webhook names them, cut under the API server's 5 KiB
            # cap on an evaluated message (a message expression must be a string: no binding).
            expression, names = rule_check
            rule["messageExpression"] = unbind(
                f"{quote(f'gpuAccess: {message} (')} + (size({names}) > 2000 ? "
                f"{names}.substring(0, 2000) + ' …' : {names}) + ').'"
            )
        else:
            expression = rule_check
        found.append({"expression": unbind(expression), **rule})
    return found


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


def _pods_rule(resource: str, *operations: str) -> dict[str, Any]:
    return {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "resources": [resource],
        "operations": list(operations),
    }


def _object(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {"name": name, "labels": dict(_LABELS)},
        "spec": spec,
    }


def exempt_namespaces(config: WebhookConfig) -> tuple[str, ...]:
    """The namespaces neither policy judges: the webhook's and gpuAccess's exempt lists."""
    return tuple(sorted(set(config.exempt_namespaces) | set(config.gpu_access.exempt_namespaces)))


def validating_policy(config: WebhookConfig, name: str = DEFAULT_NAME) -> dict[str, Any]:
    variables = [
        (
            "containers",
            "request.operation == 'CREATE' ? object.spec.containers : "
            "object.spec.containers.filter(c, false)",
        ),
        (
            "initContainers",
            "request.operation == 'CREATE' ? object.spec.?initContainers.orValue([]) : "
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
        ("openReaders", open_readers(config)),
        (
            "deviceVolumes",
            "object.spec.?volumes.orValue([]).filter(v, has(v.hostPath) && "
            f"{device_path('v.hostPath.path')}).map(v, v.name)",
        ),
    ]
    spec = {
        # A CEL error (the cost limit on an absurd pod) denies: never an unreviewed route.
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                _pods_rule("pods", "CREATE", "UPDATE"),
                _pods_rule("pods/ephemeralcontainers", "UPDATE"),
            ]
        },
        "variables": [{"name": n, "expression": unbind(e)} for n, e in variables],
        "validations": _validations(config),
    }
    return _object("ValidatingAdmissionPolicy", name, spec)


def voids() -> list[tuple[str, str, Family, bool]]:
    """(variable, value, family, share) the mutating policy may write, in the order it writes:
    each family's void (core/access/control.py _VOIDS), then the share values."""
    found = [(n, f.void or "", f, False) for f in _VOID_FAMILIES for n in f.void_env]
    found += [(n, v, f, True) for f in FAMILIES if f.share_env for n, v in f.share_env]
    return found


def _writes(family: Family, share: bool) -> str:
    """CEL over container `c`: whether it gets the family's variable."""
    if share:
        keys = any_of(
            name_is(
                [p for p in family.share_resources if not p.endswith("*")],
                [p[:-1] for p in family.share_resources if p.endswith("*")],
                "k",
            )
        )
        return requests("c", keys)
    if family.void_in_devices:
        return "true"
    return f"!{owns(family)}"


def _needs(variable: str, family: Family, share: bool) -> str:
    """CEL over container `c`: it gets `variable` (no claims, no entry of that name)."""
    return (
        f"!{claims()} && !c.?env.orValue([]).exists(e, e.name == {quote(variable)}) && "
        f"{_writes(family, share)}"
    )


def mutating_policy(name: str = DEFAULT_NAME) -> dict[str, Any]:
    mutations = []
    written = voids()
    # On CREATE the pod's containers; on the ephemeralcontainers subresource only the ephemeral
    # containers it adds (nothing else of a pod's spec may change there).
    lists = (
        ("containers", "!has(request.subResource)"),
        ("initContainers", "!has(request.subResource)"),
        (
            "ephemeralContainers",
            "has(request.subResource) && "
            "!oldObject.spec.?ephemeralContainers.orValue([]).exists(o, o.name == c.name)",
        ),
    )
    for list_name, when in lists:
        at = f"'/spec/{list_name}/' + string(i) + '/env'"
        for variable, value, family, share in written:
            entry = f"Object.spec.{list_name}.env{{name: {quote(variable)}, value: {quote(value)}}}"
            # Where the container has no env yet, the list is written as plain maps: a JSONPatch
            # value that is a list of typed objects makes the 1.36.2 API server panic (cel-go
            # baseList.ConvertToNative into structpb.Value), and an empty env is dropped before
            # the next mutation. Mutations apply in order, so the next variable finds the env.
            plain = f"[{{'name': {quote(variable)}, 'value': {quote(value)}}}]"
            mutations.append(
                f"object.spec.?{list_name}.orValue([]).transformList(i, c, "
                f"{when} && {_needs(variable, family, share)}, has(c.env) ? "
                f"JSONPatch{{op: 'add', path: {at} + '/-', value: {entry}}} : "
                f"JSONPatch{{op: 'add', path: {at}, value: {plain}}})"
            )
    spec = {
        "failurePolicy": "Fail",
        "reinvocationPolicy": "IfNeeded",
        "matchConstraints": {
            "resourceRules": [
                _pods_rule("pods", "CREATE"),
                _pods_rule("pods/ephemeralcontainers", "UPDATE"),
            ]
        },
        "mutations": [
            {"patchType": "JSONPatch", "jsonPatch": {"expression": unbind(m)}} for m in mutations
        ],
    }
    return _object("MutatingAdmissionPolicy", name, spec)


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
        _object(
            "ValidatingAdmissionPolicyBinding",
            name,
            {"policyName": name, "validationActions": ["Deny"], "matchResources": selector},
        ),
    ]
    notes = []
    if config.gpu_access.void_image_devices == "all":
        objects += [
            mutating_policy(name),
            _object(
                "MutatingAdmissionPolicyBinding",
                name,
                {"policyName": name, "matchResources": selector},
            ),
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
