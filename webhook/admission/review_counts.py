"""The per-review counters and latency histogram as plain numbers, exported at scrape time."""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterable
from typing import Any

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from webhook.core.audit.findings import SOURCE, policy_name
from webhook.core.audit.reports import OTHER
from webhook.core.outcome.decision import CUDA
from webhook.core.placement.injection import PLACEMENT_RULES
from webhook.core.placement.vendors import shipped_vendors
from webhook.registry.resolver import SLOW
from webhook.registry.results import FOUND, STATUSES

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# The `le` labels of the latency buckets, written as prometheus_client's Histogram writes them.
_LE = [floatToGoString(b) for b in LATENCY_BUCKETS] + ["+Inf"]  # type: ignore[no-untyped-call]

# gpu_webhook_violations_total: the first MAX_POLICY_LABELS policies denied keep their name (and
# the webhook's own rules, "gpu-admission-webhook"), the ones after count as "other" (a
# counter's series must never shrink, so not a top-N re-ranked at each scrape as the audit's
# gauge is). Rules: the webhook's own and each CRL rule's field (`max: 8` -> "max"; "limits:
# required" kept whole); anything else "other".
MAX_POLICY_LABELS = 20
_RULES = frozenset(
    {
        "cuda",
        "compute capability",
        "gpu access",
        "crl",
        "unique key",
        "limits: required",
        "limits: disabled",
        "requests: required",
        "requests: disabled",
        "requests = limits",
        "requests need limits",
    }
)
_RULE_FIELDS = frozenset({"dataType", "min", "max", "wholeUnit"})
# gpu_webhook_cuda_unknown_total{reason,runtime}: lookups off, not asked or nothing failed
# ("not-known"), a lookup's failure (LookupResult status), or no answer within the budget.
CUDA_UNKNOWN_REASONS = frozenset(
    {"not-known", "lookups-off", SLOW, *(s for s in STATUSES if s != FOUND)}
)
# The `runtime` label of gpu_webhook_cuda_unknown_total and gpu_webhook_gpu_containers_total:
# CUDA (NVIDIA's containers) and each shipped vendor's runtime (placement/vendors.py), lowercased;
# anything else "other". The CUDA series always exists (at 0 before any review), as it did
# before the label.
RUNTIMES = frozenset({CUDA.lower(), *(v.runtime.lower() for v in shipped_vendors())})
_CUDA = CUDA.lower()
_PLACEMENTS = frozenset(PLACEMENT_RULES)
# Distinct review aggregates kept by ReviewCounts.answered; past it, reviews are counted one
# series at a time (as review_done, mutated and evaluated do), so memory stays bounded.
MAX_AGGREGATES = 4096

# What one review counts, as ReviewCounts.answered keys it: endpoint, kind, operation, result,
# mutation kinds, accelerator containers' runtimes, placements, violations, unknown runtimes'
# (runtime, reason).
AggregateKey = tuple[
    str,
    str,
    str,
    str,
    tuple[str, ...],
    tuple[str, ...],
    tuple[str, ...],
    tuple[tuple[str, str], ...],
    tuple[tuple[str, str], ...],
]


class _Aggregate:
    """How many reviews counted one AggregateKey, with the series' labels worked out once."""

    __slots__ = ("count", "gpu", "kinds", "placements", "review", "row", "unknown", "violations")

    def __init__(
        self,
        row: list[float],
        review: tuple[str, str, str, str],
        kinds: tuple[str, ...],
        gpu: tuple[str, ...],
        placements: tuple[str, ...],
        unknown: tuple[tuple[str, str], ...],
        violations: tuple[tuple[str, str], ...],
    ) -> None:
        self.count = 0
        self.row = row
        self.review = review
        self.kinds = kinds
        self.gpu = gpu
        self.placements = placements
        self.unknown = unknown
        self.violations = violations


def runtime_label(runtime: str) -> str:
    """The `runtime` label of a container's runtime (Decision.runtimes: "CUDA", "ROCm")."""
    label = runtime.lower()
    return label if label in RUNTIMES else OTHER


def _unknown_label(pair: tuple[str, str]) -> tuple[str, str]:
    """(reason, runtime) labels of one unknown runtime version given as (runtime, reason)."""
    runtime, reason = pair
    return (reason if reason in CUDA_UNKNOWN_REASONS else OTHER, runtime_label(runtime))


def rule_label(rule: str) -> str:
    if rule in _RULES:
        return rule
    head = rule.partition(":")[0]
    return head if head in _RULE_FIELDS else OTHER


class ReviewCounts(Collector):
    """The per-review metrics as plain numbers, exported at scrape time.

    Under load in the server (bench/bench_server.py, distinct mix), prometheus_client's locked
    Counter.inc and Histogram.observe for each review cost ~6 µs of its ~120 µs of CPU when
    stubbed out in one sitting. Reviews are answered, and /metrics scraped, on the event loop's
    one thread, so plain dict and list updates are enough. Label values are bounded by the
    caller (admission/review_handler.py `_label`; mutation kinds are rule names). The
    exposition is what prometheus_client's Counter and Histogram write:
    `_total` and `_created` per label set; `_bucket` (cumulative, `le` as Go formats floats),
    `_count`, `_sum` and `_created` per endpoint.
    """

    def __init__(self) -> None:
        self.reviews: dict[tuple[str, str, str, str], int] = {}
        self.mutations: dict[str, int] = {}
        # (policy, rule) label values, placement rule, (reason, runtime) of an unknown runtime
        # version, accelerator containers' runtime -> count.
        self.violations: dict[tuple[str, str], int] = {}
        self.placements: dict[str, int] = {}
        self.cuda_unknown: dict[tuple[str, str], int] = {}
        self.gpu_containers: dict[str, int] = {_CUDA: 0}
        # (configmap, rule) of a violation -> its label values, once worked out.
        self._violation_labels: dict[tuple[str, str], tuple[str, str]] = {}
        self._policies: set[str] = set()
        # Per endpoint: one count per bucket (the last one +Inf), then the sum of the seconds.
        self.latency: dict[str, list[float]] = {}
        # When each series began: keyed by the review labels, the endpoint (latency) or
        # ("mutation", kind).
        self._created: dict[object, float] = {}
        # answered(): reviews that count the same, counted together and added up at scrape
        # time; the tables above hold their series (at 0, in the order they were first seen).
        self._aggregates: dict[AggregateKey, _Aggregate] = {}
        self.max_aggregates = MAX_AGGREGATES
        self._created[("gpu-containers", _CUDA)] = time.time()

    def answered(
        self,
        endpoint: str,
        kind: str,
        operation: str,
        result: str,
        seconds: float,
        mutation_kinds: tuple[str, ...],
        gpu_containers: tuple[str, ...],
        placements: tuple[str, ...],
        violations: tuple[tuple[str, str], ...],
        cuda_unknown: tuple[tuple[str, str], ...],
    ) -> None:
        """One answered review, as mutated() per kind, review_done() and, when it evaluated
        GPU containers or violations, evaluated() count it: one dict update, not several."""
        key = (
            endpoint,
            kind,
            operation,
            result,
            mutation_kinds,
            gpu_containers,
            placements,
            violations,
            cuda_unknown,
        )
        found = self._aggregates.get(key)
        if found is None:
            found = self._aggregate(key)
            if found is None:
                for mutation in mutation_kinds:
                    self.mutated(mutation)
                self.review_done(endpoint, kind, operation, result, seconds)
                if gpu_containers or violations:
                    self.evaluated(gpu_containers, placements, violations, cuda_unknown)
                return
        found.count += 1
        row = found.row
        row[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        row[-1] += seconds

    def _aggregate(self, key: AggregateKey) -> _Aggregate | None:
        """A new aggregate, its series created (at 0) in the order the direct methods would
        create them; None when there are already `max_aggregates`."""
        if len(self._aggregates) >= self.max_aggregates:
            return None
        endpoint, kind, operation, result, kinds, gpu, placements, violations, unknown = key
        for mutation in kinds:
            self._add(self.mutations, mutation, "mutation", 0)
        review = (endpoint, kind, operation, result)
        if review not in self.reviews:
            self.reviews[review] = 0
            self._created[review] = time.time()
        row = self._latency_row(endpoint)
        placement_labels: tuple[str, ...] = ()
        unknown_labels: tuple[tuple[str, str], ...] = ()
        violation_labels: tuple[tuple[str, str], ...] = ()
        gpu_labels: tuple[str, ...] = ()
        if gpu or violations:
            gpu_labels = tuple(runtime_label(r) for r in gpu)
            for runtime in gpu_labels:
                self._add(self.gpu_containers, runtime, "gpu-containers", 0)
            placement_labels = tuple(r if r in _PLACEMENTS else OTHER for r in placements)
            for rule in placement_labels:
                self._add(self.placements, rule, "placement", 0)
            unknown_labels = tuple(_unknown_label(pair) for pair in unknown)
            for labels in unknown_labels:
                self._add(self.cuda_unknown, labels, "cuda-unknown", 0)
            violation_labels = tuple(self._violation_labels_of(pair) for pair in violations)
            for labels in violation_labels:
                self._add_violation(labels, 0)
        found = _Aggregate(
            row, review, kinds, gpu_labels, placement_labels, unknown_labels, violation_labels
        )
        self._aggregates[key] = found
        return found

    def _latency_row(self, endpoint: str) -> list[float]:
        row = self.latency.get(endpoint)
        if row is None:
            row = self.latency[endpoint] = [0.0] * (len(LATENCY_BUCKETS) + 2)
            self._created[endpoint] = time.time()
        return row

    def review_done(
        self, endpoint: str, kind: str, operation: str, result: str, seconds: float
    ) -> None:
        key = (endpoint, kind, operation, result)
        count = self.reviews.get(key)
        if count is None:
            count = 0
            self._created[key] = time.time()
        self.reviews[key] = count + 1
        row = self._latency_row(endpoint)
        # The first bucket whose bound is >= seconds, as Histogram.observe counts (le);
        # past the last bound, the +Inf bucket.
        row[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        row[-1] += seconds

    def mutated(self, kind: str) -> None:
        count = self.mutations.get(kind)
        if count is None:
            count = 0
            self._created[("mutation", kind)] = time.time()
        self.mutations[kind] = count + 1

    def evaluated(
        self,
        gpu_containers: tuple[str, ...],
        placements: tuple[str, ...],
        violations: tuple[tuple[str, str], ...],
        cuda_unknown: tuple[tuple[str, str], ...],
    ) -> None:
        """What one review's decision counts: accelerator containers by runtime, placements by
        rule, denied violations by (configmap, rule), unknown runtime versions by (reason,
        runtime)."""
        for runtime in gpu_containers:
            self._add(self.gpu_containers, runtime_label(runtime), "gpu-containers")
        for rule in placements:
            self._add(self.placements, rule if rule in _PLACEMENTS else OTHER, "placement")
        for pair in cuda_unknown:
            self._add(self.cuda_unknown, _unknown_label(pair), "cuda-unknown")
        for pair in violations:
            self._add_violation(self._violation_labels_of(pair), 1)

    def _violation_labels_of(self, pair: tuple[str, str]) -> tuple[str, str]:
        labels = self._violation_labels.get(pair)
        return labels if labels is not None else self._violation_label(*pair)

    def _add_violation(self, labels: tuple[str, str], n: int) -> None:
        count = self.violations.get(labels)
        if count is None:
            count = 0
            self._created[("violation", labels)] = time.time()
        self.violations[labels] = count + n

    def _violation_label(self, configmap: str, rule: str) -> tuple[str, str]:
        policy = policy_name(configmap)
        if policy != SOURCE and policy not in self._policies:
            if len(self._policies) >= MAX_POLICY_LABELS:
                policy = OTHER
            else:
                self._policies.add(policy)
        labels = (policy, rule_label(rule))
        # The label memo is bounded too: configmaps are few, rules' values (`max: 8`) are not.
        if len(self._violation_labels) < 4 * MAX_POLICY_LABELS * len(_RULES):
            self._violation_labels[(configmap, rule)] = labels
        return labels

    def _add(self, table: dict[Any, int], label: Any, series: str, n: int = 1) -> None:
        count = table.get(label)
        if count is None:
            count = 0
            self._created[(series, label)] = time.time()
        table[label] = count + n

    def _totals(
        self,
    ) -> tuple[
        dict[tuple[str, str, str, str], int],
        dict[str, int],
        dict[tuple[str, str], int],
        dict[str, int],
        dict[tuple[str, str], int],
        dict[str, int],
    ]:
        """Reviews, mutations, violations, placements, unknown runtimes and accelerator
        containers: the
        tables plus the aggregates (whose series the tables hold already, in their order)."""
        reviews = dict(self.reviews)
        mutations = dict(self.mutations)
        violations = dict(self.violations)
        placements = dict(self.placements)
        unknown = dict(self.cuda_unknown)
        gpu = dict(self.gpu_containers)
        for found in list(self._aggregates.values()):
            n = found.count
            reviews[found.review] += n
            for mutation in found.kinds:
                mutations[mutation] += n
            for runtime in found.gpu:
                gpu[runtime] += n
            for rule in found.placements:
                placements[rule] += n
            for labels in found.unknown:
                unknown[labels] += n
            for labels in found.violations:
                violations[labels] += n
        return reviews, mutations, violations, placements, unknown, gpu

    def collect(self) -> Iterable[Metric]:
        review_counts, mutation_counts, violation_counts, placement_counts, unknown_counts, gpu = (
            self._totals()
        )
        reviews = CounterMetricFamily(
            "gpu_webhook_reviews",
            "Admission reviews answered, by endpoint, kind, operation and result.",
            labels=["endpoint", "kind", "operation", "result"],
        )
        for key, count in review_counts.items():
            reviews.add_metric(list(key), count, created=self._created[key])
        yield reviews
        latency = HistogramMetricFamily(
            "gpu_webhook_review_duration_seconds",
            "Time from request body received to response ready.",
            labels=["endpoint"],
        )
        for endpoint, row in list(self.latency.items()):
            cumulative = 0.0
            buckets: list[tuple[str, float]] = []
            for bound, in_bucket in zip(_LE, row[:-1], strict=True):
                cumulative += in_bucket
                buckets.append((bound, cumulative))
            latency.add_metric([endpoint], buckets, row[-1])
            created = self._created[endpoint]
            latency.samples.append(
                Sample(latency.name + "_created", {"endpoint": endpoint}, created)
            )
        yield latency
        mutations = CounterMetricFamily(
            "gpu_webhook_mutations", "Mutations returned by /mutate, by type.", labels=["type"]
        )
        for kind, count in mutation_counts.items():
            mutations.add_metric([kind], count, created=self._created[("mutation", kind)])
        yield mutations
        violations = CounterMetricFamily(
            "gpu_webhook_violations",
            "Violations in the denials /validate returned, by CRL policy (ConfigMap name; "
            "gpu-admission-webhook for the webhook's own rules; 'other' past the first "
            f"{MAX_POLICY_LABELS}) and rule.",
            labels=["policy", "rule"],
        )
        for labels, count in violation_counts.items():
            created = self._created[("violation", labels)]
            violations.add_metric(list(labels), count, created=created)
        yield violations
        placements = CounterMetricFamily(
            "gpu_webhook_placements",
            "Node affinity parts /mutate injected, by the rule that set them (backward, "
            "minorVersion, forward, architecture-floor, compute).",
            labels=["rule"],
        )
        for rule, count in placement_counts.items():
            placements.add_metric([rule], count, created=self._created[("placement", rule)])
        yield placements
        unknown = CounterMetricFamily(
            "gpu_webhook_cuda_unknown",
            "Accelerator containers /mutate found no runtime version for where placement would "
            "use it, by reason (not-known, lookups-off, or the registry lookup's result) and "
            "runtime (cuda, rocm, cann).",
            labels=["reason", "runtime"],
        )
        for labels, count in unknown_counts.items():
            created = self._created[("cuda-unknown", labels)]
            unknown.add_metric(list(labels), count, created=created)
        yield unknown
        containers = CounterMetricFamily(
            "gpu_webhook_gpu_containers",
            "Accelerator containers in the objects /mutate evaluated, by the runtime placement "
            "reads (cuda: NVIDIA's GPU containers; rocm, cann).",
            labels=["runtime"],
        )
        for runtime, count in gpu.items():
            created = self._created[("gpu-containers", runtime)]
            containers.add_metric([runtime], count, created=created)
        yield containers
