"""One replica audits at a time: a coordination.k8s.io/v1 Lease taken before each audit.

The webhook runs as several replicas (the chart's default is 2); without this each would list
every Pod and rewrite the same reports each interval. Before an audit a replica takes the Lease
(create it, or update it with the resourceVersion it read, so two replicas racing for it get
one 409 Conflict): when it is free, expired (renewTime + leaseDurationSeconds in the past) or
already its own. The duration covers one and a half intervals, so the replica that holds it
keeps it by auditing, and another one takes over when the holder has stopped (a rollout, a
lost node). This is the Lease protocol of client-go's leaderelection (resourcelock
LeaseLock: holderIdentity, leaseDurationSeconds, acquireTime, renewTime, leaseTransitions),
checked once per audit instead of continuously renewed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from webhook.sources.kubeapi import Send, api_error

PATH = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


@dataclass(frozen=True)
class Verdict:
    audit: bool  # this replica audits now
    holder: str  # who holds the lease after the attempt
    reason: str = ""  # why not, or why without a lease


def micro_time(moment: datetime) -> str:
    """meta/v1 MicroTime: RFC 3339 with microseconds, as the API server writes it."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


class AuditLease:
    def __init__(self, namespace: str, name: str, identity: str, interval: float) -> None:
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration = math.ceil(interval * 1.5)

    async def acquire(self, send: Send, now: datetime | None = None) -> Verdict:
        """Take (or keep) the lease. A lease the credentials may not read or write (403) or a
        cluster without the API (404) is no reason to stop auditing: then every replica
        audits, as without a lease, and the reason says so."""
        now = now or datetime.now(UTC)
        collection = PATH.format(namespace=self.namespace)
        # coordination.k8s.io/v1 is served by every supported cluster (GA in 1.14): a 404 is
        # a lease nobody created yet.
        status, body = await send("GET", f"{collection}/{self.name}", (), None)
        spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.duration,
            "renewTime": micro_time(now),
        }
        if status == 404:
            spec["acquireTime"] = micro_time(now)
            spec["leaseTransitions"] = 0
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": spec,
            }
            status, body = await send("POST", collection, (), lease)
            return self._answer(status, body, "another replica created the lease first")
        if status != 200:
            return self._unusable(status, body)
        current = json.loads(body)
        held = current.get("spec") or {}
        holder = held.get("holderIdentity") or ""
        renewed = _parse(held.get("renewTime"))
        duration = held.get("leaseDurationSeconds")
        expired = (
            renewed is None
            or not isinstance(duration, int)
            or (now - renewed).total_seconds() > duration
        )
        if holder and holder != self.identity and not expired:
            return Verdict(False, holder, f"replica {holder} holds the audit lease")
        if holder != self.identity:
            spec["acquireTime"] = micro_time(now)
            spec["leaseTransitions"] = int(held.get("leaseTransitions") or 0) + 1
        else:
            spec["acquireTime"] = held.get("acquireTime") or micro_time(now)
            spec["leaseTransitions"] = int(held.get("leaseTransitions") or 0)
        updated = {**current, "spec": {**held, **spec}}
        status, body = await send("PUT", f"{collection}/{self.name}", (), updated)
        return self._answer(status, body, "another replica took the lease first")

    def _answer(self, status: int, body: bytes, lost: str) -> Verdict:
        if 200 <= status < 300:
            return Verdict(True, self.identity)
        if status == 409:
            return Verdict(False, "", lost)
        return self._unusable(status, body)

    def _unusable(self, status: int, body: bytes) -> Verdict:
        error = api_error(status, None, body)
        return Verdict(
            True,
            self.identity,
            f"cannot use the audit lease {self.namespace}/{self.name} ({error}); auditing "
            "anyway (grant get, create and update on leases: the chart's audit Role does)",
        )
