"""Policy report content (webhook/core/audit/reports.py): one report per namespace, one result per
finding and policy rule, in both formats; and the bounded labels of the findings metric."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers import GPU, container, pod, standard_policies
from tests.unit.test_audit import IMAGE, MAX_GPU_MESSAGE, add, deployment_with_pods, gpu_pod
from tests.unit.test_audit import gpu_policies as limited
from webhook.core.audit.audit import Audit
from webhook.core.audit.findings import AuditResult, Finding, Problem
from webhook.core.audit.owners import Ref
from webhook.core.audit.reports import (
    MAX_MESSAGE,
    MAX_REPORT_BYTES,
    MAX_RESULTS,
    OMITTED_ANNOTATION,
    OPENREPORTS,
    OWNER_LABEL,
    WGPOLICY,
    build_reports,
    finding_counts,
)

NOW = 1_700_000_000


def two_namespaces() -> AuditResult:
    audit = Audit()
    deployment_with_pods(audit, namespace="ml")
    deployment_with_pods(audit, namespace="research", name="big", pods=2)
    # A pod created before the webhook: it would get CUDA affinity, its requests and /dev/shm
    # (a warn result each).
    bare = pod(container("train", image=IMAGE, limits={GPU: "2"}), name="old", namespace="ml")
    add(audit, bare, "Pod", "v1", standard_policies(), owner=False)
    return audit.result()


def test_one_policyreport_per_namespace_with_one_result_per_finding_and_rule() -> None:
    reports = build_reports(two_namespaces(), WGPOLICY, NOW)
    assert sorted(reports) == ["ml", "research"]
    ml = reports["ml"]
    assert ml["apiVersion"] == "wgpolicyk8s.io/v1alpha2"
    assert ml["kind"] == "PolicyReport"
    assert ml["metadata"] == {
        "name": "gpu-admission-webhook",
        "namespace": "ml",
        "labels": {
            "app.kubernetes.io/managed-by": "gpu-admission-webhook",
            "gpu-admission-webhook/report-owner": "gpu-admission-webhook",
        },
    }
    assert "source" not in ml  # a PolicyReport has no report-level source
    assert ml["summary"] == {"pass": 0, "fail": 1, "warn": 3, "error": 0, "skip": 0}
    fail = ml["results"][0]
    assert {k: v for k, v in fail.items() if k != "message"} == {
        "source": "gpu-admission-webhook",
        "policy": "cf-crl-nvidia-gpu",
        "rule": "max: 4",
        "category": "GPU resources",
        "result": "fail",
        "scored": True,
        "timestamp": {"seconds": NOW, "nanos": 0},
        "resources": [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "namespace": "ml",
                "name": "train",
                "uid": "ml-train-dep",
            }
        ],
        "properties": {
            "scope": "template denied, 3 of 3 pod(s) denied",
            "pods": "3",
            "podsDenied": "3",
            "podsChanged": "0",
        },
    }
    assert fail["message"].startswith(MAX_GPU_MESSAGE)
    assert fail["message"].endswith("(in the template and 3 pod(s))")
    warns = [r for r in ml["results"] if r["result"] == "warn"]
    assert {r["rule"] for r in warns} == {"cuda-affinity", "requests-from-limits", "shm"}
    assert all(r["resources"][0]["name"] == "old" for r in warns)
    assert all(r["properties"] == {"scope": "the pod"} for r in warns)
    research = reports["research"]["results"]
    assert [(r["result"], r["resources"][0]["name"]) for r in research] == [("fail", "big")]


def test_openreports_reports_carry_the_same_results_and_a_report_source() -> None:
    result = two_namespaces()
    wg = build_reports(result, WGPOLICY, NOW)
    reports = build_reports(result, OPENREPORTS, NOW)
    ml = reports["ml"]
    assert (ml["apiVersion"], ml["kind"], ml["source"]) == (
        "openreports.io/v1alpha1",
        "Report",
        "gpu-admission-webhook",
    )
    assert ml["results"] == wg["ml"]["results"]
    assert ml["summary"] == wg["ml"]["summary"]


def test_a_clean_audit_has_no_report() -> None:
    audit = Audit()
    deployment_with_pods(audit, gpus="2")
    assert build_reports(audit.result(), WGPOLICY, NOW) == {}


def test_results_past_the_cap_are_left_out_and_counted_failures_first() -> None:
    findings = []
    for index in range(MAX_RESULTS + 5):
        finding = Finding(Ref("v1", "Pod", "ml", f"p-{index}"))
        table = finding.changes if index < 10 else finding.denied
        # One long message (cut); the others short, so the count cap applies, not the size's.
        message = "x" * (MAX_MESSAGE + 50) if index == 10 else "x"
        table[("p", "r", "m")] = Problem("p", "r", message)
        findings.append(finding)
    result = AuditResult(tuple(findings), 0, len(findings), 0)
    report = build_reports(result, WGPOLICY, NOW)["ml"]
    *kept, note = report["results"]
    assert len(kept) == MAX_RESULTS
    assert note["rule"] == "report size"
    assert note["message"].startswith("5 more result(s) (0 fail, 5 warn) are left out")
    assert report["metadata"]["annotations"] == {OMITTED_ANNOTATION: "5"}
    # The 5 left out are warnings: every failure is kept. The summary counts them all.
    assert sum(r["result"] == "fail" for r in kept) == MAX_RESULTS + 5 - 10
    assert report["summary"]["fail"] == MAX_RESULTS + 5 - 10
    assert report["summary"]["warn"] == 10
    assert len(kept[0]["message"]) == MAX_MESSAGE
    assert kept[0]["message"].endswith("…")


def _result_with(namespaces: int, policies: int) -> AuditResult:
    findings = []
    for n in range(namespaces):
        for p in range(policies):
            finding = Finding(Ref("v1", "Pod", f"ns-{n:03d}", f"pod-{p}"))
            # Namespace 0 has the most findings, then 1, ...: ranking is by count.
            for extra in range(namespaces - n):
                key = (f"policy-{p:02d}", "r", f"m{extra}")
                finding.denied[key] = Problem(f"policy-{p:02d}", "r", f"m{extra}")
            findings.append(finding)
    return AuditResult(tuple(findings), 0, len(findings), 0)


def test_finding_counts_keep_the_largest_namespaces_and_policies_and_bucket_the_rest() -> None:
    result = _result_with(namespaces=60, policies=3)
    counts = finding_counts(result, max_namespaces=50, max_policies=2)
    namespaces = {ns for _, ns, _ in counts}
    policies = {p for p, _, _ in counts}
    assert len(namespaces) == 51 and "other" in namespaces
    assert "ns-000" in namespaces and "ns-059" not in namespaces
    assert policies == {"policy-00", "policy-01", "other"}
    # Nothing is lost in the buckets: one finding per (owner, policy).
    assert sum(counts.values()) == 60 * 3
    assert counts[("other", "other", "fail")] == 10  # 10 small namespaces x policy-02


def test_finding_counts_count_owners_per_policy_and_result() -> None:
    audit = Audit()
    deployment_with_pods(audit)
    big = gpu_pod("big", "8")
    add(audit, big, "Pod", "v1", limited("4"), owner=False)
    counts: dict[tuple[str, str, str], Any] = finding_counts(audit.result())
    assert counts == {("cf-crl-nvidia-gpu", "ml", "fail"): 2}


# --- per-installation ownership, bounded size, one source (issue 30, item 3) -------------------


def _encoded(report: dict[str, Any]) -> int:
    return len(json.dumps(report, ensure_ascii=False, separators=(",", ":")).encode())


def test_reports_name_and_label_their_owner_and_keep_one_source() -> None:
    result = two_namespaces()
    default = build_reports(result, WGPOLICY, NOW)["ml"]
    assert default["metadata"]["name"] == "gpu-admission-webhook"
    assert default["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "gpu-admission-webhook",
        OWNER_LABEL: "gpu-admission-webhook",
    }
    for fmt in (WGPOLICY, OPENREPORTS):
        proposed = build_reports(result, fmt, NOW, owner="proposed")["ml"]
        assert proposed["metadata"]["name"] == "proposed"
        assert proposed["metadata"]["labels"][OWNER_LABEL] == "proposed"
        # The source is the engine, the same for every installation (Policy Reporter's
        # per-source settings), never the owner.
        assert {r["source"] for r in proposed["results"]} == {"gpu-admission-webhook"}
        if fmt is OPENREPORTS:
            assert proposed["source"] == "gpu-admission-webhook"


def test_a_report_owner_must_be_a_name_a_label_can_hold() -> None:
    for owner in ("", "Prod", "a" * 64, "gpu_webhook", "-x"):
        with pytest.raises(ValueError, match="report owner"):
            build_reports(two_namespaces(), WGPOLICY, NOW, owner=owner)


def test_a_full_report_stays_under_the_size_budget_and_says_what_it_left_out() -> None:
    """1,000 results with 1,000-character messages and long legal names encode to ~1.7 MB,
    past etcd's 1.5 MiB request limit (etcd server/embed/config.go DefaultMaxRequestBytes):
    the API server would refuse the report, and the namespace would have none."""
    long = "n" * 253
    findings = []
    for index in range(MAX_RESULTS + 20):
        finding = Finding(Ref("apps/v1", "Deployment", "ml", f"{long[:240]}-{index:05d}", "u" * 36))
        finding.pods = 12345
        table = finding.changes if index % 10 == 0 else finding.denied
        table[("p", "r", "m")] = Problem(long[:63], "r" * 100, "x" * (MAX_MESSAGE + 50))
        findings.append(finding)
    result = AuditResult(tuple(findings), 0, len(findings), 0)
    report = build_reports(result, WGPOLICY, NOW)["ml"]
    assert _encoded(report) <= MAX_REPORT_BYTES
    kept = [r for r in report["results"] if r["rule"] != "report size"]
    omitted = len(findings) - len(kept)
    assert omitted > 20
    assert report["metadata"]["annotations"] == {OMITTED_ANNOTATION: str(omitted)}
    # The summary counts every result of the audit, also those left out.
    assert report["summary"]["fail"] + report["summary"]["warn"] == len(findings)
    assert report["summary"]["warn"] == (MAX_RESULTS + 20) // 10
    # Failures are kept before warnings; the last result says what is missing.
    assert all(r["result"] == "fail" for r in kept)
    note = report["results"][-1]
    assert (note["source"], note["policy"], note["rule"], note["result"]) == (
        "gpu-admission-webhook",
        "gpu-admission-webhook",
        "report size",
        "warn",
    )
    fails = len(findings) - (MAX_RESULTS + 20) // 10 - len(kept)
    assert note["message"] == (
        f"{omitted} more result(s) ({fails} fail, {(MAX_RESULTS + 20) // 10} warn) are left out "
        "of this report to keep it under 1 MiB and 1000 results; `gpu-webhook audit -n ml` "
        "lists them all"
    )
