"""The DRA node inventory (SPEC §13): ResourceSlices read for nodes without labels, their
attributes only, and placement naming such nodes (matchFields metadata.name)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakekube import NODES, SLICES, FakeKube, fast_options, node, running
from tests.helpers import (
    GPU,
    apply,
    assert_idempotent,
    container,
    eventually,
    expr,
    node_terms,
    pod,
    run,
)
from webhook.cli import main
from webhook.core.base.versions import CudaVersion
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.placement.dra import DraNode, from_objects, slice_facts
from webhook.core.placement.inventory import NodeInventory
from webhook.sources.nodes import inventory_sources
from webhook.sources.store import PolicyStore

MAJOR, MINOR = "cuda-major-version", "cuda-minor-version"
CMAJ, CMIN = "nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor"
DENY = load_config({"noCompatibleNode": "deny"})


def gpu_device(name: str, cuda: str, compute: str, qualified: bool = False) -> dict[str, Any]:
    """A device as NVIDIA's DRA driver publishes it (k8s-dra-driver-gpu deviceinfo.go), with the
    attributes the inventory does not read too."""
    prefix = "gpu.nvidia.com/" if qualified else ""
    return {
        "name": name,
        "attributes": {
            f"{prefix}type": {"string": "gpu"},
            f"{prefix}productName": {"string": "NVIDIA A100-SXM4-40GB"},
            f"{prefix}driverVersion": {"version": "570.124.6"},
            f"{prefix}cudaDriverVersion": {"version": cuda},
            f"{prefix}cudaComputeCapability": {"version": compute},
        },
        "capacity": {"memory": {"value": "40Gi"}},
    }


def resource_slice(
    name: str, node_name: str | None, driver: str, devices: list[dict[str, Any]]
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": node_name or "all", "generation": 1, "resourceSliceCount": 1},
        "devices": devices,
    }
    if node_name is None:
        spec["allNodes"] = True
    else:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": spec,
    }


def nvidia_slice(node_name: str, *versions: tuple[str, str], qualified: bool = False) -> Any:
    devices = [gpu_device(f"gpu-{i}", c, cc, qualified) for i, (c, cc) in enumerate(versions)]
    return resource_slice(f"{node_name}-gpu.nvidia.com", node_name, "gpu.nvidia.com", devices)


def amd_slice(node_name: str, version: str) -> dict[str, Any]:
    device = {
        "name": "gpu-1-128",
        "attributes": {
            "type": {"string": "amdgpu"},
            "driverVersion": {"version": version},
            "driverVersionFull": {"string": f"{version}.31400000"},
        },
    }
    return resource_slice(f"{node_name}-gpu.amd.com", node_name, "gpu.amd.com", [device])


def gpu_pod(image: str = "nvidia/cuda:12.4.1", **annotations: str) -> dict[str, Any]:
    return pod(
        container(image=image, limits={GPU: "1"}, requests={GPU: "1"}), annotations=annotations
    )


def names(name: str) -> dict[str, Any]:
    return {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}


def cuda_12_4() -> list[dict[str, Any]]:
    return [
        {
            "matchExpressions": [
                expr(MAJOR, "Gt", 11),
                expr(MAJOR, "Lt", 13),
                expr(MINOR, "Gt", 3),
            ]
        },
        {"matchExpressions": [expr(MAJOR, "Gt", 12)]},
    ]


# --- reading slices ---------------------------------------------------------------------------


def test_a_slice_gives_its_node_and_the_lowest_of_its_devices_versions() -> None:
    found = slice_facts(nvidia_slice("dra-1", ("12.8.0", "9.0.0"), ("12.4.0", "8.0.0")))
    assert found == ("dra-1", DraNode(cuda=CudaVersion(12, 4), compute=CudaVersion(8, 0)))
    # Qualified attribute names are the driver's own too (resource/v1 Device.Attributes).
    found = slice_facts(nvidia_slice("dra-2", ("13.0.0", "10.0.0"), qualified=True))
    assert found == ("dra-2", DraNode(cuda=CudaVersion(13, 0), compute=CudaVersion(10, 0)))
    assert slice_facts(amd_slice("mi-1", "6.12.12")) == ("mi-1", DraNode(amdgpu="6.12.12"))


@pytest.mark.parametrize(
    "obj",
    [
        # Another driver's slice, even with the same attribute names.
        resource_slice("x", "n", "gpu.example.com", [gpu_device("g", "12.4.0", "8.0.0")]),
        # A slice for every node (no nodeName): it places nothing on one node.
        resource_slice("x", None, "gpu.nvidia.com", [gpu_device("g", "12.4.0", "8.0.0")]),
        # Not semver (VersionValue is semver 2.0.0), or not a version attribute.
        nvidia_slice("n", ("12.4", "8.0")),
        resource_slice(
            "x", "n", "gpu.nvidia.com", [{"name": "g", "attributes": {"cudaDriverVersion": {}}}]
        ),
        {"spec": "not a spec"},
    ],
)
def test_slices_the_inventory_cannot_use_are_not_kept(obj: dict[str, Any]) -> None:
    assert slice_facts(obj) is None


def test_a_node_with_several_slices_keeps_the_lowest_versions() -> None:
    slices = [
        nvidia_slice("dra-1", ("12.8.0", "9.0.0")),
        {**nvidia_slice("dra-1", ("12.6.0", "9.0.0")), "metadata": {"name": "pool-2"}},
        amd_slice("dra-1", "6.10.5"),
        {**amd_slice("dra-1", "6.8.5"), "metadata": {"name": "amd-2"}},
    ]
    assert from_objects(slices) == {
        "dra-1": DraNode(cuda=CudaVersion(12, 6), compute=CudaVersion(9, 0), amdgpu="6.8.5")
    }


# --- placement --------------------------------------------------------------------------------


def inventory(**dra: tuple[str, str]) -> NodeInventory:
    """Node `labelled` with CUDA 12.4 manual labels, `plain` without labels, and one node per
    keyword argument that only its DRA slice describes (CUDA, compute capability)."""
    nodes: dict[str, dict[str, str]] = {"labelled": {MAJOR: "12", MINOR: "4"}, "plain": {}}
    nodes.update({name: {} for name in dra})
    slices = [nvidia_slice(name, (cuda, cc)) for name, (cuda, cc) in dra.items()]
    return NodeInventory.build(nodes, dra=from_objects(slices))


def test_dra_only_nodes_that_fit_are_named_beside_the_labelled_ones() -> None:
    inv = inventory(**{"dra-new": ("12.8.0", "9.0.0"), "dra-old": ("11.8.0", "7.0.0")})
    decision = run(gpu_pod(), inventory=inv)
    assert decision.allowed
    assert decision.warnings == ()
    # Labelled nodes by their labels (as without DRA), the DRA-only node that fits by name.
    assert node_terms(apply(decision)) == [*cuda_12_4(), names("dra-new")]
    assert_idempotent(decision, inventory=inv)
    assert inv.to_json()["draNodes"] == 2
    assert inv.to_json()["cuda"] == {"12.8": 1, "12.4": 1, "11.8": 1}


def test_labels_win_over_slices() -> None:
    nodes = {"both": {MAJOR: "11", MINOR: "8"}}
    inv = NodeInventory.build(nodes, dra=from_objects([nvidia_slice("both", ("12.8.0", "9.0"))]))
    decision = run(gpu_pod(), inventory=inv, config=DENY)
    # The label says 11.8: no node fits, whatever the slice says.
    assert decision.violations[0].message.startswith("Pod ml/train: no node supports CUDA 12.4")
    assert "draNodes" not in inv.to_json()


def test_slices_of_nodes_that_are_not_nodes_place_nothing() -> None:
    inv = NodeInventory.build(
        {"plain": {}}, dra=from_objects([nvidia_slice("gone", ("13.0.0", "9.0.0"))])
    )
    decision = run(gpu_pod(), inventory=inv)
    assert decision.warnings == (
        "CUDA placement is not enforced: no node advertises its CUDA version",
    )
    assert node_terms(apply(decision)) is None


def test_a_dra_only_cluster_where_nothing_fits_warns_and_denies_as_a_labelled_one() -> None:
    nodes: dict[str, dict[str, str]] = {"dra-old": {}}
    inv = NodeInventory.build(
        nodes, dra=from_objects([nvidia_slice("dra-old", ("12.2.0", "8.0.0"))])
    )
    text = "no node supports CUDA 12.4; highest available is 12.2 (1 node)"
    warned = run(gpu_pod(), inventory=inv)
    assert text in warned.warnings[0]
    # Terms no node meets: the pod waits for a node that fits instead of landing on 12.2.
    assert node_terms(apply(warned)) == cuda_12_4()
    denied = run(gpu_pod(), inventory=inv, config=DENY)
    assert not denied.allowed
    assert text in denied.violations[0].message


def test_compute_capability_of_dra_only_nodes_is_placed_by_name_too() -> None:
    inv = inventory(**{"dra-a100": ("12.8.0", "8.0.0"), "dra-v100": ("12.8.0", "7.0.0")})
    decision = run(gpu_pod(**{"features.alauda.io/min-compute-capability": "8.0"}), inventory=inv)
    assert decision.allowed
    terms = node_terms(apply(decision))
    # Every CUDA term ANDed with every compute term, except two different nodes' names (a term
    # no node matches): the CUDA part names dra-a100 and dra-v100, the compute part dra-a100.
    named = [t for t in terms if "matchFields" in t]
    # dra-a100 by name alone (both parts name it: one expression).
    assert [t for t in named if "matchExpressions" not in t] == [names("dra-a100")]
    # dra-v100 only with compute labels it does not carry: no term selects it.
    compute = {"matchExpressions": [expr(CMAJ, "Gt", 7)]}
    v100 = [t for t in named if t["matchFields"] == names("dra-v100")["matchFields"]]
    assert v100 == [{**compute, **names("dra-v100")}]
    # (2 label terms + 2 named) x (label term + named), less dra-v100 x dra-a100
    assert len(terms) == 4 * 2 - 1
    assert_idempotent(decision, inventory=inv)


def test_one_term_per_named_node() -> None:
    # The API server accepts one value in a node field selector's In (kube-apiserver 1.36.2
    # refused a Job's pods whose term listed two).
    inv = inventory(**{"dra-a": ("12.8.0", "9.0.0"), "dra-b": ("13.0.0", "9.0.0")})
    decision = run(gpu_pod(), inventory=inv)
    assert node_terms(apply(decision)) == [*cuda_12_4(), names("dra-a"), names("dra-b")]
    assert_idempotent(decision, inventory=inv)


def test_a_users_own_terms_are_crossed_with_the_named_nodes() -> None:
    inv = inventory(**{"dra-new": ("12.8.0", "9.0.0")})
    obj = gpu_pod()
    zone = {"matchExpressions": [expr("topology.kubernetes.io/zone", "In", "a")]}
    obj["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [zone]}
        }
    }
    decision = run(obj, inventory=inv)
    terms = node_terms(apply(decision))
    assert terms[-1] == {**zone, **names("dra-new")}
    assert_idempotent(decision, inventory=inv)


# --- the source -------------------------------------------------------------------------------


async def test_slices_are_listed_and_watched_into_the_inventory(
    kube: FakeKube, store: PolicyStore, tmp_path: Path
) -> None:
    kube.put(node("labelled", {MAJOR: "12", MINOR: "4"}))
    kube.put(node("dra-1"))
    kube.put(node("mi300"))
    kube.put(nvidia_slice("dra-1", ("12.8.0", "9.0.0")))
    kube.put(amd_slice("mi300", "6.12.12"))
    # Another driver's slice is not kept.
    kube.put(resource_slice("nic", "dra-1", "net.example.com", [{"name": "eth0"}]))
    sources = inventory_sources(store, WebhookConfig(), **fast_options(kube, tmp_path))
    async with running(sources[0]), running(sources[1]):
        await eventually(lambda: store.inventory is not None and bool(store.inventory.dra), "dra")
        assert store.inventory is not None
        assert dict(store.inventory.dra) == {
            "dra-1": DraNode(cuda=CudaVersion(12, 8), compute=CudaVersion(9, 0)),
            "mi300": DraNode(amdgpu="6.12.12"),
        }
        # Slices are read whole (their attributes are in spec); Nodes stay metadata-only.
        assert [r.accept for r in kube.lists(SLICES)] == ["application/json"]
        assert "PartialObjectMetadataList" in kube.lists(NODES)[0].accept
        # A driver upgrade on the node arrives through the watch.
        await eventually(lambda: kube.open_watches_of(SLICES) == 1, "slice watch open")
        kube.put(nvidia_slice("dra-1", ("13.0.0", "9.0.0")))
        await eventually(
            lambda: (
                store.inventory is not None
                and store.inventory.dra["dra-1"].cuda == CudaVersion(13, 0)
            ),
            "the new version published",
        )
    assert store.snapshot_status("ResourceSlice") == {"available": True}


# --- the CLI --------------------------------------------------------------------------------


def test_review_reads_resource_slices_beside_the_nodes(tmp_path: Path) -> None:
    """`kubectl get nodes,resourceslices -o yaml` as `review --nodes`: DRA-only nodes placed."""
    listing = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            node("dra-new"),
            node("dra-old"),
            nvidia_slice("dra-new", ("12.8.0", "9.0.0")),
            nvidia_slice("dra-old", ("12.2.0", "8.0.0")),
        ],
    }
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump(listing), encoding="utf-8")
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(gpu_pod()), encoding="utf-8")
    out = io.StringIO()
    code = main(["review", "-f", str(manifest), "--nodes", str(nodes), "-o", "json"], out=out)
    assert code == 0
    (result,) = json.loads(out.getvalue())
    assert node_terms(result["mutated"]) == [names("dra-new")]


# --- AMD: the ROCm gate on nodes only DRA describes -------------------------------------------

ROCM_64 = "rocm/pytorch:rocm6.4_ubuntu24.04_py3.12_pytorch_release_2.6.0"
ROCM_714 = "rocm/vllm:rocm7.14.0_vllm_0.10.2_20251006"
MODULE = "amd.com/gpu.driver-version"


def amd_pod(image: str) -> dict[str, Any]:
    return pod(container(image=image, limits={"amd.com/gpu": "1"}))


def amd_inventory() -> NodeInventory:
    """A labelled node on amdgpu module 6.12.12 (the ROCm 6.4 driver), and DRA-only nodes on
    6.12.12 and 6.14.14 (amdgpu 30.10), and one whose slice publishes no driverVersion."""
    nodes: dict[str, dict[str, str]] = {
        "mi-labelled": {MODULE: "6.12.12"},
        "mi-dra-old": {},
        "mi-dra-new": {},
        "mi-dra-none": {},
    }
    slices = [amd_slice("mi-dra-old", "6.12.12"), amd_slice("mi-dra-new", "6.14.14")]
    slices.append(resource_slice("s", "mi-dra-none", "gpu.amd.com", [{"name": "gpu-0"}]))
    return NodeInventory.build(nodes, dra=from_objects(slices))


def test_the_rocm_gate_names_the_dra_only_nodes_whose_driver_runs_the_image() -> None:
    inv = amd_inventory()
    decision = run(amd_pod(ROCM_64), inventory=inv)
    release = {"key": "amdgpu-driver-release", "operator": "DoesNotExist"}
    module = {"key": MODULE, "operator": "In", "values": ["6.12.12"]}
    assert node_terms(apply(decision)) == [
        {"matchExpressions": [release, module]},
        names("mi-dra-new"),
        names("mi-dra-old"),
    ]
    assert_idempotent(decision, inventory=inv)
    # ROCm 7.14 runs on amdgpu 30.10 (not 6.4): the DRA-only node on 6.14.14.
    newer = run(amd_pod(ROCM_714), inventory=inv)
    assert node_terms(apply(newer)) == [names("mi-dra-new")]
    # Only names: evaluated again (reinvocation), the pod keeps exactly these terms.
    assert_idempotent(newer, inventory=inv)


def test_an_amd_label_wins_over_the_slice() -> None:
    nodes = {"mi": {MODULE: "6.12.12"}}
    inv = NodeInventory.build(nodes, dra=from_objects([amd_slice("mi", "6.14.14")]))
    decision = run(amd_pod(ROCM_714), inventory=inv)
    assert decision.warnings[0].startswith("no node's amdgpu driver supports ROCm 7.14")
