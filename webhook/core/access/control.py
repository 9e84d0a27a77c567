"""GPU access control (SPEC §12): a container reaches GPUs only through what quotas, CRLs and
the scheduler count — GPU extended resources and GPU DRA claims.

Pure: one pod spec's containers, which of them are GPU containers, and the config in; findings
(what a container could reach GPUs through without requesting one) and the containers whose
image would hand them every GPU out. evaluate.py turns them into warnings, denials or the
NVIDIA_VISIBLE_DEVICES=void change by `gpuAccess.mode`.

Which node configurations honour each path, with NVIDIA's and the runtimes' sources, is in
docs/concepts/gpu-access.md; the code cites what each rule relies on.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from webhook.core.base.shapes import is_mapping
from webhook.core.base.wording import cut
from webhook.core.workloads.devices import (
    CDI_ANNOTATION_PREFIXES,
    DEVICE_ENV_NAMES,
    NO_DEVICE_VALUES,
    VISIBLE_DEVICES,
)
from webhook.core.workloads.pods import ContainerRef, PodSpecRef

# The device-list strategy "volume-mounts" (k8s-device-plugin DEVICE_LIST_STRATEGY): the
# plugin mounts /dev/null at /var/run/nvidia-container-devices/<id> and the toolkit reads the
# container's mounts under this path as its device request
# (nvidia-container-toolkit internal/config/image: DeviceListAsVolumeMountsRoot).
DEVICE_LIST_MOUNT_ROOT = "/var/run/nvidia-container-devices"
# Host paths whose mount reaches GPU device nodes: /dev itself, NVIDIA's nodes (/dev/nvidia0,
# /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-caps/...), DRM render nodes (/dev/dri) and
# /dev/char (links to every character device by major:minor). "/" holds them all.
_DEVICE_PATHS = ("/dev/nvidia", "/dev/dri", "/dev/char")

RULE = "gpu access"
# The policy findings are reported under (audit, policy reports, a denial's "About these
# policies"): the webhook config's gpuAccess, not a CRL.
POLICY = "gpu-access"
_MAX_VALUE = 24
_MAX_PATH = 48


class AccessFinding(NamedTuple):
    """A way to reach GPUs without requesting one: `what` is said of the container (or the pod,
    when `container` is empty), `advice` what to do instead."""

    container: str  # `container "app"`, or "" for the pod (an annotation)
    what: str
    advice: str
    gpu: bool = False  # said of a GPU container (that chooses devices beyond its request)

    def text(self) -> str:
        """`container "app" sets NVIDIA_VISIBLE_DEVICES=all but requests no GPU: request ...`"""
        if not self.container:
            return f"{self.what}: {self.advice}"
        if self.gpu:
            return f"{self.container} {self.what}: {self.advice}"
        return f"{self.container} {self.what} but requests no GPU: {self.advice}"


def _value(text: str) -> str:
    return cut(text, _MAX_VALUE)


class EnvScan(NamedTuple):
    """What one pass over a container's env found. Any entry of a device variable that names
    devices counts, not only the last one of its name (which is what the kubelet and the
    toolkit keep): an admission answer must not depend on which duplicate a reader keeps."""

    device: Mapping[str, Any] | None  # the first entry of a device variable that names devices
    visible: bool  # NVIDIA_VISIBLE_DEVICES is set, to anything
    cuda: bool  # CUDA_VERSION or NVIDIA_REQUIRE_CUDA is set


_NO_ENV = EnvScan(None, False, False)
_CUDA_ENV = frozenset({"CUDA_VERSION", "NVIDIA_REQUIRE_CUDA"})
_DEVICE_ENV = frozenset(DEVICE_ENV_NAMES)


def _names_devices(entry: Mapping[str, Any]) -> bool:
    value = entry.get("value")
    text = value if isinstance(value, str) else ""
    return "valueFrom" in entry or text.strip().lower() not in NO_DEVICE_VALUES


def scan_env(container: Mapping[str, Any]) -> EnvScan:
    env = container.get("env")
    if type(env) is not list or not env:
        return _NO_ENV
    device: Mapping[str, Any] | None = None
    visible = cuda = False
    for entry in env:
        if not is_mapping(entry):
            continue
        name = entry.get("name")
        if type(name) is not str:
            continue
        if name in _DEVICE_ENV:
            if name == VISIBLE_DEVICES:
                visible = True
            if device is None and _names_devices(entry):
                device = entry
        elif name in _CUDA_ENV:
            cuda = True
    return EnvScan(device, visible, cuda)


def _env_finding(entry: Mapping[str, Any], label: str, request: str) -> AccessFinding:
    name = str(entry.get("name"))
    value = entry.get("value")
    text = value if isinstance(value, str) else ""
    if "valueFrom" in entry and not text:
        return AccessFinding(label, f"sets {name} from valueFrom", f"request {request} instead")
    return AccessFinding(
        label, f"sets {name}={_value(text)}", f"request {request} or set it to void"
    )


def _normpath(path: str) -> str:
    """`path` as the kernel resolves it without links: `//dev//dri/../dri` is /dev/dri."""
    norm = posixpath.normpath("/" + path.strip())
    # POSIX keeps a leading "//" (implementation-defined); Linux treats it as "/".
    return "/" + norm.lstrip("/")


def device_host_path(path: str) -> bool:
    """Whether a hostPath volume of `path` reaches GPU device nodes."""
    if not path.strip():
        return False
    norm = _normpath(path)
    if norm in ("/", "/dev"):
        return True
    return any(norm == p or norm.startswith(p) for p in _DEVICE_PATHS)


def _device_volumes(spec: Mapping[str, Any]) -> dict[str, str]:
    """volume name -> host path, for the pod's hostPath volumes that reach device nodes."""
    volumes = spec.get("volumes")
    found: dict[str, str] = {}
    if type(volumes) is not list:
        return found
    for volume in volumes:
        if not is_mapping(volume) or "hostPath" not in volume:
            continue
        if not isinstance(volume.get("name"), str):
            continue
        host = volume.get("hostPath")
        path = host.get("path") if isinstance(host, Mapping) else None
        if isinstance(path, str) and device_host_path(path):
            found[volume["name"]] = path
    return found


def _mount_findings(
    container: Mapping[str, Any], label: str, devices: Mapping[str, str], request: str
) -> list[AccessFinding]:
    mounts = container.get("volumeMounts")
    findings: list[AccessFinding] = []
    if type(mounts) is not list:
        return findings
    for mount in mounts:
        if not is_mapping(mount):
            continue
        name, at = mount.get("name"), mount.get("mountPath")
        if isinstance(name, str) and name in devices:
            findings.append(
                AccessFinding(
                    label,
                    f"mounts host path {cut(devices[name], _MAX_PATH)}",
                    f"request {request} instead",
                )
            )
        elif isinstance(at, str) and "nvidia-container-devices" in at:
            norm = _normpath(at)
            if norm == DEVICE_LIST_MOUNT_ROOT or norm.startswith(DEVICE_LIST_MOUNT_ROOT + "/"):
                findings.append(
                    AccessFinding(
                        label,
                        f"mounts {cut(norm, _MAX_PATH)}",
                        f"request {request} instead",
                    )
                )
    return findings


def _privileged(container: Mapping[str, Any]) -> bool:
    context = container.get("securityContext")
    return is_mapping(context) and context.get("privileged") is True


def _label(c: ContainerRef) -> str:
    kind = "init container" if c.list_name == "initContainers" else "container"
    return f'{kind} "{c.name}"'


def _override(scan: EnvScan, label: str) -> AccessFinding | None:
    """A GPU container's own NVIDIA_VISIBLE_DEVICES naming devices: the kubelet appends the
    container's env after the device plugin's (pkg/kubelet/kubelet_pods.go
    GenerateRunContainerOptions) and the runtime keeps the last value (containerd
    pkg/oci/spec_opts.go replaceOrAppendEnvValues), so under the plugin's default `envvar`
    device-list strategy it replaces the GPUs it was given (NVIDIA/k8s-device-plugin#90)."""
    entry = scan.device
    if entry is None or entry.get("name") != VISIBLE_DEVICES:
        return None
    value = entry.get("value")
    text = value if isinstance(value, str) else ""
    shown = "from valueFrom" if "valueFrom" in entry and not text else f"={_value(text)}"
    return AccessFinding(
        label,
        f"sets {VISIBLE_DEVICES}{shown}",
        "remove it: the device plugin sets the GPUs a container gets",
        gpu=True,
    )


class Candidate(NamedTuple):
    """A container that requests no GPU and sets no NVIDIA_VISIBLE_DEVICES: one `void` may be
    added to, when its image (or its CUDA env, `cuda`) would hand it every GPU."""

    ref: ContainerRef
    cuda: bool


def findings(
    pod: PodSpecRef,
    gpu: Iterable[ContainerRef],
    request: str,
    runtime_classes: frozenset[str] = frozenset(),
) -> tuple[list[AccessFinding], list[Candidate]]:
    """Every way one pod spec's containers that are not in `gpu` could reach GPUs, GPU
    containers that choose their own devices, and the pod's CDI device annotations (whatever
    its containers request: a device a runtime injects from an annotation is counted by
    nothing). `request` is the resource to advise; `runtime_classes` the RuntimeClasses whose
    handler is NVIDIA's runtime (a pod that requests no GPU has no use for them).

    Also returns the containers NVIDIA_VISIBLE_DEVICES=void may be added to (Candidate)."""
    found: list[AccessFinding] = []
    candidates: list[Candidate] = []
    gpu = list(gpu)
    runtime = pod.spec.get("runtimeClassName")
    if not gpu and isinstance(runtime, str) and runtime in runtime_classes:
        found.append(
            AccessFinding(
                "",
                f"runtimeClassName {_value(runtime)} runs NVIDIA's runtime for a pod requesting "
                "no GPU",
                f"request {request} or drop runtimeClassName",
            )
        )
    for key in pod.annotations:
        if isinstance(key, str) and key.startswith(CDI_ANNOTATION_PREFIXES):
            found.append(
                AccessFinding(
                    "",
                    f"annotation {_value(key)} names devices for the runtime",
                    f"request {request} or a GPU DRA claim instead",
                )
            )
    gpu_ids = {id(c.container) for c in gpu}
    devices = _device_volumes(pod.spec)
    for c in pod.containers:
        scan = scan_env(c.container)
        if id(c.container) in gpu_ids:
            if scan.device is not None:
                label = _label(c)
                override = _override(scan, label)
                if override is not None:
                    found.append(override)
            continue
        if not scan.visible:
            candidates.append(Candidate(c, scan.cuda))
        privileged = _privileged(c.container)
        mounts = c.container.get("volumeMounts")
        if scan.device is None and not privileged and not mounts:
            continue
        label = _label(c)
        if scan.device is not None:
            found.append(_env_finding(scan.device, label, request))
        if privileged:
            found.append(
                AccessFinding(
                    label,
                    "is privileged",
                    "drop privileged or run it in a namespace exempt from gpuAccess",
                )
            )
        if mounts:
            found += _mount_findings(c.container, label, devices, request)
    return found, candidates
