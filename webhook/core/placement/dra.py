"""DRA ResourceSlices as node inventory facts (SPEC §13 "DRA inventory"), for nodes without labels.

A DRA driver publishes its devices in ResourceSlices (resource.k8s.io/v1, GA in Kubernetes
1.34), one or more per node and driver. Of a slice the inventory keeps the node it describes and
three attributes, nothing else:

- `gpu.nvidia.com`: `cudaDriverVersion` (the highest CUDA version the node's driver supports)
  and `cudaComputeCapability`, both semver `VersionValue`s (NVIDIA/k8s-dra-driver-gpu
  `cmd/gpu-kubelet-plugin/deviceinfo.go`, `GpuInfo.GetDevice` and `MigDeviceInfo.GetDevice`:
  `"cudaDriverVersion": {VersionValue: semver.MustParse(d.cudaDriverVersion).String()}`, e.g.
  `12.8.0`, and `"cudaComputeCapability"`, e.g. `9.0.0`);
- `gpu.amd.com`: `driverVersion`, the amdgpu kernel module's version cut to MAJOR.MINOR.PATCH
  (ROCm/k8s-gpu-dra-driver `cmd/gpu-kubeletplugin/deviceinfo.go`, `AmdGpuInfo.GetDevice`:
  `"driverVersion": {VersionValue: amdgpu.SemverDriverVersion(d.DriverVersion)}`;
  `pkg/amdgpu/amdgpu.go` SemverDriverVersion keeps the first three fields of e.g.
  `6.19.14.31400000`; the driver name is `pkg/consts/consts.go` `DriverName = "gpu.amd.com"`).
  It is the same kernel-module version the AMD labeller's `amd.com/gpu.driver-version` carries.

Two more attributes are kept for display (`gpu-webhook nodes`), never for placement, and
compare equal whatever they hold: `productName` (both drivers: NVIDIA's from NVML,
`deviceinfo.go` `"productName": {StringValue: &d.productName}`, e.g. `NVIDIA H100 80GB HBM3`;
AMD's from sysfs `/sys/class/drm/card<N>/device/product_name`, ROCm/k8s-gpu-dra-driver
`pkg/amdgpu/amdgpu.go` at 2622427, e.g. `AMD Instinct MI300X`) and NVIDIA's `driverVersion`
(the kernel driver's, semver-parsed: `570.124.06` is published as `570.124.6`; NVIDIA/
k8s-dra-driver-gpu `cmd/gpu-kubelet-plugin/deviceinfo.go` `GpuInfo.Attributes` at 2240711).
AMD's `deviceID` is not read: it is the GPU's unique id (`info.UniqueID` of the KFD topology,
`amdgpu.go`), not the PCI device id the labeller's `amd.com/gpu.device-id` carries.

Attribute names in a slice are either qualified (`gpu.nvidia.com/cudaDriverVersion`) or short,
the short form standing for the driver's own domain (k8s.io/api resource/v1 types.go,
`Device.Attributes`: "If the domain prefix is not specified, it is the driver name"); both are
read. The JSON of a v1 DeviceAttribute is `{"version": "12.8.0"}` (`VersionValue
json:"version"`). A node whose devices disagree keeps the lowest value: what every device of
the node supports.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.core.base.versions import CudaVersion

NVIDIA_DRIVER = "gpu.nvidia.com"
AMD_DRIVER = "gpu.amd.com"
DRIVERS = frozenset({NVIDIA_DRIVER, AMD_DRIVER})

# Semantic versions as DRA's VersionValue holds them (semver 2.0.0: MAJOR.MINOR.PATCH with an
# optional pre-release and build part).
_NUMBER = r"(0|[1-9]\d{0,8})"
_SEMVER = re.compile(rf"{_NUMBER}\.{_NUMBER}\.{_NUMBER}(?:[-+][0-9A-Za-z.+-]*)?")
Semver = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class DraNode:
    """What one node's DRA devices publish, as the inventory reads it (None: not published)."""

    cuda: CudaVersion | None = None  # lowest cudaDriverVersion, major.minor
    compute: CudaVersion | None = None  # lowest cudaComputeCapability, major.minor
    amdgpu: str | None = None  # lowest amdgpu driverVersion, MAJOR.MINOR.PATCH as published
    # For display only (not compared): the lowest NVIDIA driverVersion as published, and the
    # node's productName (the first in order when its devices differ, `+` marking more).
    driver: str | None = field(default=None, compare=False)
    product: str | None = field(default=None, compare=False)

    def __bool__(self) -> bool:
        return self.cuda is not None or self.compute is not None or self.amdgpu is not None


def _semver(value: Any) -> Semver | None:
    if not isinstance(value, Mapping):
        return None
    text = value.get("version")
    match = _SEMVER.fullmatch(text) if isinstance(text, str) else None
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def _attribute(attributes: Mapping[str, Any], driver: str, name: str) -> Semver | None:
    value = attributes.get(name)
    if value is None:
        value = attributes.get(f"{driver}/{name}")
    return _semver(value)


def _string(attributes: Mapping[str, Any], driver: str, name: str) -> str | None:
    value = attributes.get(name)
    if value is None:
        value = attributes.get(f"{driver}/{name}")
    text = value.get("string") if isinstance(value, Mapping) else None
    return text.strip() or None if isinstance(text, str) else None


def _product(current: str | None, found: str | None) -> str | None:
    """One product name per node: the lowest in order, with `+` when the devices differ."""
    if found is None or current == found:
        return current
    if current is None:
        return found
    names = sorted({current.rstrip("+"), found.rstrip("+")})
    return names[0] + "+"


def _low(current: Semver | None, found: Semver | None) -> Semver | None:
    if found is None:
        return current
    return found if current is None or found < current else current


def slice_facts(obj: Mapping[str, Any]) -> tuple[str, DraNode] | None:
    """(node name, facts) of one ResourceSlice of a known driver that names its node; None
    for any other slice (another driver, a slice for a node selector or all nodes, no
    attributes the inventory reads)."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return None
    driver, node = spec.get("driver"), spec.get("nodeName")
    if driver not in DRIVERS or not isinstance(node, str) or not node:
        return None
    devices = spec.get("devices")
    cuda = compute = amd = nvidia = None
    product: str | None = None
    for device in devices if isinstance(devices, list) else ():
        attributes = device.get("attributes") if isinstance(device, Mapping) else None
        if not isinstance(attributes, Mapping):
            continue
        product = _product(product, _string(attributes, driver, "productName"))
        if driver == NVIDIA_DRIVER:
            cuda = _low(cuda, _attribute(attributes, driver, "cudaDriverVersion"))
            compute = _low(compute, _attribute(attributes, driver, "cudaComputeCapability"))
            nvidia = _low(nvidia, _attribute(attributes, driver, "driverVersion"))
        else:
            amd = _low(amd, _attribute(attributes, driver, "driverVersion"))
    facts = DraNode(
        cuda=CudaVersion(cuda[0], cuda[1]) if cuda else None,
        compute=CudaVersion(compute[0], compute[1]) if compute else None,
        amdgpu=".".join(map(str, amd)) if amd else None,
        driver=".".join(map(str, nvidia)) if nvidia else None,
        product=product,
    )
    return (node, facts) if facts else None


def _lowest(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _amd_key(version: str) -> tuple[int, ...]:  # also NVIDIA's driverVersion
    return tuple(int(part) for part in version.split("."))


def merge_nodes(slices: Iterable[tuple[str, DraNode]]) -> dict[str, DraNode]:
    """Per node, the lowest of what its slices publish (several pools, several drivers)."""
    nodes: dict[str, DraNode] = {}
    for name, facts in slices:
        seen = nodes.get(name)
        if seen is None:
            nodes[name] = facts
            continue
        amd = seen.amdgpu
        if facts.amdgpu is not None and (amd is None or _amd_key(facts.amdgpu) < _amd_key(amd)):
            amd = facts.amdgpu
        driver = seen.driver
        if facts.driver is not None and (
            driver is None or _amd_key(facts.driver) < _amd_key(driver)
        ):
            driver = facts.driver
        nodes[name] = DraNode(
            cuda=_lowest(seen.cuda, facts.cuda),
            compute=_lowest(seen.compute, facts.compute),
            amdgpu=amd,
            driver=driver,
            product=_product(seen.product, facts.product),
        )
    return nodes


def from_objects(objs: Iterable[Mapping[str, Any]]) -> dict[str, DraNode]:
    """The DRA facts of every node some ResourceSlice of `objs` describes (CLI, tests)."""
    return merge_nodes(
        found
        for obj in objs
        if isinstance(obj, Mapping) and (found := slice_facts(obj)) is not None
    )
