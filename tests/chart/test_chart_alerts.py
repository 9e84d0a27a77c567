"""The chart's PrometheusRule: opt-in, each alert switchable with its thresholds, each linked to
its runbook section; checked and unit-tested by Prometheus's own `promtool` on synthetic series.

promtool comes with Debian's `prometheus` package; the promtool tests are skipped, saying so,
where it is absent.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import NAMESPACE, RELEASE, Render
from .test_chart import find, one

ROOT = Path(__file__).resolve().parents[2]
RUNBOOKS = ROOT / "docs" / "operations" / "runbooks.md"
FULLNAME = f"{RELEASE}-gpu-admission-webhook"
SEL = f'job="{FULLNAME}",namespace="{NAMESPACE}"'
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool not installed (Debian: apt-get install prometheus): rules not checked",
)
# audit.intervalSeconds small enough that "two intervals" fits a short synthetic series.
ON = {"prometheusRule": {"enabled": True}, "audit": {"intervalSeconds": 300}}
ALERTS = {
    "latency": ["GpuWebhookReviewLatencyHigh"],
    "replicasNotReady": ["GpuWebhookReplicasNotReady"],
    "sourceNotSynced": ["GpuWebhookSourceNotSynced", "GpuWebhookSourceStale"],
    "invalidConfigMaps": ["GpuWebhookInvalidCrlConfigMaps", "GpuWebhookConflictingCrlConfigMaps"],
    "audit": ["GpuWebhookAuditFailing", "GpuWebhookAuditNotRun", "GpuWebhookAuditNeverFinished"],
    "registryLookupsFailing": ["GpuWebhookRegistryLookupsFailing"],
    "failOpen": ["GpuWebhookFailedOpen"],
}


def rules_of(render: Render, values: dict[str, Any]) -> list[dict[str, Any]]:
    rule = one(render(values), "PrometheusRule")
    assert rule["metadata"]["namespace"] == NAMESPACE
    (group,) = rule["spec"]["groups"]
    rules: list[dict[str, Any]] = group["rules"]
    return rules


def test_no_prometheus_rule_unless_enabled(render: Render) -> None:
    assert find(render(), "PrometheusRule") == []


def test_every_alert_is_switchable(render: Render) -> None:
    everything = [r["alert"] for r in rules_of(render, ON)]
    assert sorted(set(everything)) == sorted(a for names in ALERTS.values() for a in names)
    for switch, names in ALERTS.items():
        values = {**ON, "prometheusRule": {"enabled": True, "alerts": {switch: {"enabled": False}}}}
        left = [r["alert"] for r in rules_of(render, values)]
        assert left == [a for a in everything if a not in names], switch
    # The audit's alerts only exist with the audit.
    without_audit = [r["alert"] for r in rules_of(render, {**ON, "audit": {"enabled": False}})]
    assert without_audit == [a for a in everything if a not in ALERTS["audit"]]


def test_thresholds_come_from_values(render: Render) -> None:
    values = {
        "prometheusRule": {
            "enabled": True,
            "selector": 'job="gpu-webhook"',
            "alerts": {
                "latency": {"p99Seconds": 0.25, "for": "2m", "severity": "critical"},
                "replicasNotReady": {"minReady": 3},
                "registryLookupsFailing": {"failureRatio": 0.9, "window": "30m"},
            },
        }
    }
    rules = {r["alert"]: r for r in rules_of(render, values)}
    latency = rules["GpuWebhookReviewLatencyHigh"]
    assert latency["expr"].endswith("> 0.25")
    assert 'gpu_webhook_review_duration_seconds_bucket{job="gpu-webhook"}' in latency["expr"]
    assert (latency["for"], latency["labels"]["severity"]) == ("2m", "critical")
    assert rules["GpuWebhookReplicasNotReady"]["expr"].endswith("< 3")
    lookups = rules["GpuWebhookRegistryLookupsFailing"]["expr"]
    assert lookups.endswith("> 0.9") and "[30m]" in lookups


def test_every_runbook_url_points_at_a_section_of_docs_runbooks(render: Render) -> None:
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", line[3:].strip().lower()).replace(" ", "-")
        for line in RUNBOOKS.read_text(encoding="utf-8").splitlines()
        if line.startswith("## ")
    }
    for rule in rules_of(render, ON):
        url = rule["annotations"]["runbook_url"]
        base, _, anchor = url.partition("#")
        assert base.endswith("/docs/operations/runbooks.md"), url
        assert anchor in anchors, (
            f"{rule['alert']}: no section #{anchor} in docs/operations/runbooks.md"
        )


def _rules_file(render: Render, tmp_path: Path) -> tuple[Path, dict[str, dict[str, Any]]]:
    rules = rules_of(render, ON)
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "gpu-admission-webhook", "rules": rules}]}))
    return path, {r["alert"]: r for r in rules}


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], capture_output=True, text=True, timeout=120, check=False
    )


@needs_promtool
def test_promtool_check_rules(render: Render, tmp_path: Path) -> None:
    path, rules = _rules_file(render, tmp_path)
    result = _promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def _series(name: str, values: str, **labels: str) -> dict[str, str]:
    matchers = ",".join([SEL, *(f'{k}="{v}"' for k, v in labels.items())])
    return {"series": f"{name}{{{matchers}}}", "values": values}


def _alert(
    rules: dict[str, dict[str, Any]], alert: str, summary: str, **labels: str
) -> dict[str, Any]:
    """An expected alert: its labels, its summary as a user reads it, the fixed annotations."""
    rule = rules[alert]
    return {
        "exp_labels": {"severity": rule["labels"]["severity"], **labels},
        "exp_annotations": {
            "summary": summary,
            "description": rule["annotations"]["description"],
            "runbook_url": rule["annotations"]["runbook_url"],
        },
    }


def _test_cases(rules: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    ns = {"job": FULLNAME, "namespace": NAMESPACE}
    bucket = "gpu_webhook_review_duration_seconds_bucket"
    # /mutate: 90 of every 100 reviews within 0.25 s, 10 between 0.5 and 1 s, so p99 is 0.95 s
    # (linear within the bucket); /validate: all within 0.25 s.
    latency = [
        _series(bucket, f"0+{count}x30", instance="a", endpoint="mutate", le=le)
        for le, count in (("0.25", 90), ("0.5", 90), ("1.0", 100), ("+Inf", 100))
    ] + [
        _series(bucket, "0+100x30", instance="a", endpoint="validate", le=le)
        for le in ("0.25", "0.5", "1.0", "+Inf")
    ]
    mutate_slow = _alert(
        rules,
        "GpuWebhookReviewLatencyHigh",
        "Admission reviews on /mutate take 950ms at p99 (threshold 0.5 s).",
        endpoint="mutate",
        **ns,
    )
    lookups = "gpu_webhook_image_lookups_total"
    fail_open = "apiserver_admission_webhook_fail_open_count"
    ours = f"workloads.{FULLNAME}.{NAMESPACE}.svc"
    return [
        {
            "interval": "1m",
            "input_series": latency,
            "alert_rule_test": [
                # Above the threshold since the start, but not yet for 10 minutes.
                {"eval_time": "5m", "alertname": "GpuWebhookReviewLatencyHigh", "exp_alerts": []},
                {
                    "eval_time": "20m",
                    "alertname": "GpuWebhookReviewLatencyHigh",
                    "exp_alerts": [mutate_slow],
                },
            ],
        },
        {
            "interval": "1m",
            "input_series": [
                _series("gpu_webhook_ready", "1x20", instance="a"),
                _series("gpu_webhook_ready", "1x5 0x15", instance="b"),
                _series("gpu_webhook_reflector_synced", "1x20", instance="a", kind="ConfigMap"),
                _series("gpu_webhook_reflector_synced", "0x20", instance="a", kind="Node"),
                _series("gpu_webhook_invalid_configmaps", "2x20", instance="a"),
                # A second ConfigMap for one key from minute 11: firing 5 minutes later.
                _series("gpu_webhook_policy_conflicts", "0x10 1x10", instance="a"),
            ],
            "alert_rule_test": [
                {"eval_time": "8m", "alertname": "GpuWebhookReplicasNotReady", "exp_alerts": []},
                {
                    "eval_time": "12m",
                    "alertname": "GpuWebhookReplicasNotReady",
                    "exp_alerts": [
                        _alert(
                            rules,
                            "GpuWebhookReplicasNotReady",
                            "1 webhook replica(s) ready, fewer than 2.",
                        )
                    ],
                },
                {
                    "eval_time": "15m",
                    "alertname": "GpuWebhookSourceNotSynced",
                    "exp_alerts": [
                        _alert(
                            rules,
                            "GpuWebhookSourceNotSynced",
                            "The webhook has not listed Node objects yet on a.",
                            instance="a",
                            kind="Node",
                            **ns,
                        )
                    ],
                },
                {
                    "eval_time": "15m",
                    "alertname": "GpuWebhookInvalidCrlConfigMaps",
                    "exp_alerts": [
                        _alert(
                            rules,
                            "GpuWebhookInvalidCrlConfigMaps",
                            "2 CRL ConfigMap(s) are invalid and skipped.",
                            **ns,
                        )
                    ],
                },
                {
                    "eval_time": "15m",
                    "alertname": "GpuWebhookConflictingCrlConfigMaps",
                    "exp_alerts": [],
                },
                {
                    "eval_time": "17m",
                    "alertname": "GpuWebhookConflictingCrlConfigMaps",
                    "exp_alerts": [
                        _alert(
                            rules,
                            "GpuWebhookConflictingCrlConfigMaps",
                            "1 resource key(s) are defined by more than one enabled CRL ConfigMap.",
                            **ns,
                        )
                    ],
                },
            ],
        },
        {
            # Node watch failing every minute, nothing published since the start; the ConfigMap
            # snapshot as old, but its watch is healthy (a quiet cluster): not stale.
            "interval": "1m",
            "input_series": [
                _series("gpu_webhook_reflector_errors_total", "0+1x40", instance="a", kind="Node"),
                _series(
                    "gpu_webhook_reflector_seconds_since_sync", "0+60x40", instance="a", kind="Node"
                ),
                _series(
                    "gpu_webhook_reflector_errors_total", "0x40", instance="a", kind="ConfigMap"
                ),
                _series(
                    "gpu_webhook_reflector_seconds_since_sync",
                    "0+60x40",
                    instance="a",
                    kind="ConfigMap",
                ),
            ],
            "alert_rule_test": [
                # Older than 900 s from minute 16; firing 10 minutes later.
                {"eval_time": "20m", "alertname": "GpuWebhookSourceStale", "exp_alerts": []},
                {
                    "eval_time": "30m",
                    "alertname": "GpuWebhookSourceStale",
                    "exp_alerts": [
                        _alert(
                            rules,
                            "GpuWebhookSourceStale",
                            "The webhook's Node snapshot on a is older than 900 s and its watch "
                            "is failing.",
                            instance="a",
                            kind="Node",
                            **ns,
                        )
                    ],
                },
            ],
        },
        {
            # Audits every 300 s: one failure at minute 3; the last success at Unix time 0.
            "interval": "1m",
            "input_series": [
                _series("gpu_webhook_audit_failures_total", "0 0 0 1x30", instance="a"),
                _series("gpu_webhook_audit_last_success_timestamp_seconds", "0x30", instance="a"),
            ],
            "alert_rule_test": [
                {
                    "eval_time": "10m",
                    "alertname": "GpuWebhookAuditFailing",
                    "exp_alerts": [
                        _alert(
                            rules,
                            "GpuWebhookAuditFailing",
                            "The background audit failed 1 time(s) in the last two intervals.",
                            **ns,
                        )
                    ],
                },
                # 600 s without a finished audit from minute 10, firing 5 minutes later.
                {"eval_time": "12m", "alertname": "GpuWebhookAuditNotRun", "exp_alerts": []},
                {
                    "eval_time": "30m",
                    "alertname": "GpuWebhookAuditNotRun",
                    "exp_alerts": [
                        _alert(
                            rules,
                            "GpuWebhookAuditNotRun",
                            "No audit has finished for 30m 0s (the interval is 300 s).",
                            **ns,
                        )
                    ],
                },
                {"eval_time": "30m", "alertname": "GpuWebhookAuditNeverFinished", "exp_alerts": []},
            ],
        },
        {
            # Running, auditing (runs counted), never finishing.
            "interval": "1m",
            "input_series": [_series("gpu_webhook_audit_runs_total", "0+1x20", instance="a")],
            "alert_rule_test": [
                {"eval_time": "5m", "alertname": "GpuWebhookAuditNeverFinished", "exp_alerts": []},
                {
                    "eval_time": "15m",
                    "alertname": "GpuWebhookAuditNeverFinished",
                    "exp_alerts": [
                        _alert(
                            rules,
                            "GpuWebhookAuditNeverFinished",
                            "No replica has finished an audit for two intervals (600 s).",
                            **ns,
                        )
                    ],
                },
            ],
        },
        {
            # 8 of every 10 lookups time out; not-found answers are no failure of the registry.
            "interval": "1m",
            "input_series": [
                _series(lookups, "0+8x40", instance="a", result="timeout"),
                _series(lookups, "0+2x40", instance="a", result="found"),
                _series(lookups, "0+50x40", instance="b", result="not-found"),
                _series(lookups, "0+50x40", instance="b", result="found"),
            ],
            "alert_rule_test": [
                {
                    "eval_time": "40m",
                    "alertname": "GpuWebhookRegistryLookupsFailing",
                    "exp_alerts": [],
                },
            ],
        },
        {
            "interval": "1m",
            "input_series": [
                _series(lookups, "0+8x40", instance="a", result="timeout"),
                _series(lookups, "0+2x40", instance="a", result="found"),
            ],
            "alert_rule_test": [
                {
                    "eval_time": "40m",
                    "alertname": "GpuWebhookRegistryLookupsFailing",
                    "exp_alerts": [
                        _alert(
                            rules,
                            "GpuWebhookRegistryLookupsFailing",
                            "80% of registry lookups failed over 15m.",
                            **ns,
                        )
                    ],
                },
            ],
        },
        {
            # The API server's counter: 3 fail-opens of our workloads entry at minute 15; another
            # release's webhook fails open too, and is not ours to report.
            "interval": "1m",
            "input_series": [
                {
                    "series": f'{fail_open}{{name="{ours}",type="validating"}}',
                    "values": "0x14 3x15",
                },
                {
                    "series": f'{fail_open}{{name="pods.other.{NAMESPACE}.svc",type="admit"}}',
                    "values": "0x14 5x15",
                },
            ],
            "alert_rule_test": [
                {"eval_time": "10m", "alertname": "GpuWebhookFailedOpen", "exp_alerts": []},
                {
                    "eval_time": "20m",
                    "alertname": "GpuWebhookFailedOpen",
                    "exp_alerts": [
                        _alert(
                            rules,
                            "GpuWebhookFailedOpen",
                            f"The API server let 3 request(s) through webhook {ours} unchecked "
                            "in 10 minutes.",
                            name=ours,
                            type="validating",
                        )
                    ],
                },
                # Ten minutes later the window holds no increase any more.
                {"eval_time": "29m", "alertname": "GpuWebhookFailedOpen", "exp_alerts": []},
            ],
        },
    ]


@needs_promtool
def test_promtool_unit_tests_fire_each_alert_on_synthetic_series(
    render: Render, tmp_path: Path
) -> None:
    path, rules = _rules_file(render, tmp_path)
    tests = tmp_path / "tests.yaml"
    tests.write_text(
        yaml.safe_dump(
            {
                "rule_files": [path.name],
                "evaluation_interval": "1m",
                "tests": _test_cases(rules),
            },
            sort_keys=False,
        )
    )
    result = _promtool("test", "rules", str(tests))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
    # Every alert was made to fire by some test.
    fired = {
        case["alertname"]
        for test in _test_cases(rules)
        for case in test["alert_rule_test"]
        if case["exp_alerts"]
    }
    assert fired == set(rules)


def test_dashboard_configmap_for_the_sidecar_and_the_grafana_operator(render: Render) -> None:
    assert find(render(), "GrafanaDashboard") == []
    assert [
        c for c in find(render(), "ConfigMap") if c["metadata"]["name"].endswith("-dashboard")
    ] == []
    objects = render({"grafanaDashboard": {"enabled": True}})
    board = one(objects, "ConfigMap", f"{FULLNAME}-dashboard")
    # kube-prometheus-stack's Grafana sidecar loads ConfigMaps labelled grafana_dashboard: "1".
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = (
        ROOT / "charts/gpu-admission-webhook/dashboards/gpu-admission-webhook.json"
    ).read_text()
    assert board["data"]["gpu-admission-webhook.json"] == shipped.rstrip("\n")
    assert find(objects, "GrafanaDashboard") == []
    operator = one(
        render(
            {
                "grafanaDashboard": {
                    "enabled": True,
                    "namespace": "monitoring",
                    "grafanaOperator": {"enabled": True, "folder": "GPU"},
                }
            }
        ),
        "GrafanaDashboard",
    )
    assert operator["metadata"]["namespace"] == "monitoring"
    assert operator["spec"]["configMapRef"] == {
        "name": f"{FULLNAME}-dashboard",
        "key": "gpu-admission-webhook.json",
    }
    assert operator["spec"]["folder"] == "GPU"
    assert operator["spec"]["instanceSelector"] == {"matchLabels": {"dashboards": "grafana"}}
