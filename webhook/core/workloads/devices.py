"""The names NVIDIA's container stack reads as device requests (SPEC §12): shared by GPU access
control (access/control.py) and the update comparison (workloads/pods.py), which must agree on them.
No imports: both sides may use it."""

from __future__ import annotations

# nvidia-container-toolkit internal/config/image/cuda_image.go: the device request is read from
# NVIDIA_VISIBLE_DEVICES (EnvVarNvidiaVisibleDevices); "void" and empty behave like runc (no GPU,
# no driver), "none" mounts the driver but no device (VisibleDevicesFromEnvVar, and the
# toolkit's docs "docker-specialized.md"). Any other value (`all`, indexes, UUIDs) names devices.
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
NO_DEVICE_VALUES = frozenset({"", "void", "none"})
VOID = "void"
# Environment variables the toolkit reads as device requests besides NVIDIA_VISIBLE_DEVICES
# (internal/config/image/cuda_image.go): MIG configuration and monitoring capabilities
# (NVIDIA_MIG_CONFIG_DEVICES, NVIDIA_MIG_MONITOR_DEVICES) and IMEX channels
# (NVIDIA_IMEX_CHANNELS). A container that requests no GPU has no business setting them.
DEVICE_ENV_NAMES = (
    VISIBLE_DEVICES,
    "NVIDIA_MIG_CONFIG_DEVICES",
    "NVIDIA_MIG_MONITOR_DEVICES",
    "NVIDIA_IMEX_CHANNELS",
)
# container-device-interface pkg/cdi annotations.go: AnnotationPrefix "cdi.k8s.io/"; the
# toolkit in cdi mode injects the devices such an annotation names when it reaches the OCI spec
# (containerd passes pod annotations there only with a `pod_annotations` setting). NVIDIA's NRI
# plugin (toolkit >= 1.20, ClusterPolicy cdi.nriPluginEnabled) injects the devices named by pod
# annotations `nvidia.cdi.k8s.io/...` from any namespace (nvidia-container-toolkit
# cmd/nvidia-ctk-installer/container/runtime/nri/plugin.go). Device plugins write theirs into the
# container's CRI config, never onto the pod: a pod annotation with either is a user's.
CDI_ANNOTATION_PREFIXES = ("cdi.k8s.io/", "nvidia.cdi.k8s.io")
