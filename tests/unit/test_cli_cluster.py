"""`gpu-webhook review --kubeconfig`: policies, Nodes and claim templates read once, read-only,
from the fake API server (tests/fakekube.py), through the real kubernetes client.

The CLI is synchronous (it runs its own event loop), so it runs in a thread while the fake
server serves from the test's loop.
"""

from __future__ import annotations

import asyncio
import io
import json
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakekube import (
    CLAIM_TEMPLATES,
    CLAIMS,
    CONFIGMAPS,
    DEVICE_CLASSES,
    NODES,
    SLICES,
    FakeKube,
    claim_template,
    node,
)
from tests.helpers import CONFIGMAPS as CONFIGMAPS_DIR
from tests.helpers import GPU, container, pod
from webhook.cli import main
from webhook.sources.watched import METADATA_LIST_ACCEPT

GFD = {"nvidia.com/cuda.runtime-version.major": "12", "nvidia.com/cuda.runtime-version.minor": "4"}
GFD_KEYS = set(GFD)
MANUAL_KEYS = {"cuda-major-version", "cuda-minor-version"}
SELECTOR = "features.alauda.io/type=CustomResourceLimitation"
NO_NODE = "no node supports CUDA 12.6; highest available is 12.4 (2 nodes)"

# The shipped ConfigMaps the fake cluster serves (configmaps/).
SHIPPED = len(list(CONFIGMAPS_DIR.glob("*.yaml")))


async def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = await asyncio.to_thread(main, list(argv), out)
    return code, out.getvalue()


def write_yaml(path: Path, *docs: Any) -> Path:
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False), encoding="utf-8")
    return path


def dra_pod(image: str = "nvidia/cuda:12.6.1") -> dict[str, Any]:
    c = container(image=image, resources={"claims": [{"name": "gpu"}]})
    return pod(c, resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}])


def node_keys(mutated: dict[str, Any]) -> set[str]:
    affinity = mutated["spec"]["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return {e["key"] for t in terms for e in t["matchExpressions"]}


@pytest.fixture
def cluster(kube: FakeKube) -> FakeKube:
    """The project's CRL ConfigMaps, two GFD-labelled GPU nodes, a CPU node, a GPU template."""
    for file in sorted(CONFIGMAPS_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(file.read_text(encoding="utf-8")):
            kube.put(doc)
    kube.put(node("gpu-1", GFD))
    kube.put(node("gpu-2", GFD))
    kube.put(node("cpu-1"))
    kube.put(claim_template("ml", "single-gpu", "gpu.nvidia.com"))
    return kube


async def test_review_against_the_cluster_lists_each_kind_once_and_never_watches(
    cluster: FakeKube, tmp_path: Path
) -> None:
    kubeconfig = cluster.write_kubeconfig(tmp_path)
    manifest = write_yaml(tmp_path / "pod.yaml", dra_pod())
    code, text = await cli("review", "-f", str(manifest), "--kubeconfig", str(kubeconfig))
    assert code == 0
    server = cluster.url
    assert text.startswith(
        f"policies: {SHIPPED} CRL ConfigMap(s) from the cluster at {server}\n"
        f"node inventory: 3 node(s) from the cluster at {server} "
        "(2 with CUDA labels; scheme(s): gfd)\n"
        "DRA claims: 1 ResourceClaimTemplate(s), 0 ResourceClaim(s) from the cluster\n"
        f"--- Pod ml/train ({manifest}, document 1): ALLOWED\n"
    )
    # The DRA pod is a GPU pod through the cluster's template, placed on the scheme nodes carry.
    assert (
        "  - required GPU nodes with CUDA ≥ 12.6 (image nvidia/cuda:12.6.1), preferably < 14.0\n"
        in text
    )
    assert f"warnings:\n  - {NO_NODE}\n" in text
    assert cluster.watches() == []
    assert [(r.resource, r.accept) for r in cluster.lists()] == [
        (CONFIGMAPS, "application/json"),
        (NODES, METADATA_LIST_ACCEPT),
        (SLICES, "application/json"),
        (CLAIM_TEMPLATES, "application/json"),
        (CLAIMS, "application/json"),
        (DEVICE_CLASSES, "application/json"),
    ]
    (crls,) = cluster.lists(CONFIGMAPS)
    assert crls.path == "/api/v1/namespaces/kube-public/configmaps"
    assert crls.query["labelSelector"] == SELECTOR


async def test_cluster_policies_deny_like_the_cluster(cluster: FakeKube, tmp_path: Path) -> None:
    kubeconfig = cluster.write_kubeconfig(tmp_path)
    bad = pod(container(image="nvidia/cuda:12.4.1", limits={"tencent.com/vcuda-core": "150"}))
    manifest = write_yaml(tmp_path / "bad.yaml", bad)
    code, out = await cli(
        "review", "-f", str(manifest), "--kubeconfig", str(kubeconfig), "-o", "json"
    )
    assert code == 1
    (result,) = json.loads(out)
    assert result["violations"][0].startswith(
        "Pod ml/train, container \"c\": limits.tencent.com/vcuda-core='150' is above 100 but "
        "not a multiple of 100 "
    )
    # The same ConfigMaps from files give the same verdict and text.
    code, out = await cli(
        "review", "-f", str(manifest), "--policies", str(CONFIGMAPS_DIR), "-o", "json"
    )
    assert code == 1
    assert json.loads(out)[0]["violations"] == result["violations"]


async def test_unreadable_nodes_and_templates_are_notes_and_evaluation_goes_on(
    cluster: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.forbid(NODES, 'nodes is forbidden: User "ci" cannot list resource "nodes"')
    # A cluster without resource.k8s.io/v1 serves neither DRA kind.
    cluster.not_served(CLAIM_TEMPLATES)
    cluster.not_served(CLAIMS)
    cluster.not_served(SLICES)
    cluster.not_served(DEVICE_CLASSES)
    kubeconfig = cluster.write_kubeconfig(tmp_path)
    manifest = write_yaml(
        tmp_path / "pod.yaml", pod(container(image="nvidia/cuda:12.6.1", limits={GPU: "1"}))
    )
    code, out = await cli(
        "review", "-f", str(manifest), "--kubeconfig", str(kubeconfig), "-o", "json"
    )
    assert code == 0
    (result,) = json.loads(out)
    assert result["warnings"] == []
    # Without an inventory: the first configured scheme, as the cluster's webhook would do.
    assert node_keys(result["mutated"]) == MANUAL_KEYS
    server = cluster.url
    assert capsys.readouterr().err == (
        f"gpu-webhook review: note: {server} refused to list Nodes: 403 Forbidden: nodes is "
        'forbidden: User "ci" cannot list resource "nodes"; evaluating without a node inventory\n'
        f"gpu-webhook review: note: {server} does not serve ResourceSlices "
        "(resource.k8s.io/v1): 404 NotFound: the server could not find the requested resource; "
        "evaluating without the DRA ResourceSlices' node facts\n"
        f"gpu-webhook review: note: {server} does not serve ResourceClaimTemplates "
        "(resource.k8s.io/v1): 404 NotFound: the server could not find the requested resource; "
        "evaluating without the cluster's claim templates\n"
        f"gpu-webhook review: note: {server} does not serve ResourceClaims "
        "(resource.k8s.io/v1): 404 NotFound: the server could not find the requested resource; "
        "evaluating without the cluster's claims\n"
        f"gpu-webhook review: note: {server} does not serve DeviceClasses "
        "(resource.k8s.io/v1): 404 NotFound: the server could not find the requested resource; "
        "evaluating without the cluster's DeviceClasses (by driver)\n"
        f"gpu-webhook review: policies: {SHIPPED} CRL ConfigMap(s) from the cluster at {server}\n"
    )


async def test_unreadable_policies_exit_2(
    cluster: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.forbid(CONFIGMAPS, "configmaps is forbidden")
    kubeconfig = cluster.write_kubeconfig(tmp_path)
    manifest = write_yaml(tmp_path / "pod.yaml", dra_pod())
    code, out = await cli("review", "-f", str(manifest), "--kubeconfig", str(kubeconfig))
    assert (code, out) == (2, "")
    assert capsys.readouterr().err == (
        f"gpu-webhook review: {cluster.url} refused to list ConfigMaps in kube-public "
        f"({SELECTOR}): 403 Forbidden: configmaps is forbidden\n"
    )
    assert cluster.lists(NODES) == []


async def test_unreachable_api_server_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kube = FakeKube()
    kube.port = port
    kubeconfig = kube.write_kubeconfig(tmp_path)
    manifest = write_yaml(tmp_path / "pod.yaml", dra_pod())
    code, out = await cli("review", "-f", str(manifest), "--kubeconfig", str(kubeconfig))
    assert (code, out) == (2, "")
    err = capsys.readouterr().err
    assert err.startswith(
        f"gpu-webhook review: cannot list ConfigMaps in kube-public ({SELECTOR}) at "
        f"http://127.0.0.1:{port}: "
    )
    assert err.count("\n") == 1


async def test_missing_kubeconfig_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = write_yaml(tmp_path / "pod.yaml", dra_pod())
    code, _ = await cli("review", "-f", str(manifest), "--kubeconfig", str(tmp_path / "nope"))
    assert code == 2
    assert capsys.readouterr().err == (
        f"gpu-webhook review: cannot use the kubeconfig {tmp_path / 'nope'}: the kubeconfig "
        f"file {tmp_path / 'nope'} does not exist\n"
    )


async def test_broken_kubeconfig_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n", encoding="utf-8")
    manifest = write_yaml(tmp_path / "pod.yaml", dra_pod())
    code, _ = await cli("review", "-f", str(manifest), "--kubeconfig", str(kubeconfig))
    assert code == 2
    assert capsys.readouterr().err == (
        f"gpu-webhook review: cannot use the kubeconfig {kubeconfig}: Invalid kube-config file. "
        f"Expected key current-context in {kubeconfig}\n"
    )
    kubeconfig.write_text("kind: [\n", encoding="utf-8")
    code, _ = await cli("review", "-f", str(manifest), "--kubeconfig", str(kubeconfig))
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpu-webhook review: cannot use the kubeconfig {kubeconfig}: while ")
    assert err.count("\n") == 1


async def test_policies_and_nodes_flags_win_over_the_cluster(
    cluster: FakeKube, tmp_path: Path
) -> None:
    kubeconfig = cluster.write_kubeconfig(tmp_path)
    nodes = write_yaml(
        tmp_path / "nodes.yaml",
        {
            "apiVersion": "v1",
            "kind": "List",
            "items": [node("big", {**GFD, "nvidia.com/cuda.runtime-version.minor": "8"})],
        },
    )
    manifest = write_yaml(tmp_path / "pod.yaml", dra_pod())
    code, text = await cli(
        "review",
        "-f",
        str(manifest),
        "--kubeconfig",
        str(kubeconfig),
        "--policies",
        str(CONFIGMAPS_DIR),
        "--nodes",
        str(nodes),
    )
    assert code == 0
    assert text.startswith(
        f"node inventory: 1 node(s) from {nodes} (1 with CUDA labels; scheme(s): gfd)\n"
        "DRA claims: 1 ResourceClaimTemplate(s), 0 ResourceClaim(s) from the cluster\n"
    )
    assert "warnings:" not in text  # 12.8 on the file's node satisfies 12.6
    assert (
        "  - required GPU nodes with CUDA ≥ 12.6 (image nvidia/cuda:12.6.1), preferably < 14.0\n"
        in text
    )
    # Only the DRA claim cache (templates, claims, classes) was read from the cluster.
    assert [r.resource for r in cluster.lists()] == [CLAIM_TEMPLATES, CLAIMS, DEVICE_CLASSES]


async def test_a_template_in_the_manifest_overrides_the_clusters(
    cluster: FakeKube, tmp_path: Path
) -> None:
    kubeconfig = cluster.write_kubeconfig(tmp_path)
    nic = claim_template("ml", "single-gpu", "rdma.example.com")
    manifest = write_yaml(tmp_path / "dra.yaml", nic, dra_pod())
    code, out = await cli(
        "review", "-f", str(manifest), "--kubeconfig", str(kubeconfig), "-o", "json"
    )
    assert code == 0
    pod_result = json.loads(out)[1]
    # Once applied, the manifest's template (a NIC) is what the pod gets: no GPU placement.
    assert (pod_result["verdict"], pod_result["mutated"], pod_result["warnings"]) == (
        "allowed",
        None,
        [],
    )


def table_config(tmp_path: Path) -> Path:
    """A config whose own table pins team/serving:* to 11.8 and that names the ConfigMap."""
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "imageCudaTable": [{"image": "team/serving:*", "cudaVersion": "11.8"}],
                "imageCudaTableConfigMap": {"name": "gpu-image-table"},
                "nodeInventory": False,
                "claimTemplateCache": False,
            }
        )
    )
    return path


def table_configmap(table: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "gpu-image-table", "namespace": "kube-public"},
        "data": {"imageCudaTable": table},
    }


SERVING_FROM_FILE = (
    "  - required GPU nodes with CUDA ≥ 11.8 (image table entry for team/serving:3), "
    "preferably < 13.0\n"
)


async def test_the_image_table_configmap_is_read_once_with_the_servers_request(
    cluster: FakeKube, tmp_path: Path
) -> None:
    cluster.put(table_configmap('- image: "team/serving:*"\n  cudaVersion: "12.1"\n'))
    manifest = write_yaml(
        tmp_path / "pod.yaml", pod(container(image="team/serving:3", limits={GPU: "1"}))
    )
    code, text = await cli(
        "review",
        "-f",
        str(manifest),
        "--kubeconfig",
        str(cluster.write_kubeconfig(tmp_path)),
        "--config",
        str(table_config(tmp_path)),
    )
    assert code == 0
    assert text.startswith(
        f"policies: {SHIPPED} CRL ConfigMap(s) from the cluster at {cluster.url}\n"
        "image table: 1 entry from ConfigMap kube-public/gpu-image-table in the cluster at "
        f"{cluster.url}\n"
    )
    assert (
        "  - required GPU nodes with CUDA ≥ 12.1 (image table entry for team/serving:3), "
        "preferably < 14.0\n" in text
    )
    crls, table = cluster.lists(CONFIGMAPS)
    assert crls.query["labelSelector"] == SELECTOR
    assert (table.path, table.query.get("fieldSelector")) == (
        "/api/v1/namespaces/kube-public/configmaps",
        "metadata.name=gpu-image-table",
    )
    assert cluster.watches() == []


async def test_a_broken_image_table_is_a_note_and_the_config_files_table_applies(
    cluster: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.put(table_configmap('- image: "team/serving:*"\n  cudaVersion: "twelve"\n'))
    manifest = write_yaml(
        tmp_path / "pod.yaml", pod(container(image="team/serving:3", limits={GPU: "1"}))
    )
    code, text = await cli(
        "review",
        "-f",
        str(manifest),
        "--kubeconfig",
        str(cluster.write_kubeconfig(tmp_path)),
        "--config",
        str(table_config(tmp_path)),
    )
    assert code == 0
    assert SERVING_FROM_FILE in text
    assert "image table:" not in text
    assert capsys.readouterr().err == (
        "gpu-webhook review: note: ignoring the image table of ConfigMap "
        "kube-public/gpu-image-table key imageCudaTable entry 0: cudaVersion: Value error, "
        "cudaVersion must look like 12.4 or 12.4.1, got 'twelve'; the config file's "
        "imageCudaTable applies\n"
    )


async def test_a_refused_image_table_is_a_note_and_the_config_files_table_applies(
    cluster: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.forbid(CONFIGMAPS, "configmaps is forbidden")
    manifest = write_yaml(
        tmp_path / "pod.yaml", pod(container(image="team/serving:3", limits={GPU: "1"}))
    )
    code, text = await cli(
        "review",
        "-f",
        str(manifest),
        "--kubeconfig",
        str(cluster.write_kubeconfig(tmp_path)),
        "--config",
        str(table_config(tmp_path)),
        "--policies",
        str(CONFIGMAPS_DIR),
    )
    assert code == 0
    assert SERVING_FROM_FILE in text
    assert capsys.readouterr().err == (
        f"gpu-webhook review: note: {cluster.url} refused to list ConfigMap "
        "kube-public/gpu-image-table (image table): 403 Forbidden: configmaps is forbidden; "
        "evaluating without its entries (the config file's imageCudaTable applies)\n"
    )


async def test_without_kubeconfig_a_named_image_table_is_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = write_yaml(
        tmp_path / "pod.yaml", pod(container(image="team/serving:3", limits={GPU: "1"}))
    )
    code, text = await cli(
        "review",
        "-f",
        str(manifest),
        "--config",
        str(table_config(tmp_path)),
        "--policies",
        str(CONFIGMAPS_DIR),
    )
    assert code == 0
    assert SERVING_FROM_FILE in text
    assert capsys.readouterr().err == (
        "gpu-webhook review: note: the config names imageCudaTableConfigMap "
        "kube-public/gpu-image-table; pass --kubeconfig to use its entries as the server does\n"
    )
