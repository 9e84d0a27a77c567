"""The /mutate and /validate handler: body, decision cache, decision, metrics, per-review log."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import web

from webhook.admission.body import plain, read_body
from webhook.admission.decide import decide, read_snapshots
from webhook.admission.decisions import CachedAnswer, normalized_key, split_uid
from webhook.admission.jsoncodec import std_dumps
from webhook.admission.reviews import (
    AdmissionRequest,
    Allowed,
    ReviewDecodeError,
    decode_review,
    denied_response,
    encode_allowed,
)
from webhook.admission.state import STATE, Outcome, WebhookState
from webhook.core.kinds.builtin import BUILTIN_KINDS

# The logger keeps the name it had when this was part of app.py: log lines and filters name it.
log = logging.getLogger("webhook.admission.app")
review_log = logging.getLogger("webhook.review")

# Metric label values: the registry's built-in kinds (operators included) and ConfigMap; a kind
# added in the config counts as "other", so labels stay bounded by the code, not the input.
WORKLOAD_KINDS = frozenset({"ConfigMap", *(k.kind for k in BUILTIN_KINDS)})
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})


def make_review_handler(
    endpoint: str,
) -> Callable[[web.Request], Coroutine[Any, Any, web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        state = request.app[STATE]
        state.in_flight += 1
        try:
            return await _review(request, state)
        finally:
            state.in_flight -= 1

    async def _review(request: web.Request, state: WebhookState) -> web.Response:
        body = await read_body(request, state.metrics, endpoint)
        # Compiled, the bytes check is a type test; isinstance of aiohttp's (interpreted) class
        # is a generic one (~1k instructions).
        if not isinstance(body, bytes):
            return body
        start = time.perf_counter()
        snapshots = read_snapshots(state)
        cache = state.decisions
        split = None
        # Only objects named by the API server repeat: the pods a ReplicaSet, Job or DaemonSet
        # creates (`generateName`). Others pay one byte search, nothing more.
        if cache is not None and _GENERATED not in body:
            cache = None
        if cache is not None:
            cache.check_generation(snapshots)
            split = split_uid(body)
            if split is not None:
                hit = cache.get(endpoint, split[0])
                if hit is not None:
                    cache.count(True)
                    return _cached(state, endpoint, hit, split[1], start)
        try:
            data = state.codec.loads(body)
        # Each except names its own variable: mypyc gives a name one type per async function.
        except (ValueError, RecursionError) as exc:
            # orjson.JSONDecodeError and json.JSONDecodeError are ValueErrors; so is bad UTF-8.
            state.metrics.rejected.labels(endpoint, "400").inc()
            return plain(400, f"request body is not valid JSON: {exc}")
        try:
            req = decode_review(data)
        except ReviewDecodeError as bad:
            state.metrics.rejected.labels(endpoint, "400").inc()
            return plain(400, f"request body is not an AdmissionReview: {bad}")
        normal = None
        if cache is not None:
            normal = _normalized_key(state, endpoint, req, data)
            hit = cache.get(endpoint, normal) if normal is not None else None
            cache.count(hit is not None)
            if hit is not None:
                return _cached(state, endpoint, hit, req.uid.encode(), start, req.name)
        outcome = await decide(state, endpoint, req, snapshots)
        response = outcome.response
        try:
            if isinstance(response, Allowed):
                payload = encode_allowed(req.api_version, req.uid, response, state.codec.dumps)
            else:
                payload = state.codec.dumps(response)
        except (TypeError, ValueError) as unencodable:
            # Unreachable for well-formed decisions; kept so an encoder surprise is a denial.
            log.error("cannot encode the response for uid %s: %s", req.uid, unencodable)
            outcome = Outcome(
                denied_response(req, f"internal error encoding the response: {unencodable}"),
                "error",
                0,
                0,
                cacheable=False,
            )
            payload = std_dumps(outcome.response)
        # Metric labels from request data are bounded, or any client could explode cardinality.
        kind = req.kind
        operation = req.operation
        labels = (
            kind if kind in WORKLOAD_KINDS else "other",
            operation if operation in OPERATIONS else "other",
            outcome.result,
        )
        store = cache is not None and outcome.cacheable
        # The log line's fields only when a line is written or the answer is kept.
        log_on = review_log.isEnabledFor(logging.INFO)
        fields = _fields(endpoint, req, outcome) if log_on or store else None
        if store and cache is not None and fields is not None:
            what: dict[str, Any] = {
                "labels": labels,
                "mutation_kinds": outcome.mutation_kinds,
                "fields": tuple(fields.items()),
                "gpu_containers": outcome.gpu_containers,
                "placements": outcome.placements,
                "violations": outcome.violations,
                "cuda_unknown": outcome.cuda_unknown,
            }
            uid = req.uid.encode()
            # The byte key only if the uid it split off is the one the review was decoded with.
            if split is not None and split[1] == uid:
                cache.put(endpoint, split[0], uid, payload, **what)
            # The name-blind key of /validate only for an answer that names nothing.
            plain_allowed = outcome.result == "allowed" and not outcome.warnings
            if normal is not None and (endpoint == "mutate" or plain_allowed):
                cache.put(endpoint, normal, uid, payload, **what)
        _done(state, endpoint, labels, outcome, fields if log_on else None, req.uid, start)
        return web.Response(body=payload, content_type="application/json")

    return handle


def _fields(endpoint: str, req: AdmissionRequest, outcome: Outcome) -> dict[str, Any]:
    """The per-review log line's fields but its duration."""
    fields: dict[str, Any] = {
        "endpoint": endpoint,
        "uid": req.uid,
        "kind": req.kind,
        "namespace": req.namespace,
        "name": req.name,
        "operation": req.operation,
    }
    # `kubectl debug` (pods/ephemeralcontainers) is an UPDATE: say which one it was.
    if req.sub_resource:
        fields["subResource"] = req.sub_resource
    fields["user"] = req.username
    fields["dryRun"] = req.dry_run
    response = outcome.response
    fields["allowed"] = isinstance(response, Allowed) or response["response"]["allowed"]
    fields["result"] = outcome.result
    fields["mutations"] = outcome.mutations
    fields["warnings"] = outcome.warnings
    return fields


_GENERATED = b'"generateName":"'


def _normalized_key(
    state: WebhookState, endpoint: str, req: AdmissionRequest, data: Any
) -> bytes | None:
    """A Pod review's key without what the API server sets per pod (admission/decisions.py)."""
    if req.kind != "Pod" or req.group:
        return None
    # One key each, one encoding each: /mutate with the names (its notes name the pod),
    # /validate without (only plain allowed answers are kept: a denial names its pod, and a
    # replica's validating call always carries a new name).
    return normalized_key(data, endpoint, state.codec.dumps, names=endpoint == "mutate")


def _cached(
    state: WebhookState,
    endpoint: str,
    hit: CachedAnswer,
    uid: bytes,
    start: float,
    name: str | None = None,
) -> web.Response:
    """The answer to a body seen before but for its uid (and `name`), with this uid; logged
    and counted as the full path would."""
    payload = hit.response(uid)
    fields = None
    if review_log.isEnabledFor(logging.INFO):
        fields = dict(hit.fields)
        if name is not None:
            fields["name"] = name
    _done(state, endpoint, hit.labels, hit, fields, uid.decode(), start)
    return web.Response(body=payload, content_type="application/json")


def _done(
    state: WebhookState,
    endpoint: str,
    labels: tuple[str, str, str],
    answer: Outcome | CachedAnswer,
    fields: dict[str, Any] | None,
    uid: str,
    start: float,
) -> None:
    """Metrics and the per-review log line (of `fields`; None: not logged) of one review."""
    elapsed = time.perf_counter() - start
    kind, operation, result = labels
    state.metrics.counts.answered(
        endpoint,
        kind,
        operation,
        result,
        elapsed,
        answer.mutation_kinds,
        answer.gpu_containers,
        answer.placements,
        answer.violations,
        answer.cuda_unknown,
    )
    if fields is not None:
        # `fields` is this review's own dict (a copy for a cached answer): completed in place.
        line = fields
        line["uid"] = uid
        line["durationMs"] = round(elapsed * 1000, 3)
        if state.review_sink is None:
            review_log.info("review", extra={"fields": line})
        else:
            state.review_sink(line)
