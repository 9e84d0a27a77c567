"""Never strand a pod, on the real control plane (SPEC §13, issue 45 item 5): Nodes labelled
exactly as the vendors' own tools label them, none with an admin label, and Deployments and
Jobs of ROCm, CANN and CUDA images created through the webhook, BOUND by the real
kube-scheduler (asserted by node name); where one node is known to fit, bound there only.

- AMD's GPU operator labeller writes the amdgpu kernel-module version
  (`amd.com/gpu.driver-version`) and the PCI device id (`amd.com/gpu.device-id`): the shipped
  table maps module 6.14.14 (amdgpu 30.10: ROCm 6.2-7.2, 7.14), 6.12.12 (the ROCm 6.4 driver:
  6.1-7.2) and 6.19.14 (amdgpu 31.40: 7.0-7.2, 7.14; written in the labeller's four-field form
  `6.19.14.31400000`); a module no AMD page the tables read pairs with a release (`6.16.13`)
  is unknown to it. 74a1 is MI300X (gfx942), 75a3 MI355X (gfx950).
- mind-cluster before v26.1 writes the chip (`node.kubernetes.io/npu.chip.name`) and the
  accelerator type, no driver version; v26.1 on also `huawei.com/driver.version` (HDK 25.5.1
  pairs with CANN 9.0.0 and 8.5.x, not 8.3.RC1).
- NVIDIA: a node GPU Feature Discovery labels CUDA 12.2, and a GPU node the GPU Operator marks
  (`nvidia.com/gpu.present`) without CUDA labels.

Needs `start.sh --controllers` and the webhook registered by URL (scripts/e2e-kapi.sh with
KAPI_CONTROLLERS=1), like test_e2e_vendor_scheduling.py, whose style it follows: its nodes are
selected by a label of this module only and tainted, so no other module's pod lands on them.
"""

from __future__ import annotations

from typing import Any

import pytest

from .labelled_nodes import NodeSet, module_fixtures

pytestmark = pytest.mark.e2e

NODE_SET = NodeSet("gaw-strand", "gaw-strand-node", "gaw-strand-only", "gaw-strand")
MODULE, DEVICE = "amd.com/gpu.driver-version", "amd.com/gpu.device-id"
HDK, CHIP, TYPE = (
    "huawei.com/driver.version",
    "node.kubernetes.io/npu.chip.name",
    "accelerator-type",
)
GFD_MAJOR, GFD_MINOR = (
    "nvidia.com/cuda.runtime-version.major",
    "nvidia.com/cuda.runtime-version.minor",
)
PRESENT = "nvidia.com/gpu.present"
AMD_GPU, NPU_910, NPU_310P, NVIDIA_GPU = (
    "amd.com/gpu",
    "huawei.com/Ascend910",
    "huawei.com/Ascend310P",
    "nvidia.com/gpu",
)

# short name -> (labels as the vendor's tool writes them, capacity)
NODES: dict[str, tuple[dict[str, str], str]] = {
    "amd-30-10": ({MODULE: "6.14.14", DEVICE: "74a1"}, f"{AMD_GPU}=8"),
    "amd-6-4": ({MODULE: "6.12.12", DEVICE: "74a1"}, f"{AMD_GPU}=8"),
    "amd-6-16": ({MODULE: "6.16.13", DEVICE: "74a1"}, f"{AMD_GPU}=8"),
    "amd-6-16-13": ({MODULE: "6.16.13", DEVICE: "75a3"}, f"{AMD_GPU}=8"),
    "amd-31-40": ({MODULE: "6.19.14.31400000", DEVICE: "75a3"}, f"{AMD_GPU}=8"),
    # mind-cluster before v26.1: chip and type only.
    "a2-chip": ({CHIP: "910B3", TYPE: "module-910b-8"}, f"{NPU_910}=8"),
    "p-chip": ({CHIP: "310P3"}, f"{NPU_310P}=4"),
    # mind-cluster v26.1: the HDK too.
    "a2-hdk": ({HDK: "25.5.1", CHIP: "910B3", TYPE: "module-910b-8"}, f"{NPU_910}=8"),
    "cuda-12-2": ({GFD_MAJOR: "12", GFD_MINOR: "2", PRESENT: "true"}, f"{NVIDIA_GPU}=8"),
    "cuda-unknown": ({PRESENT: "true"}, f"{NVIDIA_GPU}=8"),
}

ROCM_714 = "rocm/vllm:rocm7.14.0_vllm_0.10.2_20251006"  # amdgpu 30.10 and newer, not 6.4
ROCM_60 = "rocm/dev-ubuntu-22.04:6.0.2"  # amdgpu 5.6 to 6.2 only, by AMD's matrix
GFX942 = [{"name": "PYTORCH_ROCM_ARCH", "value": "gfx942"}]
CANN_83_910B = "ascendai/cann:8.3.rc1-910b-ubuntu22.04-py3.11"  # HDK 25.3.RC1
CANN_90_910B = "ascendai/cann:9.0.0-910b-ubuntu22.04-py3.11"  # HDK 25.5.1 (and others)
CUDA_124 = "nvidia/cuda:12.4.1-base-ubuntu22.04"


PROBES = [("amd", ROCM_60, AMD_GPU), ("npu", CANN_83_910B, NPU_910), ("cuda", CUDA_124, NVIDIA_GPU)]
scheduler, labelled, synced, batch, run = module_fixtures(
    NODE_SET, NODES, PROBES, "the never-strand e2e"
)


def test_rocm_on_labeller_only_nodes_is_bound(run: Any) -> None:
    # ROCm 7.14: amdgpu 30.10 (module 6.14.14) and 31.40 (6.19.14.31400000) are known to run
    # it: bound to one of them only, the two unknown modules counted in a warning.
    for kind in ("Deployment", "Job"):
        bound, warnings = run(kind, ROCM_714, AMD_GPU)
        assert bound in ("amd-30-10", "amd-31-40")
        assert (
            "2 AMD GPU nodes not used, their amdgpu driver is unknown: "
            "label amdgpu-driver-release=<amdgpu driver release>"
        ) in warnings
    # A gfx942-only build: the MI355X (gfx950) on 31.40 is not.
    assert run("Job", ROCM_714, AMD_GPU, env=GFX942)[0] == "amd-30-10"
    # ROCm 6.0: no node known to run it (amdgpu 5.6 to 6.2); kept off the three known drivers,
    # bound to a node whose module the table does not map.
    for kind in ("Deployment", "Job"):
        bound, warnings = run(kind, ROCM_60, AMD_GPU)
        assert bound in ("amd-6-16", "amd-6-16-13")
        assert any(
            "ROCm 6.0" in w and w.endswith("label amdgpu-driver-release=<amdgpu driver release>")
            for w in warnings
        ), warnings
    # A gfx942-only build: the MI355X (gfx950) is kept off too, whatever its driver.
    assert run("Job", ROCM_60, AMD_GPU, env=GFX942)[0] == "amd-6-16"
    # Never onto a node known not to run it.
    assert run("Job", ROCM_60, AMD_GPU, node="amd-6-4")[0] is None


def test_cann_on_mind_cluster_nodes_is_bound(run: Any) -> None:
    # CANN 8.3.RC1 for 910b: the v26.1 node's HDK 25.5.1 does not run it, the 310P chip is
    # another; the 910B3 node without an HDK label may: bound there.
    for kind in ("Deployment", "Job"):
        bound, warnings = run(kind, CANN_83_910B, NPU_910)
        assert bound == "a2-chip"
        assert any(
            w.endswith("label ascend-driver-version=<Ascend HDK release>") for w in warnings
        ), warnings
    # CANN 9.0.0 for 910b: HDK 25.5.1 is known to run it: bound there only.
    for kind in ("Deployment", "Job"):
        assert run(kind, CANN_90_910B, NPU_910)[0] == "a2-hdk"


def test_cuda_mixed_case_is_bound(run: Any) -> None:
    """One node labelled CUDA 12.2, one GPU node without CUDA labels: a CUDA 12.4 pod is kept
    off the 12.2 node and bound to the other (before: required onto neither)."""
    for kind in ("Deployment", "Job"):
        bound, warnings = run(kind, CUDA_124, NVIDIA_GPU)
        assert bound == "cuda-unknown"
        assert any(
            w.endswith("label cuda-major-version=<major> cuda-minor-version=<minor>")
            for w in warnings
        ), warnings
