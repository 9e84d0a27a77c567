"""The periodic audit inside the real app (SPEC §6): fed by serve's cluster reflectors from the
fake API server, it publishes policy reports and its figures on /audit and /metrics; when it
fails, admission and readiness go on as before."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.auditdata import GPU, IMAGE, populate, proposed_policies
from tests.fakekube import PODS, POLICYREPORTS, FakeKube
from tests.helpers import eventually
from tests.integration.helpers import metric_samples
from webhook.admission.app import create_app
from webhook.cli.serve import _policy_source
from webhook.core.config.model import WebhookConfig
from webhook.sources.auditor import Auditor
from webhook.sources.store import PolicyStore


@pytest.fixture
async def kube() -> AsyncIterator[FakeKube]:
    async with FakeKube() as server:
        populate(server)
        yield server


async def started(
    kube: FakeKube, tmp_path: Path, *, policies: Path | None = None
) -> tuple[TestClient[Any, Any], PolicyStore]:
    """The app as `serve --audit-interval` builds it (cluster reflectors, or --policies files,
    plus the auditor), with the first audit at once instead of after a minute."""
    config = WebhookConfig()
    store = PolicyStore()
    kubeconfig = str(kube.write_kubeconfig(tmp_path))
    args = argparse.Namespace(
        policies=str(policies) if policies else None, policies_poll=0, kubeconfig=kubeconfig
    )
    source = _policy_source(args, store, config)
    auditor = Auditor(
        store, config, interval=3600, kubeconfig=kubeconfig, page_pause=0, first_run_delay=0
    )
    app = create_app(config, store, policy_source=source, tasks=[auditor.run])
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    return client, store


def review(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "ml",
            "operation": "CREATE",
            "object": obj,
        },
    }


async def test_the_audit_publishes_reports_and_its_figures(kube: FakeKube, tmp_path: Path) -> None:
    # --policies with the tightened folder: the cluster is audited against the files.
    client, store = await started(kube, tmp_path, policies=proposed_policies(tmp_path / "p"))
    try:
        await eventually(
            lambda: store.audit is not None and store.audit.last_success_unix is not None,
            "the first audit finished",
        )
        await eventually(lambda: len(kube.objects(POLICYREPORTS)) == 2, "two reports written")
        document = await (await client.get("/audit")).json()
        assert {k: document[k] for k in ("enabled", "runs", "failures", "denied", "changed")} == {
            "enabled": True,
            "runs": 1,
            "failures": 0,
            "denied": 2,
            "changed": 1,
        }
        assert (document["reports"], document["reportOwner"], document["lastError"]) == (
            "wgpolicyk8s",
            "gpu-admission-webhook",
            None,
        )
        samples = metric_samples(await (await client.get("/metrics")).text())
        assert (
            samples[
                'gpu_webhook_audit_findings{namespace="ml",policy="cf-crl-nvidia-gpu",'
                'result="fail"}'
            ]
            == 2
        )
        assert (
            samples[
                'gpu_webhook_audit_findings{namespace="research",policy="gpu-admission-webhook",'
                'result="warn"}'
            ]
            == 1
        )
        assert samples["gpu_webhook_audit_runs_total"] == 1
        assert samples["gpu_webhook_audit_failures_total"] == 0
        assert samples['gpu_webhook_audit_objects{type="pod"}'] == 8
        assert samples["gpu_webhook_audit_last_success_timestamp_seconds"] > 1.7e9
        assert samples["gpu_webhook_audit_duration_seconds"] > 0
    finally:
        await client.close()


async def test_the_audit_counts_unknown_runtimes_per_runtime(
    kube: FakeKube, tmp_path: Path
) -> None:
    """Running pods of each family whose runtime version nothing tells: /audit and the gauge
    count them by runtime, the same way for CUDA, ROCm and CANN."""
    for name, image, resource in (
        ("cuda-app", "registry.example/team/cuda-app:1", GPU),
        ("rocm-app", "registry.example/team/rocm-app:1", "amd.com/gpu"),
        ("rocm-app-2", "registry.example/team/rocm-app:2", "amd.com/gpu"),
        ("npu-app", "registry.example/team/npu-app:1", "huawei.com/npu"),
    ):
        limits = {resource: "1"}
        spec = {"name": "c", "image": image, "resources": {"limits": limits, "requests": limits}}
        meta = {"name": name, "namespace": "lab", "uid": f"uid-{name}"}
        kube.put(
            {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [spec]}}
        )
    client, store = await started(kube, tmp_path)
    try:
        await eventually(
            lambda: store.audit is not None and store.audit.last_success_unix is not None,
            "the first audit finished",
        )
        document = await (await client.get("/audit")).json()
        assert document["unknownRuntimes"] == {"CUDA": 1, "CANN": 1, "ROCm": 2}
        samples = metric_samples(await (await client.get("/metrics")).text())
        assert {k: v for k, v in samples.items() if "audit_unknown_runtimes" in k} == {
            'gpu_webhook_audit_unknown_runtimes{runtime="cuda"}': 1.0,
            'gpu_webhook_audit_unknown_runtimes{runtime="cann"}': 1.0,
            'gpu_webhook_audit_unknown_runtimes{runtime="rocm"}': 2.0,
        }
    finally:
        await client.close()


async def test_a_failing_audit_changes_nothing_for_admission_or_readiness(
    kube: FakeKube, tmp_path: Path
) -> None:
    kube.fail_resource(PODS, 500, "etcdserver: leader changed")
    kube.not_installed("wgpolicyk8s.io")
    client, store = await started(kube, tmp_path)
    try:
        await eventually(lambda: store.ready, "the policies synced")
        await eventually(
            lambda: store.audit is not None and store.audit.failures == 1, "the audit failed"
        )
        assert (await client.get("/readyz")).status == 200
        document = await (await client.get("/audit")).json()
        assert document["lastError"] == (
            "cannot audit the cluster: 500 InternalError: etcdserver: leader changed"
        )
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ml"},
            "spec": {
                "containers": [{"name": "c", "image": IMAGE, "resources": {"limits": {GPU: "1"}}}]
            },
        }
        answer = await (await client.post("/mutate", json=review(pod))).json()
        assert answer["response"]["allowed"] is True
        assert answer["response"]["patchType"] == "JSONPatch"
        samples = metric_samples(await (await client.get("/metrics")).text())
        assert samples["gpu_webhook_audit_failures_total"] == 1
        assert "gpu_webhook_audit_last_success_timestamp_seconds" not in samples
    finally:
        await client.close()


async def test_the_audit_is_off_by_default(kube: FakeKube, tmp_path: Path) -> None:
    store = PolicyStore()
    app = create_app(WebhookConfig(), store)
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        assert await (await client.get("/audit")).json() == {"enabled": False}
        text = await (await client.get("/metrics")).text()
        assert "gpu_webhook_audit" not in text
    finally:
        await client.close()
