"""The DRA node inventory under the real scheduler (SPEC §13 "DRA inventory", issue 38 item 5):
nodes without any GPU label, described only by the ResourceSlices NVIDIA's and AMD's DRA
drivers would publish for them (created here through resource.k8s.io/v1, as the drivers'
kubelet plugins do), and CUDA and ROCm workloads created through the webhook: the scheduler
binds each pod to the DRA-described node whose `cudaDriverVersion` (`driverVersion`, the
amdgpu module's) runs it, and leaves it unschedulable where none does.

Needs `start.sh --controllers` and the webhook registered by URL (scripts/e2e-kapi.sh with
KAPI_CONTROLLERS=1), like test_e2e_scheduling.py, whose helpers it uses. The nodes (node.sh,
GPU capacity, tainted) are selected by a label of this module only.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from webhook.core.base.versions import CudaVersion
from webhook.core.config.model import WebhookConfig
from webhook.core.placement.dra import DraNode

from .conftest import (
    Cluster,
    InventoryReader,
    cluster_slices,
    kapi_nodes,
    real_scheduler,
    synced_inventory,
)
from .test_e2e_scheduling import create, scheduled, workload

pytestmark = pytest.mark.e2e

RUN = uuid.uuid4().hex[:6]
SELECT, TAINT = "gaw-dra", "gaw-dra-only"
# node short name -> (cudaDriverVersion, cudaComputeCapability) its slice publishes
NODES = {"new": ("12.8.0", "9.0.0"), "old": ("12.2.0", "8.0.0")}
# AMD nodes: short name -> the amdgpu module version (driverVersion) its gpu.amd.com slice
# publishes: 6.12.12 is the ROCm 6.4 driver, 6.14.14 amdgpu 30.10 (webhook/data/accelerators.yaml)
AMD_NODES = {"mi-old": "6.12.12", "mi-new": "6.14.14"}


@pytest.fixture(scope="module")
def scheduler(cluster: Cluster) -> dict[str, str]:
    return real_scheduler(cluster, "the DRA inventory e2e")


def _slice(node: str, cuda: str, compute: str) -> dict[str, Any]:
    """A ResourceSlice as NVIDIA's DRA driver publishes one GPU (k8s-dra-driver-gpu
    cmd/gpu-kubelet-plugin/deviceinfo.go GpuInfo.GetDevice)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.nvidia.com"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "gpu-0",
                    "attributes": {
                        "type": {"string": "gpu"},
                        "productName": {"string": "NVIDIA H100 80GB HBM3"},
                        "driverVersion": {"version": "570.124.6"},
                        "cudaDriverVersion": {"version": cuda},
                        "cudaComputeCapability": {"version": compute},
                    },
                    "capacity": {"memory": {"value": "80Gi"}},
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def dra_nodes(core: Any, cluster: Cluster, scheduler: dict[str, str]) -> Iterator[dict[str, str]]:
    """short name -> Node name: nodes with GPU capacity and no CUDA label, each with the
    ResourceSlice that describes its GPU."""
    from kubernetes import client

    custom = client.CustomObjectsApi(core.api_client)
    specs: dict[str, tuple[dict[str, str], str]] = {
        **{short: ({SELECT: RUN}, "nvidia.com/gpu=8") for short in NODES},
        **{short: ({SELECT: RUN}, "amd.com/gpu=8") for short in AMD_NODES},
    }
    slices: list[str] = []
    with kapi_nodes(
        core, cluster, scheduler, specs, prefix=f"gaw-dra-{RUN}", taint=f"{TAINT}={RUN}:NoSchedule"
    ) as names:
        try:
            for short, (cuda, compute) in NODES.items():
                body = _slice(names[short], cuda, compute)
                custom.create_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", body)
                slices.append(body["metadata"]["name"])
            for short, version in AMD_NODES.items():
                body = _amd_slice(names[short], version)
                custom.create_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", body)
                slices.append(body["metadata"]["name"])
            yield names
        finally:
            for sliced in slices:
                custom.delete_cluster_custom_object(
                    "resource.k8s.io", "v1", "resourceslices", sliced
                )


def _amd_slice(node: str, version: str) -> dict[str, Any]:
    """A ResourceSlice as AMD's DRA driver publishes one GPU (ROCm/k8s-gpu-dra-driver
    cmd/gpu-kubeletplugin/deviceinfo.go AmdGpuInfo.GetDevice)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.amd.com"},
        "spec": {
            "driver": "gpu.amd.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "gpu-1-128",
                    "attributes": {
                        "type": {"string": "amdgpu"},
                        "productName": {"string": "AMD Instinct MI300X"},
                        "driverVersion": {"version": version},
                        "driverVersionFull": {"string": f"{version}.31400000"},
                    },
                    "capacity": {"memory": {"value": "192Gi"}},
                }
            ],
        },
    }


def _template(app: str, image: str, resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    toleration = {"key": TAINT, "operator": "Equal", "value": RUN, "effect": "NoSchedule"}
    return {
        "metadata": {"labels": {"app": app}},
        "spec": {
            "nodeSelector": {SELECT: RUN},
            "tolerations": [toleration],
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "command": ["sleep", "3600"],
                    "resources": {"limits": {resource: "1"}},
                }
            ],
        },
    }


@pytest.fixture
def batch(cluster: Cluster) -> Any:
    from kubernetes import client

    return client.BatchV1Api(cluster.api)


def test_cuda_pods_are_bound_to_the_dra_described_node_that_runs_them(
    core: Any, apps: Any, batch: Any, namespace: str, dra_nodes: dict[str, str],
    webhook_inventory: InventoryReader, webhook_config: WebhookConfig,
) -> None:  # fmt: skip
    # What the cluster's slices say, read as the webhook reads them.
    published = cluster_slices(core)
    assert published[dra_nodes["new"]] == DraNode(CudaVersion(12, 8), CudaVersion(9, 0))
    assert published[dra_nodes["old"]] == DraNode(CudaVersion(12, 2), CudaVersion(8, 0))
    assert published[dra_nodes["mi-new"]] == DraNode(amdgpu="6.14.14")
    # The webhook's inventory has caught up with the Nodes and the slices.
    inventory, confirmed = synced_inventory(core, webhook_inventory, webhook_config)
    assert confirmed and inventory is not None
    assert inventory.to_json(webhook_config)["draNodes"] >= 2
    names = {v: k for k, v in dra_nodes.items()}
    kw = {"apps": apps, "batch": batch, "namespace": namespace}

    def run(
        kind: str, image: str, resource: str = "nvidia.com/gpu"
    ) -> tuple[str | None, list[str]]:
        app = f"dra-{kind.lower()}-{uuid.uuid4().hex[:6]}"
        template = _template(app, image, resource)
        if kind == "Job":
            template["spec"]["restartPolicy"] = "Never"
        _, warnings = create(kind, workload(kind, app, template), **kw)
        (bound,) = scheduled(core, namespace, app).values()
        return (None if bound is None else names.get(bound, bound)), warnings

    # CUDA 12.4: only the 12.8 node's driver runs it (the 12.2 node has the same GPU capacity).
    assert run("Deployment", "nvidia/cuda:12.4.1-base-ubuntu22.04")[0] == "new"
    assert run("Job", "nvidia/cuda:12.6.3-base-ubuntu22.04")[0] == "new"
    # CUDA 12.2 runs on either.
    assert run("Job", "nvidia/cuda:12.2.2-base-ubuntu22.04")[0] in ("new", "old")
    # CUDA 12.9: no node's driver runs it; the pod waits, with the webhook's warning (under
    # noCompatibleNode: deny the workload is refused instead, as the unit tests show).
    if webhook_config.no_compatible_node == "warn":
        bound, warnings = run("Job", "nvidia/cuda:12.9.1-base-ubuntu22.04")
        assert bound is None
        assert any("no node supports CUDA 12.9; highest available is" in w for w in warnings)
    # AMD: the ROCm gate reads the amdgpu driver the slices publish. ROCm 7.14 runs on amdgpu
    # 30.10 (module 6.14.14), not 6.4; ROCm 6.4 on both.
    rocm714 = "rocm/vllm:rocm7.14.0_vllm_0.10.2_20251006"
    rocm64 = "rocm/pytorch:rocm6.4_ubuntu24.04_py3.12_pytorch_release_2.6.0"
    assert run("Deployment", rocm714, "amd.com/gpu")[0] == "mi-new"
    assert run("Job", rocm714, "amd.com/gpu")[0] == "mi-new"
    assert run("Job", rocm64, "amd.com/gpu")[0] in ("mi-old", "mi-new")
