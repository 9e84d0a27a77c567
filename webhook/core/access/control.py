"""GPU access control (SPEC §12): a container reaches accelerator devices only through what
quotas, CRLs and the scheduler count — extended resources and DRA claims — for every vendor's
devices (core/families).

Pure: one pod spec's containers (init, sidecar, ephemeral and device containers alike), the
device families each container requests, and what the config declares in; out come findings
(each way a container could reach devices beyond what it requests) and, per container, the
device variables `void` would close. evaluation/containers.py turns them into warnings,
denials or the `void` changes by `gpuAccess.mode`.

The routes (SPEC §12): device-selection variables (every entry; envFrom and the image config,
whose values the webhook cannot see, are closed by `void`), device-list mounts, device
annotations, privileged containers and hostPath volumes of device nodes, vendor runtime
classes, and a device container's own device selection or sharing-limiter controls. Which
node configurations honour each, with the sources, is in docs/concepts/gpu-access.md; the code
cites what each rule relies on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core.access import patterns, sources
from webhook.core.access.routes import (
    EPHEMERAL,
    AccessFinding,
    Candidate,
    container_families,
    device_host_path,
    device_volumes,
    ephemeral_containers,
    label,
    mount_findings,
    nonzero,
    normpath,
    privilege,
    privilege_finding,
)
from webhook.core.access.sources import unvoidable_prefix
from webhook.core.base.shapes import as_dict, is_mapping
from webhook.core.base.wording import cut
from webhook.core.families.catalog import FAMILIES, Family, family_named
from webhook.core.families.visible import LIMITER_PARSERS, selects_devices
from webhook.core.workloads.devices import DEVICE_ANNOTATION_PREFIXES
from webhook.core.workloads.pods import ContainerRef, PodSpecRef

__all__ = [
    "EPHEMERAL",
    "POLICY",
    "RULE",
    "VOID_FAMILIES",
    "AccessFinding",
    "Candidate",
    "container_families",
    "device_host_path",
    "ephemeral_containers",
    "findings",
    "label",
    "normpath",
    "pin_note",
    "unvoidable_prefix",
]

RULE = "gpu access"
# The policy findings are reported under (audit, policy reports, a denial's "About these
# policies"): the webhook config's gpuAccess, not a CRL.
POLICY = "gpu-access"
_MAX_VALUE = 24
_NVIDIA = family_named("nvidia")
_DEVICE_FAMILIES = tuple(f for f in FAMILIES if f.device_env or f.device_env_prefixes)
_LIMITER_FAMILIES = tuple(f for f in FAMILIES if f.limiter_env)
_VOID_FAMILIES = tuple(f for f in FAMILIES if f.void is not None and f.void_env)
_SHARE_FAMILIES = tuple(f for f in FAMILIES if f.share_env)
_CUDA_ENV = frozenset({"CUDA_VERSION", "NVIDIA_REQUIRE_CUDA"})
_ENV_FAMILY = {name: f for f in _DEVICE_FAMILIES for name in f.device_env}
_ENV_PREFIXES = tuple(p for f in _DEVICE_FAMILIES for p in f.device_env_prefixes)
_LIMITER_EXACT = {p: f for f in _LIMITER_FAMILIES for p in f.limiter_env if not p.endswith("*")}
_LIMITER_PREFIXES = tuple(
    p[:-1] for f in _LIMITER_FAMILIES for p in f.limiter_env if p.endswith("*")
)
# Names whose entries decide what Candidate writes: the voids and the share variables.
_VOID_NAMES = frozenset(name for f in _VOID_FAMILIES for name in f.void_env) | frozenset(
    name for f in _SHARE_FAMILIES for name, _ in f.share_env
)
# ((variable, void value), family name) for every family with a void, in the families' order.
_VOIDS = tuple(((name, f.void or ""), f.name) for f in _VOID_FAMILIES for name in f.void_env)
_EVERY_VOID = tuple(v for v, _ in _VOIDS)
# Families whose own device containers get their void (no plugin of theirs sets it).
_VOID_IN_DEVICES = frozenset(f.name for f in _VOID_FAMILIES if f.void_in_devices)
# Variable -> its family, for the notes saying what void was written.
VOID_FAMILIES = {name: f for f in _VOID_FAMILIES for name in f.void_env}
_MAX_KEY = 48
_NONE: frozenset[str] = frozenset()


def _value(text: str) -> str:
    """A value as a message shows it: cut, its unprintable characters escaped (`void\\x1f`)."""
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
    return cut(text, _MAX_VALUE)


@dataclass(slots=True)  # one per pod spec: no NamedTuple either (Candidate)
class _Context:
    request: str  # the NVIDIA resource to advise (config gpuRequestAdvice)
    devices: Mapping[str, str]  # device hostPath volumes: name -> path
    # Families whose nodes ignore device variables (nodeSettings).
    env_ignored: frozenset[str] | tuple[str, ...]
    pod: PodSpecRef  # for the vendors' patterns (core/access/patterns.py)
    # The families with names no void closes whose runtime reads the pod (sources.readers).
    readers: tuple[Family, ...]

    def __init__(
        self,
        request: str,
        devices: Mapping[str, str],
        env_ignored: frozenset[str] | tuple[str, ...],
        pod: PodSpecRef,
        readers: tuple[Family, ...] = (),
    ) -> None:
        self.request = request
        self.devices = devices
        self.env_ignored = env_ignored
        self.pod = pod
        self.readers = readers


def _names_devices(family: Family, entry: Mapping[str, Any]) -> bool:
    """Whether an env entry of a device variable names devices, read as the family's runtime
    reads it (core/families/visible.py): a value the webhook cannot see (valueFrom) does."""
    if "valueFrom" in entry:
        return True
    value = entry.get("value")
    return selects_devices(family.selection, value if isinstance(value, str) else "")


def _limits_raised(name: str, entry: Mapping[str, Any]) -> bool:
    """Whether a sharing limiter's control raises or switches off the limit: any value, but
    for controls whose reader a parser knows (HAMi-core's GPU_CORE_UTILIZATION_POLICY: only
    `disable`)."""
    parser = LIMITER_PARSERS.get(name)
    if parser is None or "valueFrom" in entry:
        return True
    value = entry.get("value")
    return parser(value if isinstance(value, str) else "")


def _shown(entry: Mapping[str, Any]) -> str:
    value = entry.get("value")
    text = value if isinstance(value, str) else ""
    if "valueFrom" in entry and not text:
        return " from valueFrom"
    return f"={_value(text)}"


def _void_advice(family: Family) -> str:
    if family.void is None:
        return "remove it"
    return "set it empty" if family.void == "" else f"set it to {family.void}"


def _advice_for(family: Family | None, ctx: _Context) -> tuple[str, str]:
    """(noun, resource to request) for a family (None: a GPU in general)."""
    if family is None or family is _NVIDIA:
        return "GPU", ctx.request
    return family.noun, family.request


def _device_family(name: str) -> Family | None:
    """The family whose runtime reads `name` as a device selection (one dict lookup for the
    usual name that is none)."""
    family = _ENV_FAMILY.get(name)
    if family is None and name.startswith(_ENV_PREFIXES):
        family = next(f for f in _DEVICE_FAMILIES if name.startswith(f.device_env_prefixes))
    return family


def _limiter_family(name: str) -> Family | None:
    family = _LIMITER_EXACT.get(name)
    if family is None and name.startswith(_LIMITER_PREFIXES):
        family = next(f for f in _LIMITER_FAMILIES if f.is_limiter_env(name))
    return family


def _env_findings(
    c: ContainerRef, container: dict[str, Any], own: frozenset[str], ctx: _Context
) -> tuple[list[AccessFinding], set[str], bool]:
    """Every env entry of a device variable that names devices, and in a device container its
    sharing limiter's controls. Returns the findings, the void variables the container sets
    (any value), and whether it names a CUDA version."""
    env = container.get("env")
    where = ""  # label(c), made for the first finding (most containers have none)
    found: list[AccessFinding] = []
    names: set[str] = set()
    cuda = False
    if type(env) is not list:
        return found, names, cuda
    for item in env:
        if not is_mapping(item):
            continue
        entry = as_dict(item)
        name = entry.get("name")
        if type(name) is not str:
            continue
        if name in _VOID_NAMES:
            names.add(name)
        elif name in _CUDA_ENV:
            cuda = True
            continue
        family = _device_family(name)
        if family is None:
            limiter = _limiter_family(name) if own else None
            if limiter is not None and limiter.name in own and _limits_raised(name, entry):
                where = where or label(c)
                # HAMi-core reads its limits from the process env; the device plugin writes
                # them (and the kubelet puts the container's own env after): a user's value
                # raises or switches off the share it was given.
                found.append(
                    AccessFinding(
                        where,
                        f"sets {name}{_shown(entry)}",
                        "remove it: the device plugin sets the sharing limits",
                        gpu=True,
                    )
                )
            continue
        if not _names_devices(family, entry) or patterns.counted(ctx.pod, c, entry):
            continue
        where = where or label(c)
        noun, request = _advice_for(family, ctx)
        if family.name in own:
            # The kubelet appends the container's env after the device plugin's
            # (pkg/kubelet/kubelet_pods.go GenerateRunContainerOptions) and the runtime keeps
            # the last value (containerd pkg/oci/spec_opts.go replaceOrAppendEnvValues): a
            # device container's own value replaces the devices it was given
            # (NVIDIA/k8s-device-plugin#90). Every entry counts, not only the last one of its
            # name: an admission answer must not depend on which duplicate a reader keeps.
            found.append(
                AccessFinding(
                    where,
                    f"sets {name}{_shown(entry)}",
                    f"remove it: the device plugin sets the {noun}s a container gets",
                    gpu=True,
                )
            )
        elif "valueFrom" in entry and not isinstance(entry.get("value"), str):
            found.append(
                AccessFinding(
                    where, f"sets {name} from valueFrom", f"request {request} instead", False, noun
                )
            )
        else:
            found.append(
                AccessFinding(
                    where,
                    f"sets {name}{_shown(entry)}",
                    f"request {request} or {_void_advice(family)}",
                    False,
                    noun,
                )
            )
    return found, names, cuda


def _env_from(container: Mapping[str, Any]) -> tuple[str, ...]:
    sources = container.get("envFrom")
    if type(sources) is not list:
        return ()
    prefixes = []
    for source in sources:
        if is_mapping(source):
            prefix = source.get("prefix")
            prefixes.append(prefix if isinstance(prefix, str) else "")
    return tuple(prefixes)


def container_findings(
    c: ContainerRef, own: frozenset[str], ctx: _Context
) -> tuple[list[AccessFinding], Candidate]:
    """One container's findings, whatever it requests, and what `void` may close in it."""
    container = as_dict(c.container)
    privileged = privilege(container)
    found, names, cuda = _env_findings(c, container, own, ctx)
    opened = None
    device = bool(own)
    mounts = container.get("volumeMounts")
    env_from = _env_from(container)
    # The label only where a finding can name it (most containers have none of these).
    where = label(c) if privileged or mounts or (env_from and device) else ""
    if privileged:
        found.append(privilege_finding(where, privileged, device))
    if mounts:
        found += mount_findings(
            container, where, device, ctx.devices, ctx.request, lambda f: _advice_for(f, ctx)
        )
    if env_from and device:
        # envFrom comes before env in the kubelet's list (kubelet_pods.go
        # makeEnvironmentVariables), after the device plugin's: a ConfigMap key can replace the
        # plugin's choice or a sharing limit, and no value can be written over it without
        # overriding the plugin. Moot where every entry's prefix makes no name the family reads
        # (sources.device_env_from), or where the admin declares that the vendor's nodes ignore
        # device variables and run no env-controlled limiter (nodeSettings).
        for name in sorted(own):
            family = family_named(name)
            if family is None or name in ctx.env_ignored:
                continue
            shown = sources.device_env_from(container, family)
            if shown:
                noun = _advice_for(family, ctx)[0]
                fix = "change its prefix" if shown != "envFrom" else "list its variables in env"
                why = f"envFrom can choose its {noun}s or raise its limits"
                found.append(AccessFinding(where, f"uses {shown}", f"{fix}: {why}", gpu=True))
                break
    elif env_from and ctx.readers:
        # A container without a device in a pod whose runtime reads names no void closes (AMD's
        # DOCKER_RESOURCE_*, Neuron's, Moore Threads', Enflame's variables): an unprefixed
        # ConfigMap or Secret hands it devices unseen.
        opened = sources.open_finding(label(c), container, ctx.readers)
        if opened is not None:
            found.append(opened)
    pins: tuple[tuple[str, str], ...] = ()
    if not own and not names:
        voids = _EVERY_VOID  # the usual container: every family's void
    else:
        voids = tuple(v for v, family in _VOIDS if family not in own and v[0] not in names)
        if own:
            # A device container's own variable where no plugin of its family sets it (AMD:
            # the image's `all` would stand), and its sharing limiter's safe values.
            pins = tuple(
                v for v, family in _VOIDS if family in own & _VOID_IN_DEVICES and v[0] not in names
            )
            pins += _share_values(container, own, names)
    return found, Candidate(c, voids, cuda, env_from, device, pins, opened is not None)


def pin_note(name: str, value: str, where: str) -> str:
    """The note saying a pin was written: why a device container gets it."""
    if name in VOID_FAMILIES:
        family = VOID_FAMILIES[name]
        return (
            f"set {name}={value} in {where}: its {family.noun}s come as device nodes, not from "
            "its image"
        )
    return f"set {name}={value} in {where}: the image must not switch off its share's limits"


def _share_values(
    container: Mapping[str, Any], own: frozenset[str], names: set[str]
) -> tuple[tuple[str, str], ...]:
    """The (variable, safe value) pairs of the sharing limiters whose resources the container
    requests, for the variables it does not set itself."""
    found: tuple[tuple[str, str], ...] = ()
    resources = container.get("resources")
    if not is_mapping(resources):
        return found
    for family in _SHARE_FAMILIES:
        if family.name not in own:
            continue
        keys = [
            key
            for values in (resources.get("limits"), resources.get("requests"))
            if is_mapping(values)
            for key in values
            if isinstance(key, str) and family.shares(key) and nonzero(values, key)
        ]
        if keys:
            found += tuple(pair for pair in family.share_env if pair[0] not in names)
    return found


def findings(
    pod: PodSpecRef,
    devices: Mapping[int, frozenset[str]],
    request: str,
    runtime_classes: Mapping[str, str] | None = None,
    env_ignored: Iterable[str] = (),
    containers: Iterable[ContainerRef] | None = None,
) -> tuple[list[AccessFinding], list[Candidate]]:
    """Every way one pod spec's containers could reach devices beyond what they request, and
    the pod's device annotations and runtime class; and per container what `void` may close.

    `devices` maps id(container) to the device families it requests (its extended resources,
    a GPU DRA claim); `request` is the NVIDIA resource to advise; `runtime_classes` maps a
    vendor RuntimeClass name to its family; `env_ignored` the families whose nodes ignore
    device variables (gpuAccess.nodeSettings); `containers` the containers to judge (default:
    all of the pod's, ephemeral ones included).
    """
    # The config's tuple as it is (only `in` reads it); anything else as a frozenset.
    ignored = env_ignored if type(env_ignored) is tuple else frozenset(env_ignored)
    spec = as_dict(pod.spec)
    runtime = spec.get("runtimeClassName")
    vendor = runtime_classes.get(runtime, "") if runtime_classes and type(runtime) is str else ""
    readers = sources.readers(devices, vendor, ignored) if devices or vendor else ()
    ctx = _Context(request, device_volumes(spec), ignored, pod, readers)
    found: list[AccessFinding] = []
    candidates: list[Candidate] = []
    if vendor and isinstance(runtime, str):
        family = family_named(vendor)
        requested: set[str] = set()
        for fams in devices.values():
            requested |= fams
        if patterns.kai_fraction_container(pod) is not None:
            requested.add("nvidia")  # KAI's scheduler counts the fraction's GPU
        if family is not None and family.name not in requested:
            noun, advice = _advice_for(family, ctx)
            found.append(
                AccessFinding(
                    "",
                    f"runtimeClassName {_value(runtime)} runs {family.vendor}'s runtime but the "
                    f"pod requests no {noun}",
                    f"request {advice} or drop it",
                )
            )
    for key in as_dict(pod.annotations):
        if isinstance(key, str) and key.startswith(DEVICE_ANNOTATION_PREFIXES):
            if key.startswith("mounts."):
                what, advice = "names host mounts", "remove it"
            else:
                what, advice = "names devices", f"request {request} or a DRA claim instead"
            found.append(AccessFinding("", f"annotation {cut(key, _MAX_KEY)} {what}", advice))
    if containers is None:
        ephemeral = ephemeral_containers(spec)
        refs: Iterable[ContainerRef] = (
            (*pod.containers, *ephemeral) if ephemeral else pod.containers
        )
    else:
        refs = containers
    for c in refs:
        own = devices.get(id(c.container), _NONE)
        more, candidate = container_findings(c, own, ctx)
        found += more
        candidates.append(candidate)
    if not found:
        return found, candidates
    # The same text twice (a duplicated env entry) is one finding.
    unique = list({f.text(): f for f in found}.values())
    return unique, candidates
