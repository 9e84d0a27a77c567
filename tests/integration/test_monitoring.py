"""Every metric the chart's alerts and dashboard name is one the server really exports.

The app is started as `serve --kubeconfig ... --audit-interval` builds it (cluster reflectors
from the fake API server, the audit, registry lookups, the decision cache), a few reviews are
answered, one audit finishes, and /metrics is scraped. The metric names are read from the
rendered PrometheusRule's expressions and from each dashboard panel's queries.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from tests.auditdata import GPU, IMAGE, populate
from tests.chart.conftest import CHART_DIR, render_chart
from tests.fakekube import FakeKube
from tests.helpers import container, eventually, pod
from webhook.admission.app import create_app
from webhook.cli.serve import _image_resolver, _policy_source
from webhook.core.config.model import WebhookConfig
from webhook.sources.auditor import Auditor
from webhook.sources.store import PolicyStore

DASHBOARD = CHART_DIR / "dashboards" / "gpu-admission-webhook.json"
# Series not from this server, each with who exports it.
EXTERNAL = {
    # kube-apiserver: staging/src/k8s.io/apiserver/pkg/admission/metrics/metrics.go
    # (namespace "apiserver", subsystem "admission", name "webhook_fail_open_count").
    "apiserver_admission_webhook_fail_open_count": "kube-apiserver",
}
# PromQL functions, aggregations and keywords that can appear as bare words in the queries.
PROMQL_WORDS = {
    "sum",
    "max",
    "min",
    "rate",
    "increase",
    "histogram_quantile",
    "scalar",
    "time",
    "vector",
    "absent",
    "by",
    "on",
    "and",
    "or",
    "bool",
    "group_left",
}


def metric_names(expr: str) -> set[str]:
    """The metric names an expression reads: every bare word once label matchers, strings,
    grouping clauses, durations and numbers are taken out, that is no PromQL word."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\b(?:by|on|without|ignoring)\s*\([^)]*\)", "", text)
    words = set(re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b", text))
    return {w for w in words if w not in PROMQL_WORDS and not re.fullmatch(r"e\d*", w)}


def alert_expressions() -> dict[str, str]:
    values = {
        "prometheusRule": {"enabled": True},
        "audit": {"enabled": True},
    }
    with helm_python.Chart.load(CHART_DIR) as chart:
        rendered = render_chart(chart, values)
    (text,) = [t for path, t in rendered.items() if path.endswith("prometheusrule.yaml")]
    rule = yaml.safe_load(text)
    return {
        f"alert {r['alert']}": r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]
    }


def panel_expressions() -> dict[str, str]:
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return {
        f"panel {panel['title']!r} {target['refId']}": target["expr"]
        for panel in board["panels"]
        for target in panel["targets"]
    }


def test_metric_names_are_read_from_expressions() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, endpoint) (rate(a_seconds_bucket{job="x",'
        'le="+Inf"}[5m]))) > 0.5 and on (job) time() - max(b_total{kind=~"a|b"}) > 1e3'
    )
    assert metric_names(expr) == {"a_seconds_bucket", "b_total"}


def exported(metrics_text: str) -> set[str]:
    """Every series name the exposition declares or holds (a labelled counter with no child
    yet has its # TYPE line: its name is declared)."""
    names: set[str] = set()
    for family in text_string_to_metric_families(metrics_text):
        names.update(sample.name for sample in family.samples)
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names.update(family.name + suffix for suffix in ("_bucket", "_sum", "_count"))
        else:
            names.add(family.name)
    return names


@pytest.fixture
async def kube() -> AsyncIterator[FakeKube]:
    async with FakeKube() as server:
        populate(server)
        yield server


def review(obj: dict[str, Any], uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "ml",
            "operation": "CREATE",
            "object": obj,
        },
    }


async def test_every_metric_of_the_alerts_and_the_dashboard_is_exported(
    kube: FakeKube, tmp_path: Path
) -> None:
    config = WebhookConfig.model_validate(
        {"registryLookups": {"publicRegistries": False, "allowedRegistries": ["127.0.0.1:9"]}}
    )
    store = PolicyStore()
    kubeconfig = str(kube.write_kubeconfig(tmp_path))
    args = argparse.Namespace(
        policies=None,
        policies_poll=0,
        kubeconfig=kubeconfig,
        registry_auth=None,
        registry_ca=None,
    )
    source = _policy_source(args, store, config)
    images = _image_resolver(args, config)
    assert images is not None
    auditor = Auditor(
        store, config, interval=3600, kubeconfig=kubeconfig, page_pause=0, first_run_delay=0
    )
    app = create_app(
        config,
        store,
        policy_source=source,
        tasks=[auditor.run],
        images=images,
        decision_cache_bytes=1 << 20,
    )
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        await eventually(lambda: store.ready, "the policies synced")
        await eventually(
            lambda: store.audit is not None and store.audit.last_success_unix is not None,
            "the first audit finished",
        )
        gpu = pod(container("c", IMAGE, limits={GPU: "1"}), name="p")
        # An image nothing tells the CUDA version of, on a loopback registry that is closed.
        unknown = pod(container("c", "127.0.0.1:9/team/app:1", limits={GPU: "1"}), name="q")
        over = pod(container("c", IMAGE, limits={GPU: "100"}), name="r")
        for n, obj in enumerate([gpu, gpu, unknown, over]):
            for endpoint in ("mutate", "validate"):
                reply = await client.post(f"/{endpoint}", json=review(obj, f"u-{endpoint}-{n}"))
                assert reply.status == 200
        text = await (await client.get("/metrics")).text()
    finally:
        await client.close()
    names = exported(text)
    # The review counters, from the reviews above: GPU containers and unknown CUDA versions
    # by /mutate, the denial's violation by /validate, the lookup of the unknown image.
    samples = {
        s.name + str(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples["gpu_webhook_gpu_containers_total[('runtime', 'cuda')]"] == 4
    assert (
        samples["gpu_webhook_cuda_unknown_total[('reason', 'unreachable'), ('runtime', 'cuda')]"]
        == 1
    )
    assert samples["gpu_webhook_image_cache_requests_total[('result', 'miss')]"] == 1
    assert samples["gpu_webhook_image_cache_requests_total[('result', 'hit')]"] == 0
    assert samples["gpu_webhook_image_lookups_over_budget_total[]"] == 0
    assert samples["gpu_webhook_image_lookups_late_total[]"] == 0
    assert samples["gpu_webhook_placements_total[('rule', 'backward')]"] == 3
    # No CRL here has a maximum: nothing denied, the family declared (test_review_metrics.py).
    assert "gpu_webhook_violations_total" in names
    assert not [k for k in samples if k.startswith("gpu_webhook_violations_total")]
    expressions = {**alert_expressions(), **panel_expressions()}
    assert len(expressions) > 20
    missing = {
        where: sorted(n for n in metric_names(expr) if n not in names and n not in EXTERNAL)
        for where, expr in expressions.items()
    }
    assert {where: m for where, m in missing.items() if m} == {}
    # Each external series is named by some alert, for the reason given.
    used = set().union(*(metric_names(e) for e in expressions.values()))
    assert set(EXTERNAL) <= used


def test_dashboard_json_is_what_the_script_writes_and_has_the_variables() -> None:
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert {"datasource", "namespace", "replica"} <= set(variables)
    assert variables["namespace"]["definition"] == "label_values(gpu_webhook_ready, namespace)"
    assert variables["replica"]["definition"] == (
        'label_values(gpu_webhook_ready{namespace=~"$namespace"}, pod)'
    )
    titles = [panel["title"] for panel in board["panels"]]
    assert len(titles) == len(set(titles))
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        for target in panel["targets"]:
            # Every query follows both variables: a replica picked shows that replica only.
            assert 'namespace=~"$namespace",pod=~"$replica"' in target["expr"], panel["title"]
    check = subprocess.run(
        [sys.executable, str(CHART_DIR.parents[1] / "scripts" / "dashboard_json.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stderr
