"""The aiohttp admission app: /mutate, /validate, probes, /metrics, /policies, background tasks.

The parts: the review handler (admission/review_handler.py) and the decision it answers with
(admission/decide.py), the read-only endpoints (admission/endpoints.py), background tasks and
the shutdown drain (admission/lifecycle.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web

from webhook.admission import endpoints
from webhook.admission.body import HANDLER_ARGS, MAX_BODY_BYTES
from webhook.admission.decisions import DecisionCache
from webhook.admission.jsoncodec import JsonCodec, json_codec
from webhook.admission.lifecycle import background, close_when_draining
from webhook.admission.metrics import Metrics
from webhook.admission.review_handler import make_review_handler
from webhook.admission.state import (
    CERT_RELOAD_INTERVAL,
    STATE,
    Evaluator,
    PolicySource,
    ReviewSink,
    WebhookState,
)
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import evaluate
from webhook.registry.resolver import ImageResolver
from webhook.sources.store import PolicyStore
from webhook.tls.certs import CertReloader


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
    app.router.add_post("/mutate", make_review_handler("mutate"))
    app.router.add_post("/validate", make_review_handler("validate"))
    _add_probe_routes(app)
    app.router.add_get("/policies", endpoints.policies)
    app.router.add_get("/inventory", endpoints.inventory)
    app.router.add_get("/audit", endpoints.audit)
    app.cleanup_ctx.append(background)
    app.on_response_prepare.append(close_when_draining)
    return app


def _add_probe_routes(app: web.Application) -> None:
    app.router.add_get("/healthz", endpoints.healthz)
    app.router.add_get("/readyz", endpoints.readyz)
    app.router.add_get("/metrics", endpoints.metrics)


def create_metrics_app(admission_app: web.Application) -> web.Application:
    """Plain-HTTP app for Prometheus, probes and /images, sharing the admission app's state."""
    app = web.Application(client_max_size=1024, handler_args=HANDLER_ARGS)
    app[STATE] = admission_app[STATE]
    _add_probe_routes(app)
    # Every tenant's images and digests: not on the admission port, which anyone who can
    # reach the Service can call (SPEC §12, "Registry lookups under attack").
    app.router.add_get("/images", endpoints.images)
    return app
