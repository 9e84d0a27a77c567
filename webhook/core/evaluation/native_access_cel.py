"""The CEL expressions of GPU access control's native policies (evaluation/native_access.py):
each vendor runtime's parser (core/families/visible.py), the vendors' patterns
(core/access/patterns.py), and the per-container checks of core/access/control.py and
routes.py, written over a container `c` (index `i`) and its env entries `e`. Built from the
families catalog and the routes' constants; the API server's CEL environment (1.36.2) has no
bindings library, so `cel.bind` written here is rewritten by `unbind`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from webhook.core.access import patterns
from webhook.core.access.routes import _PRIVILEGED_CAPS as PRIVILEGED_CAPABILITIES
from webhook.core.access.routes import DEVICE_LIST_MOUNT_ROOT
from webhook.core.access.sources import OPEN_FAMILIES, open_lists, read_lists
from webhook.core.config.model import WebhookConfig
from webhook.core.families.catalog import DEVICE_PATHS, FAMILIES, Family

_CUDA_ENV = ("CUDA_VERSION", "NVIDIA_REQUIRE_CUDA")


def quote(text: str) -> str:
    """A CEL string literal."""
    return json.dumps(text, ensure_ascii=True)


def cel_list(items: Sequence[str]) -> str:
    return "[" + ", ".join(quote(i) for i in items) + "]"


def unbind(text: str) -> str:
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


def any_of(terms: Sequence[str]) -> str:
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


def value_selects(family: Family) -> str:
    """CEL over an env entry `e`: its value names devices as `family`'s runtime reads it."""
    parser = CEL_PARSERS.get(family.selection, "true")
    return f"(has(e.valueFrom) || cel.bind(v, e.?value.orValue(''), {parser}))"


def name_is(names: Sequence[str], prefixes: Sequence[str], of: str = "e.name") -> list[str]:
    terms = [f"{of} in {cel_list(names)}"] if names else []
    terms += [f"{of}.startsWith({quote(p)})" for p in prefixes]
    return terms


def resource_of(family: Family, key: str) -> str:
    exact = [p for p in family.resources if not p.endswith("*")]
    prefixes = [p[:-1] for p in family.resources if p.endswith("*")]
    return any_of(name_is(exact, prefixes, key))


def requests(c: str, match: str) -> str:
    """CEL: container `c` asks a nonzero amount of a resource `k` matching `match`."""
    return (
        "(['limits', 'requests'].exists(l, cel.bind(m, "
        f"{c}.?resources[?l].orValue({{}}), m.exists(k, {match} && "
        "quantity(string(m[k])).compareTo(quantity('0')) != 0))))"
    )


def owns(family: Family, c: str = "c") -> str:
    """CEL: container `c` requests a device of `family` (control.container_families)."""
    return requests(c, resource_of(family, "k"))


def any_device(c: str = "c") -> str:
    return any_of([owns(f, c) for f in FAMILIES])


def claims(c: str = "c") -> str:
    return f"(size({c}.?resources.?claims.orValue([])) > 0)"


# --- the vendors' patterns (core/access/patterns.py counted) -------------------------------

_MINDCLUSTER_FIELD = r"^metadata\.annotations\['huawei\.com/Ascend[0-9A-Za-z]+'\]$"


def mindcluster() -> str:
    """An ASCEND_VISIBLE_DEVICES entry `e` from the pod's own huawei.com/<type> annotation, in a
    container `c` requesting that type, scheduled by Volcano (patterns.mindcluster_counted)."""
    return (
        f"(e.name == {quote(patterns.ASCEND_VARIABLE)} && "
        "cel.bind(p, e.?valueFrom.?fieldRef.?fieldPath.orValue(''), "
        f"p.matches({quote(_MINDCLUSTER_FIELD)}) && "
        "cel.bind(r, p.substring(22, size(p) - 2), "
        "['limits', 'requests'].exists(l, cel.bind(m, c.?resources[?l].orValue({}), "
        "r in m && quantity(string(m[r])).compareTo(quantity('0')) > 0)))) && "
        f"object.spec.?schedulerName.orValue('') == {quote(patterns.VOLCANO)})"
    )


def kai(list_name: str) -> str:
    """An NVIDIA_VISIBLE_DEVICES entry `e` in container `c` (index `i` of `list_name`) from key
    NVIDIA_VISIBLE_DEVICES of the pod's own KAI sharing ConfigMap, in the container KAI's
    scheduler accounts the fraction to (patterns.kai_counted, kai_fraction_container)."""
    if list_name not in ("containers", "initContainers"):
        return "false"
    ann = "object.metadata.?annotations.orValue({})"
    named = f"{ann}[?{quote(patterns.KAI_CONTAINER_ANNOTATION)}]"
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
    cm = f"{ann}[?{quote(patterns.KAI_CONFIGMAP_ANNOTATION)}].orValue('')"
    return (
        f"(e.name == {quote(patterns.NVIDIA_VARIABLE)} && "
        f"e.?valueFrom.?configMapKeyRef.?key.orValue('') == {quote(patterns.NVIDIA_VARIABLE)} && "
        f"object.spec.?schedulerName.orValue('') == {quote(patterns.KAI_SCHEDULER)} && "
        f"{cel_list(patterns.KAI_FRACTION_ANNOTATIONS)}.exists(a, a in {ann}) && {fraction} && "
        f"{cm} != '' && e.?valueFrom.?configMapKeyRef.?name.orValue('') == {cm} + '-' + {index})"
    )


# --- the per-container checks -----------------------------------------------------------------

_DEVICE_FAMILIES = tuple(f for f in FAMILIES if f.device_env or f.device_env_prefixes)
_LIMITER_FAMILIES = tuple(f for f in FAMILIES if f.limiter_env)
_DEVICE_PREFIXES = tuple(p for f in _DEVICE_FAMILIES for p in f.device_env_prefixes)


def device_variable(list_name: str) -> str:
    """CEL over container `c`: an env entry of a device variable names devices, and is no
    vendor pattern (control._env_findings)."""
    terms = []
    for family in _DEVICE_FAMILIES:
        named = any_of(name_is(family.device_env, family.device_env_prefixes))
        terms.append(f"({named} && {value_selects(family)})")
    counted = f"({mindcluster()} || {kai(list_name)})"
    return f"c.?env.orValue([]).exists(e, {any_of(terms)} && !{counted})"


def limiter() -> str:
    """CEL over container `c`: a device container's sharing-limiter control that raises or
    switches off its limit (control._limits_raised)."""
    terms = []
    device_names = any_of(
        name_is(
            [n for f in _DEVICE_FAMILIES for n in f.device_env] + [*_CUDA_ENV],
            _DEVICE_PREFIXES,
        )
    )
    for family in _LIMITER_FAMILIES:
        exact = [p for p in family.limiter_env if not p.endswith("*")]
        prefixes = [p[:-1] for p in family.limiter_env if p.endswith("*")]
        parsed = [
            f"(e.name == {quote(n)} && !has(e.valueFrom) && "
            f"!cel.bind(v, e.?value.orValue(''), {p}))"
            for n, p in CEL_LIMITER_PARSERS.items()
        ]
        raised = f"!{any_of(parsed)}"
        terms.append(
            f"({owns(family)} && c.?env.orValue([]).exists(e, !{device_names} && "
            f"{any_of(name_is(exact, prefixes))} && {raised}))"
        )
    return any_of(terms)


def _makes(prefix: str, lists: tuple[tuple[str, ...], tuple[str, ...]]) -> str:
    """CEL: an envFrom `prefix` can make one of the (exact, prefixes) names (sources.makes)."""
    exact, prefixes = lists
    terms = [f"({quote(n)}.startsWith({prefix}) && {prefix} != {quote(n)})" for n in exact]
    terms += [
        f"({quote(p)}.startsWith({prefix}) || {prefix}.startsWith({quote(p)}))" for p in prefixes
    ]
    return any_of(terms)


def open_readers(config: WebhookConfig) -> str:
    """CEL over the pod: a runtime that reads names no void closes reads its containers
    (sources.readers): a container requests a device of such a family, or the pod's runtime
    class is one of that family's."""
    ignored = config.gpu_access.node_settings.env_ignored
    every = "(object.spec.containers + object.spec.?initContainers.orValue([]))"
    runtimes = config.gpu_access.runtime_class_families
    terms = []
    for family in OPEN_FAMILIES:
        if family.name in ignored:
            continue
        classes = sorted(r for r, name in runtimes.items() if name == family.name)
        term = f"{every}.exists(o, {owns(family, 'o')})"
        if classes:
            term += f" || object.spec.?runtimeClassName.orValue('') in {cel_list(classes)}"
        terms.append(f"({term})")
    return any_of(terms)


def env_from(config: WebhookConfig) -> str:
    """CEL over container `c`: envFrom no void closes (control.container_findings with
    sources.device_env_from and open_finding; evaluation containers._void with its unvoidable
    prefixes). `variables.openReaders` is open_readers."""
    ignored = config.gpu_access.node_settings.env_ignored
    prefix = "x.?prefix.orValue('')"
    guarded = [
        f"({owns(f)} && c.?envFrom.orValue([]).exists(x, {prefix} == '' || "
        f"{_makes(prefix, read_lists(f))}))"
        for f in FAMILIES
        if (f.device_env or f.limiter_env or f.device_env_prefixes) and f.name not in ignored
    ]
    device = any_of(guarded)
    has_from = "size(c.?envFrom.orValue([])) > 0"
    if config.gpu_access.void_image_devices != "all":
        plain = f"({has_from} && !{any_device()})"
    else:
        unvoidable = any_of([_makes(prefix, open_lists(f)) for f in OPEN_FAMILIES])
        plain = (
            f"(!{any_device()} && c.?envFrom.orValue([]).exists(x, ({prefix} != '' && "
            f"{unvoidable}) || ({prefix} == '' && variables.openReaders)))"
        )
    return f"(!{claims()} && ({device} || {plain}))"


def privileged() -> str:
    caps = cel_list(sorted(PRIVILEGED_CAPABILITIES))
    return (
        "(c.?securityContext.?privileged.orValue(false) == true || "
        "c.?securityContext.?capabilities.?add.orValue([]).exists(n, "
        f"n.trim().upperAscii() in {caps}))"
    )


def path_parts(path: str) -> str:
    return f"{path}.trim().split('/').filter(x, x != '' && x != '.')"


def device_path(path: str) -> str:
    """CEL: a hostPath reaches device nodes (routes.device_host_path; a `..` part: yes)."""
    return (
        f"({path}.trim() != '' && cel.bind(parts, {path_parts(path)}, "
        "'..' in parts || cel.bind(n, '/' + parts.join('/'), "
        f"n in ['/', '/dev'] || {any_of([f'n.startsWith({quote(p)})' for p in DEVICE_PATHS])})))"
    )


def mounts() -> str:
    """CEL over container `c`: it mounts a device-node volume or at the device-list prefix."""
    return (
        "c.?volumeMounts.orValue([]).exists(m, m.name in variables.deviceVolumes || "
        f"cel.bind(parts, {path_parts('m.mountPath')}, '..' in parts || "
        f"('/' + parts.join('/')).startsWith({quote(DEVICE_LIST_MOUNT_ROOT)})))"
    )
