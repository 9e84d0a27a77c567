"""The server's periodic audit (SPEC §6): `gpu-webhook serve --audit-interval SECONDS`.

A background task, off the request path: every interval it lists and evaluates what runs
with the policy snapshot admission uses (and the node inventory and DRA claims as they are),
publishes the findings as policy reports and records the outcome in `store.audit` for
/metrics and /audit. Its cost is bounded: pages of PAGE_SIZE objects with a pause between
pages (API load), one page in memory at a time, evaluation in slices that yield to the event
loop, and with several replicas only the one holding the audit lease works (sources/lease).
A failure (an unreachable API server, a 403, a missing report CRD) is logged and counted, and
the next interval tries again: admission and readiness never depend on it. A run that could not
list a kind (403 on Pods, say) is such a failure: it publishes nothing and leaves the figures of
the last complete run, since a partial read must never erase what it could not read (the
reports of that kind's findings, the metrics).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable

from kubernetes.aio.client import ApiClient

from webhook.core.audit.findings import AuditResult
from webhook.core.audit.reports import (
    DEFAULT_OWNER,
    FORMATS,
    build_reports,
    check_owner,
    finding_counts,
)
from webhook.core.config.model import WebhookConfig
from webhook.sources.audit import AuditError, AuditOptions, client_fetch, run_audit
from webhook.sources.kubeapi import close, load_configuration, sender
from webhook.sources.lease import AuditLease
from webhook.sources.reports import ReportsUnavailable, publish
from webhook.sources.store import AuditStatus, PolicyStore

log = logging.getLogger(__name__)

# Pages of 100 objects, 0.1 s apart: at most 10 lists/s from one replica, and each page is
# parsed on the event loop admission shares (json.loads of 500 running pods, ~2-5 MB, holds
# it for tens of milliseconds; 100 pods, a fifth of that). bench/bench_audit.py measures it.
PAGE_SIZE = 100
PAGE_PAUSE = 0.1
FIRST_RUN_DELAY = 60.0  # after start-up, once the policies synced; capped by the interval
READY_POLL = 0.5


class Auditor:
    """Runs the audit every `interval` seconds until cancelled; never raises."""

    def __init__(
        self,
        store: PolicyStore,
        config: WebhookConfig,
        *,
        interval: float,
        report_format: str | None = "wgpolicyk8s",
        kubeconfig: str | None = None,
        api_factory: Callable[[], Awaitable[ApiClient]] | None = None,
        page_size: int = PAGE_SIZE,
        page_pause: float = PAGE_PAUSE,
        first_run_delay: float = FIRST_RUN_DELAY,
        namespace: str | None = None,
        lease: AuditLease | None = None,
        report_owner: str = DEFAULT_OWNER,
    ) -> None:
        if report_format is not None and report_format not in FORMATS:
            raise ValueError(f"unknown report format {report_format!r}: use {', '.join(FORMATS)}")
        self.store = store
        self.config = config
        self.interval = interval
        self.format = FORMATS[report_format] if report_format else None
        # The installation whose reports this auditor writes, replaces and deletes.
        self.report_owner = check_owner(report_owner)
        self._kubeconfig = kubeconfig
        self._api_factory = api_factory
        # namespace: audit (and report on) one namespace only; None: the whole cluster.
        self.options = AuditOptions(namespace=namespace, page_size=page_size, page_pause=page_pause)
        self._first_delay = min(first_run_delay, interval)
        self.status = store.audit = AuditStatus(
            interval=interval, report_format=report_format, report_owner=self.report_owner
        )
        # One client for every run (connections and TLS set up once), dropped after a failure
        # so the next run starts afresh (rotated credentials, a moved API server).
        self._api: ApiClient | None = None
        # With several replicas, the one holding the lease audits (None: always audit).
        self.lease = lease
        self._lease_problem: str | None = None

    async def run(self) -> None:
        # Jitter keeps the replicas of a Deployment from auditing in step.
        await asyncio.sleep(self._first_delay * random.uniform(0.5, 1.0))
        while not self.store.ready:  # an audit without the policies in force would say nothing
            await asyncio.sleep(READY_POLL)
        try:
            while True:
                await self.run_once()
                await asyncio.sleep(self.interval * random.uniform(0.9, 1.0))
        finally:
            await self.close()

    async def close(self) -> None:
        api, self._api = self._api, None
        if api is not None:
            await close(api)

    async def _connect(self) -> ApiClient:
        if self._api_factory is not None:
            return await self._api_factory()
        return ApiClient(await load_configuration(self._kubeconfig))

    async def run_once(self) -> bool:
        """One audit and report update; True when both succeeded. Never raises."""
        status = self.status
        if not self.store.ready:
            status.last_error = "skipped: the policies have not synced yet"
            log.info("Audit skipped: the policies have not synced yet")
            return False
        try:
            if self._api is None:
                self._api = await self._connect()
            api = self._api
            if self.lease is not None and not await self._take_lease(api):
                return True
            status.runs += 1
            run = await run_audit(
                client_fetch(api, self.options.request_timeout),
                self.store.current,
                self.config,
                inventory=self.store.inventory,
                claims=self.store.claims,
                options=self.options,
            )
            result = run.result
            if run.unread:
                for note in result.notes:
                    log.info("Audit: %s", note)
                return self._failed(
                    f"incomplete, nothing published: {'; '.join(run.unread)}; the reports and "
                    "figures of the last complete run are kept"
                )
            status.last_duration = run.seconds
            status.workloads, status.pods, status.requests = (
                result.workloads,
                result.pods,
                run.requests,
            )
            status.denied, status.changed = len(result.denied), len(result.changed)
            status.findings = finding_counts(result)
            status.unknown_runtimes = dict(result.runtime_unknown)
            for note in result.notes:
                log.info("Audit: %s", note)
            log.info(
                "Audit: %d workload(s) and %d pod(s) in %.1f s with %d list request(s): %d "
                "owner(s) would be denied, %d would change",
                result.workloads,
                result.pods,
                run.seconds,
                run.requests,
                status.denied,
                status.changed,
            )
            status.last_success_unix = time.time()
            status.last_error = None
            if self.format is not None:
                await self._publish(api, result)
        except asyncio.CancelledError:
            raise
        except AuditError as exc:
            await self.close()
            return self._failed(str(exc))
        except Exception as exc:  # the client's network errors, timeouts, a bug: never fatal
            await self.close()
            return self._failed(f"{type(exc).__name__}: {exc}")
        return not status.report_errors

    async def _take_lease(self, api: ApiClient) -> bool:
        """Whether this replica audits now (it holds the lease, or the lease is unusable)."""
        assert self.lease is not None
        verdict = await self.lease.acquire(sender(api))
        self.status.lease_holder = verdict.holder
        if not verdict.audit:
            self.status.skipped_runs += 1
            log.info("Audit skipped: %s", verdict.reason)
            return False
        if verdict.reason != self._lease_problem and verdict.reason:
            log.warning("Audit: %s", verdict.reason)  # once per distinct problem
        self._lease_problem = verdict.reason or None
        return True

    async def _publish(self, api: ApiClient, result: AuditResult) -> None:
        """Replace the reports; a report failure leaves the audit's own figures standing."""
        assert self.format is not None
        status = self.status
        reports = build_reports(result, self.format, int(time.time()), owner=self.report_owner)
        try:
            published = await publish(
                sender(api),
                self.format,
                reports,
                namespace=self.options.namespace,
                owner=self.report_owner,
            )
        except ReportsUnavailable as exc:
            status.report_errors = [str(exc)]
        else:
            status.reports_written = published.written
            status.reports_deleted = published.deleted
            status.report_errors = published.errors
        for error in status.report_errors:
            log.warning("Audit reports: %s", error)

    def _failed(self, message: str) -> bool:
        self.status.failures += 1
        self.status.last_error = message
        log.warning("Audit failed: %s; trying again in %g s", message, self.interval)
        return False
