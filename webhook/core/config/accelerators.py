"""The webhook config's part for accelerators beyond NVIDIA (SPEC §13): per vendor, the node
labels that carry its driver release and its device, in order, and the admin's image table."""

from __future__ import annotations

from functools import cached_property
from typing import Literal

from pydantic import field_validator

from webhook.core.config.fields import ConfigModel, label_key_problem


def _key(value: str) -> str:
    problem = label_key_problem(value)
    if problem:
        raise ValueError(problem)
    return value


class DriverLabel(ConfigModel):
    """A node label naming the vendor's driver: its release as the vendor's matrix names it
    (`release`), or a kernel module version the shipped table maps to a release
    (`kernelModule`: the AMD labeller's amd.com/gpu.driver-version)."""

    # The node label key.
    key: str
    # What its value is: the driver release, or the kernel module's version.
    value: Literal["release", "kernelModule"] = "release"

    @field_validator("key")
    @classmethod
    def _valid(cls, value: str) -> str:
        return _key(value)


class AcceleratorImage(ConfigModel):
    """Admin table entry: images matching `image` (shell-style glob) need runtime `version`
    (ROCm "6.4", CANN "8.3.RC1") and, when listed, run only on these devices (gfx targets,
    Ascend chips)."""

    # A shell-style glob matched against the image reference (Docker's short form).
    image: str
    # The runtime version the matching images need.
    version: str
    # The devices their code is built for (gfx942, gfx94X, 910b); empty: not checked.
    devices: tuple[str, ...] = ()


class VendorGate(ConfigModel):
    """How the gate of one vendor reads the cluster (SPEC §13)."""

    # Place this vendor's pods on nodes whose driver and device run their images.
    enabled: bool = True
    # Labels naming the node's driver, in order: the first one a node carries is read (so an
    # admin's label, listed first, wins over the vendor labeller's).
    driver_labels: tuple[DriverLabel, ...] = ()
    # Labels naming the node's device (a PCI device id, a chip name), first carried one read.
    device_labels: tuple[str, ...] = ()
    # Images whose runtime nothing else tells (checked before the tag and shipped knowledge).
    image_table: tuple[AcceleratorImage, ...] = ()

    @field_validator("device_labels")
    @classmethod
    def _keys(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for key in value:
            _key(key)
        return value

    # cached_property: read by every review of the vendor's pods (as WebhookConfig's).
    @cached_property
    def keys(self) -> frozenset[str]:
        """Every label key the gate reads (kept by the node inventory)."""
        return frozenset((*(d.key for d in self.driver_labels), *self.device_labels))


# AMD: the admin's release label (SPEC §13, the amdgpu driver release as AMD's matrix names
# it), then the AMD labeller's kernel module version and PCI device id (ROCm/k8s-device-plugin
# cmd/k8s-node-labeller/main.go: "driver-version" reads /sys/.../driver/module/version,
# "device-id" the PCI id; both under the amd.com/gpu. prefix).
DEFAULT_ROCM = VendorGate(
    driver_labels=(
        DriverLabel(key="amdgpu-driver-release"),
        DriverLabel(key="amd.com/gpu.driver-version", value="kernelModule"),
    ),
    device_labels=("amd.com/gpu.device-id",),
)
# Ascend: the admin's HDK label (clusters before mind-cluster v26.1), then mind-cluster's
# huawei.com/driver.version (the HDK version), and the chip labels mind-cluster's device plugin
# sets (Ascend/mind-cluster ascend-common api label: node.kubernetes.io/npu.chip.name,
# accelerator-type).
DEFAULT_CANN = VendorGate(
    driver_labels=(
        DriverLabel(key="ascend-driver-version"),
        DriverLabel(key="huawei.com/driver.version"),
    ),
    device_labels=("node.kubernetes.io/npu.chip.name", "accelerator-type"),
)


class Accelerators(ConfigModel):
    """The driver-release gates of accelerators beyond NVIDIA, by vendor."""

    # AMD ROCm: amdgpu driver release and GPU target.
    rocm: VendorGate = DEFAULT_ROCM
    # Huawei Ascend CANN: Ascend HDK version and chip.
    cann: VendorGate = DEFAULT_CANN

    def gate(self, vendor: str) -> VendorGate | None:
        return self.rocm if vendor == "rocm" else self.cann if vendor == "cann" else None

    @cached_property
    def keys(self) -> frozenset[str]:
        return self.rocm.keys | self.cann.keys
