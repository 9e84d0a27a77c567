"""Where the real kube-scheduler binds AMD ROCm and Huawei Ascend CANN pods the webhook placed
(SPEC §13, issue 38 item 6): nodes labelled as AMD's labeller (`amd.com/gpu.driver-version`, the
amdgpu kernel-module version; `amd.com/gpu.device-id`) and Ascend's device plugin
(`huawei.com/driver.version`, `node.kubernetes.io/npu.chip.name`, `accelerator-type`) label
them — MI210 and MI300X on two amdgpu drivers, one MI300X whose driver label is empty, 910B and
310P on two HDKs — and Deployments and Jobs of ROCm and CANN images created through the
webhook: each pod is bound where the shipped tables say its image runs (asserted by node name),
and waits, with the webhook's warning, where nothing does.

The expected nodes follow the shipped tables (webhook/data/accelerators.yaml, docs/concepts/
vendor-tables.md): amdgpu module 6.12.12 is the ROCm 6.4 driver (ROCm 6.1-7.1, and 7.2 on
gfx942/gfx90a/gfx908), 6.14.14 amdgpu 30.10 (ROCm 6.2-7.2, 7.14, 10.0.0); device id 740f is
MI210 (gfx90a), 74a1 MI300X (gfx942); Ascend HDK 25.5.1 runs CANN 9.1.X, 9.0.X, 8.5.2 and 8.5.0,
25.3.RC1 CANN 9.1.X, 9.0.X, 8.5.2 (the CANN 9.1.1 notes' table) and 8.3.RC1; chip 910B3 runs the
images built for 910b, 310P3 those for 310p.

Needs `start.sh --controllers` and the webhook registered by URL (scripts/e2e-kapi.sh with
KAPI_CONTROLLERS=1), like test_e2e_scheduling.py, whose helpers it uses. Its nodes are selected
by a label of this module only and tainted, so no other module's pod lands on them.
"""

from __future__ import annotations

from typing import Any

import pytest

from webhook.core.config.model import WebhookConfig

from .labelled_nodes import NodeSet, module_fixtures

pytestmark = pytest.mark.e2e

NODE_SET = NodeSet("gaw-vendor", "gaw-vendor-node", "gaw-vendor-only", "gaw-vendor")
MODULE, DEVICE = "amd.com/gpu.driver-version", "amd.com/gpu.device-id"
HDK, CHIP, TYPE = (
    "huawei.com/driver.version",
    "node.kubernetes.io/npu.chip.name",
    "accelerator-type",
)
AMD_GPU, NPU_910, NPU_310P = "amd.com/gpu", "huawei.com/Ascend910", "huawei.com/Ascend310P"

# short name -> (labels, capacity)
NODES: dict[str, tuple[dict[str, str], str]] = {
    "mi210-old": ({MODULE: "6.12.12", DEVICE: "740f"}, f"{AMD_GPU}=8"),
    "mi300-old": ({MODULE: "6.12.12", DEVICE: "74a1"}, f"{AMD_GPU}=8"),
    "mi210-new": ({MODULE: "6.14.14", DEVICE: "740f"}, f"{AMD_GPU}=8"),
    "mi300-new": ({MODULE: "6.14.14", DEVICE: "74a1"}, f"{AMD_GPU}=8"),
    "mi300-empty": ({MODULE: "", DEVICE: "74a1"}, f"{AMD_GPU}=8"),
    "a2-new": ({HDK: "25.5.1", CHIP: "910B3", TYPE: "module-910b-8"}, f"{NPU_910}=8"),
    "a2-old": ({HDK: "25.3.RC1", CHIP: "910B3", TYPE: "module-910b-8"}, f"{NPU_910}=8"),
    "p-new": ({HDK: "25.5.1", CHIP: "310P3"}, f"{NPU_310P}=4"),
    "p-old": ({HDK: "25.3.RC1", CHIP: "310P3"}, f"{NPU_310P}=4"),
}
AMD_NODES = [n for n in NODES if n.startswith("mi")]

ROCM_64 = "rocm/pytorch:rocm6.4_ubuntu24.04_py3.12_pytorch_release_2.6.0"
ROCM_714 = "rocm/vllm:rocm7.14.0_vllm_0.10.2_20251006"  # amdgpu 30.10 and newer, not 6.4
ROCM_60 = "rocm/dev-ubuntu-22.04:6.0.2"  # amdgpu 5.6 to 6.2 only, by AMD's matrix
ROCM_72 = "rocm/dev-ubuntu-24.04:7.2.1"
GFX942 = [{"name": "PYTORCH_ROCM_ARCH", "value": "gfx942"}]
CANN_83_910B = "ascendai/cann:8.3.rc1-910b-ubuntu22.04-py3.11"
CANN_90_910B = "ascendai/cann:9.0.0-910b-ubuntu22.04-py3.11"
CANN_852_310P = "quay.io/ascend/cann:8.5.2-310p-ubuntu22.04-py3.11"
CANN_83_310P = "ascendai/cann:8.3.rc1-310p-ubuntu22.04-py3.11"
CANN_82_910B = "ascendai/cann:8.2.rc1-910b-ubuntu22.04-py3.11"
VLLM_ASCEND = "quay.io/ascend/vllm-ascend:v0.11.0rc1"  # CANN 8.3.RC1, the 910b build


PROBES = [("amd", ROCM_64, AMD_GPU), ("npu", CANN_83_910B, NPU_910)]
scheduler, labelled, synced, batch, run = module_fixtures(
    NODE_SET, NODES, PROBES, "the vendor scheduling e2e"
)


def test_rocm_pods_are_bound_where_the_amdgpu_driver_and_the_gpu_run_them(run: Any) -> None:
    # ROCm 6.4: both drivers run it; never the node whose driver label is empty.
    bound, _ = run("Deployment", ROCM_64, AMD_GPU)
    assert bound in ("mi210-old", "mi300-old", "mi210-new", "mi300-new")
    assert run("Job", ROCM_64, AMD_GPU, node="mi300-empty")[0] is None
    assert run("Job", ROCM_64, AMD_GPU, node="mi210-old")[0] == "mi210-old"
    # ROCm 7.14: only amdgpu 30.10 (module 6.14.14).
    assert run("Deployment", ROCM_714, AMD_GPU, node="mi300-old")[0] is None
    assert run("Deployment", ROCM_714, AMD_GPU, node="mi300-new")[0] == "mi300-new"
    # Built for gfx942 only: the MI300X on the new driver, never the MI210 (no fallback).
    assert run("Job", ROCM_714, AMD_GPU, env=GFX942)[0] == "mi300-new"
    assert run("Job", ROCM_714, AMD_GPU, node="mi210-new", env=GFX942)[0] is None
    # ROCm 7.2: the 7.2.x release notes list amdgpu 6.4 for the MI300X-to-MI100 cell (MI210
    # included), AMD's matrix 30.10 for every GPU: 6.4's is a per-GPU row, placed with the
    # node's target.
    assert run("Job", ROCM_72, AMD_GPU, node="mi210-old")[0] == "mi210-old"
    assert run("Job", ROCM_72, AMD_GPU, node="mi300-empty")[0] is None


def test_cann_pods_are_bound_where_the_hdk_and_the_chip_run_them(run: Any) -> None:
    # CANN 8.3.RC1 for 910b: HDK 25.3.RC1 on a 910B3.
    assert run("Deployment", CANN_83_910B, NPU_910)[0] == "a2-old"
    # CANN 9.0.0 for 910b: HDK 25.5.1 and 25.3.X (9.0.X, the CANN 9.1.1 notes' table).
    assert run("Job", CANN_90_910B, NPU_910)[0] in ("a2-new", "a2-old")
    # 310P images on the 310P nodes, by HDK (8.5.2 on both, 8.3.RC1 on 25.3.RC1 only).
    assert run("Job", CANN_852_310P, NPU_310P)[0] in ("p-new", "p-old")
    assert run("Deployment", CANN_83_310P, NPU_310P)[0] == "p-old"
    # vllm-ascend through its published CANN pairing (v0.11.0rc1: CANN 8.3.RC1, 910b build).
    assert run("Deployment", VLLM_ASCEND, NPU_910)[0] == "a2-old"
    # A 910b image pinned to the 910B node of the other HDK: it waits.
    assert run("Job", CANN_83_910B, NPU_910, node="a2-new")[0] is None


def test_where_nothing_fits_the_pod_waits_with_the_webhooks_warning(
    run: Any, webhook_config: WebhookConfig
) -> None:
    if webhook_config.no_compatible_node == "deny":
        pytest.skip("noCompatibleNode: deny refuses these workloads (the unit tests cover it)")
    # No node is known to run ROCm 6.0, but the one whose driver label is empty may (issue 45:
    # never strand a pod): it is bound there, never on a node known not to run it.
    bound, warnings = run("Job", ROCM_60, AMD_GPU)
    assert bound == "mi300-empty"
    assert any(
        "ROCm 6.0" in w and w.endswith("label amdgpu-driver-release=<amdgpu driver release>")
        for w in warnings
    ), warnings
    # Every node known and unfit: it waits, with the webhook's warning.
    bound, warnings = run("Deployment", CANN_82_910B, NPU_910)
    assert bound is None
    assert any(
        "no node's Ascend HDK supports CANN 8.2.RC1; newest is 25.5.1" in w for w in warnings
    )
