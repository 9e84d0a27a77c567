"""Benchmark of the pure evaluation core: cost per object, and independence from the number of
policies (10 vs 1,000 CRLs) and of nodes in the inventory (10 vs 10,000 nodes).

Run: .venv/bin/python bench/bench_eval.py [--rounds N] [--inner N] [--json]
Not a test: prints figures (median/p90 µs per object) to compare runs on the same machine.
Every variant runs interleaved in the same rounds, and each ratio (1000/10 policies,
10000/10 nodes, PyTorchJob/Deployment) is the median of its round-by-round ratios, then
checked against the targets of issues 9, 11 and 12.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# GPU_WEBHOOK_COMPILED=build/compiled: measure the mypyc-compiled core (`make compiled`).
COMPILED = os.environ.get("GPU_WEBHOOK_COMPILED", "")
if COMPILED:
    sys.path.insert(0, str(Path(COMPILED).resolve()))

from bench.harness import cli  # noqa: E402
from bench.harness.core import (  # noqa: E402
    NodeInventory,
    PolicySet,
    WebhookConfig,
    crl_configmap,
    evaluate,
)
from bench.harness.objects import policy_configmaps  # noqa: E402
from bench.harness.report import Column, Table  # noqa: E402
from bench.harness.timing import interleaved, median_p90, paired_ratio  # noqa: E402

# Which core was imported: a compiled module has no .py file.
CORE = "source" if (sys.modules[evaluate.__module__].__file__ or "").endswith(".py") else "compiled"


def typical_pod() -> dict[str, Any]:
    """One container, one vGPU key, Paddle image: defaults + affinity + env fix."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train", "namespace": "ml", "labels": {"app": "train"}},
        "spec": {
            "containers": [
                {
                    "name": "train",
                    "image": "paddlepaddle/paddle:2.6.1-gpu-cuda12.0-cudnn8.9-trt8.6",
                    "command": ["python", "train.py"],
                    "env": [{"name": "EPOCHS", "value": "10"}],
                    "resources": {
                        "limits": {"cpu": "4", "memory": "16Gi", "tencent.com/vcuda-core": "50"},
                        "requests": {"cpu": "2", "memory": "8Gi"},
                    },
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
    }


def multi_container_pod() -> dict[str, Any]:
    """Init container + 3 containers (2 GPU), existing required affinity with 2 terms."""
    gpu = {"limits": {"nvidia.com/gpu": "1", "cpu": "8"}, "requests": {"nvidia.com/gpu": "1"}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "serve", "namespace": "ml"},
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "zone", "operator": "In", "values": ["a"]}
                                ]
                            },
                            {
                                "matchExpressions": [
                                    {"key": "zone", "operator": "In", "values": ["b"]}
                                ]
                            },
                        ]
                    }
                }
            },
            "initContainers": [
                {"name": "fetch", "image": "busybox:1.36", "resources": {"limits": {"cpu": "1"}}}
            ],
            "containers": [
                {
                    "name": "model",
                    "image": "nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04",
                    "resources": copy.deepcopy(gpu),
                },
                {
                    "name": "tokenizer",
                    "image": "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime",
                    "resources": copy.deepcopy(gpu),
                },
                {
                    "name": "sidecar",
                    "image": "envoyproxy/envoy:v1.30",
                    "resources": {"limits": {"cpu": "1"}},
                },
            ],
        },
    }


def deployment() -> dict[str, Any]:
    pod = typical_pod()
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "train"}},
            "template": {"metadata": pod["metadata"], "spec": pod["spec"]},
        },
    }


def pytorchjob() -> dict[str, Any]:
    """A Kubeflow PyTorchJob with 2 roles (Master, Worker), each the Deployment's pod template:
    the operator-workload cost is compared with the Deployment's (target: at most 2x)."""
    pod = typical_pod()
    replica = {"replicas": 1, "template": {"metadata": pod["metadata"], "spec": pod["spec"]}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": copy.deepcopy(replica),
                "Worker": {**copy.deepcopy(replica), "replicas": 4},
            }
        },
    }


def amd_pod() -> dict[str, Any]:
    """One AMD container (SPEC §13): the ROCm gate with a gfx target from the env."""
    pod = typical_pod()
    c = pod["spec"]["containers"][0]
    c["image"] = "rocm/vllm:rocm7.0.0_vllm_0.10.2_20251006"
    c["env"] = [{"name": "PYTORCH_ROCM_ARCH", "value": "gfx942"}]
    c["resources"] = {"limits": {"cpu": "4", "memory": "16Gi", "amd.com/gpu": "1"}}
    return pod


def ascend_pod() -> dict[str, Any]:
    """One Ascend container (SPEC §13): the CANN gate, version and chip from the tag."""
    pod = typical_pod()
    c = pod["spec"]["containers"][0]
    c["image"] = "ascendai/cann:8.3.rc1-910b-ubuntu22.04-py3.11"
    c["resources"] = {"limits": {"cpu": "4", "memory": "16Gi", "huawei.com/Ascend910": "1"}}
    return pod


def non_gpu_pod() -> dict[str, Any]:
    pod = typical_pod()
    pod["spec"]["containers"][0]["resources"]["limits"].pop("tencent.com/vcuda-core")
    return pod


def filler_crl(i: int) -> dict[str, Any]:
    """A valid CRL on a key no benchmark object uses (50 groups of 20 keys)."""
    group = f"bench{i % 50}"
    return crl_configmap(
        f"cf-crl-bench{i}-res{i}",
        {
            "key": f"example.com/res{i}",
            "dataType": "integer",
            "group": group,
            "limits": "optional",
            "requests": "disabled",
        },
    )


def synthetic_policies(count: int, base: Path) -> PolicySet:
    """The shipped policies plus filler CRLs on other keys, `count` in total."""
    shipped = policy_configmaps(base)
    filler = [filler_crl(i) for i in range(max(0, count - len(shipped)))]
    policies = PolicySet.from_configmaps([*shipped, *filler])
    assert len(policies.by_key) == max(count, len(shipped)), "every synthetic CRL must load"
    return policies


def synthetic_inventory(count: int) -> NodeInventory:
    """`count` nodes as a mixed cluster advertises them: GFD labels on most (three driver
    versions, three GPU generations), the manual scheme on some, CPU nodes with none, and
    AMD and Ascend nodes (two drivers each) instead of a tenth of the GPU ones."""
    versions = [("12", "2"), ("12", "4"), ("12", "6")]
    capabilities = [("7", "5"), ("8", "0"), ("9", "0")]
    nodes: dict[str, dict[str, str]] = {}
    for i in range(count):
        major, minor = versions[i % 3]
        cc_major, cc_minor = capabilities[(i // 3) % 3]
        if i % 10 == 9:
            labels: dict[str, str] = {}  # a CPU node
        elif i % 10 == 7:  # AMD nodes on two amdgpu drivers (MI300X, MI210)
            labels = {
                "amd.com/gpu.driver-version": ("6.14.14", "6.12.12")[(i // 10) % 2],
                "amd.com/gpu.device-id": ("74a1", "740f")[(i // 20) % 2],
            }
        elif i % 10 == 6:  # Ascend nodes on two HDKs
            labels = {
                "huawei.com/driver.version": ("25.3.RC1", "25.5.1")[(i // 10) % 2],
                "node.kubernetes.io/npu.chip.name": "910B3",
            }
        elif i % 10 == 8:
            labels = {"cuda-major-version": major, "cuda-minor-version": minor}
        else:
            labels = {
                "nvidia.com/cuda.runtime-version.major": major,
                "nvidia.com/cuda.runtime-version.minor": minor,
                "nvidia.com/gpu.compute.major": cc_major,
                "nvidia.com/gpu.compute.minor": cc_minor,
            }
        nodes[f"node-{i:05d}"] = labels
    return NodeInventory.build(nodes)


# Targets (issues 9, 11, 12): typical GPU pod ≤ 100 µs; 10 vs 10,000 nodes within 10 %; a
# PyTorchJob with 2 roles ≤ 2x a Deployment; no growth with the number of policies (≤ 10 %).
TYPICAL_MAX_US = 100.0
NODES_MAX_RATIO = 1.10
POLICIES_MAX_RATIO = 1.10
PYTORCHJOB_MAX_RATIO = 2.0
BY_POLICIES = Table(
    Column("object", 22, align="<"),
    Column("median µs (10)", 16, ".1f"),
    Column("median µs (1000)", 18, ".1f"),
    Column("1000/10", 10, ".3f"),
    sep="",
)
BY_NODES = Table(
    Column("object", 22, align="<"),
    Column("µs (10 nodes)", 16, ".1f"),
    Column("µs (10,000 nodes)", 19, ".1f"),
    Column("10000/10", 10, ".3f"),
    sep="",
)


def main() -> int:
    parser = cli.parser(__doc__)
    cli.add_rounds(parser, rounds=30, inner=200)
    cli.add_json(parser)
    args = parser.parse_args()

    config = WebhookConfig()
    base = ROOT / "configmaps"
    small = synthetic_policies(10, base)
    large = synthetic_policies(1000, base)
    objects = {
        "typical GPU pod": typical_pod(),
        "multi-container pod": multi_container_pod(),
        "Deployment": deployment(),
        "PyTorchJob (2 roles)": pytorchjob(),
        "non-GPU pod": non_gpu_pod(),
        "AMD pod (ROCm)": amd_pod(),
        "Ascend pod (CANN)": ascend_pod(),
    }
    inventories = {"10": synthetic_inventory(10), "10000": synthetic_inventory(10_000)}
    by_nodes_objects = (
        "typical GPU pod",
        "multi-container pod",
        "AMD pod (ROCm)",
        "Ascend pod (CANN)",
    )

    def run(
        obj: dict[str, Any], policies: PolicySet, inventory: NodeInventory | None = None
    ) -> Callable[[], object]:
        # Decision.patch is part of the cost: the server always needs it.
        return lambda: evaluate(obj, policies, config, inventory=inventory).patch

    # Every variant in one interleaved run: each ratio below compares samples taken in the
    # same rounds (policies 1000/10, nodes 10000/10, PyTorchJob/Deployment).
    variants: dict[str, Callable[[], object]] = {}
    for label, obj in objects.items():
        variants[f"{label}|10"] = run(obj, small)
        variants[f"{label}|1000"] = run(obj, large)
    for label in by_nodes_objects:
        for n, inventory in inventories.items():
            variants[f"{label}|nodes {n}"] = run(objects[label], small, inventory)
    samples = interleaved(variants, args.rounds, args.inner)

    results: dict[str, dict[str, float]] = {}
    for label in objects:
        row: dict[str, float] = {}
        for n in ("10", "1000"):
            row[f"median_us_{n}"], row[f"p90_us_{n}"] = median_p90(samples[f"{label}|{n}"])
        row["ratio_1000_vs_10"] = paired_ratio(samples[f"{label}|1000"], samples[f"{label}|10"])
        results[label] = row
    by_nodes: dict[str, dict[str, float]] = {}
    for label in by_nodes_objects:
        row = {}
        for n in inventories:
            row[f"median_us_{n}"], row[f"p90_us_{n}"] = median_p90(samples[f"{label}|nodes {n}"])
        row["ratio_10000_vs_10"] = paired_ratio(
            samples[f"{label}|nodes 10000"], samples[f"{label}|nodes 10"]
        )
        by_nodes[label] = row
    ratios = {
        "pytorchjob_vs_deployment": paired_ratio(
            samples["PyTorchJob (2 roles)|10"], samples["Deployment|10"]
        )
    }
    checks = [
        (
            f"typical GPU pod ≤ {TYPICAL_MAX_US:.0f} µs",
            f"{results['typical GPU pod']['median_us_10']:.1f} µs",
            results["typical GPU pod"]["median_us_10"] <= TYPICAL_MAX_US,
        ),
        *(
            (
                f"{label}: 10,000 vs 10 nodes ≤ {NODES_MAX_RATIO:.2f}",
                f"{row['ratio_10000_vs_10']:.3f}",
                row["ratio_10000_vs_10"] <= NODES_MAX_RATIO,
            )
            for label, row in by_nodes.items()
        ),
        (
            f"PyTorchJob (2 roles) vs Deployment ≤ {PYTORCHJOB_MAX_RATIO:.1f}",
            f"{ratios['pytorchjob_vs_deployment']:.3f}",
            ratios["pytorchjob_vs_deployment"] <= PYTORCHJOB_MAX_RATIO,
        ),
        (
            f"1,000 vs 10 policies ≤ {POLICIES_MAX_RATIO:.2f} (worst object)",
            f"{max(row['ratio_1000_vs_10'] for row in results.values()):.3f}",
            all(row["ratio_1000_vs_10"] <= POLICIES_MAX_RATIO for row in results.values()),
        ),
    ]

    if args.json:
        json.dump(
            {
                "core": CORE,
                "policies": results,
                "nodes": by_nodes,
                "ratios": ratios,
                "targets": {name: {"value": value, "met": met} for name, value, met in checks},
            },
            sys.stdout,
            indent=2,
        )
        print()
        return 0
    print(f"evaluation core: {CORE}")
    print(BY_POLICIES.header())
    for label, row in results.items():
        columns = ("median_us_10", "median_us_1000", "ratio_1000_vs_10")
        print(BY_POLICIES.row(label, *(row[k] for k in columns)))
    print()
    print(BY_NODES.header())
    for label, row in by_nodes.items():
        columns = ("median_us_10", "median_us_10000", "ratio_10000_vs_10")
        print(BY_NODES.row(label, *(row[k] for k in columns)))
    print()
    print("ratios are medians of round-by-round ratios (same rounds, interleaved)")
    for name, value, met in checks:
        print(f"{'met   ' if met else 'MISSED'} {name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
