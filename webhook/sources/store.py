"""Holder of the current immutable snapshots (policies, node inventory, DRA claim templates)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.core.config.model import WebhookConfig
from webhook.core.placement.inventory import NodeInventory
from webhook.core.policies.policyset import PolicySet
from webhook.core.workloads.claims import ClaimIndex

log = logging.getLogger(__name__)


@dataclass
class SourceStats:
    """Counters one source (a watched kind, or the policy files) updates; /metrics reads them."""

    kind: str = "ConfigMap"
    syncs: int = 0
    watch_restarts: int = 0
    errors: int = 0
    last_sync_monotonic: float | None = None
    last_error: str | None = None
    # The source's current problem (None once a load succeeds again): /policies reports it, as
    # the policies in force are then the last good set, not what the source holds now.
    source_error: str | None = None
    # Objects kept after the projection (None: not listed yet).
    objects: int | None = None
    # The kind cannot be read here (403: no RBAC; 404: the API group is not served), as
    # opposed to "not listed yet": placement then works as without the snapshot (SPEC §4).
    unavailable: bool = False

    @property
    def synced(self) -> bool:
        return self.syncs > 0

    def published(self) -> None:
        self.syncs += 1
        self.last_sync_monotonic = time.monotonic()

    def seconds_since_sync(self) -> float | None:
        last = self.last_sync_monotonic
        return None if last is None else time.monotonic() - last

    def to_json(self) -> dict[str, Any]:
        since = self.seconds_since_sync()
        return {
            "synced": self.synced,
            "objects": self.objects,
            "secondsSinceSync": None if since is None else round(since, 1),
            "restarts": self.watch_restarts,
            "errors": self.errors,
            "lastError": self.last_error,
        }


@dataclass
class AuditStatus:
    """The server's periodic audit as /metrics and /audit show it (SPEC §6)."""

    interval: float = 0.0
    report_format: str | None = None  # None: reports are not written
    report_owner: str | None = None  # the installation whose reports are written
    runs: int = 0
    failures: int = 0
    skipped_runs: int = 0  # another replica held the audit lease
    lease_holder: str | None = None
    last_success_unix: float | None = None
    last_duration: float | None = None
    last_error: str | None = None  # the last run's failure (None once a run succeeds)
    workloads: int = 0
    pods: int = 0
    requests: int = 0
    denied: int = 0  # owners that would be denied
    changed: int = 0
    # {(policy, namespace, result): owners}, labels already capped (core/audit/reports.py)
    findings: dict[tuple[str, str, str], int] = field(default_factory=dict)
    # The last audit's containers whose runtime version nothing told, by runtime (CUDA, ROCm,
    # CANN: AuditResult.runtime_unknown).
    unknown_runtimes: dict[str, int] = field(default_factory=dict)
    reports_written: int = 0
    reports_deleted: int = 0
    report_errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "intervalSeconds": self.interval,
            "reports": self.report_format or "off",
            "reportOwner": self.report_owner,
            "runs": self.runs,
            "failures": self.failures,
            "skippedRuns": self.skipped_runs,
            "leaseHolder": self.lease_holder,
            "lastSuccessUnix": self.last_success_unix,
            "lastDurationSeconds": self.last_duration,
            "lastError": self.last_error,
            "workloads": self.workloads,
            "pods": self.pods,
            "apiRequests": self.requests,
            "denied": self.denied,
            "changed": self.changed,
            "unknownRuntimes": self.unknown_runtimes,
            "reportsWritten": self.reports_written,
            "reportsDeleted": self.reports_deleted,
            "reportErrors": self.report_errors,
        }


# What admission does while a snapshot is missing (SPEC §4, §6).
_WITHOUT = {
    "Node": "CUDA placement uses the first label scheme, as without a node inventory",
    "ResourceClaimTemplate": "pods are evaluated as if their DRA claims requested no GPU",
    "ResourceClaim": "pods naming a ResourceClaim are evaluated as if it requested no GPU",
    "DeviceClass": "DRA device classes are known by their built-in names only, not by driver",
    "Namespace": "IPC_LOCK for RDMA is warned about, never added",
    "ResourceSlice": "nodes that only DRA ResourceSlices describe get no placement",
}

_NOT_LISTED_YET = (
    "CUDA and compute-capability placement are not enforced yet: nothing is injected until "
    "the first list of Nodes arrives"
)

# The policy source's stats kept their historical name.
StoreStats = SourceStats


@dataclass
class PolicyStore:
    """The request path reads `current` (one attribute read, never blocks); sources call `replace`.

    Readiness means "policies synced at least once": a source calls `replace` only after a
    successful full list (API server) or directory load (file source).
    """

    current: PolicySet = field(default_factory=PolicySet.empty)
    stats: SourceStats = field(default_factory=SourceStats)
    # Other cluster snapshots, each swapped whole by its source; None: not known (not watched,
    # not readable). They never affect readiness.
    inventory: NodeInventory | None = None
    claims: ClaimIndex | None = None
    # Namespace -> its pod-security.kubernetes.io/enforce label ("" when unlabelled), for the
    # RDMA runtime fix (SPEC §14).
    namespace_levels: Mapping[str, str] | None = None
    # The webhook config with a watched ConfigMap's image table (None: the config as loaded).
    config: WebhookConfig | None = None
    # Every kind a reflector watches, by kind ("ConfigMap", "Node", "ResourceClaimTemplate"):
    # /inventory, /policies and /metrics show their sync state.
    watched: dict[str, SourceStats] = field(default_factory=dict)
    # The periodic audit's last outcome (None: the audit is off).
    audit: AuditStatus | None = None

    @property
    def ready(self) -> bool:
        return self.stats.syncs > 0

    def pending_kinds(self) -> list[str]:
        """Watched kinds whose first list has not arrived yet, and which are not known to be
        unreadable (403/404): readiness waits for them, bounded (SPEC §4)."""
        return [
            kind
            for kind, stats in sorted(self.watched.items())
            if stats is not self.stats and not stats.synced and not stats.unavailable
        ]

    @property
    def inventory_pending(self) -> bool:
        """The node inventory is switched on but not listed yet: "not listed yet" is not
        "Nodes unreadable" — guessing a label scheme now would place pods on a scheme the
        nodes may not carry, so nothing is injected until the first list (SPEC §4)."""
        stats = self.watched.get("Node")
        return (
            self.inventory is None
            and stats is not None
            and not stats.synced
            and not stats.unavailable
        )

    def replace(self, policies: PolicySet) -> None:
        # A single attribute assignment is atomic for readers on the event loop and in threads.
        self.current = policies
        self.stats.published()

    def seconds_since_sync(self) -> float | None:
        return self.stats.seconds_since_sync()

    def snapshot_status(self, kind: str) -> dict[str, Any]:
        """Whether the snapshot of a watched kind ("Node", "ResourceClaimTemplate", ...) is in
        force, and if not, why: for /inventory and /policies."""
        # ResourceSlices feed the node inventory (SPEC §13), in force once they listed.
        snapshot: object = (
            self.inventory
            if kind in ("Node", "ResourceSlice")
            else self.namespace_levels
            if kind == "Namespace"
            else self.claims
        )
        stats = self.watched.get(kind)
        # Both DRA kinds fill the one ClaimIndex: a watched kind is in force once it listed.
        if snapshot is not None and (
            stats is None or kind in ("Node", "Namespace") or stats.synced
        ):
            return {"available": True}
        if stats is None:
            reason = (
                f"{kind} objects are not watched (a local run with --policies, or switched off "
                "in the webhook config)"
            )
        else:
            reason = stats.last_error or f"waiting for the first list of {kind} objects"
        effect = _WITHOUT[kind]
        if kind == "Node" and self.inventory_pending:
            effect = _NOT_LISTED_YET
        return {"available": False, "reason": reason, "effect": effect}

    def watch(self, kind: str) -> SourceStats:
        """The stats of a watched kind, registered so observability lists it (the CRL source
        shares the policy source's `stats`)."""
        stats = self.stats if kind == self.stats.kind else SourceStats(kind=kind)
        self.watched[kind] = stats
        return stats


def log_policy_changes(old: PolicySet | None, new: PolicySet, source: str) -> None:
    """Log what a snapshot changes (everything when `old` is None, the first load).

    Loaded policies, newly invalid ConfigMaps with their errors, and conflicts, so an admin
    sees each problem once when it appears rather than on every unrelated change.
    """
    first = old is None
    old = old or PolicySet.empty()
    loaded = {(lim.configmap, lim.key) for lim in new.limitations}
    if first or loaded != {(lim.configmap, lim.key) for lim in old.limitations}:
        names = ", ".join(f"{cm} ({key})" for cm, key in sorted(loaded)) or "none"
        log.info("Loaded %d CRL policies from %s: %s", len(loaded), source, names)
    old_invalid = set(old.invalid)
    for invalid in new.invalid:
        if invalid not in old_invalid:
            log.warning(
                "Skipping invalid CRL ConfigMap %s: %s", invalid.name, "; ".join(invalid.errors)
            )
    new_invalid = {i.name for i in new.invalid}
    for invalid in old.invalid:
        if invalid.name not in new_invalid:
            log.info("CRL ConfigMap %s is no longer invalid (fixed or removed)", invalid.name)
    old_conflicts = set(old.conflicts)
    for conflict in new.conflicts:
        if conflict not in old_conflicts:
            log.warning("Conflicting CRL ConfigMaps: %s", conflict.message())
