"""Gauges and counters read at scrape time: policies, reflectors, audit, caches, certificate."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from webhook.admission.decisions import DecisionCache
from webhook.core.config.model import WebhookConfig
from webhook.core.outcome.decision import CUDA
from webhook.registry.resolver import ImageResolver
from webhook.sources.store import AuditStatus, PolicyStore
from webhook.tls.certs import CertReloader


class StateCollector(Collector):
    """Gauges read from the store and the certificate at scrape time, never stale."""

    def __init__(
        self,
        store: PolicyStore,
        reloader: CertReloader | None,
        config: WebhookConfig | None,
        images: ImageResolver | None = None,
        decisions: DecisionCache | None = None,
    ) -> None:
        self._store = store
        self._reloader = reloader
        self._config = config
        self._images = images
        self.decisions = decisions

    def collect(self) -> Iterable[Metric]:
        policies = self._store.current
        stats = self._store.stats
        yield GaugeMetricFamily(
            "gpu_webhook_policies_loaded",
            "CRL policies in force (one per resource key).",
            value=len(policies.by_key),
        )
        yield GaugeMetricFamily(
            "gpu_webhook_invalid_configmaps",
            "CRL ConfigMaps skipped because they are invalid (see /policies).",
            value=len(policies.invalid),
        )
        yield GaugeMetricFamily(
            "gpu_webhook_policy_conflicts",
            "Resource keys defined by more than one enabled CRL ConfigMap.",
            value=len(policies.conflicts),
        )
        yield GaugeMetricFamily(
            "gpu_webhook_ready",
            "1 once policies synced at least once.",
            value=int(self._store.ready),
        )
        yield CounterMetricFamily(
            "gpu_webhook_policy_syncs", "Policy snapshots published.", value=stats.syncs
        )
        yield CounterMetricFamily(
            "gpu_webhook_watch_restarts",
            "ConfigMap watches restarted with a fresh list (410 Gone).",
            value=stats.watch_restarts,
        )
        yield CounterMetricFamily(
            "gpu_webhook_policy_source_errors",
            "Failed lists, watches or file reloads of the policy source.",
            value=stats.errors,
        )
        since = self._store.seconds_since_sync()
        if since is not None:
            yield GaugeMetricFamily(
                "gpu_webhook_seconds_since_last_sync",
                "Seconds since the policy snapshot was last replaced.",
                value=since,
            )
        yield from _reflector_metrics(self._store, self._config)
        if self._store.audit is not None:
            yield from _audit_metrics(self._store.audit)
        if self._images is not None:
            yield GaugeMetricFamily(
                "gpu_webhook_image_cache_entries",
                "Images (and digests) in the registry lookup cache, answers and failures.",
                value=self._images.size,
            )
            yield GaugeMetricFamily(
                "gpu_webhook_image_lookups_in_flight",
                "Registry lookups running now.",
                value=self._images.in_flight,
            )
            cache = CounterMetricFamily(
                "gpu_webhook_image_cache_requests",
                "Images (per architecture) reviews asked the registry lookup cache for, by "
                "result: hit (answered from the cache, a failure too) or miss.",
                labels=["result"],
            )
            cache.add_metric(["hit"], self._images.cache_hits)
            cache.add_metric(["miss"], self._images.cache_misses)
            yield cache
            yield CounterMetricFamily(
                "gpu_webhook_image_lookups_over_budget",
                "Images a review got no registry answer for within the lookup budget.",
                value=self._images.over_budget,
            )
            yield CounterMetricFamily(
                "gpu_webhook_image_lookups_late",
                "Registry lookups that answered after the budget (cached for later pods).",
                value=self._images.late_answers,
            )
        decisions = self.decisions
        if decisions is not None:
            yield CounterMetricFamily(
                "gpu_webhook_decision_cache_hits",
                "Reviews answered from the decision cache (same body but for the uid).",
                value=decisions.hits,
            )
            yield CounterMetricFamily(
                "gpu_webhook_decision_cache_misses",
                "Reviews looked up in the decision cache and evaluated.",
                value=decisions.misses,
            )
            yield GaugeMetricFamily(
                "gpu_webhook_decision_cache_bytes",
                "Memory the decision cache accounts for (bounded by --decision-cache-mib).",
                value=decisions.size,
            )
        if self._reloader is not None:
            yield GaugeMetricFamily(
                "gpu_webhook_serving_certificate_expiry_timestamp_seconds",
                "Unix time when the serving certificate in force expires.",
                value=self._reloader.expiry_timestamp,
            )


def _reflector_metrics(store: PolicyStore, config: WebhookConfig | None) -> Iterable[Metric]:
    """Per watched kind (a bounded label: the kinds serve starts), and nodes per CUDA version
    (only versions present: bounded by the label values the cluster carries)."""
    labels = ["kind"]
    synced = GaugeMetricFamily(
        "gpu_webhook_reflector_synced", "1 once the kind was listed at least once.", labels=labels
    )
    objects = GaugeMetricFamily(
        "gpu_webhook_reflector_objects", "Objects kept after the projection.", labels=labels
    )
    restarts = CounterMetricFamily(
        "gpu_webhook_reflector_restarts",
        "Watches restarted with a fresh list (410 Gone).",
        labels=labels,
    )
    errors = CounterMetricFamily(
        "gpu_webhook_reflector_errors", "Failed lists or watches.", labels=labels
    )
    since = GaugeMetricFamily(
        "gpu_webhook_reflector_seconds_since_sync",
        "Seconds since the kind's snapshot was last published.",
        labels=labels,
    )
    for kind, stats in sorted(store.watched.items()):
        synced.add_metric([kind], int(stats.synced))
        objects.add_metric([kind], stats.objects or 0)
        restarts.add_metric([kind], stats.watch_restarts)
        errors.add_metric([kind], stats.errors)
        seconds = stats.seconds_since_sync()
        if seconds is not None:
            since.add_metric([kind], seconds)
    yield from (synced, objects, restarts, errors, since)
    if store.inventory is not None:
        nodes = GaugeMetricFamily(
            "gpu_webhook_nodes", "Nodes advertising each CUDA version.", labels=["cuda"]
        )
        cuda = store.inventory.to_json(config).get("cuda") or {}
        for version, count in sorted(cuda.items()):
            nodes.add_metric([str(version)], count)
        yield nodes


def _audit_metrics(audit: AuditStatus) -> Iterable[Metric]:
    """The periodic audit (SPEC §6): findings by policy, namespace and result (labels capped
    with an "other" bucket when the audit counted them), runs, last success and duration."""
    findings = GaugeMetricFamily(
        "gpu_webhook_audit_findings",
        "Owners (Deployments, jobs, standalone pods) with a finding in the last audit, by CRL "
        "policy, namespace and result (fail: would be denied; warn: pods would change).",
        labels=["policy", "namespace", "result"],
    )
    for (policy, namespace, result), count in sorted(audit.findings.items()):
        findings.add_metric([policy, namespace, result], count)
    yield findings
    yield CounterMetricFamily("gpu_webhook_audit_runs", "Audits started.", value=audit.runs)
    yield CounterMetricFamily(
        "gpu_webhook_audit_skipped_runs",
        "Audits left to the replica holding the audit lease.",
        value=audit.skipped_runs,
    )
    yield CounterMetricFamily(
        "gpu_webhook_audit_failures",
        "Audits that could not list the cluster (see the logs and /audit).",
        value=audit.failures,
    )
    if audit.last_success_unix is not None:
        yield GaugeMetricFamily(
            "gpu_webhook_audit_last_success_timestamp_seconds",
            "Unix time when the last audit finished.",
            value=audit.last_success_unix,
        )
    if audit.last_duration is not None:
        yield GaugeMetricFamily(
            "gpu_webhook_audit_duration_seconds",
            "How long the last audit took (listing and evaluation).",
            value=audit.last_duration,
        )
    objects = GaugeMetricFamily(
        "gpu_webhook_audit_objects", "Objects evaluated by the last audit.", labels=["type"]
    )
    objects.add_metric(["workload"], audit.workloads)
    objects.add_metric(["pod"], audit.pods)
    yield objects
    unknown = GaugeMetricFamily(
        "gpu_webhook_audit_unknown_runtimes",
        "Containers of the pods the last audit evaluated whose runtime version nothing told, by "
        "runtime (cuda, rocm, cann).",
        labels=["runtime"],
    )
    counts = {CUDA.lower(): 0}
    for runtime, count in audit.unknown_runtimes.items():
        counts[runtime.lower()] = count
    for runtime, count in counts.items():
        unknown.add_metric([runtime], count)
    yield unknown
    yield GaugeMetricFamily(
        "gpu_webhook_audit_report_errors",
        "Policy reports the last audit could not write or delete.",
        value=len(audit.report_errors),
    )
