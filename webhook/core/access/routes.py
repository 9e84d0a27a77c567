"""GPU access control's findings and the routes that need no vendor variable: device-list mounts,
hostPath volumes of device nodes, privileged containers and capabilities (SPEC §12). Pure;
core/access/control.py judges a pod with them."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from webhook.core.base.quantity import parsed
from webhook.core.base.shapes import as_dict, is_mapping
from webhook.core.base.wording import cut
from webhook.core.families.catalog import FAMILIES, Family, family_of, is_device_path
from webhook.core.workloads.pods import ContainerRef

# The device-list strategy "volume-mounts" (k8s-device-plugin DEVICE_LIST_STRATEGY): the
# plugin mounts /dev/null at /var/run/nvidia-container-devices/<id> and the toolkit reads the
# container's mounts as its device request. It tests the cleaned destination with
# strings.HasPrefix(destination, "/var/run/nvidia-container-devices") — no trailing "/" — and
# takes the rest as the device: a mount at /var/run/nvidia-container-devicesall requests "all"
# (nvidia-container-toolkit internal/config/image/cuda_image.go requestsFromMounts).
DEVICE_LIST_MOUNT_ROOT = "/var/run/nvidia-container-devices"
EPHEMERAL = "ephemeralContainers"
_MAX_PATH = 48
_NO_FAMILY: frozenset[str] = frozenset()
# Capabilities NVIDIA's toolkit counts as privileged: it takes a container whose bounding set
# holds CAP_SYS_ADMIN as privileged (internal/config/image/privileged.go IsPrivileged) and then
# honours its device variables whatever accept-nvidia-visible-devices-envvar-when-unprivileged
# says; `ALL` adds it. containerd and CRI-O upper-case a name and add the "CAP_" prefix
# (containerd internal/cri/opts/spec_linux.go, CRI-O internal/config/capabilities).
_PRIVILEGED_CAPS = frozenset({"SYS_ADMIN", "CAP_SYS_ADMIN", "ALL", "CAP_ALL"})


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
    """A container `void` may be written to: `voids` are the (variable, void) pairs of the
    families it requests no device of and sets no value for; `pins` the (variable, value) pairs
    a device container gets for its own devices (the void of a family whose variable no plugin
    sets, a sharing limiter's safe value); `cuda` says its env names a CUDA version (the toolkit
    hands a legacy CUDA image every GPU); `env_from` the prefixes of its envFrom entries (""
    for none), whose values the webhook cannot see."""

    ref: ContainerRef
    voids: tuple[tuple[str, str], ...]
    cuda: bool
    env_from: tuple[str, ...]
    device: bool  # a device container (of some family)
    pins: tuple[tuple[str, str], ...]
    unseen: bool  # its envFrom is a finding already (sources.open_finding)

    # Written out: @dataclass's own __init__ stays interpreted under mypyc (pods.ContainerRef).
    def __init__(
        self,
        ref: ContainerRef,
        voids: tuple[tuple[str, str], ...],
        cuda: bool,
        env_from: tuple[str, ...],
        device: bool,
        pins: tuple[tuple[str, str], ...] = (),
        unseen: bool = False,
    ) -> None:
        self.ref = ref
        self.voids = voids
        self.cuda = cuda
        self.env_from = env_from
        self.device = device
        self.pins = pins
        self.unseen = unseen


def nonzero(values: Any, key: str) -> bool:
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
        return _NO_FAMILY
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
                and (nonzero(limits, key) or nonzero(requests, key))
            ):
                if found is None:
                    found = set()
                found.add(family.name)
    return frozenset(found) if found else _NO_FAMILY


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


def normpath(path: str) -> str:
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
    return is_device_path(normpath(path))


def path_family(norm: str) -> Family | None:
    """The one family whose device nodes `norm` reaches (None: several, as /dev/dri, or any)."""
    found = [f for f in FAMILIES if f.device_paths and norm.startswith(f.device_paths)]
    return found[0] if len(found) == 1 else None


def device_volumes(spec: Mapping[str, Any]) -> dict[str, str]:
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


def mount_findings(
    container: Mapping[str, Any],
    where: str,
    device: bool,
    devices: Mapping[str, str],
    request: str,
    advice_for: Callable[[Family], tuple[str, str]],
) -> list[AccessFinding]:
    """A container's mounts of device-node volumes (`devices`: name -> host path) and at the
    device-list prefix. `advice_for(family)` is the (noun, resource) a message advises."""
    mounts = container.get("volumeMounts")
    findings: list[AccessFinding] = []
    if type(mounts) is not list:
        return findings
    for mount in mounts:
        if not is_mapping(mount):
            continue
        name, at = mount.get("name"), mount.get("mountPath")
        if isinstance(name, str) and name in devices:
            path = devices[name]
            family = path_family(normpath(path))
            what = f"mounts host path {cut(path, _MAX_PATH)}"
            if device:
                advice = "remove it: the device plugin gives the devices"
                findings.append(AccessFinding(where, what, advice, gpu=True))
            elif family is None:
                # /dev, /dev/dri, /dev/kfd...: several vendors' nodes.
                advice = "request the device's resource instead"
                findings.append(AccessFinding(where, what, advice))
            else:
                noun, resource = advice_for(family)
                findings.append(
                    AccessFinding(where, what, f"request {resource} instead", False, noun)
                )
        elif isinstance(at, str):
            norm = normpath(at)
            if norm.startswith(DEVICE_LIST_MOUNT_ROOT):
                what = f"mounts {cut(norm, _MAX_PATH)}"
                if device:
                    advice = "remove it: the device plugin gives the devices"
                    findings.append(AccessFinding(where, what, advice, gpu=True))
                else:
                    findings.append(AccessFinding(where, what, f"request {request} instead"))
    return findings


def privilege(container: Mapping[str, Any]) -> str:
    """What makes a container privileged to a runtime: "privileged", "capability <name>"
    (SYS_ADMIN or ALL added), or ""."""
    context = container.get("securityContext")
    if not is_mapping(context):
        return ""
    if context.get("privileged") is True:
        return "privileged"
    capabilities = context.get("capabilities")
    added = capabilities.get("add") if is_mapping(capabilities) else None
    if type(added) is list:
        for name in added:
            if isinstance(name, str) and name.strip().upper() in _PRIVILEGED_CAPS:
                return f"capability {cut(name, 24)}"
    return ""


def privilege_finding(where: str, privileged: str, device: bool) -> AccessFinding:
    """The finding of a privileged container (`privileged`: what privilege() returned)."""
    if privileged == "privileged":
        # A privileged container gets every device node of its node (runc/containerd mount the
        # host's /dev; the toolkit honours its env whatever its strategy: cuda_image.go
        # VisibleDevices `if i.isPrivileged || i.acceptEnvvarUnprivileged`).
        if device:
            advice = "drop privileged: a privileged container sees every device of its node"
            return AccessFinding(where, "is privileged", advice, gpu=True)
        return AccessFinding(
            where, "is privileged", "drop privileged or exempt its namespace in gpuAccess"
        )
    what = f"adds {privileged}"
    if device:
        return AccessFinding(
            where, what, "drop it: NVIDIA's toolkit treats it as privileged", gpu=True
        )
    return AccessFinding(where, what, "drop it or exempt its namespace in gpuAccess")
