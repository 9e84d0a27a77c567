"""The chart's audit (SPEC §6, §10): the serve flags, the ClusterRole that lists what the audit
evaluates and writes its reports (each behind its switch), and the report CRDs in crds/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# jsonschema comes with kubernetes-validate (its validator), which has no type stubs for it.
import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate
import pytest
import yaml

from tests.chart.conftest import CHART_DIR, NAMESPACE, Render
from tests.chart.test_chart import FULLNAME, container, find, one, supported_schema_versions
from webhook.core.audit.audit import Audit
from webhook.core.audit.findings import AuditResult, Finding, Problem
from webhook.core.audit.owners import Ref
from webhook.core.audit.reports import FORMATS, MAX_RESULTS, build_reports
from webhook.core.workloads.pods import registry_for

AUDIT_ROLE = f"{FULLNAME}-audit"
LIST = ["list"]


def report_rules(group: str, resource: str, owner: str = FULLNAME) -> list[dict[str, Any]]:
    """List and create on the report kind (RBAC cannot limit them to a name); update and delete
    on this installation's report name only."""
    return [
        {"apiGroups": [group], "resources": [resource], "verbs": ["list", "create"]},
        {
            "apiGroups": [group],
            "resources": [resource],
            "resourceNames": [owner],
            "verbs": ["update", "delete"],
        },
    ]


BUILTIN_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": LIST},
    {
        "apiGroups": ["apps"],
        "resources": ["deployments", "replicasets", "statefulsets", "daemonsets"],
        "verbs": LIST,
    },
    {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": LIST},
]
CRDS = {
    "wgpolicyk8s": CHART_DIR / "crds" / "wgpolicyk8s.io_policyreports.yaml",
    "openreports": CHART_DIR / "crds" / "openreports.io_reports.yaml",
}


def args_of(objects: list[dict[str, Any]]) -> dict[str, str]:
    args: list[str] = container(objects)["args"]
    flags = ("--audit-interval", "--audit-reports", "--audit-lease", "--report-owner")
    return {flag: args[args.index(flag) + 1] for flag in flags}


def operator_rules(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the chart sends to the webhook for operators: the audit lists the same kinds."""
    hooks = one(objects, "ValidatingWebhookConfiguration")["webhooks"]
    (operators,) = [h for h in hooks if "operator" in h["name"]]
    return [
        {"apiGroups": rule["apiGroups"], "resources": rule["resources"], "verbs": LIST}
        for rule in operators["rules"]
    ]


def test_default_install_audits_hourly_lists_what_it_checks_and_writes_policy_reports(
    render: Render,
) -> None:
    objects = render()
    assert args_of(objects) == {
        "--audit-interval": "3600",
        "--audit-reports": "wgpolicyk8s",
        "--audit-lease": f"{NAMESPACE}/{AUDIT_ROLE}",
        "--report-owner": FULLNAME,
    }
    role = one(objects, "ClusterRole", AUDIT_ROLE)
    reports = report_rules("wgpolicyk8s.io", "policyreports")
    assert role["rules"] == [*BUILTIN_RULES, *operator_rules(objects), *reports]
    # List only: no get, no watch (the audit pages through lists), no write but its reports.
    assert {verb for rule in role["rules"][:-2] for verb in rule["verbs"]} == {"list"}
    binding = one(objects, "ClusterRoleBinding", AUDIT_ROLE)
    assert binding["roleRef"]["name"] == AUDIT_ROLE
    account = one(objects, "ServiceAccount")["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    ]


def test_replicas_share_one_lease_they_may_create_read_and_renew_only(render: Render) -> None:
    objects = render()
    role = one(objects, "Role", AUDIT_ROLE)
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [AUDIT_ROLE],
            "verbs": ["get", "update"],
        },
    ]
    binding = one(objects, "RoleBinding", AUDIT_ROLE)
    assert (binding["metadata"]["namespace"], binding["roleRef"]["name"]) == (
        NAMESPACE,
        AUDIT_ROLE,
    )


def test_the_audit_lists_every_kind_of_the_webhooks_registry(render: Render) -> None:
    """A kind the webhook checks but the role does not list would be a 403 note forever."""
    listed = {
        (group, resource)
        for rule in one(render(), "ClusterRole", AUDIT_ROLE)["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    groups = {group for group, _ in listed}
    for kind in registry_for(None).kinds.values():
        assert kind.group in groups, f"{kind.kind} ({kind.group}) is not listed by the audit"


@pytest.mark.parametrize(
    ("reports", "rules"),
    [("openreports", report_rules("openreports.io", "reports")), ("none", [])],
)
def test_the_report_format_switches_its_write_permission(
    render: Render, reports: str, rules: list[dict[str, Any]]
) -> None:
    objects = render({"audit": {"reports": reports}})
    assert args_of(objects)["--audit-reports"] == reports
    granted = one(objects, "ClusterRole", AUDIT_ROLE)["rules"]
    writes = [r for r in granted if r["verbs"] != LIST]
    assert writes == rules


def test_a_report_owner_names_the_reports_and_the_only_ones_it_may_update(
    render: Render,
) -> None:
    objects = render({"audit": {"reportOwner": "gpu-staging"}})
    assert args_of(objects)["--report-owner"] == "gpu-staging"
    granted = one(objects, "ClusterRole", AUDIT_ROLE)["rules"]
    assert granted[-2:] == report_rules("wgpolicyk8s.io", "policyreports", "gpu-staging")


def test_audit_off_removes_its_role_and_passes_interval_zero(render: Render) -> None:
    objects = render({"audit": {"enabled": False, "intervalSeconds": 600}})
    assert args_of(objects)["--audit-interval"] == "0"
    for kind in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
        assert find(objects, kind, AUDIT_ROLE) == []


@pytest.mark.parametrize(
    "values",
    [
        {"intervalSeconds": 30},
        {"reports": "kyverno"},
        {"enabled": "yes"},
        {"reportOwner": "Prod_1"},
        {"reportOwner": "a" * 64},
    ],
    ids=["interval-below-60", "unknown-format", "non-boolean", "owner-not-a-label", "owner-long"],
)
def test_the_values_schema_rejects_unusable_audit_values(
    render: Render, values: dict[str, Any]
) -> None:
    with pytest.raises(Exception, match="audit"):
        render({"audit": values})


def load_crd(path: Path) -> dict[str, Any]:
    docs = [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]
    assert len(docs) == 1
    crd: dict[str, Any] = docs[0]
    return crd


@pytest.mark.parametrize("name", sorted(CRDS))
def test_report_crds_serve_the_version_the_webhook_writes(name: str) -> None:
    fmt = FORMATS[name]
    crd = load_crd(CRDS[name])
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == f"{fmt.resource}.{fmt.group}"
    spec = crd["spec"]
    assert (spec["group"], spec["scope"], spec["names"]["kind"], spec["names"]["plural"]) == (
        fmt.group,
        "Namespaced",
        fmt.kind,
        fmt.resource,
    )
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == (fmt.version, True, True)


@pytest.mark.parametrize("schema_version", supported_schema_versions())
@pytest.mark.parametrize("name", sorted(CRDS))
def test_report_crds_are_valid_for_kubernetes(name: str, schema_version: str) -> None:
    kubernetes_validate.validate(load_crd(CRDS[name]), schema_version, strict=True)


def _structural(schema: dict[str, Any]) -> None:
    """Every schema node typed (apiextensions' structural-schema rule, enforced since CRD v1)."""
    assert "type" in schema, schema
    for child in schema.get("properties", {}).values():
        _structural(child)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            _structural(schema[key])


@pytest.mark.parametrize("name", sorted(CRDS))
def test_a_report_the_webhook_writes_is_valid_for_its_crd(name: str) -> None:
    """The report of a real finding validates against the CRD's schema (the API server would
    otherwise refuse it) and keeps no field the schema would prune."""
    from tests.unit.test_audit import deployment_with_pods

    fmt = FORMATS[name]
    (version,) = load_crd(CRDS[name])["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    _structural(schema)
    audit = Audit()
    deployment_with_pods(audit, namespace="ml", gpus="8", max_gpus="4")
    (report,) = build_reports(audit.result(), fmt, 1_700_000_000).values()
    strict = _no_unknown_fields(schema)
    jsonschema.validate(report, strict)
    # A report with results left out (its last result, without a resource, says so).
    findings = []
    for index in range(MAX_RESULTS + 3):
        finding = Finding(Ref("v1", "Pod", "ml", f"p-{index}"))
        finding.denied[("p", "r", "m")] = Problem("p", "r", "x")
        findings.append(finding)
    result = AuditResult(tuple(findings), 0, len(findings), 0)
    (cut,) = build_reports(result, fmt, 1_700_000_000).values()
    assert cut["results"][-1]["rule"] == "report size"
    jsonschema.validate(cut, strict)


def _no_unknown_fields(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with additionalProperties false on every object node that lists properties
    (metadata aside): an unknown field fails validation instead of being pruned silently."""
    out = dict(schema)
    if "properties" in schema:
        out["properties"] = {
            name: {"type": "object"} if name == "metadata" else _no_unknown_fields(child)
            for name, child in schema["properties"].items()
        }
        out.setdefault("additionalProperties", False)
    if isinstance(schema.get("items"), dict):
        out["items"] = _no_unknown_fields(schema["items"])
    return out
