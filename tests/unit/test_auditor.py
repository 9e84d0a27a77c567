"""The server's periodic audit (webhook/sources/auditor.py) against the fake API server: the
policy reports it writes, replaces and removes, and failures that only ever become status."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes.aio.client import ApiClient

from tests.auditdata import populate, proposed_policies, shipped_policies
from tests.fakekube import LEASES, OPENREPORTS, PODS, POLICYREPORTS, FakeKube
from tests.helpers import CONFIGMAPS
from webhook.cli import main
from webhook.core.config.model import WebhookConfig
from webhook.core.policies.policyset import PolicySet
from webhook.sources.auditor import Auditor
from webhook.sources.files import policy_files, read_documents
from webhook.sources.kubeapi import close, load_configuration, sender
from webhook.sources.lease import AuditLease
from webhook.sources.store import PolicyStore

LABEL = {
    "app.kubernetes.io/managed-by": "gpu-admission-webhook",
    "gpu-admission-webhook/report-owner": "gpu-admission-webhook",
}


def tightened(tmp_path: Path) -> PolicySet:
    folder = proposed_policies(tmp_path / "proposed")
    return PolicySet.from_configmaps(
        doc for file in policy_files(folder) for doc in read_documents(file)
    )


@pytest.fixture
def cluster(kube: FakeKube) -> FakeKube:
    populate(kube)
    return kube


Make = Callable[..., tuple[Auditor, PolicyStore]]


@pytest.fixture
async def auditor(cluster: FakeKube, tmp_path: Path) -> AsyncIterator[Make]:
    """make(policies, **options) -> an Auditor on the fake cluster and its store; each is
    closed (its client) after the test."""
    made: list[Auditor] = []

    def make(policies: PolicySet | None, **options: Any) -> tuple[Auditor, PolicyStore]:
        store = PolicyStore()
        if policies is not None:
            store.replace(policies)
        kubeconfig = str(cluster.write_kubeconfig(tmp_path))
        options.setdefault("page_pause", 0)
        audit = Auditor(store, WebhookConfig(), interval=3600, kubeconfig=kubeconfig, **options)
        made.append(audit)
        return audit, store

    yield make
    for audit in made:
        await audit.close()


def reports(kube: FakeKube, resource: str = POLICYREPORTS) -> dict[str, dict[str, Any]]:
    return {r["metadata"]["namespace"]: r for r in kube.objects(resource)}


def findings(report: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    return [
        (r["result"], r["resources"][0]["kind"], r["resources"][0]["name"], r["rule"])
        for r in report["results"]
    ]


async def test_a_run_writes_one_policy_report_per_namespace_and_its_status(
    cluster: FakeKube, tmp_path: Path, auditor: Make
) -> None:
    audit, store = auditor(tightened(tmp_path))
    assert await audit.run_once() is True
    written = reports(cluster)
    assert sorted(written) == ["ml", "research"]
    ml = written["ml"]
    assert (ml["apiVersion"], ml["kind"]) == ("wgpolicyk8s.io/v1alpha2", "PolicyReport")
    assert ml["metadata"]["name"] == "gpu-admission-webhook"
    assert ml["metadata"]["labels"] == LABEL
    assert findings(ml) == [
        ("fail", "Deployment", "train", "max: 4"),
        ("fail", "PyTorchJob", "bert", "max: 4"),
    ]
    assert ml["summary"] == {"pass": 0, "fail": 2, "warn": 0, "error": 0, "skip": 0}
    assert findings(written["research"]) == [
        ("warn", "Pod", "old", "cuda-affinity"),
        ("warn", "Pod", "old", "shm"),
    ]
    status = store.audit
    assert status is not None
    assert (status.runs, status.failures, status.last_error) == (1, 0, None)
    assert (status.workloads, status.pods, status.denied, status.changed) == (3, 8, 2, 1)
    assert status.findings == {
        ("cf-crl-nvidia-gpu", "ml", "fail"): 2,
        ("gpu-admission-webhook", "research", "warn"): 1,
    }
    assert (status.reports_written, status.reports_deleted, status.report_errors) == (2, 0, [])
    assert status.last_success_unix is not None


async def test_the_next_run_replaces_reports_and_removes_stale_ones(
    cluster: FakeKube, tmp_path: Path, auditor: Make
) -> None:
    audit, store = auditor(tightened(tmp_path))
    await audit.run_once()
    before = reports(cluster)["research"]["metadata"]["resourceVersion"]
    # The policy is relaxed again: nothing in ml is denied any more; research/old still lacks
    # its CUDA affinity.
    store.replace(PolicySet.from_configmaps(shipped_policies()))
    assert await audit.run_once() is True
    written = reports(cluster)
    assert sorted(written) == ["research"]
    assert written["research"]["metadata"]["resourceVersion"] != before
    assert (store.audit.reports_written, store.audit.reports_deleted) == (1, 1)  # type: ignore[union-attr]
    # The pod is deleted: its namespace's report goes too.
    cluster.delete("old", kind="Pod", namespace="research")
    await audit.run_once()
    assert reports(cluster) == {}


async def test_reports_of_others_are_never_touched(
    cluster: FakeKube, tmp_path: Path, auditor: Make
) -> None:
    foreign = {
        "apiVersion": "wgpolicyk8s.io/v1alpha2",
        "kind": "PolicyReport",
        "metadata": {"name": "gpu-admission-webhook", "namespace": "ml"},
        "results": [],
    }
    kyverno = {
        "apiVersion": "wgpolicyk8s.io/v1alpha2",
        "kind": "PolicyReport",
        "metadata": {
            "name": "kyverno-ml",
            "namespace": "research",
            "labels": {"app.kubernetes.io/managed-by": "kyverno"},
        },
        "results": [],
    }
    cluster.put(foreign)
    cluster.put(kyverno)
    audit, store = auditor(PolicySet.from_configmaps(shipped_policies()))
    await audit.run_once()
    by_name = {
        (r["metadata"]["namespace"], r["metadata"]["name"]): r
        for r in cluster.objects(POLICYREPORTS)
    }
    assert by_name[("research", "kyverno-ml")]["results"] == []
    assert "labels" not in by_name[("ml", "gpu-admission-webhook")]["metadata"]
    assert findings(by_name[("research", "gpu-admission-webhook")]) == [
        ("warn", "Pod", "old", "cuda-affinity"),
        ("warn", "Pod", "old", "shm"),
    ]
    # With the tightened policy, ml needs a report but the name is taken by someone else's.
    store.replace(tightened(tmp_path))
    assert await audit.run_once() is False
    assert store.audit is not None
    (error,) = store.audit.report_errors
    assert error.startswith(
        "cannot write the PolicyReport of namespace ml: a PolicyReport named "
        "gpu-admission-webhook that this installation does not own (no "
        "gpu-admission-webhook/report-owner=gpu-admission-webhook label) is in the way: 409 "
    )
    assert reports(cluster)["ml"] == by_name[("ml", "gpu-admission-webhook")]


def by_owner(kube: FakeKube) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (r["metadata"]["namespace"], r["metadata"]["name"]): r for r in kube.objects(POLICYREPORTS)
    }


async def test_each_installation_replaces_and_deletes_only_its_own_reports(
    cluster: FakeKube, tmp_path: Path, auditor: Make
) -> None:
    """Production audits with the policies in force; an admin runs `serve --policies proposed/
    --audit-interval` against the same cluster. Before reports were owned per installation,
    each run replaced the other's reports and deleted those it had no finding for."""
    production, prod_store = auditor(
        PolicySet.from_configmaps(shipped_policies()), report_owner="gaw-prod"
    )
    proposed, _ = auditor(tightened(tmp_path), report_owner="proposed")
    assert await production.run_once() is True
    assert await proposed.run_once() is True
    written = by_owner(cluster)
    assert sorted(written) == [
        ("ml", "proposed"),
        ("research", "gaw-prod"),
        ("research", "proposed"),
    ]
    assert written[("research", "gaw-prod")]["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "gpu-admission-webhook",
        "gpu-admission-webhook/report-owner": "gaw-prod",
    }
    kept = written[("research", "gaw-prod")]["metadata"]["resourceVersion"]
    # Production runs again: it rewrites its own report and leaves the proposed ones alone.
    assert await production.run_once() is True
    after = by_owner(cluster)
    assert sorted(after) == sorted(written)
    assert after[("ml", "proposed")] == written[("ml", "proposed")]
    assert after[("research", "gaw-prod")]["metadata"]["resourceVersion"] != kept
    # Nothing left to report for production: it deletes its own report only.
    cluster.delete("old", kind="Pod", namespace="research")
    assert await production.run_once() is True
    assert sorted(by_owner(cluster)) == [("ml", "proposed"), ("research", "proposed")]
    assert prod_store.audit is not None and prod_store.audit.reports_deleted == 1
    assert prod_store.audit.to_json()["reportOwner"] == "gaw-prod"  # shown on /audit


async def test_a_report_named_like_ours_with_another_owner_label_is_not_ours(
    cluster: FakeKube, tmp_path: Path, auditor: Make
) -> None:
    """The owner is checked in the code, not only by the list's label selector: RBAC cannot
    restrict by label (the chart narrows update/delete to the owner's report name)."""
    impostor: dict[str, Any] = {
        "apiVersion": "wgpolicyk8s.io/v1alpha2",
        "kind": "PolicyReport",
        "metadata": {
            "name": "gaw-prod",
            "namespace": "ml",
            "labels": {
                "app.kubernetes.io/managed-by": "gpu-admission-webhook",
                "gpu-admission-webhook/report-owner": "someone-else",
            },
        },
        "results": [],
    }
    cluster.put(impostor)
    audit, store = auditor(tightened(tmp_path), report_owner="gaw-prod")
    assert await audit.run_once() is False
    assert store.audit is not None
    (error,) = store.audit.report_errors
    assert error.startswith(
        "cannot write the PolicyReport of namespace ml: a PolicyReport named gaw-prod that this "
        "installation does not own (no gpu-admission-webhook/report-owner=gaw-prod label) is in "
        "the way: 409 "
    )
    assert (
        by_owner(cluster)[("ml", "gaw-prod")]["metadata"]["labels"]
        == impostor["metadata"]["labels"]
    )


async def test_openreports_format_writes_reports_with_a_source(
    cluster: FakeKube, tmp_path: Path, auditor: Make
) -> None:
    audit, _ = auditor(tightened(tmp_path), report_format="openreports")
    assert await audit.run_once() is True
    written = reports(cluster, OPENREPORTS)
    assert sorted(written) == ["ml", "research"]
    assert (written["ml"]["apiVersion"], written["ml"]["source"]) == (
        "openreports.io/v1alpha1",
        "gpu-admission-webhook",
    )
    assert cluster.objects(POLICYREPORTS) == []


async def test_a_missing_report_crd_keeps_the_audit_and_says_why(
    cluster: FakeKube, tmp_path: Path, auditor: Make
) -> None:
    cluster.not_installed("wgpolicyk8s.io")
    audit, store = auditor(tightened(tmp_path))
    assert await audit.run_once() is False
    status = store.audit
    assert status is not None
    assert (status.failures, status.denied, status.last_error) == (0, 2, None)
    (error,) = status.report_errors
    assert error.startswith(
        "PolicyReport (wgpolicyk8s.io/v1alpha2) is not served: install its CRD (the chart "
        "ships it in crds/) or set the report format to the one installed: 404 "
    )


async def test_an_unreadable_cluster_is_a_counted_failure_never_an_exception(
    cluster: FakeKube, tmp_path: Path, auditor: Make
) -> None:
    audit, store = auditor(tightened(tmp_path))
    cluster.fail_resource(PODS, 500, "etcdserver: leader changed")
    assert await audit.run_once() is False
    status = store.audit
    assert status is not None
    assert (status.runs, status.failures) == (1, 1)
    assert status.last_error == (
        "cannot audit the cluster: 500 InternalError: etcdserver: leader changed"
    )
    assert status.last_success_unix is None
    assert cluster.objects(POLICYREPORTS) == []  # nothing half-done is published
    cluster.allow(PODS)
    assert await audit.run_once() is True
    assert (status.runs, status.failures) == (2, 1)
    assert status.to_json()["lastError"] is None


async def test_a_run_that_may_not_list_pods_erases_nothing(
    cluster: FakeKube, tmp_path: Path, auditor: Make
) -> None:
    """Pods forbidden (RBAC changed under the webhook): their findings are unknown, not gone.
    The run is a counted failure; the reports and the figures /metrics shows stay those of
    the last complete run, until pods can be listed again."""
    audit, store = auditor(tightened(tmp_path))
    assert await audit.run_once() is True
    status = store.audit
    assert status is not None
    before = {ns: r["metadata"]["resourceVersion"] for ns, r in reports(cluster).items()}
    assert sorted(before) == ["ml", "research"]  # research's only finding is a pod's
    figures = (status.pods, status.workloads, status.denied, status.changed, status.findings)
    succeeded = status.last_success_unix

    cluster.forbid(PODS, 'pods is forbidden: User "system:serviceaccount:gpu:webhook" cannot list')
    assert await audit.run_once() is False
    assert (status.runs, status.failures) == (2, 1)
    assert status.last_error == (
        "incomplete, nothing published: not allowed to list pods (v1), not audited: 403 "
        'Forbidden: pods is forbidden: User "system:serviceaccount:gpu:webhook" cannot list; '
        "grant list on pods (the chart's audit RBAC does); the reports and figures of the last "
        "complete run are kept"
    )
    assert {ns: r["metadata"]["resourceVersion"] for ns, r in reports(cluster).items()} == before
    assert findings(reports(cluster)["research"]) == [
        ("warn", "Pod", "old", "cuda-affinity"),
        ("warn", "Pod", "old", "shm"),
    ]
    assert (status.pods, status.workloads, status.denied, status.changed, status.findings) == (
        figures
    )
    assert status.findings[("gpu-admission-webhook", "research", "warn")] == 1
    assert status.last_success_unix == succeeded
    assert (status.reports_written, status.reports_deleted) == (2, 0)

    cluster.allow(PODS)
    assert await audit.run_once() is True
    assert (status.runs, status.failures) == (3, 1)
    assert status.to_json()["lastError"] is None
    assert sorted(reports(cluster)) == ["ml", "research"]


async def test_no_audit_before_the_policies_synced(cluster: FakeKube, auditor: Make) -> None:
    audit, store = auditor(None)
    assert await audit.run_once() is False
    assert store.audit is not None
    assert store.audit.last_error == "skipped: the policies have not synced yet"
    assert cluster.requests == []


async def test_pages_are_spaced_by_the_pause(
    cluster: FakeKube, tmp_path: Path, auditor: Make
) -> None:
    audit, _ = auditor(tightened(tmp_path), page_size=2, page_pause=0.05)
    loop_time = asyncio.get_running_loop().time
    started = loop_time()
    await audit.run_once()
    # 9 pods in pages of 2: 4 pauses between 5 pod pages, and some between workload pages.
    assert loop_time() - started >= 4 * 0.05
    assert len(cluster.lists(PODS)) == 5


async def test_an_audit_of_one_namespace_reports_on_that_namespace_only(
    cluster: FakeKube, tmp_path: Path, auditor: Make
) -> None:
    whole, _ = auditor(tightened(tmp_path))
    await whole.run_once()
    assert sorted(reports(cluster)) == ["ml", "research"]
    # Relaxed, and audited in research only: ml's report is not this audit's to judge.
    one, store = auditor(PolicySet.from_configmaps(shipped_policies()), namespace="research")
    await one.run_once()
    assert sorted(reports(cluster)) == ["ml", "research"]
    assert {r.path for r in cluster.lists(PODS)} >= {"/api/v1/namespaces/research/pods"}
    assert store.audit is not None and store.audit.pods == 1


async def test_one_client_serves_every_run_until_a_failure(
    cluster: FakeKube, tmp_path: Path, auditor: Make
) -> None:
    audit, _ = auditor(tightened(tmp_path))
    await audit.run_once()
    first = audit._api
    await audit.run_once()
    assert audit._api is first is not None
    cluster.fail_resource(PODS, 500, "etcdserver: leader changed")
    await audit.run_once()
    assert audit._api is None


async def test_with_a_lease_one_replica_audits_and_the_other_waits(
    cluster: FakeKube, tmp_path: Path, auditor: Make
) -> None:
    policies = tightened(tmp_path)
    first, first_store = auditor(policies, lease=AuditLease("gpu", "gaw-audit", "replica-a", 3600))
    second, second_store = auditor(
        policies, lease=AuditLease("gpu", "gaw-audit", "replica-b", 3600)
    )
    assert await first.run_once() is True
    cluster.requests.clear()
    assert await second.run_once() is True
    # The second replica read the lease and stopped there: no list, no report.
    assert [(r.method, r.path) for r in cluster.requests] == [
        ("GET", "/apis/coordination.k8s.io/v1/namespaces/gpu/leases/gaw-audit")
    ]
    assert second_store.audit is not None and first_store.audit is not None
    assert (second_store.audit.runs, second_store.audit.skipped_runs) == (0, 1)
    assert second_store.audit.lease_holder == "replica-a"
    # The holder keeps it by auditing again.
    assert await first.run_once() is True
    assert (first_store.audit.runs, first_store.audit.lease_holder) == (2, "replica-a")
    (lease,) = cluster.objects(LEASES)
    assert lease["spec"]["holderIdentity"] == "replica-a"
    assert lease["spec"]["leaseDurationSeconds"] == 5400
    assert lease["spec"]["leaseTransitions"] == 0


async def test_an_expired_lease_is_taken_over(cluster: FakeKube, tmp_path: Path) -> None:
    api = ApiClient(await load_configuration(str(cluster.write_kubeconfig(tmp_path))))
    try:
        send = sender(api)
        a = AuditLease("gpu", "gaw-audit", "replica-a", 60)
        b = AuditLease("gpu", "gaw-audit", "replica-b", 60)
        start = datetime(2026, 1, 1, tzinfo=UTC)
        assert (await a.acquire(send, start)).audit
        # Within 1.5 intervals (90 s) of the holder's last audit, the other replica waits...
        verdict = await b.acquire(send, start + timedelta(seconds=89))
        assert (verdict.audit, verdict.holder) == (False, "replica-a")
        assert verdict.reason == "replica replica-a holds the audit lease"
        # ...after that the holder is gone (a rollout, a lost node) and it takes over.
        assert (await b.acquire(send, start + timedelta(seconds=91))).audit
        (lease,) = cluster.objects(LEASES)
        assert lease["spec"]["holderIdentity"] == "replica-b"
        assert lease["spec"]["leaseTransitions"] == 1
        assert lease["spec"]["renewTime"] == "2026-01-01T00:01:31.000000Z"
        assert not (await a.acquire(send, start + timedelta(seconds=100))).audit
    finally:
        await close(api)


async def test_a_lease_the_credentials_may_not_use_does_not_stop_the_audit(
    cluster: FakeKube, tmp_path: Path, auditor: Make
) -> None:
    cluster.forbid(LEASES, 'leases.coordination.k8s.io "gaw-audit" is forbidden')
    audit, store = auditor(
        tightened(tmp_path), lease=AuditLease("gpu", "gaw-audit", "replica-a", 3600)
    )
    assert await audit.run_once() is True
    assert store.audit is not None and store.audit.runs == 1
    assert sorted(reports(cluster)) == ["ml", "research"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            [],
            "error: --policies with --audit-interval publishes policy reports: pass "
            "--report-owner NAME (not the production installation's) or --audit-reports none\n",
        ),
        (
            ["--report-owner", "Proposed"],
            "error: report owner 'Proposed' must be a DNS label: at most 63 lower-case letters, "
            "digits and '-', starting and ending with a letter or digit\n",
        ),
    ],
)
def test_serve_with_proposed_policies_must_name_its_report_owner(
    capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    """`serve --policies proposed/ --audit-interval` with the default owner would replace and
    delete the production installation's reports when the release is named like the default."""
    argv = ["serve", "--self-signed", "--policies", str(CONFIGMAPS), "--port", "1"]
    argv += ["--log-format", "text", "--audit-interval", "60", *extra]
    assert main(argv) == 2
    assert capsys.readouterr().err.endswith(message)


def test_serve_passes_its_report_owner_to_the_audit() -> None:
    from webhook.cli import build_parser
    from webhook.cli.serve import _audit_tasks

    argv = ["serve", "--policies", str(CONFIGMAPS), "--audit-interval", "60"]
    args = build_parser().parse_args([*argv, "--report-owner", "proposed"])
    (task,) = _audit_tasks(args, PolicyStore(), WebhookConfig())
    assert task.__self__.report_owner == "proposed"  # type: ignore[attr-defined]
    # Policies from the cluster: the default owner.
    args = build_parser().parse_args(["serve", "--audit-interval", "60"])
    (task,) = _audit_tasks(args, PolicyStore(), WebhookConfig())
    assert task.__self__.report_owner == "gpu-admission-webhook"  # type: ignore[attr-defined]
