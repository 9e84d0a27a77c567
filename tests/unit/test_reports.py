"""Policy report content (webhook/core/reports.py): one report per namespace, one result per
finding and policy rule, in both formats; and the bounded labels of the findings metric."""

from __future__ import annotations

from typing import Any

from tests.helpers import GPU, container, pod, standard_policies
from tests.unit.test_audit import IMAGE, MAX_GPU_MESSAGE, add, deployment_with_pods, gpu_pod
from tests.unit.test_audit import gpu_policies as limited
from webhook.core.audit import Audit, AuditResult, Finding, Problem, Ref
from webhook.core.reports import (
    MAX_MESSAGE,
    MAX_RESULTS,
    OMITTED_ANNOTATION,
    OPENREPORTS,
    WGPOLICY,
    build_reports,
    finding_counts,
)

NOW = 1_700_000_000


def two_namespaces() -> AuditResult:
    audit = Audit()
    deployment_with_pods(audit, namespace="ml")
    deployment_with_pods(audit, namespace="research", name="big", pods=2)
    # A pod created before the webhook: it would get CUDA affinity (a warn result).
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
        "labels": {"app.kubernetes.io/managed-by": "gpu-admission-webhook"},
    }
    assert "source" not in ml  # a PolicyReport has no report-level source
    assert ml["summary"] == {"pass": 0, "fail": 1, "warn": 2, "error": 0, "skip": 0}
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
    assert {r["rule"] for r in warns} == {"cuda-affinity", "requests-from-limits"}
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
        table[("p", "r", "m")] = Problem("p", "r", "x" * (MAX_MESSAGE + 50))
        findings.append(finding)
    result = AuditResult(tuple(findings), 0, len(findings), 0)
    report = build_reports(result, WGPOLICY, NOW)["ml"]
    assert len(report["results"]) == MAX_RESULTS
    assert report["metadata"]["annotations"] == {OMITTED_ANNOTATION: "5"}
    # The 5 left out are warnings: every failure is kept.
    assert report["summary"]["fail"] == MAX_RESULTS + 5 - 10
    assert report["summary"]["warn"] == 5
    assert all(len(r["message"]) == MAX_MESSAGE for r in report["results"])
    assert report["results"][0]["message"].endswith("…")


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
