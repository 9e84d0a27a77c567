"""The aiohttp admission app: /mutate, /validate, probes, /metrics, /policies, background tasks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import traceback
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.exposition import generate_latest

from webhook.admission.body import HANDLER_ARGS, MAX_BODY_BYTES, plain, read_body
from webhook.admission.decisions import CachedAnswer, DecisionCache, normalized_key, split_uid
from webhook.admission.jsoncodec import JsonCodec, json_codec, std_dumps
from webhook.admission.metrics import Metrics
from webhook.admission.reviews import (
    AdmissionRequest,
    ReviewDecodeError,
    allowed_response,
    decode_review,
    denied_response,
    patched_response,
)
from webhook.admission.state import (
    CERT_RELOAD_INTERVAL,
    STATE,
    Evaluator,
    Outcome,
    PolicySource,
    ReviewSink,
    WebhookState,
)
from webhook.core.base.errors import WebhookError
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import Decision, evaluate
from webhook.core.kinds.builtin import BUILTIN_KINDS
from webhook.core.placement.inventory import NodeInventory
from webhook.registry.resolver import ImageResolver
from webhook.sources.store import PolicyStore
from webhook.tls.certs import CertReloader

# What evaluation sees while the node inventory's first list is still running (SPEC §4).
NOT_LISTED_YET = NodeInventory.not_listed_yet()

log = logging.getLogger(__name__)
review_log = logging.getLogger("webhook.review")

# Metric label values: the registry's built-in kinds (operators included) and ConfigMap; a kind
# added in the config counts as "other", so labels stay bounded by the code, not the input.
WORKLOAD_KINDS = frozenset({"ConfigMap", *(k.kind for k in BUILTIN_KINDS)})
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})


def _label(value: str, known: frozenset[str]) -> str:
    # Metric labels from request data are bounded, or any client could explode cardinality.
    return value if value in known else "other"


def _snapshots(state: WebhookState) -> tuple[Any, WebhookConfig, NodeInventory | None, Any]:
    """What an evaluation reads besides the review: policies, config, inventory, claims."""
    store = state.store
    return (
        store.current,
        # The config with a watched ConfigMap's image table, when there is one.
        store.config or state.config,
        # Cluster snapshots as they are now (None: not known); never fetched here.
        store.inventory if not store.inventory_pending else NOT_LISTED_YET,
        store.claims,
    )


def _evaluate(
    state: WebhookState,
    endpoint: str,
    req: AdmissionRequest,
    snapshots: tuple[Any, WebhookConfig, NodeInventory | None, Any],
    **images: Any,
) -> Decision:
    policies, config, inventory, claims = snapshots
    return state.evaluator(
        req.object,
        policies,
        config,
        kind=req.kind or None,
        group=req.group,
        namespace=req.namespace or None,
        operation=req.operation,
        sub_resource=req.sub_resource,
        old_object=req.old_object,
        inventory=inventory,
        claims=claims,
        # /validate returns no Pod or template warnings (the mutating call showed them).
        violations_only=endpoint == "validate",
        **images,
    )


async def _decide(
    state: WebhookState,
    endpoint: str,
    req: AdmissionRequest,
    snapshots: tuple[Any, WebhookConfig, NodeInventory | None, Any],
) -> Outcome:
    """Evaluate and build the response; every exception becomes a denial, never an HTTP 500."""
    if req.object is None or req.operation not in ("CREATE", "UPDATE"):
        return Outcome(allowed_response(req), "allowed", 0, 0)
    what = f"{req.kind or 'object'} {req.ref or '(unnamed)'}"
    lookup_warnings: list[str] = []
    failed: dict[str, str] | None = None
    try:
        decision = _evaluate(state, endpoint, req, snapshots)
        # Only images whose CUDA nothing else told reach a registry (SPEC §4 step 6), within
        # the budget; the evaluation runs again with what the lookups found.
        if decision.unresolved_images and state.images is not None:
            found = await state.images.resolve(decision.unresolved_images)
            lookup_warnings = found.warnings
            failed = found.failed
            if found.facts:
                decision = _evaluate(state, endpoint, req, snapshots, images=found.facts)
    except WebhookError as exc:
        # The object does not have the shape its kind requires: say so, as the API server would.
        return Outcome(denied_response(req, f"cannot evaluate {what}: {exc}"), "denied", 0, 0)
    except Exception as exc:
        # A 403 denial like any other (SPEC §7: a well-formed review never yields a 500); the
        # message says it is the webhook's fault, and failurePolicy does not apply to denials.
        log.error(
            "internal error evaluating %s (uid %s)\n%s", what, req.uid, traceback.format_exc()
        )
        message = (
            f"internal error evaluating {what}: {type(exc).__name__}: {exc}; see the webhook logs"
        )
        return Outcome(denied_response(req, message), "error", 0, 0, cacheable=False)
    # An answer that waited on a registry depends on its cache's age, not only on the body.
    cacheable = not (decision.unresolved_images and state.images is not None)
    if not decision.handled:
        return Outcome(allowed_response(req), "allowed", 0, 0)
    is_configmap = req.kind == "ConfigMap"
    if endpoint == "mutate":
        warnings = [*decision.notes, *decision.warnings, *lookup_warnings]
        patch = decision.patch
        gpu = decision.gpu_containers
        # GPU containers and unknown CUDA versions are counted by /mutate only: /validate
        # skips placement for most pods (evaluate's violations_only).
        unknown = _unknown_reasons(state, decision.cuda_unknown, failed)
        if patch:
            response = patched_response(req, patch, warnings=warnings, dumps=state.codec.dumps)
            kinds = decision.mutation_kinds
            return Outcome(
                response,
                "patched",
                len(kinds),
                len(warnings),
                cacheable,
                kinds,
                gpu_containers=gpu,
                placements=decision.placements,
                cuda_unknown=unknown,
            )
        return Outcome(
            allowed_response(req, warnings=warnings),
            "allowed",
            0,
            len(warnings),
            cacheable,
            gpu_containers=gpu,
            cuda_unknown=unknown,
        )
    # /validate: Pod and template warnings were already shown by the mutating call.
    warnings = list(decision.warnings) if is_configmap else []
    if decision.violations:
        return Outcome(
            denied_response(req, decision.denial_message(), warnings=warnings),
            "denied",
            0,
            len(warnings),
            cacheable,
            violations=tuple((v.configmap, v.rule) for v in decision.violations),
        )
    return Outcome(allowed_response(req, warnings=warnings), "allowed", 0, len(warnings), cacheable)


def _unknown_reasons(
    state: WebhookState, images: tuple[str, ...], failed: dict[str, str] | None
) -> tuple[str, ...]:
    """Why each GPU container's CUDA version is unknown (metrics.CUDA_UNKNOWN_REASONS)."""
    if not images:
        return ()
    if state.images is None:
        return ("lookups-off",) * len(images)
    # Not asked (no image, no architecture the pod may run on) or nothing failed: "not-known".
    return tuple(
        (failed or {}).get(image, "not-known") if image else "not-known" for image in images
    )


def _make_review_handler(
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
        if isinstance(body, web.Response):
            return body
        start = time.perf_counter()
        snapshots = _snapshots(state)
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
        except (ValueError, RecursionError) as exc:
            # orjson.JSONDecodeError and json.JSONDecodeError are ValueErrors; so is bad UTF-8.
            state.metrics.rejected.labels(endpoint, "400").inc()
            return plain(400, f"request body is not valid JSON: {exc}")
        try:
            req = decode_review(data)
        except ReviewDecodeError as exc:
            state.metrics.rejected.labels(endpoint, "400").inc()
            return plain(400, f"request body is not an AdmissionReview: {exc}")
        normal = None
        if cache is not None:
            normal = _normalized_key(state, endpoint, req, data)
            hit = cache.get(endpoint, normal) if normal is not None else None
            cache.count(hit is not None)
            if hit is not None:
                return _cached(state, endpoint, hit, req.uid.encode(), start, req.name)
        outcome = await _decide(state, endpoint, req, snapshots)
        try:
            payload = state.codec.dumps(outcome.response)
        except (TypeError, ValueError) as exc:
            # Unreachable for well-formed decisions; kept so an encoder surprise is a denial.
            log.error("cannot encode the response for uid %s: %s", req.uid, exc)
            outcome = Outcome(
                denied_response(req, f"internal error encoding the response: {exc}"),
                "error",
                0,
                0,
                cacheable=False,
            )
            payload = std_dumps(outcome.response)
        labels = (
            _label(req.kind, WORKLOAD_KINDS),
            _label(req.operation, OPERATIONS),
            outcome.result,
        )
        fields = {
            "endpoint": endpoint,
            "uid": req.uid,
            "kind": req.kind,
            "namespace": req.namespace,
            "name": req.name,
            "operation": req.operation,
            "user": req.username,
            "dryRun": req.dry_run,
            "allowed": outcome.response["response"]["allowed"],
            "result": outcome.result,
            "mutations": outcome.mutations,
            "warnings": outcome.warnings,
        }
        if cache is not None and outcome.cacheable:
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
        _done(state, endpoint, labels, outcome, fields, req.uid, start)
        return web.Response(body=payload, content_type="application/json")

    return handle


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
    fields: dict[str, Any],
    uid: str,
    start: float,
) -> None:
    """Metrics and the per-review log line of one answered review."""
    elapsed = time.perf_counter() - start
    counts = state.metrics.counts
    for kind in answer.mutation_kinds:
        counts.mutated(kind)
    counts.review_done(endpoint, *labels, elapsed)
    if answer.gpu_containers or answer.violations:
        counts.evaluated(
            answer.gpu_containers, answer.placements, answer.violations, answer.cuda_unknown
        )
    if review_log.isEnabledFor(logging.INFO):
        # `fields` is this review's own dict (a copy for a cached answer): completed in place.
        line = fields
        line["uid"] = uid
        line["durationMs"] = round(elapsed * 1000, 3)
        if state.review_sink is None:
            review_log.info("review", extra={"fields": line})
        else:
            state.review_sink(line)


async def _healthz(request: web.Request) -> web.Response:
    return plain(200, "ok")


async def _readyz(request: web.Request) -> web.Response:
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


async def _metrics(request: web.Request) -> web.Response:
    registry = request.app[STATE].metrics.registry
    return web.Response(
        body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


async def _policies(request: web.Request) -> web.Response:
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


async def _inventory(request: web.Request) -> web.Response:
    """What the webhook knows of the cluster: node inventory, DRA claims, sync state."""
    state = request.app[STATE]
    store = state.store
    nodes = store.snapshot_status("Node")
    if store.inventory is not None:
        nodes.update(store.inventory.to_json(state.config))
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
        "sources": _sources(store),
    }
    return web.Response(body=std_dumps(document), content_type="application/json")


async def _audit(request: web.Request) -> web.Response:
    """The periodic audit's last outcome (SPEC §6); the findings are in the policy reports."""
    audit = request.app[STATE].store.audit
    document: dict[str, Any] = {"enabled": audit is not None}
    if audit is not None:
        document.update(audit.to_json())
    return web.Response(body=std_dumps(document), content_type="application/json")


async def _images(request: web.Request) -> web.Response:
    """The registry lookup cache: image → CUDA, where it came from, age (SPEC §4 step 6)."""
    resolver = request.app[STATE].images
    document: Any = {"enabled": False} if resolver is None else resolver.to_json()
    return web.Response(body=std_dumps(document), content_type="application/json")


async def _background(app: web.Application) -> AsyncIterator[None]:
    """Run the policy source and the certificate reload loop for the app's lifetime."""
    state = app[STATE]
    if state.policy_source is not None:
        state.background.append(asyncio.create_task(_guarded(state.policy_source)))
    for extra in state.tasks:
        state.background.append(asyncio.create_task(_guarded(extra, "a background task")))
    reloader = state.cert_reloader
    if reloader is not None and state.cert_reload_interval > 0:
        state.background.append(
            asyncio.create_task(_reload_certificates(reloader, state.cert_reload_interval))
        )
    yield
    state.shutting_down = True
    for task in state.background:
        task.cancel()
    for task in state.background:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    state.background.clear()
    if state.images is not None:
        await state.images.close()


async def _guarded(source: PolicySource, what: str = "the policy source") -> None:
    # A policy source (and the audit) is designed never to raise; if it does anyway, admission
    # keeps the last snapshot and the error is visible in logs and /readyz rather than killing
    # the process.
    try:
        await source()
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("%s stopped; admission goes on with the last policies loaded", what)


async def _reload_certificates(reloader: CertReloader, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            reloader.check()
        except Exception:
            log.exception("certificate reload check failed; keeping the current certificate")


def create_app(
    config: WebhookConfig,
    store: PolicyStore,
    *,
    evaluator: Evaluator = evaluate,
    codec: JsonCodec | None = None,
    cert_reloader: CertReloader | None = None,
    cert_reload_interval: float = CERT_RELOAD_INTERVAL,
    policy_source: PolicySource | None = None,
    review_sink: ReviewSink | None = None,
    tasks: Sequence[PolicySource] = (),
    images: ImageResolver | None = None,
    ready_timeout: float = 30.0,
    decision_cache_bytes: int = 0,
) -> web.Application:
    """The admission app; `evaluator` and `policy_source` are seams for tests and serve.

    `review_sink` replaces `review_log.info` for the per-review line (serve passes the batched
    handler's direct writer); the default goes through logging, where tests capture it.
    `images` looks up the CUDA version of images nothing else tells (None: no lookups).
    `decision_cache_bytes` bounds the decision cache (0: off; serve turns it on).
    """
    decisions = DecisionCache(decision_cache_bytes) if decision_cache_bytes > 0 else None
    state = WebhookState(
        config=config,
        store=store,
        evaluator=evaluator,
        codec=codec or json_codec(),
        metrics=Metrics.create(store, cert_reloader, config, images, decisions),
        cert_reloader=cert_reloader,
        cert_reload_interval=cert_reload_interval,
        policy_source=policy_source,
        review_sink=review_sink,
        tasks=tuple(tasks),
        images=images,
        ready_timeout=ready_timeout,
        decisions=decisions,
    )
    if images is not None:
        images.observe = state.metrics.image_lookup_done
    # client_max_size also guards chunked bodies that carry no Content-Length.
    app = web.Application(client_max_size=MAX_BODY_BYTES, handler_args=HANDLER_ARGS)
    app[STATE] = state
    app.router.add_post("/mutate", _make_review_handler("mutate"))
    app.router.add_post("/validate", _make_review_handler("validate"))
    _add_probe_routes(app)
    app.router.add_get("/policies", _policies)
    app.router.add_get("/inventory", _inventory)
    app.router.add_get("/audit", _audit)
    app.cleanup_ctx.append(_background)
    app.on_response_prepare.append(_close_when_draining)
    return app


async def _close_when_draining(request: web.Request, response: web.StreamResponse) -> None:
    # During the shutdown drain every answer says Connection: close, so the API server's
    # keep-alive connections move to other replicas before this one stops accepting (SPEC §7).
    # aiohttp (3.14) runs this hook after it computed the headers, so both are set here: the
    # header for the client, force_close() for the connection (closed after this answer).
    if request.app[STATE].shutting_down:
        response.force_close()
        response.headers["Connection"] = "close"


def _add_probe_routes(app: web.Application) -> None:
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)


def create_metrics_app(admission_app: web.Application) -> web.Application:
    """Plain-HTTP app for Prometheus, probes and /images, sharing the admission app's state."""
    app = web.Application(client_max_size=1024, handler_args=HANDLER_ARGS)
    app[STATE] = admission_app[STATE]
    _add_probe_routes(app)
    # Every tenant's images and digests: not on the admission port, which anyone who can
    # reach the Service can call (SPEC §12, "Registry lookups under attack").
    app.router.add_get("/images", _images)
    return app
