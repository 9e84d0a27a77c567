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

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from webhook.core.base.quantity import parsed
from webhook.core.base.shapes import as_dict, is_mapping
from webhook.core.base.wording import cut
from webhook.core.families.catalog import (
    FAMILIES,
    Family,
    family_named,
    family_of,
    is_device_path,
)
from webhook.core.workloads.devices import DEVICE_ANNOTATION_PREFIXES, NO_DEVICE_VALUES
from webhook.core.workloads.pods import ContainerRef, PodSpecRef

# The device-list strategy "volume-mounts" (k8s-device-plugin DEVICE_LIST_STRATEGY): the
# plugin mounts /dev/null at /var/run/nvidia-container-devices/<id> and the toolkit reads the
# container's mounts as its device request. It tests the cleaned destination with
# strings.HasPrefix(destination, "/var/run/nvidia-container-devices") — no trailing "/" — and
# takes the rest as the device: a mount at /var/run/nvidia-container-devicesall requests "all"
# (nvidia-container-toolkit internal/config/image/cuda_image.go requestsFromMounts).
DEVICE_LIST_MOUNT_ROOT = "/var/run/nvidia-container-devices"

RULE = "gpu access"
# The policy findings are reported under (audit, policy reports, a denial's "About these
# policies"): the webhook config's gpuAccess, not a CRL.
POLICY = "gpu-access"
_MAX_VALUE = 24
_MAX_PATH = 48
_NVIDIA = family_named("nvidia")
_DEVICE_FAMILIES = tuple(f for f in FAMILIES if f.device_env or f.device_env_prefixes)
_LIMITER_FAMILIES = tuple(f for f in FAMILIES if f.limiter_env)
_VOID_FAMILIES = tuple(f for f in FAMILIES if f.void is not None and f.void_env)
_CUDA_ENV = frozenset({"CUDA_VERSION", "NVIDIA_REQUIRE_CUDA"})
_ENV_FAMILY = {name: f for f in _DEVICE_FAMILIES for name in f.device_env}
_ENV_PREFIXES = tuple(p for f in _DEVICE_FAMILIES for p in f.device_env_prefixes)
_LIMITER_EXACT = {p: f for f in _LIMITER_FAMILIES for p in f.limiter_env if not p.endswith("*")}
_LIMITER_PREFIXES = tuple(
    p[:-1] for f in _LIMITER_FAMILIES for p in f.limiter_env if p.endswith("*")
)
_VOID_NAMES = frozenset(name for f in _VOID_FAMILIES for name in f.void_env)
# ((variable, void value), family name) for every family with a void, in the families' order.
_VOIDS = tuple(((name, f.void or ""), f.name) for f in _VOID_FAMILIES for name in f.void_env)
_EVERY_VOID = tuple(v for v, _ in _VOIDS)
# Variable -> its family, for the notes saying what void was written.
VOID_FAMILIES = {name: f for f in _VOID_FAMILIES for name in f.void_env}
_MAX_KEY = 48
EPHEMERAL = "ephemeralContainers"
_NONE: frozenset[str] = frozenset()


class AccessFinding(NamedTuple):
    """A way to reach devices beyond what is requested: `what` is said of the container (or
    of the pod, when `container` is empty), `advice` what to do instead."""

    container: str  # `container "app"`, or "" for the pod (an annotation, a runtime class)
    what: str
    advice: str
    gpu: bool = False  # said of a device container (that takes more than it requested)
    device: str = "GPU"  # what it requests none of (the family's noun)

    def text(self) -> str:
        """`container "app" sets NVIDIA_VISIBLE_DEVICES=all but requests no GPU: request ...`"""
        if not self.container:
            return f"{self.what}: {self.advice}"
        if self.gpu:
            return f"{self.container} {self.what}: {self.advice}"
        return f"{self.container} {self.what} but requests no {self.device}: {self.advice}"


@dataclass(slots=True)  # not a NamedTuple: built per container, and its __new__ is interpreted
class Candidate:
    """A container `void` may be written to: `voids` are the (variable, void value) pairs of
    the families it requests no device of and sets no value for; `cuda` says its env names a
    CUDA version (the toolkit hands a legacy CUDA image every GPU); `env_from` the prefixes
    of its envFrom entries ("" for none), whose values the webhook cannot see."""

    ref: ContainerRef
    voids: tuple[tuple[str, str], ...]
    cuda: bool
    env_from: tuple[str, ...]
    device: bool  # a device container (of some family)

    # Written out: @dataclass's own __init__ stays interpreted under mypyc (pods.ContainerRef).
    def __init__(
        self,
        ref: ContainerRef,
        voids: tuple[tuple[str, str], ...],
        cuda: bool,
        env_from: tuple[str, ...],
        device: bool,
    ) -> None:
        self.ref = ref
        self.voids = voids
        self.cuda = cuda
        self.env_from = env_from
        self.device = device


def _value(text: str) -> str:
    return cut(text, _MAX_VALUE)


def label(c: ContainerRef) -> str:
    """`container "app"`, `init container "setup"`, `ephemeral container "debugger"`."""
    if c.list_name == "initContainers":
        return f'init container "{c.name}"'
    if c.list_name == EPHEMERAL:
        return f'ephemeral container "{c.name}"'
    return f'container "{c.name}"'


def ephemeral_containers(spec: Mapping[str, Any]) -> tuple[ContainerRef, ...]:
    """A pod's ephemeral containers (kubectl debug; the pods/ephemeralcontainers subresource)."""
    items = as_dict(spec).get(EPHEMERAL)
    if type(items) is not list:
        return ()
    found = []
    for index, item in enumerate(items):
        if is_mapping(item):
            name = item.get("name")
            found.append(
                ContainerRef(EPHEMERAL, index, name if isinstance(name, str) else "", item)
            )
    return tuple(found)


def _nonzero(values: Any, key: str) -> bool:
    if not is_mapping(values) or key not in values:
        return False
    value = parsed(values[key])
    # A value that does not parse is not zero (its own check reports it).
    return value.error != 0 or value.numerator != 0


def container_families(container: Mapping[str, Any]) -> frozenset[str]:
    """The device families whose devices a container's extended resources request (a key set
    to zero requests none)."""
    resources = as_dict(container).get("resources")
    if not resources or not is_mapping(resources):
        return _NONE
    lists = as_dict(resources)
    limits, requests = lists.get("limits"), lists.get("requests")
    found: set[str] | None = None
    for values in (limits, requests):
        if not is_mapping(values):
            continue
        for key in as_dict(values):
            if not isinstance(key, str) or "/" not in key:
                continue
            family = family_of(key)
            if (
                family is not None
                and (found is None or family.name not in found)
                and (_nonzero(limits, key) or _nonzero(requests, key))
            ):
                if found is None:
                    found = set()
                found.add(family.name)
    return frozenset(found) if found else _NONE


def _names_devices(family: Family, entry: Mapping[str, Any]) -> bool:
    """Whether an env entry of a device variable names devices: a value the webhook cannot see
    (valueFrom) does; a value naming no device (NO_DEVICE_VALUES; NVIDIA's "void" anywhere in
    the list wins, cuda_image.go devicesFromEnvvars) does not."""
    if "valueFrom" in entry:
        return True
    value = entry.get("value")
    text = value.strip().lower() if isinstance(value, str) else ""
    if text in NO_DEVICE_VALUES:
        return False
    if family.void == "void":
        items = [item.strip() for item in text.split(",")]
        if "void" in items or all(not item for item in items):
            return False
    return True


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


def _normpath(path: str) -> str:
    """`path` as the kernel resolves it without links: `//dev//dri/../dri/` is /dev/dri (the
    kubelet passes a hostPath volume's path to the runtime as written)."""
    text = path.strip()
    # The usual mount path is normal already (absolute, no empty, "." or ".." part, no trailing
    # "/"): posixpath.normpath, interpreted (~2.7k instructions per call), would return it as is.
    normal = text[:1] == "/" and text[-1] != "/" and "//" not in text and "/." not in text
    if normal:
        return text
    norm = posixpath.normpath("/" + text)
    # POSIX keeps a leading "//" (implementation-defined); Linux treats it as "/".
    return "/" + norm.lstrip("/")


def device_host_path(path: str) -> bool:
    """Whether a hostPath volume of `path` reaches accelerator device nodes of any vendor."""
    if not path.strip():
        return False
    return is_device_path(_normpath(path))


def _path_family(norm: str) -> Family | None:
    """The one family whose device nodes `norm` reaches (None: several, as /dev/dri, or any)."""
    found = [f for f in FAMILIES if f.device_paths and norm.startswith(f.device_paths)]
    return found[0] if len(found) == 1 else None


def _device_volumes(spec: Mapping[str, Any]) -> dict[str, str]:
    """volume name -> host path, for the pod's hostPath volumes that reach device nodes."""
    volumes = as_dict(spec).get("volumes")
    found: dict[str, str] = {}
    if type(volumes) is not list:
        return found
    for volume in volumes:
        if not is_mapping(volume) or "hostPath" not in volume:
            continue
        if not isinstance(volume.get("name"), str):
            continue
        host = volume.get("hostPath")
        path = host.get("path") if is_mapping(host) else None
        if isinstance(path, str) and device_host_path(path):
            found[volume["name"]] = path
    return found


@dataclass(slots=True)  # one per pod spec: no NamedTuple either (Candidate)
class _Context:
    request: str  # the NVIDIA resource to advise (config gpuRequestAdvice)
    devices: Mapping[str, str]  # device hostPath volumes: name -> path
    # Families whose nodes ignore device variables (nodeSettings).
    env_ignored: frozenset[str] | tuple[str, ...]

    def __init__(
        self,
        request: str,
        devices: Mapping[str, str],
        env_ignored: frozenset[str] | tuple[str, ...],
    ) -> None:
        self.request = request
        self.devices = devices
        self.env_ignored = env_ignored


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
            if limiter is not None and limiter.name in own:
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
        if not _names_devices(family, entry):
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


def _mount_findings(
    container: Mapping[str, Any], where: str, device: bool, ctx: _Context
) -> list[AccessFinding]:
    mounts = container.get("volumeMounts")
    findings: list[AccessFinding] = []
    if type(mounts) is not list:
        return findings
    for mount in mounts:
        if not is_mapping(mount):
            continue
        name, at = mount.get("name"), mount.get("mountPath")
        if isinstance(name, str) and name in ctx.devices:
            path = ctx.devices[name]
            family = _path_family(_normpath(path))
            what = f"mounts host path {cut(path, _MAX_PATH)}"
            if device:
                advice = "remove it: the device plugin gives the devices"
                findings.append(AccessFinding(where, what, advice, gpu=True))
            elif family is None:
                # /dev, /dev/dri, /dev/kfd...: several vendors' nodes.
                advice = "request the device's resource instead"
                findings.append(AccessFinding(where, what, advice))
            else:
                noun, request = _advice_for(family, ctx)
                advice = f"request {request} instead"
                findings.append(AccessFinding(where, what, advice, False, noun))
        elif isinstance(at, str):
            norm = _normpath(at)
            if norm.startswith(DEVICE_LIST_MOUNT_ROOT):
                what = f"mounts {cut(norm, _MAX_PATH)}"
                if device:
                    advice = "remove it: the device plugin gives the devices"
                    findings.append(AccessFinding(where, what, advice, gpu=True))
                else:
                    findings.append(AccessFinding(where, what, f"request {ctx.request} instead"))
    return findings


def _privileged(container: Mapping[str, Any]) -> bool:
    context = container.get("securityContext")
    return is_mapping(context) and context.get("privileged") is True


def container_findings(
    c: ContainerRef, own: frozenset[str], ctx: _Context
) -> tuple[list[AccessFinding], Candidate]:
    """One container's findings, whatever it requests, and what `void` may close in it."""
    container = as_dict(c.container)
    privileged = _privileged(container)
    found, names, cuda = _env_findings(c, container, own, ctx)
    device = bool(own)
    mounts = container.get("volumeMounts")
    env_from = _env_from(container)
    # The label only where a finding can name it (most containers have none of these).
    where = label(c) if privileged or mounts or (env_from and device) else ""
    if privileged:
        # A privileged container gets every device node of its node (runc/containerd mount the
        # host's /dev; the toolkit honours its env whatever its strategy: cuda_image.go
        # VisibleDevices `if i.isPrivileged || i.acceptEnvvarUnprivileged`).
        if device:
            found.append(
                AccessFinding(
                    where,
                    "is privileged",
                    "drop privileged: a privileged container sees every device of its node",
                    gpu=True,
                )
            )
        else:
            found.append(
                AccessFinding(
                    where,
                    "is privileged",
                    "drop privileged or exempt its namespace in gpuAccess",
                )
            )
    if mounts:
        found += _mount_findings(container, where, device, ctx)
    if env_from and device:
        # envFrom comes before env in the kubelet's list (kubelet_pods.go
        # makeEnvironmentVariables), after the device plugin's: a ConfigMap key can replace the
        # plugin's choice or a sharing limit, and no value can be written over it without
        # overriding the plugin. Moot only where the admin declares that the vendor's nodes
        # ignore device variables and run no env-controlled limiter (nodeSettings).
        for name in sorted(own):
            family = family_named(name)
            if family is None or name in ctx.env_ignored:
                continue
            if family.device_env or family.limiter_env:
                noun = _advice_for(family, ctx)[0]
                found.append(
                    AccessFinding(
                        where,
                        "uses envFrom",
                        f"list its variables in env: envFrom can choose its {noun}s or raise "
                        "its limits",
                        gpu=True,
                    )
                )
                break
    if not own and not names:
        voids = _EVERY_VOID  # the usual container: every family's void
    else:
        voids = tuple(v for v, family in _VOIDS if family not in own and v[0] not in names)
    return found, Candidate(c, voids, cuda, env_from, device)


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
    ctx = _Context(request, _device_volumes(spec), ignored)
    found: list[AccessFinding] = []
    candidates: list[Candidate] = []
    runtime = spec.get("runtimeClassName")
    if runtime_classes and isinstance(runtime, str) and runtime in runtime_classes:
        family = family_named(runtime_classes[runtime])
        requested: set[str] = set()
        for fams in devices.values():
            requested |= fams
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
