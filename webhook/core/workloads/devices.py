"""The names node runtimes read as device requests (SPEC §12), from the device families
(core/families): shared by GPU access control (access/control.py) and the update comparison
(evaluation/updates.py), which must agree on them."""

from __future__ import annotations

from webhook.core.families.catalog import FAMILIES

# nvidia-container-toolkit internal/config/image/cuda_image.go: the device request is read from
# NVIDIA_VISIBLE_DEVICES (EnvVarNvidiaVisibleDevices); "void" and empty behave like runc (no GPU,
# no driver), "none" mounts the driver but no device (VisibleDevicesFromEnvVar, and the
# toolkit's docs "docker-specialized.md"). Any other value (`all`, indexes, UUIDs) names devices.
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
# How each vendor's runtime reads a value (which values select no device) is the runtime's own:
# core/families/visible.py.
VOID = "void"
# Every vendor's device-selection variables (NVIDIA_VISIBLE_DEVICES, NVIDIA_MIG_CONFIG_DEVICES,
# NVIDIA_MIG_MONITOR_DEVICES, NVIDIA_IMEX_CHANNELS, AMD_VISIBLE_DEVICES,
# ASCEND_VISIBLE_DEVICES, ...): the families say which runtime reads which.
DEVICE_ENV_NAMES = tuple(dict.fromkeys(name for f in FAMILIES for name in f.device_env))
DEVICE_ENV_PREFIXES = tuple(dict.fromkeys(p for f in FAMILIES for p in f.device_env_prefixes))
_LIMITER_EXACT = frozenset(p for f in FAMILIES for p in f.limiter_env if not p.endswith("*"))
_LIMITER_PREFIXES = tuple(p[:-1] for f in FAMILIES for p in f.limiter_env if p.endswith("*"))
# What access_env() accepts, as exact names and prefixes (the native policy's update check
# compares the same env entries: evaluation/updates.py update_reads).
ACCESS_ENV_EXACT = frozenset(DEVICE_ENV_NAMES) | _LIMITER_EXACT
ACCESS_ENV_PREFIXES = DEVICE_ENV_PREFIXES + _LIMITER_PREFIXES


def access_env(name: str) -> bool:
    """Whether GPU access control reads the env variable `name`: a device-selection variable
    of any vendor or a sharing limiter's control."""
    return (
        name in DEVICE_ENV_NAMES
        or name in _LIMITER_EXACT
        or name.startswith(DEVICE_ENV_PREFIXES)
        or name.startswith(_LIMITER_PREFIXES)
    )


# Pod annotations a node component reads as devices or mounts for the pod's containers. Each
# is a key prefix, as its reader tests it:
#  - container-device-interface pkg/cdi annotations.go: AnnotationPrefix "cdi.k8s.io/" (the
#    toolkit in cdi mode, and containerd with CDI, inject the devices such an annotation names);
#  - NVIDIA's NRI plugin (nvidia-container-toolkit cmd/nvidia-ctk-installer/container/runtime/
#    nri/plugin.go nriCDIAnnotationDomain "nvidia.cdi.k8s.io"), from any namespace;
#  - containerd/nri plugins/device-injector: devices.noderesource.dev, mounts.noderesource.dev,
#    cdi-devices.noderesource.dev, each as `<key>`, `<key>/pod` or `<key>/container.<name>`,
#    and their deprecated devices.nri.io, mounts.nri.io, cdi-devices.nri.io;
#  - CRI-O: devices.crio.io (and `devices.crio.io/<container>`), the current name, and its
#    deprecated io.kubernetes.cri-o.Devices, honoured where the runtime handler's
#    allowed_annotations list either (cri-o pkg/annotations/v2 annotations.go Devices, V1Devices;
#    GetAnnotationValue prefers the new name and falls back to the old).
# Device plugins and DRA drivers write theirs into the container's CRI config, never onto the
# pod: a pod annotation with any of them is a user's.
DEVICE_ANNOTATION_PREFIXES = (
    "cdi.k8s.io/",
    "nvidia.cdi.k8s.io",
    "devices.noderesource.dev",
    "mounts.noderesource.dev",
    "cdi-devices.noderesource.dev",
    "devices.nri.io",
    "mounts.nri.io",
    "cdi-devices.nri.io",
    "io.kubernetes.cri-o.Devices",
    "devices.crio.io",
)
