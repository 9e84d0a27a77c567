"""Holder of the current immutable PolicySet snapshot, swapped atomically by a policy source."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from webhook.policyset import PolicySet


@dataclass
class StoreStats:
    """Counters a policy source updates and /metrics reads."""

    syncs: int = 0
    watch_restarts: int = 0
    errors: int = 0
    last_sync_monotonic: float | None = None
    last_error: str | None = None


@dataclass
class PolicyStore:
    """The request path reads `current` (one attribute read, never blocks); sources call `replace`.

    Readiness means "policies synced at least once": a source calls `replace` only after a
    successful full list (API server) or directory load (file source).
    """

    current: PolicySet = field(default_factory=PolicySet.empty)
    stats: StoreStats = field(default_factory=StoreStats)

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
