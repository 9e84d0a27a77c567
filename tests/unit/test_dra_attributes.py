"""ResourceSlice attributes read per vendor (issue 47 item 4): besides the placement facts
(cudaDriverVersion, cudaComputeCapability, AMD's driverVersion), NVIDIA's driverVersion and
both drivers' productName, kept for display (`gpu-webhook nodes`); AMD's deviceID (a per-GPU
unique id, not the PCI device id) is never read."""

from __future__ import annotations

from typing import Any

from tests.unit.test_placement_dra import amd_slice, gpu_device, nvidia_slice, resource_slice
from webhook.core.base.versions import CudaVersion
from webhook.core.placement.dra import DraNode, from_objects, slice_facts


def test_nvidia_driver_version_and_product_are_read_qualified_or_short() -> None:
    for qualified in (False, True):
        found = slice_facts(nvidia_slice("dra-1", ("12.8.0", "9.0.0"), qualified=qualified))
        assert found is not None
        node, facts = found
        assert (node, facts.driver, facts.product) == (
            "dra-1",
            "570.124.6",
            "NVIDIA A100-SXM4-40GB",
        )
        assert facts == DraNode(cuda=CudaVersion(12, 8), compute=CudaVersion(9, 0))


def amd_with(product: str, device_id: str = "0x1234567890abcdef") -> dict[str, Any]:
    obj = amd_slice("mi-1", "6.12.12")
    attributes = obj["spec"]["devices"][0]["attributes"]
    attributes["productName"] = {"string": product}
    attributes["deviceID"] = {"string": device_id}
    return obj


def test_amd_product_is_read_and_device_id_is_not() -> None:
    found = slice_facts(amd_with("AMD Instinct MI300X"))
    assert found is not None
    assert found[1].product == "AMD Instinct MI300X"
    assert found[1].amdgpu == "6.12.12"
    assert found[1].driver is None  # NVIDIA's attribute only


def test_a_node_with_different_products_shows_the_first_with_a_plus() -> None:
    devices = [gpu_device("gpu-0", "12.8.0", "9.0.0"), gpu_device("gpu-1", "12.8.0", "8.0.0")]
    devices[1]["attributes"]["productName"] = {"string": "NVIDIA A10"}
    devices[1]["attributes"]["driverVersion"] = {"version": "550.54.15"}
    nodes = from_objects([resource_slice("s", "dra-1", "gpu.nvidia.com", devices)])
    assert nodes["dra-1"].product == "NVIDIA A10+"
    assert nodes["dra-1"].driver == "550.54.15"  # the lowest
    assert nodes["dra-1"].compute == CudaVersion(8, 0)
    # Two slices of one node merge the same way.
    other = nvidia_slice("dra-1", ("12.8.0", "9.0.0"))
    other["metadata"]["name"] = "second"
    other["spec"]["devices"][0]["attributes"]["productName"] = {"string": "NVIDIA B200"}
    first = nvidia_slice("dra-1", ("12.8.0", "9.0.0"))
    assert from_objects([first, other])["dra-1"].product == "NVIDIA A100-SXM4-40GB+"
