"""The audit against a real API server (SPEC §6): workloads created before a policy is tightened,
then `gpu-webhook audit` with the proposed folder, and the policy reports the server's audit
writes, replaces and removes.

Needs no webhook registered: the workloads are created as they would have been before the
tightened policy existed (a Deployment with its ReplicaSet and pods created by hand, since a
bare API server has no controller manager; the Deployment is paused so that a real one does
not replace them), in a namespace of their own. The PyTorchJob and PolicyReport CRDs are
created when the cluster lacks them (and removed afterwards). The server's audit runs in this
process, restricted to that namespace, so nothing outside it is reported on or touched.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.auditdata import proposed_policies, shipped_policies
from webhook.cli import main
from webhook.core.config.model import WebhookConfig
from webhook.core.policies.policyset import PolicySet
from webhook.sources.auditor import Auditor
from webhook.sources.files import load_policy_dir
from webhook.sources.store import PolicyStore

from .conftest import Cluster

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
REPORT_CRD = (
    ROOT / "charts" / "gpu-admission-webhook" / "crds" / "wgpolicyk8s.io_policyreports.yaml"
)
IMAGE = "nvidia/cuda:12.4.1-runtime-ubuntu22.04"
GPU = "nvidia.com/gpu"
ESTABLISHED_SECONDS = 30.0
MAX_4 = (
    "limits.nvidia.com/gpu='8' is above the maximum 4 (max: 4 in ConfigMap "
    "kube-public/cf-crl-nvidia-gpu). Physical NVIDIA GPUs (whole cards)."
)

PYTORCHJOB_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "pytorchjobs.kubeflow.org"},
    "spec": {
        "group": "kubeflow.org",
        "scope": "Namespaced",
        "names": {"plural": "pytorchjobs", "singular": "pytorchjob", "kind": "PyTorchJob"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


def _ensure_crd(cluster: Cluster, crd: dict[str, Any]) -> bool:
    """Create `crd` unless the cluster has it; True when created here. Waits for Established."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    ext: Any = client.ApiextensionsV1Api(cluster.api)
    name = crd["metadata"]["name"]
    try:
        ext.read_custom_resource_definition(name)
        return False
    except ApiException as exc:
        if exc.status != 404:
            raise
    ext.create_custom_resource_definition(crd)
    deadline = time.monotonic() + ESTABLISHED_SECONDS
    while True:
        status = ext.read_custom_resource_definition(name).status
        conditions = (status.conditions if status else None) or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            return True
        assert time.monotonic() < deadline, f"CRD {name} not Established in time"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def crds(cluster: Cluster) -> Iterator[None]:
    from kubernetes import client

    report_crd = yaml.safe_load(REPORT_CRD.read_text(encoding="utf-8").split("---\n", 1)[1])
    created = [crd for crd in (PYTORCHJOB_CRD, report_crd) if _ensure_crd(cluster, crd)]
    try:
        yield
    finally:
        ext: Any = client.ApiextensionsV1Api(cluster.api)
        for crd in created:
            ext.delete_custom_resource_definition(crd["metadata"]["name"])


@pytest.fixture(scope="module")
def audit_namespace(cluster: Cluster, crds: None) -> Iterator[str]:
    from kubernetes import client

    core: Any = client.CoreV1Api(cluster.api)
    name = f"gaw-audit-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    try:
        yield name
    finally:
        core.delete_namespace(name)


def _container(name: str, gpus: str) -> dict[str, Any]:
    return {"name": name, "image": IMAGE, "resources": {"limits": {GPU: gpus}}}


def _controller(owner: Any, api_version: str, kind: str) -> list[dict[str, Any]]:
    meta = owner["metadata"] if isinstance(owner, dict) else owner.metadata
    name = meta["name"] if isinstance(meta, dict) else meta.name
    uid = meta["uid"] if isinstance(meta, dict) else meta.uid
    return [{"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True}]


@pytest.fixture(scope="module")
def workloads(cluster: Cluster, audit_namespace: str) -> str:
    """ml-style workloads admitted before the policy is tightened: Deployment train (2 pods, 8
    GPUs each), PyTorchJob bert (2 workers, 8 GPUs), pod small (1 GPU)."""
    from kubernetes import client

    ns = audit_namespace
    core: Any = client.CoreV1Api(cluster.api)
    apps: Any = client.AppsV1Api(cluster.api)
    custom: Any = client.CustomObjectsApi(cluster.api)
    labels = {"app": "train"}
    template = {"metadata": {"labels": labels}, "spec": {"containers": [_container("train", "8")]}}
    deployment = apps.create_namespaced_deployment(
        ns,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "train"},
            # Paused: a real controller manager creates no ReplicaSet of its own.
            "spec": {
                "replicas": 2,
                "paused": True,
                "selector": {"matchLabels": labels},
                "template": template,
            },
        },
    )
    hashed = {**labels, "pod-template-hash": "5d8f9c"}
    replicaset = apps.create_namespaced_replica_set(
        ns,
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": "train-5d8f9c",
                "labels": hashed,
                "ownerReferences": _controller(deployment, "apps/v1", "Deployment"),
            },
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": hashed},
                "template": {**template, "metadata": {"labels": hashed}},
            },
        },
    )
    for index in range(2):
        core.create_namespaced_pod(
            ns,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"train-5d8f9c-{index}",
                    "labels": hashed,
                    "ownerReferences": _controller(replicaset, "apps/v1", "ReplicaSet"),
                },
                "spec": {"containers": [_container("train", "8")]},
            },
        )
    job = custom.create_namespaced_custom_object(
        "kubeflow.org",
        "v1",
        ns,
        "pytorchjobs",
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "bert"},
            "spec": {
                "pytorchReplicaSpecs": {
                    "Worker": {
                        "replicas": 2,
                        "template": {"spec": {"containers": [_container("pytorch", "8")]}},
                    }
                }
            },
        },
    )
    for index in range(2):
        core.create_namespaced_pod(
            ns,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"bert-worker-{index}",
                    "ownerReferences": _controller(job, "kubeflow.org/v1", "PyTorchJob"),
                },
                "spec": {"containers": [_container("pytorch", "8")]},
            },
        )
    core.create_namespaced_pod(
        ns,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "small"},
            "spec": {"containers": [_container("main", "1")]},
        },
    )
    return ns


def audit(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["audit", *argv], out)
    return code, out.getvalue()


def test_audit_of_a_proposed_folder_names_each_owner_it_would_deny(
    cluster: Cluster, workloads: str, tmp_path: Path
) -> None:
    folder = proposed_policies(tmp_path / "proposed")
    base = ("--kubeconfig", str(cluster.kubeconfig), "--policies", str(folder), "-n", workloads)
    code, out = audit(*base, "-o", "json")
    assert code == 1
    document = json.loads(out)
    denied = [
        (f["kind"], f["name"], f["templateDenied"], f["pods"], f["podsDenied"])
        for f in document["findings"]
        if f["denied"]
    ]
    assert denied == [("Deployment", "train", True, 2, 2), ("PyTorchJob", "bert", True, 2, 2)]
    train = document["findings"][0]
    (violation,) = train["violations"]
    assert violation["message"] == f'container "train": {MAX_4}'
    assert (violation["template"], violation["pods"]) == (True, 2)
    code, out = audit(*base, "-o", "summary")
    assert code == 1
    # A cluster whose nodes carry CUDA labels adds ", 2 of 2 would change" (pods created
    # without the webhook lack its affinity).
    first, second = out.splitlines()[:2]
    assert first.startswith(
        f"DENIED   Deployment {workloads}/train: 1 violation(s); template denied, 2 of 2 pod(s) "
        "denied"
    )
    assert second.startswith(
        f"DENIED   PyTorchJob {workloads}/bert: 2 violation(s); template denied, 2 of 2 pod(s) "
        "denied"
    )
    # Today's policies (no max) deny none of them.
    code, out = audit(
        "--kubeconfig", str(cluster.kubeconfig), "--policies", str(ROOT / "configmaps"),
        "-n", workloads, "-o", "summary",
    )  # fmt: skip
    assert code == 0
    assert "DENIED" not in out


def _report(
    cluster: Cluster, namespace: str, name: str = "gpu-admission-webhook"
) -> dict[str, Any] | None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    custom: Any = client.CustomObjectsApi(cluster.api)
    try:
        found: dict[str, Any] = custom.get_namespaced_custom_object(
            "wgpolicyk8s.io", "v1alpha2", namespace, "policyreports", name
        )
        return found
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _results(report: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    return [
        (r["result"], r["resources"][0]["kind"], r["resources"][0]["name"], r["policy"])
        for r in report["results"]
        if r["result"] == "fail"
    ]


def test_the_servers_audit_writes_replaces_and_removes_its_policy_report(
    cluster: Cluster, workloads: str, tmp_path: Path
) -> None:
    from kubernetes import client

    tightened = load_policy_dir(proposed_policies(tmp_path / "proposed"))
    store = PolicyStore()
    store.replace(tightened)
    auditor = Auditor(
        store,
        WebhookConfig(),
        interval=3600,
        kubeconfig=str(cluster.kubeconfig),
        namespace=workloads,
        page_pause=0,
    )
    # A second installation (`serve --policies proposed/ --report-owner proposed`) auditing the
    # same namespace: each replaces and deletes only its own report.
    proposed_store = PolicyStore()
    proposed_store.replace(tightened)
    proposed = Auditor(
        proposed_store,
        WebhookConfig(),
        interval=3600,
        kubeconfig=str(cluster.kubeconfig),
        namespace=workloads,
        page_pause=0,
        report_owner="proposed",
    )

    async def scenario() -> None:
        try:
            assert await auditor.run_once() is True
            assert await proposed.run_once() is True
            report = _report(cluster, workloads)
            assert report is not None
            assert report["metadata"]["labels"] == {
                "app.kubernetes.io/managed-by": "gpu-admission-webhook",
                "gpu-admission-webhook/report-owner": "gpu-admission-webhook",
            }
            theirs = _report(cluster, workloads, "proposed")
            assert theirs is not None
            assert theirs["metadata"]["labels"]["gpu-admission-webhook/report-owner"] == (
                "proposed"
            )
            assert _results(report) == [
                ("fail", "Deployment", "train", "cf-crl-nvidia-gpu"),
                ("fail", "PyTorchJob", "bert", "cf-crl-nvidia-gpu"),
            ]
            assert report["summary"]["fail"] == 2
            deployment_result = report["results"][0]
            assert deployment_result["source"] == "gpu-admission-webhook"
            assert deployment_result["message"].startswith(f'container "train": {MAX_4}')
            assert deployment_result["properties"]["podsDenied"] == "2"
            # The job and its pods go away: its result goes with them.
            core: Any = client.CoreV1Api(cluster.api)
            for index in range(2):
                core.delete_namespaced_pod(f"bert-worker-{index}", workloads)
            client.CustomObjectsApi(cluster.api).delete_namespaced_custom_object(
                "kubeflow.org", "v1", workloads, "pytorchjobs", "bert"
            )
            assert await auditor.run_once() is True
            report = _report(cluster, workloads)
            assert report is not None
            assert _results(report) == [("fail", "Deployment", "train", "cf-crl-nvidia-gpu")]
            # The policy is relaxed again: nothing is denied, and without anything else to
            # say the report is removed.
            store.replace(PolicySet.from_configmaps(shipped_policies()))
            assert await auditor.run_once() is True
            report = _report(cluster, workloads)
            assert report is None or _results(report) == []
            # The other installation's report was neither replaced nor deleted.
            assert _report(cluster, workloads, "proposed") == theirs
            # Its own run replaces it (PUT) and, relaxed too, deletes it (DELETE with the
            # listed resourceVersion as a precondition, which the API server honours).
            assert await proposed.run_once() is True
            replaced = _report(cluster, workloads, "proposed")
            assert replaced is not None
            assert _results(replaced) == [("fail", "Deployment", "train", "cf-crl-nvidia-gpu")]
            proposed_store.replace(PolicySet.from_configmaps(shipped_policies()))
            assert await proposed.run_once() is True
            gone = _report(cluster, workloads, "proposed")
            assert gone is None or _results(gone) == []
        finally:
            await auditor.close()
            await proposed.close()

    asyncio.run(scenario())
