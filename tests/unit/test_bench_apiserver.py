"""bench/bench_apiserver.py's reading of kube-apiserver's /metrics: the webhook calls and the
latency histograms per entry, and the per-pod figures, on a /metrics text captured from the
real API server (tests/data/apiserver-metrics.txt)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.bench_apiserver import (
    CALLS,
    DURATION,
    delta,
    entries,
    figures,
    histogram_quantile,
    parse_metrics,
)

CAPTURED = (Path(__file__).resolve().parents[1] / "data" / "apiserver-metrics.txt").read_text()
PODS = "pods.gpu-admission-webhook-url.gpu-admission-webhook.svc"
ADMIT = (("name", PODS), ("operation", "CREATE"), ("rejected", "false"), ("type", "admit"))


def test_samples_by_name_and_sorted_labels() -> None:
    metrics = parse_metrics(CAPTURED)
    assert metrics[CALLS][(("code", "200"), *ADMIT)] == 200
    assert metrics[DURATION + "_bucket"][(("le", "0.005"), *ADMIT)] == 111
    assert metrics[DURATION + "_bucket"][(("le", "+Inf"), *ADMIT)] == 200
    assert metrics["aggregator_discovery_aggregation_count_total"][()] == 2


def test_quoted_label_values_and_bad_lines() -> None:
    text = 'm{a="x\\"y,z",b="line\\nnext"} 1.5 1700000000\n'
    assert parse_metrics(text) == {"m": {(("a", 'x"y,z'), ("b", "line\nnext")): 1.5}}
    with pytest.raises(ValueError, match="not a Prometheus sample line"):
        parse_metrics("m 1 2 3\n")
    with pytest.raises(ValueError, match="bad labels"):
        parse_metrics("m{a=1} 2\n")


def test_the_histogram_quantile_interpolates_as_promql_does() -> None:
    found = {(e.name, e.type): e for e in entries(parse_metrics(CAPTURED))}
    pods = found[(PODS, "admit")]
    # 111 of 200 calls under 5 ms: the median is 100/111 of the way from 0 to 5 ms.
    assert pods.quantile(0.5) == pytest.approx(0.005 * 100 / 111)
    # The 198th call is the last of the (25 ms, 100 ms] bucket.
    assert pods.quantile(0.99) == pytest.approx(0.1)
    # Beyond the last finite bound: that bound.
    assert histogram_quantile(0.99, {1.0: 1, math.inf: 10}) == 1.0
    assert math.isnan(histogram_quantile(0.5, {1.0: 0, math.inf: 0}))


def test_calls_per_pod_count_the_pod_entries_only() -> None:
    """From a fresh API server to the capture (two Jobs of 100 GPU pods, both entries each):
    four calls per pod, two of them mutating; the Jobs' own `workloads` calls not counted."""
    after = parse_metrics(CAPTURED)
    found = entries(delta(after, {}))
    result = figures(found, 200, cpu=0.5)
    assert (result.calls_per_pod, result.mutating_per_pod, result.validating_per_pod) == (
        4.0,
        2.0,
        2.0,
    )
    assert result.cpu_per_1000 == 2.5
    workloads = [e for e in found if e.name.startswith("workloads.")]
    assert sorted((e.type, e.calls) for e in workloads) == [("admit", 2.0), ("validating", 2.0)]
    sums = after[DURATION + "_sum"]
    pod_seconds = sum(v for k, v in sums.items() if not dict(k)["name"].startswith("workloads."))
    assert result.mean_seconds == pytest.approx(pod_seconds / 200)


def test_delta_counts_only_what_happened_in_between() -> None:
    before = parse_metrics(CAPTURED)
    assert all(e.calls == 0 for e in entries(delta(before, before)))
    assert entries(delta(before, before)) == []
