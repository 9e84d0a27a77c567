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

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core.audit.findings import SOURCE, AuditResult, Finding, Problem

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpu-admission-webhook"
# Reports are owned per installation: each is named after its owner and labelled with it, and
# an installation replaces or deletes only the reports that carry its own owner label (a second
# release, or `serve --policies proposed/ --audit-interval`, never touches production's).
OWNER_LABEL = "gpu-admission-webhook/report-owner"
DEFAULT_OWNER = "gpu-admission-webhook"
# The owner is a report name and a label value: a DNS-1123 label (at most 63 characters).
_OWNER = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
CATEGORY = "GPU resources"
# A report is one etcd object: etcd refuses requests past --max-request-bytes, 1.5 MiB by default
# (etcd server/embed/config.go DefaultMaxRequestBytes), and the API server stores a custom
# resource as its JSON. Results and messages are capped, and the JSON encoding of the whole
# report is kept within MAX_REPORT_BYTES (1 MiB, room for the API server's own metadata, e.g.
# managedFields), so a namespace full of failing workloads still gets a report, which then says
# how many results it leaves out (annotation, summary, and a last result).
MAX_RESULTS = 1000
MAX_MESSAGE = 1000
MAX_REPORT_BYTES = 1024 * 1024
OMITTED_ANNOTATION = "gpu-admission-webhook/omitted-results"
SIZE_RULE = "report size"


def check_owner(owner: str) -> str:
    """`owner` if it can name a report and be a label value; ValueError (one line) if not."""
    if not _OWNER.match(owner):
        raise ValueError(
            f"report owner {owner!r} must be a DNS label: at most 63 lower-case letters, digits "
            "and '-', starting and ending with a letter or digit"
        )
    return owner


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
    result: AuditResult,
    fmt: ReportFormat,
    timestamp: int,
    owner: str = DEFAULT_OWNER,
) -> dict[str, dict[str, Any]]:
    """{namespace: report} for every namespace with a finding, each named and labelled for
    `owner`. Cluster-scoped owners (a workload kind added in the config may be one) have no
    namespace to report in and are left to the CLI and the metrics."""
    check_owner(owner)
    by_namespace: dict[str, list[dict[str, Any]]] = {}
    for finding in result.findings:
        if finding.owner.namespace:
            results = by_namespace.setdefault(finding.owner.namespace, [])
            results += finding_results(finding, timestamp)
    return {
        ns: report(fmt, ns, results, owner=owner, timestamp=timestamp)
        for ns, results in sorted(by_namespace.items())
    }


def _size(value: Any) -> int:
    """Bytes of the JSON encoding (compact, UTF-8), as the API server stores it."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def _size_note(namespace: str, left_out: list[dict[str, Any]], timestamp: int) -> dict[str, Any]:
    fails = sum(r["result"] == "fail" for r in left_out)
    return {
        "source": SOURCE,
        "policy": SOURCE,
        "rule": SIZE_RULE,
        "category": CATEGORY,
        "result": "warn",
        "scored": False,
        "timestamp": {"seconds": timestamp, "nanos": 0},
        "message": (
            f"{len(left_out)} more result(s) ({fails} fail, {len(left_out) - fails} warn) are "
            f"left out of this report to keep it under {MAX_REPORT_BYTES // (1024 * 1024)} MiB "
            f"and {MAX_RESULTS} results; `gpu-webhook audit -n {namespace}` lists them all"
        ),
    }


def report(
    fmt: ReportFormat,
    namespace: str,
    results: list[dict[str, Any]],
    *,
    owner: str = DEFAULT_OWNER,
    timestamp: int = 0,
) -> dict[str, Any]:
    # Failures first, so the caps drop warnings before denials.
    ordered = sorted(results, key=lambda r: r["result"] != "fail")
    metadata: dict[str, Any] = {
        "name": owner,
        "namespace": namespace,
        "labels": {MANAGED_BY_LABEL: MANAGED_BY, OWNER_LABEL: owner},
    }
    body: dict[str, Any] = {"apiVersion": fmt.api_version, "kind": fmt.kind, "metadata": metadata}
    if fmt is OPENREPORTS:
        body["source"] = SOURCE  # Report.Source: one engine produced every result
    # The summary counts every result, also those left out (kubectl get policyreport shows it).
    body["summary"] = summary(ordered)
    body["results"] = []
    # The budget holds the body, the annotation and the note saying what is left out (sized
    # for the worst case: every result left out), then as many results as fit, in order.
    worst = _size_note(namespace, ordered, timestamp)
    annotation = {OMITTED_ANNOTATION: str(len(ordered))}
    used = _size({**body, "metadata": {**metadata, "annotations": annotation}}) + _size(worst) + 1
    kept: list[dict[str, Any]] = []
    for result in ordered[:MAX_RESULTS]:
        cost = _size(result) + 1  # the comma
        if used + cost > MAX_REPORT_BYTES:
            break
        kept.append(result)
        used += cost
    left_out = ordered[len(kept) :]
    if left_out:
        metadata["annotations"] = {OMITTED_ANNOTATION: str(len(left_out))}
        kept.append(_size_note(namespace, left_out, timestamp))
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
