"""`gpu-webhook review --nodes/--claims`: the cluster's answers offline (SPEC §9, §4, §6).

The node files are shaped like `kubectl get nodes -o yaml|json` output: a `kind: List` of
full Node objects (status, managedFields, GPU Feature Discovery labels), as kubectl prints it.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import CONFIGMAPS, GPU, container, pod
from webhook.cli import main
from webhook.core.config.model import WebhookConfig
from webhook.core.placement.inventory import NodeInventory

POLICIES = str(CONFIGMAPS)
GFD_MAJOR, GFD_MINOR = (
    "nvidia.com/cuda.runtime-version.major",
    "nvidia.com/cuda.runtime-version.minor",
)
MANUAL_MAJOR = "cuda-major-version"


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def gfd_node(
    name: str, major: str, minor: str, compute: tuple[str, str] = ("8", "0")
) -> dict[str, Any]:
    """A GPU node as `kubectl get nodes -o yaml` prints it, labelled by GPU Feature Discovery."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "4242",
            "creationTimestamp": "2026-01-05T10:00:00Z",
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                "nvidia.com/cuda.driver-version.major": "550",
                "nvidia.com/cuda.driver-version.minor": "90",
                GFD_MAJOR: major,
                GFD_MINOR: minor,
                "nvidia.com/gpu.compute.major": compute[0],
                "nvidia.com/gpu.compute.minor": compute[1],
            },
            "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1"}],
        },
        "spec": {"podCIDR": "10.244.1.0/24"},
        "status": {
            "allocatable": {"cpu": "64", GPU: "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"kubeletVersion": "v1.31.2"},
        },
    }


def cpu_node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": "16"}},
    }


def kubectl_list(*items: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": list(items),
    }


CLUSTER = kubectl_list(*(gfd_node(f"gpu-{i}", "12", "4") for i in range(3)), cpu_node("cpu-1"))


def write_yaml(path: Path, *docs: Any) -> Path:
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False), encoding="utf-8")
    return path


def gpu_pod(image: str, **spec: Any) -> dict[str, Any]:
    return pod(container(image=image, limits={GPU: "1"}), **spec)


def node_keys(mutated: dict[str, Any]) -> set[str]:
    terms = mutated["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    return {e["key"] for t in terms for e in t["matchExpressions"]}


def review_json(*argv: str) -> tuple[int, dict[str, Any]]:
    code, out = cli("review", "--policies", POLICIES, "-o", "json", *argv)
    (result,) = json.loads(out)
    return code, result


NODES_HINT = "pass the output of `kubectl get nodes -o yaml` (or -o json)"
CLAIMS_HINT = (
    "pass ResourceClaimTemplates, ResourceClaims or DeviceClasses, "
    "e.g. `kubectl get resourceclaimtemplates -A -o yaml`"
)
HEADER = "node inventory: 4 node(s) from {nodes} (3 with CUDA labels; scheme(s): gfd)\n"


# --- --nodes --------------------------------------------------------------------------------------


def test_nodes_file_warns_that_no_node_supports_the_cuda_version(tmp_path: Path) -> None:
    nodes = write_yaml(tmp_path / "nodes.yaml", CLUSTER)
    manifest = write_yaml(tmp_path / "pod.yaml", gpu_pod("nvidia/cuda:12.6.1-base-ubuntu22.04"))
    code, text = cli("review", "-f", str(manifest), "--policies", POLICIES, "--nodes", str(nodes))
    assert code == 0
    assert text.startswith(
        HEADER.format(nodes=nodes) + f"--- Pod ml/train ({manifest}, document 1): ALLOWED\n"
    )
    assert (
        "warnings:\n  - no node supports CUDA 12.6; highest available is 12.4 (3 nodes)\n" in text
    )


def test_nodes_file_with_no_compatible_node_denies_by_config(tmp_path: Path) -> None:
    nodes = write_yaml(tmp_path / "nodes.yaml", CLUSTER)
    config = tmp_path / "config.yaml"
    config.write_text("noCompatibleNode: deny\n", encoding="utf-8")
    manifest = write_yaml(tmp_path / "pod.yaml", gpu_pod("nvidia/cuda:12.6.1"))
    code, result = review_json("-f", str(manifest), "--nodes", str(nodes), "--config", str(config))
    assert code == 1
    assert result["verdict"] == "denied"
    assert result["violations"] == [
        "Pod ml/train: no node supports CUDA 12.6; highest available is 12.4 (3 nodes)."
    ]


def test_placement_uses_the_gfd_scheme_the_nodes_carry(tmp_path: Path) -> None:
    manifest = write_yaml(tmp_path / "pod.yaml", gpu_pod("nvidia/cuda:12.4.1"))
    # Without an inventory: the first configured scheme (the reference's labels), as before.
    code, result = review_json("-f", str(manifest))
    assert code == 0
    assert node_keys(result["mutated"]) == {MANUAL_MAJOR, "cuda-minor-version"}
    nodes = write_yaml(tmp_path / "nodes.yaml", CLUSTER)
    code, result = review_json("-f", str(manifest), "--nodes", str(nodes))
    assert code == 0
    assert result["warnings"] == []
    assert node_keys(result["mutated"]) == {GFD_MAJOR, GFD_MINOR}


def test_nodes_without_cuda_labels_leave_placement_unenforced(tmp_path: Path) -> None:
    nodes = write_yaml(tmp_path / "nodes.yaml", kubectl_list(cpu_node("a"), cpu_node("b")))
    manifest = write_yaml(tmp_path / "pod.yaml", gpu_pod("nvidia/cuda:12.4.1"))
    code, result = review_json("-f", str(manifest), "--nodes", str(nodes))
    assert code == 0
    assert result["warnings"] == [
        "CUDA placement is not enforced: no node advertises its CUDA version"
    ]
    assert "affinity" not in result["mutated"]["spec"]


def test_kubectl_json_output_and_machine_formats_keep_their_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps(CLUSTER, indent=4), encoding="utf-8")
    manifest = write_yaml(tmp_path / "pod.yaml", gpu_pod("nvidia/cuda:12.6.1"))
    code, out = cli(
        "review", "-f", str(manifest), "--policies", POLICIES, "--nodes", str(nodes), "-o", "json"
    )
    assert code == 0
    results = json.loads(out)  # still a list of results, keys unchanged
    assert set(results[0]) == {
        "file",
        "document",
        "kind",
        "object",
        "verdict",
        "reason",
        "violations",
        "warnings",
        "changes",
        "patch",
        "mutated",
        "templates",
        "unknownRuntimes",
    }
    assert results[0]["warnings"] == [
        "no node supports CUDA 12.6; highest available is 12.4 (3 nodes)"
    ]
    assert capsys.readouterr().err == "gpu-webhook review: " + HEADER.format(nodes=nodes)
    code, out = cli(
        "review",
        "-f",
        str(manifest),
        "--policies",
        POLICIES,
        "--nodes",
        str(nodes),
        "-o",
        "summary",
    )
    assert out == f"ALLOWED  {manifest}#1 Pod ml/train: 0 violation(s), 3 change(s), 1 warning(s)\n"
    assert capsys.readouterr().err == "gpu-webhook review: " + HEADER.format(nodes=nodes)


def test_a_multi_document_file_of_nodes_and_an_api_nodelist_are_accepted(tmp_path: Path) -> None:
    manifest = write_yaml(tmp_path / "pod.yaml", gpu_pod("nvidia/cuda:12.6.1"))
    docs = write_yaml(tmp_path / "docs.yaml", gfd_node("gpu-0", "12", "8"), cpu_node("cpu-0"))
    # The API's own NodeList (e.g. `curl .../api/v1/nodes`): items carry no kind.
    bare = [
        {k: v for k, v in gfd_node(f"g{i}", "12", "2").items() if k not in ("kind", "apiVersion")}
        for i in range(2)
    ]
    api_list = write_yaml(
        tmp_path / "nodelist.yaml",
        {"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": bare},
    )
    code, result = review_json("-f", str(manifest), "--nodes", str(docs))
    assert (code, result["warnings"]) == (0, [])
    code, result = review_json("-f", str(manifest), "--nodes", str(api_list))
    assert (code, result["warnings"]) == (
        0,
        ["no node supports CUDA 12.6; highest available is 12.2 (2 nodes)"],
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            "apiVersion: v1\nkind: List\nitems: []\n",
            "{path} holds no Node; pass the output of `kubectl get nodes -o yaml` (or -o json)",
        ),
        ("", "{path} holds no Node; pass the output of `kubectl get nodes -o yaml` (or -o json)"),
        (
            "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\n"
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n",
            "{path}: item 2 is a Pod, not a Node; " + NODES_HINT,
        ),
        (
            "- a\n- b\n",
            "{path}: item 1 is a list, not a Node; " + NODES_HINT,
        ),
        (
            "apiVersion: v1\nkind: Node\nmetadata: {labels: {}}\n",
            "{path}: item 1 is a Node without metadata.name",
        ),
        (
            "kind: List\nitems: {a: 1}\n",
            "{path}: document 1 is a List whose items is a dict, not a list",
        ),
        ("kind: [\n", "{path} is not valid YAML: "),
    ],
)
def test_unusable_nodes_files_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(content, encoding="utf-8")
    manifest = write_yaml(tmp_path / "pod.yaml", gpu_pod("nvidia/cuda:12.6.1"))
    code, out = cli("review", "-f", str(manifest), "--policies", POLICIES, "--nodes", str(nodes))
    assert (code, out) == (2, "")
    err = capsys.readouterr().err
    assert err.startswith("gpu-webhook review: " + message.format(path=nodes))
    assert err.count("\n") == 1


def test_missing_nodes_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = write_yaml(tmp_path / "pod.yaml", gpu_pod("nvidia/cuda:12.6.1"))
    code, _ = cli(
        "review",
        "-f",
        str(manifest),
        "--policies",
        POLICIES,
        "--nodes",
        str(tmp_path / "nope.yaml"),
    )
    assert code == 2
    assert capsys.readouterr().err.startswith(
        f"gpu-webhook review: cannot read {tmp_path / 'nope.yaml'}: "
    )


def test_inventory_from_node_objects_keeps_only_the_placement_labels() -> None:
    inventory = NodeInventory.from_objects(CLUSTER["items"], WebhookConfig())
    assert dict(inventory.nodes["gpu-0"]) == {
        GFD_MAJOR: "12",
        GFD_MINOR: "4",
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "0",
        # GPU-node labels (issue 45: a GPU node advertising no CUDA version is unknown).
        "nvidia.com/gpu.present": "true",
    }
    assert dict(inventory.nodes["cpu-1"]) == {}
    # A config with one explicit scheme keeps only that scheme's labels (and compute capability).
    manual = WebhookConfig.model_validate(
        {"cudaLabels": {"major": "cuda-major-version", "minor": "cuda-minor-version"}}
    )
    assert dict(NodeInventory.from_objects(CLUSTER["items"], manual).nodes["gpu-0"]) == {
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.present": "true",
    }


# --- DRA claims -----------------------------------------------------------------------------------


def claim_template(
    name: str, device_class: str = "gpu.nvidia.com", ns: str = "ml"
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]
                }
            }
        },
    }


def dra_pod(template: str = "single-gpu") -> dict[str, Any]:
    c = container(image="nvidia/cuda:12.4.1", resources={"claims": [{"name": "gpu"}]})
    return pod(c, resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": template}])


def test_dra_pod_with_its_template_in_the_same_manifest_gets_cuda_placement(tmp_path: Path) -> None:
    manifest = write_yaml(tmp_path / "dra.yaml", claim_template("single-gpu"), dra_pod())
    code, text = cli("review", "-f", str(manifest), "--policies", POLICIES)
    assert code == 0
    assert text.startswith(
        f"DRA claims: 1 ResourceClaimTemplate(s), 0 ResourceClaim(s) from {manifest}\n"
        f"--- ResourceClaimTemplate ml/single-gpu ({manifest}, document 1): SKIPPED"
    )
    assert f"--- Pod ml/train ({manifest}, document 2): ALLOWED\n" in text
    assert (
        "  - required GPU nodes with CUDA ≥ 12.4 (image nvidia/cuda:12.4.1), preferably < 14.0\n"
        in text
    )
    assert "DRA" not in text.split("document 2")[1]  # no "no DRA claim data" warning
    code, out = cli("review", "-f", str(manifest), "--policies", POLICIES, "-o", "json")
    template_result, pod_result = json.loads(out)
    assert template_result["verdict"] == "skipped"
    # No inventory here: the first configured scheme, as for a pod with an nvidia.com/gpu limit.
    assert node_keys(pod_result["mutated"]) == {MANUAL_MAJOR, "cuda-minor-version"}


def test_dra_pod_without_any_claim_data_is_evaluated_without_it(tmp_path: Path) -> None:
    manifest = write_yaml(tmp_path / "dra.yaml", dra_pod())
    code, result = review_json("-f", str(manifest))
    assert code == 0
    assert result["warnings"] == [
        "ResourceClaimTemplate single-gpu: no DRA claim data here; evaluated without it "
        "(no GPU placement from it)"
    ]
    assert result["mutated"] is None


def test_claims_file_and_nodes_together(tmp_path: Path) -> None:
    claims = write_yaml(
        tmp_path / "claims.yaml",
        {
            "apiVersion": "v1",
            "kind": "List",
            "items": [claim_template("single-gpu"), claim_template("nic", "rdma.example.com")],
        },
    )
    nodes = write_yaml(tmp_path / "nodes.yaml", CLUSTER)
    manifest = write_yaml(tmp_path / "dra.yaml", dra_pod())
    code, text = cli(
        "review",
        "-f",
        str(manifest),
        "--policies",
        POLICIES,
        "--claims",
        str(claims),
        "--nodes",
        str(nodes),
    )
    assert code == 0
    assert text.startswith(
        HEADER.format(nodes=nodes)
        + f"DRA claims: 2 ResourceClaimTemplate(s), 0 ResourceClaim(s) from {claims}\n"
    )
    assert (
        "  - required GPU nodes with CUDA ≥ 12.4 (image nvidia/cuda:12.4.1), preferably < 14.0\n"
        in text
    )
    assert "warnings:" not in text
    code, result = review_json("-f", str(manifest), "--claims", str(claims), "--nodes", str(nodes))
    assert node_keys(result["mutated"]) == {GFD_MAJOR, GFD_MINOR}


def test_a_non_gpu_template_gives_no_placement(tmp_path: Path) -> None:
    manifest = write_yaml(
        tmp_path / "dra.yaml", claim_template("single-gpu", "rdma.example.com"), dra_pod()
    )
    code, out = cli("review", "-f", str(manifest), "--policies", POLICIES, "-o", "json")
    assert code == 0
    pod_result = json.loads(out)[1]
    assert (pod_result["verdict"], pod_result["mutated"], pod_result["warnings"]) == (
        "allowed",
        None,
        [],
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n",
            "{path}: item 1 is a Pod, not a ResourceClaimTemplate, ResourceClaim or DeviceClass; "
            + CLAIMS_HINT,
        ),
        (
            "apiVersion: v1\nkind: List\nitems: []\n",
            "{path} holds no ResourceClaimTemplate, ResourceClaim or DeviceClass; " + CLAIMS_HINT,
        ),
        (
            "apiVersion: v1\nkind: ResourceClaimTemplate\nmetadata: {name: t}\n",
            "{path}: item 1 is a ResourceClaimTemplate with apiVersion 'v1'; "
            "DRA objects are resource.k8s.io/v1",
        ),
    ],
)
def test_unusable_claims_files_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    claims = tmp_path / "claims.yaml"
    claims.write_text(content, encoding="utf-8")
    manifest = write_yaml(tmp_path / "dra.yaml", dra_pod())
    code, out = cli("review", "-f", str(manifest), "--policies", POLICIES, "--claims", str(claims))
    assert (code, out) == (2, "")
    assert capsys.readouterr().err == "gpu-webhook review: " + message.format(path=claims) + "\n"
