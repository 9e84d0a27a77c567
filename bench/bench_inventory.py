"""Benchmark of the node inventory: RSS growth and sync time for N nodes (SPEC §4, issue 11).

Run: .venv/bin/python bench/bench_inventory.py [--nodes 10000] [--json]

The fake API server (tests/fakekube.py) runs in a separate process, so its memory is not
counted. Nodes carry what real GPU nodes carry in their metadata: ~35 labels (kubelet, cloud,
GPU Feature Discovery), annotations and managedFields. This process imports everything and
builds its client first, measures RSS, then runs the node reflector until the inventory holds
every node (the sync time), collects garbage and measures RSS again: the growth is what the
inventory costs to hold (the bar: ≤ 15 MiB at 10,000 nodes, sync ≤ 3 s).

`--dra` (SPEC §13 "DRA inventory"): the same nodes without any CUDA label, each described by
the ResourceSlice NVIDIA's DRA driver publishes for 8 GPUs instead (every attribute and
capacity of k8s-dra-driver-gpu's GpuInfo.GetDevice, managedFields); both reflectors run (Nodes
metadata-only, ResourceSlices whole) until the inventory holds every node's DRA facts.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubernetes.aio.client import ApiClient, Configuration  # noqa: E402

from bench.harness import cli  # noqa: E402
from bench.harness.core import WebhookConfig  # noqa: E402
from bench.harness.proc import rss_kib  # noqa: E402
from bench.harness.servers import KubeProcess  # noqa: E402
from tests.fakekube import TOKEN, FakeKube, node  # noqa: E402
from webhook.sources.nodes import SLICE_PAGE_SIZE, NodeSource, inventory_sources  # noqa: E402
from webhook.sources.store import PolicyStore  # noqa: E402

CUDA = [("12", "4"), ("12", "2"), ("11", "8"), ("12", "8")]
PRODUCTS = ["NVIDIA-A100-SXM4-80GB", "Tesla-V100-SXM2-32GB", "NVIDIA-H100-80GB-HBM3"]


def gpu_node(index: int) -> dict[str, Any]:
    major, minor = CUDA[index % len(CUDA)]
    product = PRODUCTS[index % len(PRODUCTS)]
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": f"p4d.{index % 7}xlarge",
        "topology.kubernetes.io/region": "us-east-1",
        "topology.kubernetes.io/zone": f"us-east-1{'abcdef'[index % 6]}",
        "node-role.kubernetes.io/worker": "",
        "cuda-major-version": major,
        "cuda-minor-version": minor,
        "nvidia.com/cuda.runtime-version.major": major,
        "nvidia.com/cuda.runtime-version.minor": minor,
        "nvidia.com/cuda.driver-version.major": "550",
        "nvidia.com/cuda.driver-version.minor": "54",
        "nvidia.com/cuda.driver-version.revision": "15",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.memory": "81920",
        "nvidia.com/gpu.family": "ampere",
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.machine": "p4d.24xlarge",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gfd.timestamp": str(1_700_000_000 + index),
        "nvidia.com/gpu.deploy.driver": "true",
        "nvidia.com/gpu.deploy.device-plugin": "true",
        "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
        "nvidia.com/gpu.deploy.dcgm-exporter": "true",
        "nvidia.com/gpu.present": "true",
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "feature.node.kubernetes.io/kernel-version.full": "5.15.0-1051-aws",
    }
    obj = node(f"gpu-node-{index:05d}", labels)
    # managedFields of a real node: a few KiB of field sets per manager.
    obj["metadata"]["managedFields"] = [
        {
            "manager": manager,
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2024-01-01T00:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {f"f:{key}": {} for key in labels}}},
        }
        for manager in ("kubelet", "gpu-feature-discovery", "nfd-master")
    ]
    obj["metadata"]["uid"] = f"00000000-0000-0000-0000-{index:012d}"
    return obj


def populate(kube: FakeKube, count: int) -> None:
    for index in range(count):
        kube.put(gpu_node(index))


def unlabelled_node(index: int) -> dict[str, Any]:
    """A GPU node of a DRA-only cluster: no CUDA label of any scheme, no GFD."""
    obj = gpu_node(index)
    labels = obj["metadata"]["labels"]
    for key in [k for k in labels if k.startswith(("cuda-", "nvidia.com/"))]:
        del labels[key]
    return obj


def gpu_slice(index: int) -> dict[str, Any]:
    """The ResourceSlice of one node's 8 GPUs, with what k8s-dra-driver-gpu publishes
    (cmd/gpu-kubelet-plugin/deviceinfo.go GpuInfo.GetDevice)."""
    major, minor = CUDA[index % len(CUDA)]
    name = f"gpu-node-{index:05d}"
    devices = [
        {
            "name": f"gpu-{gpu}",
            "attributes": {
                "type": {"string": "gpu"},
                "uuid": {"string": f"GPU-{index:08x}-{gpu:04x}-0000-0000-000000000000"},
                "productName": {"string": PRODUCTS[index % len(PRODUCTS)]},
                "brand": {"string": "Nvidia"},
                "architecture": {"string": "Ampere"},
                "cudaComputeCapability": {"version": "8.0.0"},
                "driverVersion": {"version": "550.54.15"},
                "cudaDriverVersion": {"version": f"{major}.{minor}.0"},
                "pcieBusID": {"string": f"0000:{gpu + 16:02x}:00.0"},
                "addressingMode": {"string": "HMM"},
                "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{gpu // 2:02x}"},
            },
            "capacity": {"memory": {"value": "81920Mi"}},
        }
        for gpu in range(8)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": f"{name}-gpu.nvidia.com-x{index:05d}",
            "uid": f"10000000-0000-0000-0000-{index:012d}",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": name, "uid": f"u-{index}"}
            ],
            "managedFields": [
                {
                    "manager": "gpu-kubelet-plugin",
                    "operation": "Update",
                    "apiVersion": "resource.k8s.io/v1",
                    "time": "2024-01-01T00:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:devices": {}, "f:driver": {}, "f:nodeName": {}}},
                }
            ],
        },
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": name,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def populate_dra(kube: FakeKube, count: int) -> None:
    for index in range(count):
        kube.put(unlabelled_node(index))
        kube.put(gpu_slice(index))


async def measure(
    port: int, count: int, page_size: int, dra: bool, slice_page_size: int = SLICE_PAGE_SIZE
) -> dict[str, float]:
    store = PolicyStore()

    async def client() -> ApiClient:
        # The fake API server checks the bearer token, as a real one does.
        configuration = Configuration(
            host=f"http://127.0.0.1:{port}", api_key={"BearerToken": f"Bearer {TOKEN}"}
        )
        return ApiClient(configuration)

    options: dict[str, Any] = {"api_factory": client, "page_size": page_size}
    sources = (
        inventory_sources(store, WebhookConfig(), slice_page_size=slice_page_size, **options)
        if dra
        else [NodeSource(store, WebhookConfig(), **options)]
    )
    # Warm up the client's code paths (imports, SSL/HTTP machinery) outside the figure.
    warm = await client()
    await warm.close()  # type: ignore[no-untyped-call]
    gc.collect()
    before = rss_kib()
    started = time.perf_counter()
    tasks = [asyncio.create_task(source.run()) for source in sources]
    while (
        store.inventory is None
        or len(store.inventory.nodes) < count
        or (dra and len(store.inventory.dra) < count)
    ):
        await asyncio.sleep(0.005)
    sync_seconds = time.perf_counter() - started
    gc.collect()
    await asyncio.sleep(0.2)
    after = rss_kib()
    for task in tasks:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    if dra:
        # Placement reads the DRA facts: every node counted, none by labels.
        assert store.inventory is not None
        facts = store.inventory.facts(WebhookConfig())
        assert sum(map(len, facts.dra_cuda.values())) == count, facts.dra_cuda.keys()
    return {
        "nodes": count,
        "dra": dra,
        "sync_seconds": round(sync_seconds, 3),
        "rss_before_mib": round(before / 1024, 1),
        "rss_after_mib": round(after / 1024, 1),
        "rss_growth_mib": round((after - before) / 1024, 1),
    }


def main() -> int:
    parser = cli.parser(__doc__)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--page-size", type=int, default=500, help="list page size (limit)")
    parser.add_argument(
        "--slice-page-size", type=int, default=SLICE_PAGE_SIZE, help="ResourceSlice page size"
    )
    parser.add_argument(
        "--dra", action="store_true", help="unlabelled nodes described by ResourceSlices"
    )
    cli.add_json(parser, help="print one JSON object")
    args = parser.parse_args()
    fill = populate_dra if args.dra else populate
    with KubeProcess(fill, args.nodes, timeout=300) as kube:
        result = asyncio.run(
            measure(kube.port, args.nodes, args.page_size, args.dra, args.slice_page_size)
        )
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['nodes']} nodes{' (DRA ResourceSlices)' if args.dra else ''}: "
            f"sync {result['sync_seconds']:.2f} s, RSS "
            f"{result['rss_before_mib']} -> {result['rss_after_mib']} MiB "
            f"(growth {result['rss_growth_mib']} MiB; bars: sync <= 3 s, growth <= 15 MiB)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
