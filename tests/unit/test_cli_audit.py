"""`gpu-webhook audit` against the fake API server (tests/fakekube.py) through the real
kubernetes client: read-only paginated lists, grouping by owner, exit codes and output."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest

from tests.auditdata import populate
from tests.auditdata import proposed_policies as proposed
from tests.fakekube import PODS, PYTORCHJOBS, REPLICASETS, FakeKube
from tests.helpers import CONFIGMAPS
from webhook.cli import main

# The shipped ConfigMaps the fake cluster serves (configmaps/).
SHIPPED = len(list(CONFIGMAPS.glob("*.yaml")))


async def cli(*argv: str) -> tuple[int, str]:
    """The CLI runs its own event loop: in a thread, while the fake serves from this one."""
    out = io.StringIO()
    code = await asyncio.to_thread(main, list(argv), out)
    return code, out.getvalue()


@pytest.fixture
def cluster(kube: FakeKube) -> FakeKube:
    populate(kube)
    return kube


NOT_INSTALLED = (
    "note: not installed in the cluster, not audited: batch.paddlepaddle.org (PaddleJob); "
    "batch.volcano.sh (Job); jobset.x-k8s.io (JobSet); kubeflow.org (JAXJob, MPIJob, MXJob, "
    "PaddleJob, TFJob, XGBoostJob); leaderworkerset.x-k8s.io (LeaderWorkerSet); ray.io "
    "(RayCluster, RayJob, RayService); serving.knative.dev (Service); serving.kserve.io "
    "(InferenceService, LLMInferenceService); serving.kubeflow.org (InferenceService); "
    "trainer.kubeflow.org (ClusterTrainingRuntime, TrainJob, TrainingRuntime)\n"
)
MAX_4 = (
    "limits.nvidia.com/gpu='8' is above the maximum 4 (max: 4 in ConfigMap "
    "kube-public/cf-crl-nvidia-gpu). Physical NVIDIA GPUs (whole cards)."
)
OLD_CHANGE = (
    "--- Pod research/old (the pod)\n"
    "  - gpu-admission-webhook (cuda-affinity): required GPU nodes with CUDA ≥ 12.4 "
    "(image nvidia/cuda:12.4.1-runtime-ubuntu22.04), preferably < 14.0\n"
    # The /dev/shm fix, on by default, is what a pod created again gets too.
    '  - gpu-admission-webhook (shm): mounted a 16Gi memory-backed /dev/shm in container "main" '
    "(shm fix)\n"
)


def header(kube: FakeKube, policies: str) -> str:
    server = kube.url
    return (
        f"{policies}\n"
        f"node inventory: 2 node(s) from the cluster at {server} (2 with CUDA labels; "
        "scheme(s): manual)\n"
        f"DRA claims: 0 ResourceClaimTemplate(s), 0 ResourceClaim(s) from the cluster at {server}\n"
    )


async def test_the_policies_in_force_deny_nothing_that_runs_and_name_what_would_change(
    cluster: FakeKube, tmp_path: Path
) -> None:
    kubeconfig = cluster.write_kubeconfig(tmp_path)
    code, out = await cli("audit", "--kubeconfig", str(kubeconfig))
    assert code == 0
    policies = f"policies: {SHIPPED} CRL ConfigMap(s) from the cluster at {cluster.url}"
    assert out.startswith(header(cluster, policies) + NOT_INSTALLED)
    body = out[len(header(cluster, policies) + NOT_INSTALLED) :]
    assert body.startswith(
        "\nWOULD CHANGE (what pods created again would get that these do not have):\n"
        + OLD_CHANGE
        + "\naudited 3 workload(s) and 8 pod(s) (1 finished pod(s) skipped) in "
    )
    assert body.endswith(" with 12 list request(s): 0 owner(s) would be denied, 1 would change\n")
    # Read-only: GETs only (discovery and lists), never a watch.
    assert {r.method for r in cluster.requests} == {"GET"}
    assert cluster.watches() == []


async def test_a_proposed_folder_shows_the_owners_it_would_deny_each_once(
    cluster: FakeKube, tmp_path: Path
) -> None:
    kubeconfig = cluster.write_kubeconfig(tmp_path)
    folder = proposed(tmp_path / "proposed")
    code, out = await cli("audit", "--kubeconfig", str(kubeconfig), "--policies", str(folder))
    assert code == 1
    assert out.startswith(header(cluster, f"policies: proposed, from {folder}") + NOT_INSTALLED)
    assert (
        "\nWOULD BE DENIED (the next change of these is refused):\n"
        "--- Deployment ml/train (template denied, 3 of 3 pod(s) denied)\n"
        f'  - cf-crl-nvidia-gpu (max: 4): container "train": {MAX_4} '
        "[template and 3 pod(s), e.g. train-5d8f9c-00000]\n"
        "--- PyTorchJob ml/bert (template denied, 2 of 2 pod(s) denied)\n"
        f'  - cf-crl-nvidia-gpu (max: 4): replica Worker, container "pytorch": {MAX_4} '
        "[template]\n"
        f'  - cf-crl-nvidia-gpu (max: 4): container "pytorch": {MAX_4} '
        "[2 pod(s), e.g. bert-worker-0]\n"
        "\nWOULD CHANGE (what pods created again would get that these do not have):\n" + OLD_CHANGE
    ) in out
    assert "2 owner(s) would be denied, 1 would change\n" in out
    # The cluster's own CRLs were not read: the folder replaces them.
    assert cluster.lists("configmaps") == []


async def test_summary_and_json_outputs(
    cluster: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = cluster.write_kubeconfig(tmp_path)
    folder = proposed(tmp_path / "proposed")
    base = ("audit", "--kubeconfig", str(kubeconfig), "--policies", str(folder))
    code, out = await cli(*base, "-o", "summary")
    assert code == 1
    assert out == (
        "DENIED   Deployment ml/train: 1 violation(s); template denied, 3 of 3 pod(s) denied\n"
        "DENIED   PyTorchJob ml/bert: 2 violation(s); template denied, 2 of 2 pod(s) denied\n"
        "CHANGES  Pod research/old: 2 change(s); the pod\n"
    )
    # The context lines went to stderr, so stdout stays machine-readable.
    assert f"gpu-webhook audit: policies: proposed, from {folder}\n" in capsys.readouterr().err
    code, out = await cli(*base, "-o", "json")
    assert code == 1
    document = json.loads(out)
    summary = document["summary"]
    assert {k: summary[k] for k in ("denied", "changed", "workloads", "pods", "finishedPods")} == {
        "denied": 2,
        "changed": 1,
        "workloads": 3,
        "pods": 8,
        "finishedPods": 1,
    }
    assert summary["requests"] == 12
    assert [(f["kind"], f["namespace"], f["name"], f["denied"]) for f in document["findings"]] == [
        ("Deployment", "ml", "train", True),
        ("PyTorchJob", "ml", "bert", True),
        ("Pod", "research", "old", False),
    ]
    train = document["findings"][0]
    assert (train["apiVersion"], train["pods"], train["podsDenied"]) == ("apps/v1", 3, 3)
    assert train["violations"][0]["message"] == f'container "train": {MAX_4}'
    assert document["notes"] == [NOT_INSTALLED[len("note: ") : -1]]


def without_costs(document: dict[str, Any]) -> dict[str, Any]:
    return {**document, "summary": {**document["summary"], "requests": 0, "seconds": 0}}


async def test_lists_are_paginated_and_give_the_same_answer(
    cluster: FakeKube, tmp_path: Path
) -> None:
    kubeconfig = cluster.write_kubeconfig(tmp_path)
    folder = proposed(tmp_path / "proposed")
    base = ("audit", "--kubeconfig", str(kubeconfig), "--policies", str(folder), "-o", "json")
    _, whole = await cli(*base)
    cluster.requests.clear()
    _, paged = await cli(*base, "--page-size", "2")
    pod_lists = cluster.lists(PODS)
    # 9 pods (the finished one is listed, then skipped): 5 pages of at most 2.
    assert [r.query["limit"] for r in pod_lists] == ["2"] * 5
    assert [r.query.get("continue") is None for r in pod_lists] == [True] + [False] * 4
    assert without_costs(json.loads(paged)) == without_costs(json.loads(whole))
    assert json.loads(paged)["summary"]["requests"] > json.loads(whole)["summary"]["requests"]


async def test_a_missing_crd_and_a_forbidden_kind_are_notes_and_pods_still_group(
    cluster: FakeKube, tmp_path: Path
) -> None:
    cluster.not_installed("kubeflow.org")
    cluster.forbid(REPLICASETS, 'replicasets.apps is forbidden: User "ci" cannot list')
    kubeconfig = cluster.write_kubeconfig(tmp_path)
    folder = proposed(tmp_path / "proposed")
    code, out = await cli(
        "audit", "--kubeconfig", str(kubeconfig), "--policies", str(folder), "-o", "summary"
    )
    assert code == 1
    # The pods still group under their controllers, as their ownerReferences name them: the
    # PyTorchJob (not installed here) and the ReplicaSet (not listable).
    assert out == (
        "DENIED   Deployment ml/train: 1 violation(s); template denied\n"
        "DENIED   PyTorchJob ml/bert: 1 violation(s); 2 of 2 pod(s) denied\n"
        "DENIED   ReplicaSet ml/train-5d8f9c: 1 violation(s); 3 of 3 pod(s) denied\n"
        "CHANGES  Pod research/old: 2 change(s); the pod\n"
    )
    assert cluster.lists(PYTORCHJOBS) == []


async def test_notes_of_a_missing_crd_and_a_403_in_text(cluster: FakeKube, tmp_path: Path) -> None:
    cluster.not_installed("kubeflow.org")
    cluster.forbid(REPLICASETS, 'replicasets.apps is forbidden: User "ci" cannot list')
    kubeconfig = cluster.write_kubeconfig(tmp_path)
    code, out = await cli("audit", "--kubeconfig", str(kubeconfig))
    assert code == 0
    assert "kubeflow.org (JAXJob, MPIJob, MXJob, PaddleJob, PyTorchJob, TFJob, XGBoostJob)" in out
    assert (
        "note: not allowed to list replicasets (apps/v1), not audited: 403 Forbidden: "
        'replicasets.apps is forbidden: User "ci" cannot list; grant list on replicasets (the '
        "chart's audit RBAC does)\n"
    ) in out


async def test_one_namespace(cluster: FakeKube, tmp_path: Path) -> None:
    kubeconfig = cluster.write_kubeconfig(tmp_path)
    folder = proposed(tmp_path / "proposed")
    code, out = await cli(
        "audit", "--kubeconfig", str(kubeconfig), "--policies", str(folder), "-n", "research",
        "-o", "summary",
    )  # fmt: skip
    assert code == 0
    assert out == "CHANGES  Pod research/old: 2 change(s); the pod\n"
    paths = {r.path for r in cluster.lists() if r.path.endswith(("/pods", "/deployments"))}
    assert paths == {
        "/api/v1/namespaces/research/pods",
        "/apis/apps/v1/namespaces/research/deployments",
    }


@pytest.mark.parametrize("status", [500, 0], ids=["http-500", "connection-dropped"])
async def test_an_unreadable_cluster_is_exit_2_with_one_line(
    cluster: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str], status: int
) -> None:
    kubeconfig = cluster.write_kubeconfig(tmp_path)
    cluster.fail_requests(status, "etcdserver: request timed out")
    code, out = await cli("audit", "--kubeconfig", str(kubeconfig))
    assert (code, out) == (2, "")
    err = capsys.readouterr().err
    assert err.startswith("gpu-webhook audit: ")
    assert err.count("\n") == 1


async def test_the_cluster_failing_during_the_lists_is_exit_2(
    cluster: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.fail_resource(PODS, 500, "etcdserver: leader changed")
    kubeconfig = cluster.write_kubeconfig(tmp_path)
    code, _ = await cli("audit", "--kubeconfig", str(kubeconfig))
    assert code == 2
    assert capsys.readouterr().err == (
        "gpu-webhook audit: cannot audit the cluster: 500 InternalError: etcdserver: leader "
        "changed\n"
    )


async def test_unusable_inputs_are_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = await cli("audit", "--kubeconfig", str(tmp_path / "missing"))
    assert code == 2
    assert capsys.readouterr().err == (
        f"gpu-webhook audit: cannot use the kubeconfig {tmp_path / 'missing'}: the kubeconfig "
        f"file {tmp_path / 'missing'} does not exist\n"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _ = await cli(
        "audit", "--kubeconfig", str(tmp_path / "missing"), "--policies", str(empty)
    )
    assert code == 2
    assert "no CRL ConfigMap in" in capsys.readouterr().err


async def test_the_text_counts_unknown_runtimes_per_runtime(
    cluster: FakeKube, tmp_path: Path
) -> None:
    """Pods of each family whose runtime version nothing tells: the last lines count them by
    runtime, as -o json's summary does (the same rule for CUDA, ROCm and CANN)."""
    for name, image, resource in (
        ("cuda-app", "registry.example/team/cuda-app:1", "nvidia.com/gpu"),
        ("rocm-app", "registry.example/team/rocm-app:1", "amd.com/gpu"),
        ("npu-app", "registry.example/team/npu-app:1", "huawei.com/npu"),
    ):
        limits = {resource: "1"}
        cluster.put(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "lab", "uid": f"uid-{name}"},
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "image": image,
                            "resources": {"limits": limits, "requests": limits},
                        }
                    ]
                },
            }
        )
    kubeconfig = cluster.write_kubeconfig(tmp_path)
    code, out = await cli("audit", "--kubeconfig", str(kubeconfig))
    assert code == 0
    assert out.endswith(
        "runtime version unknown in pods' containers: CUDA 1, CANN 1, ROCm 1 (their placement "
        "is not checked: set each image's version annotation or image table entry)\n"
    )
    code, out = await cli("audit", "--kubeconfig", str(kubeconfig), "-o", "json")
    assert json.loads(out)["summary"]["unknownRuntimes"] == {"CUDA": 1, "CANN": 1, "ROCm": 1}
