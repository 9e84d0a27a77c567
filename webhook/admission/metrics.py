"""Prometheus metrics of the admission server: per-app registry, per-review counters, gauges.

The per-review counters are admission/review_counts.py, the gauges read at scrape time
admission/gauges.py; here the registry that holds them and the registry lookups' metrics.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram

from webhook.admission.decisions import DecisionCache
from webhook.admission.gauges import StateCollector
from webhook.admission.review_counts import ReviewCounts
from webhook.core.config.model import WebhookConfig
from webhook.registry.resolver import ImageResolver
from webhook.registry.results import STATUSES
from webhook.sources.store import PolicyStore
from webhook.tls.certs import CertReloader

LOOKUP_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


@dataclass
class Metrics:
    """A per-app registry: two apps in one process (tests) never share counters."""

    registry: CollectorRegistry
    counts: ReviewCounts
    rejected: Counter
    image_lookups: Counter
    image_lookup_latency: Histogram

    def image_lookup_done(self, result: str, seconds: float) -> None:
        """One registry lookup ended with `result` (a LookupResult status: a bounded set)."""
        self.image_lookups.labels(result if result in STATUSES else "other").inc()
        if seconds > 0:
            self.image_lookup_latency.observe(seconds)

    @classmethod
    def create(
        cls,
        store: PolicyStore,
        reloader: CertReloader | None,
        config: WebhookConfig | None = None,
        images: ImageResolver | None = None,
        decisions: DecisionCache | None = None,
    ) -> Metrics:
        registry = CollectorRegistry(auto_describe=True)
        registry.register(StateCollector(store, reloader, config, images, decisions))
        counts = ReviewCounts()
        registry.register(counts)
        return cls(
            registry=registry,
            counts=counts,
            rejected=Counter(
                "gpu_webhook_rejected_requests",
                "Requests refused before evaluation (HTTP 400/413), by endpoint and status.",
                ["endpoint", "status"],
                registry=registry,
            ),
            image_lookups=Counter(
                "gpu_webhook_image_lookups",
                "Registry lookups of image configurations, by result (found, no-cuda, refused, "
                "unauthorized, not-found, unreachable, timeout, invalid, busy).",
                ["result"],
                registry=registry,
            ),
            image_lookup_latency=Histogram(
                "gpu_webhook_image_lookup_duration_seconds",
                "Time one registry lookup took (token, manifests, config), cache misses only.",
                buckets=LOOKUP_BUCKETS,
                registry=registry,
            ),
        )
