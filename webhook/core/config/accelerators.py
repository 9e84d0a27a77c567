"""The webhook config's part for accelerators beyond NVIDIA (SPEC §13): per vendor, the node
labels that carry its driver release and its device, in order, the admin's image table, and the
rows an admin adds to the shipped tables (webhook/data/accelerators.yaml): kernel module ->
release, release -> runtimes, device label value -> device. A vendor section that sets some
keys keeps the shipped defaults of the others (a Helm override of `imageTable` alone keeps the
label settings), and admin rows are added to the shipped ones, never instead of them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cached_property
from typing import Any, Literal

from pydantic import ValidationInfo, field_validator

from webhook.core.config.fields import ConfigModel, label_key_problem

# Versions as the vendors write them: 30.20, 6.4.1, 6.19.14.31400000, 25.3.RC1, 26.0.rc1.2,
# 9.0.0-beta.1, 8.3.RC1.alpha003 (a leading v is allowed: v9.1.0).
_VERSION = re.compile(
    r"v?[0-9]{1,4}(\.(?:[0-9]{1,10}|rc[0-9]{1,3}|alpha[0-9]{1,3}|beta[0-9]{1,3})){0,4}"
    r"(-(?:alpha|beta)\.?[0-9]{1,3}|-[0-9]{1,10})?",
    re.IGNORECASE,
)


def version_format_problem(value: str, what: str) -> str:
    """'' when `value` is a version as the vendors write them, else a sentence saying so."""
    if _VERSION.fullmatch(value.strip()) and value == value.strip():
        return ""
    return f"{what} must be a version like 30.20, 6.19.14, 25.3.RC1 or 9.0.0-beta.1, got {value!r}"


def _version(value: str, what: str) -> str:
    problem = version_format_problem(value, what)
    if problem:
        raise ValueError(problem)
    return value


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


# Where an admin row says it comes from when it does not say (`gpu-webhook tables` shows it).
CONFIG_SOURCE = "webhook config"


class ModuleRow(ConfigModel):
    """Admin row: a kernel module version (what the vendor's labeller publishes, e.g. the AMD
    labeller's amd.com/gpu.driver-version) is part of this driver release."""

    # The module version; it also covers its longer forms (6.16.6 covers 6.16.6.30200000).
    value: str
    # The driver release the vendor's compatibility table names (30.20, 31.40).
    release: str
    # Where the admin read it (shown by `gpu-webhook tables`).
    source: str = CONFIG_SOURCE

    @field_validator("value", "release")
    @classmethod
    def _versions(cls, value: str, info: ValidationInfo) -> str:
        return _version(value, f"modules[].{info.field_name}")


class ReleaseRow(ConfigModel):
    """Admin row of the compatibility table: this driver release runs these runtime versions
    (ROCm 7.2, CANN 9.1); with `devices`, only on those devices."""

    # The driver release (30.20, 26.1.0); it covers its patch releases (30.20.1).
    release: str
    # The runtime versions it runs (7.2 covers 7.2.1).
    runtimes: tuple[str, ...]
    # When listed, the row holds only on these devices (gfx942, 910b).
    devices: tuple[str, ...] = ()
    # Where the admin read it (shown by `gpu-webhook tables`).
    source: str = CONFIG_SOURCE

    @field_validator("release")
    @classmethod
    def _release(cls, value: str) -> str:
        return _version(value, "releases[].release")

    @field_validator("runtimes")
    @classmethod
    def _runtimes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("releases[].runtimes must list at least one runtime version")
        for runtime in value:
            _version(runtime, "releases[].runtimes[]")
        return value


class DeviceRow(ConfigModel):
    """Admin row: a node's device label value (a PCI device id, a chip name) is this device
    (a gfx target, an Ascend chip as CANN images name it)."""

    # The label value (74a5, 910B3, Ascend910_9391); compared case-insensitively.
    value: str
    # The device it is (gfx942, 910b, a3, 950).
    device: str
    # Where the admin read it (shown by `gpu-webhook tables`).
    source: str = CONFIG_SOURCE

    @field_validator("value", "device")
    @classmethod
    def _plain(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", value):
            raise ValueError(
                f"devices[] values must be 1-63 letters, digits, '_', '.' or '-', got {value!r}"
            )
        return value


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
    # Rows added to the shipped tables (webhook/data/accelerators.yaml), e.g. a driver release
    # newer than the webhook: kernel module -> release, release -> runtimes, label -> device.
    modules: tuple[ModuleRow, ...] = ()
    releases: tuple[ReleaseRow, ...] = ()
    devices: tuple[DeviceRow, ...] = ()

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

    @field_validator("rocm", "cann", mode="before")
    @classmethod
    def _over_defaults(cls, value: Any, info: ValidationInfo) -> Any:
        """A vendor section keeps the shipped default of every key it does not set: the
        `imageTable` a Helm override sets alone never drops the label settings."""
        if not isinstance(value, Mapping):
            return value
        default = _DEFAULTS[str(info.field_name)]
        merged: dict[str, Any] = {}
        for name, field in VendorGate.model_fields.items():
            alias = field.alias or name
            if name not in value and alias not in value:
                merged[alias] = getattr(default, name)
        return {**merged, **value}

    def gate(self, vendor: str) -> VendorGate | None:
        return self.rocm if vendor == "rocm" else self.cann if vendor == "cann" else None

    @cached_property
    def keys(self) -> frozenset[str]:
        return self.rocm.keys | self.cann.keys


_DEFAULTS = {"rocm": DEFAULT_ROCM, "cann": DEFAULT_CANN}
