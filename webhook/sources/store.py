"""Holder of the current immutable PolicySet snapshot, swapped atomically by a policy source."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from webhook.core.claims import ClaimIndex
from webhook.core.policyset import PolicySet
from webhook.core.rules.cuda import NodeInventory

log = logging.getLogger(__name__)


@dataclass
class StoreStats:
    """Counters a policy source updates and /metrics reads."""

    syncs: int = 0
    watch_restarts: int = 0
    errors: int = 0
    last_sync_monotonic: float | None = None
    last_error: str | None = None
    # The source's current problem (None once a load succeeds again): /policies reports it, as
    # the policies in force are then the last good set, not what the source holds now.
    source_error: str | None = None


@dataclass
class PolicyStore:
    """The request path reads `current` (one attribute read, never blocks); sources call `replace`.

    Readiness means "policies synced at least once": a source calls `replace` only after a
    successful full list (API server) or directory load (file source).
    """

    current: PolicySet = field(default_factory=PolicySet.empty)
    stats: StoreStats = field(default_factory=StoreStats)
    # Other cluster snapshots, each swapped whole by its source; None: not known (not watched,
    # not readable). They never affect readiness.
    inventory: NodeInventory | None = None
    claims: ClaimIndex | None = None

    @property
    def ready(self) -> bool:
        return self.stats.syncs > 0

    def replace(self, policies: PolicySet) -> None:
        # A single attribute assignment is atomic for readers on the event loop and in threads.
        self.current = policies
        self.stats.syncs += 1
        self.stats.last_sync_monotonic = time.monotonic()

    def seconds_since_sync(self) -> float | None:
        last = self.stats.last_sync_monotonic
        return None if last is None else time.monotonic() - last


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
