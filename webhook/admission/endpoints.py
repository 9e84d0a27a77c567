"""The read-only endpoints: probes, /metrics, /policies, /inventory, /audit and /images."""

from __future__ import annotations

import logging
import time
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.exposition import generate_latest

from webhook.admission.body import plain
from webhook.admission.jsoncodec import std_dumps
from webhook.admission.state import STATE
from webhook.core.placement.gate import inventory_summary
from webhook.sources.store import PolicyStore

# The logger keeps the name it had when this was part of app.py: log lines and filters name it.
log = logging.getLogger("webhook.admission.app")


async def healthz(request: web.Request) -> web.Response:
    return plain(200, "ok")


async def readyz(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.shutting_down:
        return plain(503, "shutting down: draining connections, send reviews to other replicas")
    if not state.store.ready:
        detail = state.store.stats.last_error or "waiting for the first list of CRL ConfigMaps"
        return plain(503, f"policies not synced yet: {detail}")
    # Every enabled source's first list too (SPEC §4), bounded: a replica that answered before
    # the Node list arrived would place pods on a guessed label scheme.
    pending = state.store.pending_kinds()
    if pending:
        waited = time.monotonic() - state.started
        names = ", ".join(pending)
        if waited < state.ready_timeout:
            return plain(503, f"waiting for the first list of {names} ({waited:.0f} s)")
        if not state.ready_timeout_logged:
            state.ready_timeout_logged = True
            log.warning(
                "Ready without the first list of %s after %.0f s: placement is not enforced "
                "until it arrives",
                names,
                state.ready_timeout,
            )
        return plain(
            200,
            f"ok; placement not enforced yet: {names} not listed after {state.ready_timeout:.0f} s",
        )
    return plain(200, "ok")


async def metrics(request: web.Request) -> web.Response:
    registry = request.app[STATE].metrics.registry
    return web.Response(
        body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


async def policies(request: web.Request) -> web.Response:
    state = request.app[STATE]
    document = state.store.current.to_json()
    document["ready"] = state.store.ready
    error = state.store.stats.source_error
    if error is not None:
        # The policy files (or the cluster list) are broken right now: say so, and that the
        # policies above are the last good set, still in force.
        document["sourceError"] = error
        document["inForce"] = (
            "the last policies loaded successfully" if state.store.ready else "none (not ready)"
        )
    document["sources"] = _sources(state.store)
    document["nodeInventory"] = state.store.snapshot_status("Node")
    if state.decisions is not None:
        document["decisionCache"] = state.decisions.to_json()
    return web.Response(body=std_dumps(document), content_type="application/json")


def _sources(store: PolicyStore) -> dict[str, Any]:
    return {kind: stats.to_json() for kind, stats in sorted(store.watched.items())}


async def inventory(request: web.Request) -> web.Response:
    """What the webhook knows of the cluster: node inventory, DRA claims, sync state."""
    state = request.app[STATE]
    store = state.store
    nodes = store.snapshot_status("Node")
    if store.inventory is not None:
        nodes.update(store.inventory.to_json(state.config))
        # Other vendors' nodes by driver release (SPEC §13), as `review --nodes` says them.
        accelerators = inventory_summary(store.inventory, state.config)
        if accelerators:
            nodes["accelerators"] = accelerators
    templates = store.snapshot_status("ResourceClaimTemplate")
    claims = store.snapshot_status("ResourceClaim")
    if store.claims is not None:
        if templates["available"]:
            templates["templates"] = len(store.claims.templates)
        # The claim count beside the template count; why it is missing under resourceClaims.
        if claims["available"]:
            templates["claims"] = len(store.claims.claims)
    document = {
        "nodeInventory": nodes,
        "claimTemplates": templates,
        "resourceClaims": claims,
        "resourceSlices": store.snapshot_status("ResourceSlice"),
        "sources": _sources(store),
    }
    if "Namespace" in store.watched:
        # The RDMA runtime fix's input (SPEC §14): namespaces per Pod Security enforce level.
        levels = store.snapshot_status("Namespace")
        if store.namespace_levels is not None:
            counts: dict[str, int] = {}
            for level in store.namespace_levels.values():
                counts[level or "unlabelled"] = counts.get(level or "unlabelled", 0) + 1
            levels["podSecurityEnforce"] = dict(sorted(counts.items()))
        document["namespaceLevels"] = levels
    return web.Response(body=std_dumps(document), content_type="application/json")


async def audit(request: web.Request) -> web.Response:
    """The periodic audit's last outcome (SPEC §6); the findings are in the policy reports."""
    audit = request.app[STATE].store.audit
    document: dict[str, Any] = {"enabled": audit is not None}
    if audit is not None:
        document.update(audit.to_json())
    return web.Response(body=std_dumps(document), content_type="application/json")


async def images(request: web.Request) -> web.Response:
    """The registry lookup cache: image → CUDA, where it came from, age (SPEC §4 step 6)."""
    resolver = request.app[STATE].images
    document: Any = {"enabled": False} if resolver is None else resolver.to_json()
    return web.Response(body=std_dumps(document), content_type="application/json")
