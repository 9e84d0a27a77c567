"""The per-review counters and latency histogram as plain numbers, exported at scrape time."""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from webhook.core.audit.findings import SOURCE, policy_name
from webhook.core.audit.reports import OTHER
from webhook.core.placement.injection import PLACEMENT_RULES
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
# gpu_webhook_cuda_unknown_total{reason}: lookups off, not asked or nothing failed
# ("not-known"), a lookup's failure (LookupResult status), or no answer within the budget.
CUDA_UNKNOWN_REASONS = frozenset(
    {"not-known", "lookups-off", SLOW, *(s for s in STATUSES if s != FOUND)}
)
_PLACEMENTS = frozenset(PLACEMENT_RULES)


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
        # (policy, rule) label values, placement rule, unknown-CUDA reason -> count.
        self.violations: dict[tuple[str, str], int] = {}
        self.placements: dict[str, int] = {}
        self.cuda_unknown: dict[str, int] = {}
        self.gpu_containers = 0
        self._gpu_created = time.time()
        # (configmap, rule) of a violation -> its label values, once worked out.
        self._violation_labels: dict[tuple[str, str], tuple[str, str]] = {}
        self._policies: set[str] = set()
        # Per endpoint: one count per bucket (the last one +Inf), then the sum of the seconds.
        self.latency: dict[str, list[float]] = {}
        # When each series began: keyed by the review labels, the endpoint (latency) or
        # ("mutation", kind).
        self._created: dict[object, float] = {}

    def review_done(
        self, endpoint: str, kind: str, operation: str, result: str, seconds: float
    ) -> None:
        key = (endpoint, kind, operation, result)
        count = self.reviews.get(key)
        if count is None:
            count = 0
            self._created[key] = time.time()
        self.reviews[key] = count + 1
        row = self.latency.get(endpoint)
        if row is None:
            row = self.latency[endpoint] = [0.0] * (len(LATENCY_BUCKETS) + 2)
            self._created[endpoint] = time.time()
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
        gpu_containers: int,
        placements: tuple[str, ...],
        violations: tuple[tuple[str, str], ...],
        cuda_unknown: tuple[str, ...],
    ) -> None:
        """What one review's decision counts: GPU containers, placements by rule, denied
        violations by (configmap, rule), unknown CUDA versions by reason."""
        self.gpu_containers += gpu_containers
        for rule in placements:
            self._add(self.placements, rule if rule in _PLACEMENTS else OTHER, "placement")
        for reason in cuda_unknown:
            label = reason if reason in CUDA_UNKNOWN_REASONS else OTHER
            self._add(self.cuda_unknown, label, "cuda-unknown")
        for pair in violations:
            labels = self._violation_labels.get(pair)
            if labels is None:
                labels = self._violation_label(*pair)
            count = self.violations.get(labels)
            if count is None:
                count = 0
                self._created[("violation", labels)] = time.time()
            self.violations[labels] = count + 1

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

    def _add(self, table: dict[str, int], label: str, series: str) -> None:
        count = table.get(label)
        if count is None:
            count = 0
            self._created[(series, label)] = time.time()
        table[label] = count + 1

    def collect(self) -> Iterable[Metric]:
        reviews = CounterMetricFamily(
            "gpu_webhook_reviews",
            "Admission reviews answered, by endpoint, kind, operation and result.",
            labels=["endpoint", "kind", "operation", "result"],
        )
        for key, count in list(self.reviews.items()):
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
        for kind, count in list(self.mutations.items()):
            mutations.add_metric([kind], count, created=self._created[("mutation", kind)])
        yield mutations
        violations = CounterMetricFamily(
            "gpu_webhook_violations",
            "Violations in the denials /validate returned, by CRL policy (ConfigMap name; "
            "gpu-admission-webhook for the webhook's own rules; 'other' past the first "
            f"{MAX_POLICY_LABELS}) and rule.",
            labels=["policy", "rule"],
        )
        for labels, count in list(self.violations.items()):
            created = self._created[("violation", labels)]
            violations.add_metric(list(labels), count, created=created)
        yield violations
        placements = CounterMetricFamily(
            "gpu_webhook_placements",
            "Node affinity parts /mutate injected, by the rule that set them (backward, "
            "minorVersion, forward, architecture-floor, compute).",
            labels=["rule"],
        )
        for rule, count in list(self.placements.items()):
            placements.add_metric([rule], count, created=self._created[("placement", rule)])
        yield placements
        unknown = CounterMetricFamily(
            "gpu_webhook_cuda_unknown",
            "GPU containers /mutate found no CUDA version for where placement would use it, "
            "by reason (not-known, lookups-off, or the registry lookup's result).",
            labels=["reason"],
        )
        for reason, count in list(self.cuda_unknown.items()):
            unknown.add_metric([reason], count, created=self._created[("cuda-unknown", reason)])
        yield unknown
        yield CounterMetricFamily(
            "gpu_webhook_gpu_containers",
            "GPU containers in the objects /mutate evaluated.",
            value=self.gpu_containers,
            created=self._gpu_created,
        )
