"""Policy reports (SPEC §6): an audit's findings as one report per namespace.

Two formats with the same result shape (the OpenReports API started as a copy of the Policy
WG's): `wgpolicyk8s.io/v1alpha2` PolicyReport (kubernetes-sigs/wg-policy-prototypes
policy-report/pkg/api/wgpolicyk8s.io/v1alpha2/policyreport_types.go), what Kyverno writes by
default and Policy Reporter, Headlamp's Kyverno plugin and Rancher read; and its successor
`openreports.io/v1alpha1` Report (openreports/reports-api apis/openreports.io/v1alpha1/
report_types.go), which adds a report-level `source`. Kyverno writes it behind
`--openreportsEnabled` since 1.15.

One result per finding and policy rule: `fail` for what would be denied, `warn` for what pods
created again would get that the running ones lack, and for GPU access findings admission only
warns about (SPEC §12: listed in every gpuAccess mode). Results name the owner (Deployment,
PyTorchJob, ...) as their resource; the message says what was found and in how many pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core.audit import SOURCE, AuditResult, Finding, Problem

REPORT_NAME = "gpu-admission-webhook"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpu-admission-webhook"
CATEGORY = "GPU resources"
# A report is one etcd object (the API server refuses requests past ~3 MiB and etcd values
# past 1.5 MiB): results and messages are capped so a namespace full of failing workloads
# still gets a report, which then says how many results it leaves out.
MAX_RESULTS = 1000
MAX_MESSAGE = 1000
OMITTED_ANNOTATION = "gpu-admission-webhook/omitted-results"


@dataclass(frozen=True)
class ReportFormat:
    name: str  # the chart value: wgpolicyk8s | openreports
    group: str
    version: str
    kind: str
    resource: str  # plural

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def collection(self, namespace: str | None = None) -> str:
        root = f"/apis/{self.api_version}"
        return (
            f"{root}/namespaces/{namespace}/{self.resource}"
            if namespace
            else (f"{root}/{self.resource}")
        )


WGPOLICY = ReportFormat(
    "wgpolicyk8s", "wgpolicyk8s.io", "v1alpha2", "PolicyReport", "policyreports"
)
OPENREPORTS = ReportFormat("openreports", "openreports.io", "v1alpha1", "Report", "reports")
FORMATS = {f.name: f for f in (WGPOLICY, OPENREPORTS)}


def _cut(text: str, limit: int = MAX_MESSAGE) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _where(problem: Problem) -> str:
    parts = ["the template"] if problem.in_owner else []
    if problem.pods:
        parts.append(f"{problem.pods} pod(s)")
    return f" (in {' and '.join(parts)})" if parts else ""


def _message(problems: Iterable[Problem]) -> str:
    return _cut("; ".join(f"{p.message}{_where(p)}" for p in problems))


def _resource(finding: Finding) -> dict[str, str]:
    owner = finding.owner
    ref = {
        "apiVersion": owner.api_version,
        "kind": owner.kind,
        "namespace": owner.namespace,
        "name": owner.name,
    }
    if owner.uid:
        ref["uid"] = owner.uid
    return ref


def _properties(finding: Finding) -> dict[str, str]:
    """Counts a viewer can show beside the message (map[string]string in both APIs)."""
    props = {"scope": finding.scope()}
    if not finding.is_pod:
        props["pods"] = str(finding.pods)
        props["podsDenied"] = str(finding.pods_denied)
        props["podsChanged"] = str(finding.pods_changed)
    return props


def _tables(finding: Finding) -> tuple[tuple[str, Mapping[Any, Problem]], ...]:
    """A finding's problems by result: denials fail; changes and GPU access findings that
    admission only warns about (gpuAccess warn or off) warn."""
    return (("fail", finding.denied), ("warn", finding.changes), ("warn", finding.access))


def finding_results(finding: Finding, timestamp: int) -> list[dict[str, Any]]:
    """One result per (policy, rule) of the finding: fail for denials, warn for changes."""
    results = []
    for verdict, table in _tables(finding):
        by_rule: dict[tuple[str, str], list[Problem]] = {}
        for problem in table.values():
            by_rule.setdefault((problem.policy, problem.rule), []).append(problem)
        for (policy, rule), problems in by_rule.items():
            results.append(
                {
                    "source": SOURCE,
                    "policy": policy,
                    "rule": rule,
                    "category": CATEGORY,
                    "result": verdict,
                    "scored": verdict == "fail",
                    # meta/v1 Timestamp: seconds and nanos, both required by the CRDs' schema.
                    "timestamp": {"seconds": timestamp, "nanos": 0},
                    "message": _message(problems),
                    "resources": [_resource(finding)],
                    "properties": _properties(finding),
                }
            )
    return results


def build_reports(
    result: AuditResult, fmt: ReportFormat, timestamp: int
) -> dict[str, dict[str, Any]]:
    """{namespace: report} for every namespace with a finding. Cluster-scoped owners (a
    workload kind added in the config may be one) have no namespace to report in and are
    left to the CLI and the metrics."""
    by_namespace: dict[str, list[dict[str, Any]]] = {}
    for finding in result.findings:
        if finding.owner.namespace:
            results = by_namespace.setdefault(finding.owner.namespace, [])
            results += finding_results(finding, timestamp)
    return {ns: report(fmt, ns, results) for ns, results in sorted(by_namespace.items())}


def report(fmt: ReportFormat, namespace: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    # Failures first, so the cap drops warnings before denials.
    ordered = sorted(results, key=lambda r: r["result"] != "fail")
    kept, omitted = ordered[:MAX_RESULTS], len(ordered) - MAX_RESULTS
    metadata: dict[str, Any] = {
        "name": REPORT_NAME,
        "namespace": namespace,
        "labels": {MANAGED_BY_LABEL: MANAGED_BY},
    }
    if omitted > 0:
        metadata["annotations"] = {OMITTED_ANNOTATION: str(omitted)}
    body: dict[str, Any] = {"apiVersion": fmt.api_version, "kind": fmt.kind, "metadata": metadata}
    if fmt is OPENREPORTS:
        body["source"] = SOURCE  # Report.Source: one engine produced every result
    body["summary"] = summary(kept)
    body["results"] = kept
    return body


def summary(results: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    counts = {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0}
    for result in results:
        counts[result["result"]] += 1
    return counts


OTHER = "other"


def finding_counts(
    result: AuditResult, *, max_namespaces: int = 50, max_policies: int = 20
) -> dict[tuple[str, str, str], int]:
    """{(policy, namespace, result): owners} for the findings metric, with bounded labels:
    the namespaces and policies with the most findings keep their name, the rest count as
    "other" (label values come from the cluster, so their number must not be the cluster's)."""
    raw: dict[tuple[str, str, str], int] = {}
    for finding in result.findings:
        namespace = finding.owner.namespace
        for verdict, table in _tables(finding):
            for policy in {p.policy for p in table.values()}:
                key = (policy, namespace, verdict)
                raw[key] = raw.get(key, 0) + 1
    keep_ns = _top(raw, 1, max_namespaces)
    keep_policy = _top(raw, 0, max_policies)
    counts: dict[tuple[str, str, str], int] = {}
    for (policy, namespace, verdict), n in raw.items():
        key = (
            policy if policy in keep_policy else OTHER,
            namespace if namespace in keep_ns else OTHER,
            verdict,
        )
        counts[key] = counts.get(key, 0) + n
    return counts


def _top(raw: Mapping[tuple[str, str, str], int], index: int, limit: int) -> set[str]:
    totals: dict[str, int] = {}
    for key, n in raw.items():
        totals[key[index]] = totals.get(key[index], 0) + n
    ranked = sorted(totals, key=lambda name: (-totals[name], name))
    return set(ranked[:limit])
