"""The per-review metrics kept as plain numbers expose exactly what prometheus_client's own
Counter and Histogram expose for the same reviews (ReviewCounts, admission/review_counts.py)."""

from __future__ import annotations

import random
import re

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from webhook.admission.review_counts import LATENCY_BUCKETS, ReviewCounts

ENDPOINTS = ("mutate", "validate")
KINDS = ("Pod", "Deployment", "other")
RESULTS = ("allowed", "patched", "denied", "error")
MUTATIONS = ("cuda-affinity", "requests-from-limits", "env-fix")


def _without_created(text: str) -> list[str]:
    # `_created` carries the time each series began: the same lines, different instants.
    return [re.sub(r"(_created(?:\{.*\})?) \S+$", r"\1 T", line) for line in text.splitlines()]


@pytest.mark.parametrize("seed", range(20))
def test_exposition_matches_prometheus_client(seed: int) -> None:
    rng = random.Random(seed)
    reference = CollectorRegistry()
    reviews = Counter(
        "gpu_webhook_reviews",
        "Admission reviews answered, by endpoint, kind, operation and result.",
        ["endpoint", "kind", "operation", "result"],
        registry=reference,
    )
    latency = Histogram(
        "gpu_webhook_review_duration_seconds",
        "Time from request body received to response ready.",
        ["endpoint"],
        buckets=LATENCY_BUCKETS,
        registry=reference,
    )
    mutations = Counter(
        "gpu_webhook_mutations",
        "Mutations returned by /mutate, by type.",
        ["type"],
        registry=reference,
    )
    ours = CollectorRegistry()
    counts = ReviewCounts()
    ours.register(counts)
    # Bounds themselves, values between and past them, and zero.
    values = [0.0, *LATENCY_BUCKETS, *(b * 1.5 for b in LATENCY_BUCKETS), 7.0]
    for _ in range(rng.randrange(0, 300)):
        labels = (rng.choice(ENDPOINTS), rng.choice(KINDS), "CREATE", rng.choice(RESULTS))
        seconds = rng.choice(values) if rng.random() < 0.5 else rng.uniform(0, 3)
        reviews.labels(*labels).inc()
        latency.labels(labels[0]).observe(seconds)
        counts.review_done(*labels, seconds)
        if rng.random() < 0.3:
            kind = rng.choice(MUTATIONS)
            mutations.labels(kind).inc()
            counts.mutated(kind)
    # What evaluated() counts, against prometheus_client's Counter with the same names and help.
    families = {f.name: f for f in counts.collect()}
    violations, placements, unknown, gpu = (
        Counter(name, families[name].documentation, labels, registry=reference)
        for name, labels in (
            ("gpu_webhook_violations", ["policy", "rule"]),
            ("gpu_webhook_placements", ["rule"]),
            ("gpu_webhook_cuda_unknown", ["reason", "runtime"]),
            ("gpu_webhook_gpu_containers", ["runtime"]),
        )
    )
    gpu.labels("cuda")  # the CUDA series exists before any review, as it did unlabelled
    for _ in range(rng.randrange(0, 100)):
        n = rng.randrange(0, 4)
        rules = tuple(rng.choices(["backward", "minorVersion", "forward", "compute"], k=n))
        runtimes = tuple(rng.choices(["CUDA", "ROCm", "CANN"], k=n))
        reasons = tuple(
            zip(
                runtimes,
                rng.choices(["not-known", "lookups-off", "slow", "unreachable"], k=n),
                strict=True,
            )
        )
        pairs = tuple(
            rng.choices([("kube-public/cf-crl-a", "max: 8"), ("", "cuda")], k=rng.randrange(3))
        )
        counts.evaluated(runtimes, rules, pairs, reasons)
        for runtime in runtimes:
            gpu.labels(runtime.lower()).inc()
        for rule in rules:
            placements.labels(rule).inc()
        for runtime, reason in reasons:
            unknown.labels(reason, runtime.lower()).inc()
        for configmap, rule in pairs:
            policy = configmap.rpartition("/")[2] or "gpu-admission-webhook"
            violations.labels(policy, rule.partition(":")[0]).inc()
    expected = generate_latest(reference).decode()
    got = generate_latest(ours).decode()
    assert _without_created(got) == _without_created(expected)


def test_created_is_when_a_series_began() -> None:
    counts = ReviewCounts()
    registry = CollectorRegistry()
    registry.register(counts)
    counts.review_done("mutate", "Pod", "CREATE", "patched", 0.002)
    first = registry.get_sample_value(
        "gpu_webhook_reviews_created",
        {"endpoint": "mutate", "kind": "Pod", "operation": "CREATE", "result": "patched"},
    )
    counts.review_done("mutate", "Pod", "CREATE", "patched", 0.002)
    labels = {"endpoint": "mutate", "kind": "Pod", "operation": "CREATE", "result": "patched"}
    assert registry.get_sample_value("gpu_webhook_reviews_total", labels) == 2
    assert registry.get_sample_value("gpu_webhook_reviews_created", labels) == first
    assert (
        registry.get_sample_value(
            "gpu_webhook_review_duration_seconds_bucket", {"endpoint": "mutate", "le": "0.001"}
        )
        == 0
    )
    assert (
        registry.get_sample_value(
            "gpu_webhook_review_duration_seconds_bucket", {"endpoint": "mutate", "le": "0.0025"}
        )
        == 2
    )


@pytest.mark.parametrize(
    ("seed", "max_aggregates"), [(s, m) for s in range(12) for m in (0, 3, 4096)]
)
def test_answered_counts_what_the_series_methods_count(seed: int, max_aggregates: int) -> None:
    """answered() (one update per review, aggregates added up at scrape time, and past
    `max_aggregates` series by series) exposes the very text the per-series methods do, series
    in the same order, policy labels given to the same first policies."""
    rng = random.Random(seed)
    direct, aggregated = ReviewCounts(), ReviewCounts()
    aggregated.max_aggregates = max_aggregates
    policies = [f"kube-public/cf-crl-{n}" for n in range(25)] + [""]
    for _ in range(rng.randrange(50, 400)):
        endpoint, kind = rng.choice(ENDPOINTS), rng.choice(KINDS)
        result = rng.choice(RESULTS)
        seconds = rng.uniform(0, 0.02)
        kinds = tuple(rng.choices(MUTATIONS, k=rng.randrange(3)))
        gpu = rng.choice(((), (), ("CUDA",), ("CUDA", "CUDA"), ("ROCm",), ("CANN", "made-up")))
        rules = tuple(rng.choices(["backward", "forward", "made-up"], k=rng.randrange(2)))
        reasons = tuple(
            (rng.choice(["CUDA", "ROCm", "made-up"]), rng.choice(["lookups-off", "slow", "x"]))
            for _ in range(rng.randrange(2))
        )
        pairs = tuple(
            (rng.choice(policies), rng.choice(["max: 8", "cuda", "made up"]))
            for _ in range(rng.choice((0, 0, 1, 2)))
        )
        for mutation in kinds:
            direct.mutated(mutation)
        direct.review_done(endpoint, kind, "CREATE", result, seconds)
        if gpu or pairs:
            direct.evaluated(gpu, rules, pairs, reasons)
        aggregated.answered(
            endpoint, kind, "CREATE", result, seconds, kinds, gpu, rules, pairs, reasons
        )
    registries = []
    for counts in (direct, aggregated):
        registry = CollectorRegistry()
        registry.register(counts)
        registries.append(_without_created(generate_latest(registry).decode()))
    assert registries[0] == registries[1]
    assert len(aggregated._aggregates) <= max_aggregates
