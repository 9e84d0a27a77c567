"""The webhook config's `gpuAccess` part: who may reach GPUs without requesting them (SPEC §12)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Literal

from pydantic import field_validator

from webhook.core.config.fields import ConfigModel
from webhook.core.families.catalog import FAMILIES, family_named

# The user Volcano's scheduler runs as (see GpuAccess.annotation_writers).
VOLCANO_SCHEDULER = "system:serviceaccount:volcano-system:volcano-scheduler"
# DNS-1123 label (apimachinery IsDNS1123Label): what a namespace name is.
_MAX_NAMESPACE = 63


class NodeSettings(ConfigModel):
    """What the admin declares of the nodes' runtimes (docs/concepts/gpu-access.md names the
    settings per vendor, with their sources)."""

    # Device families (`nvidia`, `amd`, `ascend`) whose nodes take no device selection from a
    # container's environment and run no sharing limiter controlled through it: NVIDIA with the
    # device plugin's `volume-mounts` or CDI device-list strategy and the toolkit's
    # `accept-nvidia-visible-devices-envvar-when-unprivileged = false`, and no HAMi-core. Then a
    # device container of that vendor with `envFrom` is no finding.
    env_ignored: tuple[str, ...] = ()
    # Which ASCEND_VISIBLE_DEVICES entry the Ascend nodes' ascend-docker-runtime reads:
    # `first-entry` (the default, the safe assumption: ascend-docker-runtime up to v5.0.0 reads
    # the first, which on containerd is the image config's) or `last-entry` (every Ascend node
    # runs MindCluster's ascend-docker-runtime v6.0.0-RC3 or later, or CRI-O). With
    # `first-entry`, an image config setting ASCEND_VISIBLE_DEVICES in a pod with an NPU
    # container is a finding, and under `enforce` its images are looked up to see it.
    ascend_runtime: Literal["first-entry", "last-entry"] = "first-entry"

    @field_validator("env_ignored")
    @classmethod
    def _families(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if family_named(name) is None:
                known = ", ".join(f.name for f in FAMILIES)
                raise ValueError(f"{name!r} is not a device family ({known})")
        return value


class GpuAccess(ConfigModel):
    """GPU access control: devices only through the resources and claims that count them.

    `mode`: `off` checks nothing at admission; `warn` answers each finding with a warning;
    `enforce` denies it, and sets every vendor's device-selection variables to their `void` in
    each container that requests no device of that vendor, so that neither its image's
    configuration nor an `envFrom` source can hand it devices.
    The audit and policy reports list the findings in every mode.
    """

    # `off`: no checks at admission; `warn`: a warning per finding; `enforce`: a denial, and
    # the device variables set to void as voidImageDevices says.
    mode: Literal["off", "warn", "enforce"] = "warn"
    # Namespaces whose pods may reach GPUs without requesting them: the GPU Operator's own
    # (its device plugin, dcgm-exporter, validators read every GPU of their node) under the
    # names its chart and OperatorHub install it in. Tenants must not be able to create these.
    # The list the admin writes is the whole list: `[]` exempts nothing.
    exempt_namespaces: tuple[str, ...] = ("gpu-operator", "nvidia-gpu-operator")
    # Under `enforce`, which containers get the device variables of the vendors they request no
    # device of (NVIDIA_VISIBLE_DEVICES=void, AMD_VISIBLE_DEVICES=void, ASCEND_VISIBLE_DEVICES
    # empty) where they set no value themselves: `all` every such container (the default: an
    # explicit env entry overrides the same name from envFrom and from the image config, so this
    # closes both routes for any image); `known` only NVIDIA's, only in containers whose image
    # the webhook knows to be built on NVIDIA's CUDA images (then envFrom in a container is a
    # finding); `off` never (envFrom is a finding).
    void_image_devices: Literal["off", "known", "all"] = "all"
    # RuntimeClasses whose handler is NVIDIA's runtime: the GPU Operator's (`nvidia`, and
    # `nvidia-cdi`/`nvidia-legacy` it creates beside it). A pod that requests no GPU and runs
    # with one of them gets whatever its image's NVIDIA_VISIBLE_DEVICES says.
    runtime_classes: tuple[str, ...] = ("nvidia", "nvidia-cdi", "nvidia-legacy")
    # Other vendors' RuntimeClasses, by family: {amd: [...], ascend: [ascend]}.
    vendor_runtime_classes: Mapping[str, tuple[str, ...]] = {}
    node_settings: NodeSettings = NodeSettings()
    # Who may change, on a running pod, an annotation one of its containers reads a device
    # variable from (MindCluster's `ASCEND_VISIBLE_DEVICES` from `fieldRef:
    # metadata.annotations['huawei.com/Ascend910']`: the kubelet reads the annotation again when
    # it restarts the container). Usernames as the API server authenticates them
    # (`system:serviceaccount:<namespace>:<name>` for a ServiceAccount); anyone else's change
    # is a finding. The default: Volcano's scheduler, whose Ascend plugin writes the NPUs it
    # allocated into that annotation (Ascend/mind-cluster at 22bb3d9,
    # component/ascend-for-volcano/internal/npu/base/task.go SetNPUTopologyToPodFn; its
    # ServiceAccount volcano-scheduler in volcano-system: build/volcano-v1.12.0.yaml).
    annotation_writers: tuple[str, ...] = (VOLCANO_SCHEDULER,)
    # The same by group (`system:serviceaccounts:<namespace>`: every ServiceAccount of it).
    annotation_writer_groups: tuple[str, ...] = ()

    @cached_property
    def runtime_class_names(self) -> frozenset[str]:
        """Every vendor RuntimeClass the config lists (what the chart's access entry sends)."""
        return frozenset(self.runtime_class_families)

    @cached_property
    def runtime_class_families(self) -> Mapping[str, str]:
        """RuntimeClass name -> the device family whose runtime it runs."""
        found = dict.fromkeys(self.runtime_classes, "nvidia")
        for family, names in self.vendor_runtime_classes.items():
            found.update(dict.fromkeys(names, family))
        return found

    @field_validator("vendor_runtime_classes")
    @classmethod
    def _vendor_families(
        cls, value: Mapping[str, tuple[str, ...]]
    ) -> Mapping[str, tuple[str, ...]]:
        for name in value:
            if family_named(name) is None:
                raise ValueError(f"{name!r} is not a device family")
        return value

    @field_validator("exempt_namespaces")
    @classmethod
    def _namespaces(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not name or len(name) > _MAX_NAMESPACE or not _is_label(name):
                raise ValueError(f"{name!r} is not a namespace name (a DNS-1123 label)")
        return value

    @field_validator("annotation_writers", "annotation_writer_groups")
    @classmethod
    def _names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not name or name != name.strip():
                raise ValueError(f"{name!r} is not a user or group name")
        return value

    @property
    def checks(self) -> bool:
        """Whether admission checks anything."""
        return self.mode != "off"


def _is_label(name: str) -> bool:
    ok = all(c.isascii() and (c.islower() or c.isdigit() or c == "-") for c in name)
    return ok and name[0] != "-" and name[-1] != "-"
