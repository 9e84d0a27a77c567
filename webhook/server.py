"""The HTTPS admission server: aiohttp app factory, routes, metrics, logs, `gpu-webhook serve`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import logging
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from webhook.certs import CertReloader, write_certificates
from webhook.config import WebhookConfig, load_config
from webhook.errors import ConfigError, ManifestError, WebhookError
from webhook.evaluate import Decision, evaluate
from webhook.filesource import FileSource
from webhook.jsoncodec import JsonCodec, json_codec, std_dumps
from webhook.logs import BatchedStreamHandler, configure_logging
from webhook.policyset import PolicySet
from webhook.reviews import (
    AdmissionRequest,
    ReviewDecodeError,
    allowed_response,
    decode_review,
    denied_response,
    patched_response,
)
from webhook.store import PolicyStore

log = logging.getLogger(__name__)
review_log = logging.getLogger("webhook.review")

# The API server caps one object at 3 MiB (etcd's default request limit, enforced by the
# apiserver as its max request body). An UPDATE review carries `object` and `oldObject` plus the
# envelope (userInfo, options, managedFields...), so a legitimate body can approach 6 MiB and JSON
# re-encoding may grow it a little; 7 MiB never refuses a real review but bounds memory per request.
MAX_BODY_BYTES = 7 * 1024 * 1024

WORKLOAD_KINDS = frozenset(
    {"Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "ConfigMap"}
)
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})
CERT_RELOAD_INTERVAL = 5.0
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Evaluator(Protocol):
    """The signature of `webhook.evaluate.evaluate` as the server calls it."""

    def __call__(
        self,
        obj: Mapping[str, Any],
        policies: PolicySet,
        config: WebhookConfig,
        *,
        kind: str | None = None,
        namespace: str | None = None,
        operation: str = "CREATE",
        violations_only: bool = False,
    ) -> Decision: ...


PolicySource = Callable[[], Coroutine[Any, Any, None]]
# Writes the per-review log line (fields) once the caller checked review_log's INFO level.
ReviewSink = Callable[[Mapping[str, Any]], None]


class _StateCollector(Collector):
    """Gauges read from the store and the certificate at scrape time, never stale."""

    def __init__(self, store: PolicyStore, reloader: CertReloader | None) -> None:
        self._store = store
        self._reloader = reloader

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
        if self._reloader is not None:
            yield GaugeMetricFamily(
                "gpu_webhook_serving_certificate_expiry_timestamp_seconds",
                "Unix time when the serving certificate in force expires.",
                value=self._reloader.expiry_timestamp,
            )


@dataclass
class Metrics:
    """A per-app registry: two apps in one process (tests) never share counters."""

    registry: CollectorRegistry
    reviews: Counter
    latency: Histogram
    mutations: Counter
    rejected: Counter
    # labels() hashes and validates its arguments on every call; the label sets of the
    # per-review metrics are bounded (see _label), so their children are cached here.
    _children: dict[tuple[str, ...], Any] = field(default_factory=dict)

    def review_done(
        self, endpoint: str, kind: str, operation: str, result: str, seconds: float
    ) -> None:
        key = (endpoint, kind, operation, result)
        children = self._children.get(key)
        if children is None:
            children = (self.reviews.labels(*key), self.latency.labels(endpoint))
            self._children[key] = children
        children[0].inc()
        children[1].observe(seconds)

    @classmethod
    def create(cls, store: PolicyStore, reloader: CertReloader | None) -> Metrics:
        registry = CollectorRegistry(auto_describe=True)
        registry.register(_StateCollector(store, reloader))
        return cls(
            registry=registry,
            reviews=Counter(
                "gpu_webhook_reviews",
                "Admission reviews answered, by endpoint, kind, operation and result.",
                ["endpoint", "kind", "operation", "result"],
                registry=registry,
            ),
            latency=Histogram(
                "gpu_webhook_review_duration_seconds",
                "Time from request body received to response ready.",
                ["endpoint"],
                buckets=LATENCY_BUCKETS,
                registry=registry,
            ),
            mutations=Counter(
                "gpu_webhook_mutations",
                "Mutations returned by /mutate, by type.",
                ["type"],
                registry=registry,
            ),
            rejected=Counter(
                "gpu_webhook_rejected_requests",
                "Requests refused before evaluation (HTTP 400/413), by endpoint and status.",
                ["endpoint", "status"],
                registry=registry,
            ),
        )


@dataclass
class WebhookState:
    """Everything the handlers need; reachable only through the app, never a global."""

    config: WebhookConfig
    store: PolicyStore
    evaluator: Evaluator
    codec: JsonCodec
    metrics: Metrics
    cert_reloader: CertReloader | None = None
    cert_reload_interval: float = CERT_RELOAD_INTERVAL
    policy_source: PolicySource | None = None
    review_sink: ReviewSink | None = None
    shutting_down: bool = False
    background: list[asyncio.Task[None]] = field(default_factory=list)


STATE = web.AppKey("state", WebhookState)


class Outcome(NamedTuple):
    response: dict[str, Any]
    result: str  # allowed | patched | denied | error
    mutations: int
    warnings: int


def _plain(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text + "\n", content_type="text/plain")


def _label(value: str, known: frozenset[str]) -> str:
    # Metric labels from request data are bounded, or any client could explode cardinality.
    return value if value in known else "other"


def _decide(state: WebhookState, endpoint: str, req: AdmissionRequest) -> Outcome:
    """Evaluate and build the response; every exception becomes a denial, never an HTTP 500."""
    if req.object is None or req.operation not in ("CREATE", "UPDATE"):
        return Outcome(allowed_response(req), "allowed", 0, 0)
    what = f"{req.kind or 'object'} {req.ref or '(unnamed)'}"
    try:
        decision = state.evaluator(
            req.object,
            state.store.current,
            state.config,
            kind=req.kind or None,
            namespace=req.namespace or None,
            operation=req.operation,
            # /validate returns no Pod or template warnings (the mutating call showed them).
            violations_only=endpoint == "validate",
        )
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
        return Outcome(denied_response(req, message), "error", 0, 0)
    if not decision.handled:
        return Outcome(allowed_response(req), "allowed", 0, 0)
    is_configmap = req.kind == "ConfigMap"
    if endpoint == "mutate":
        warnings = [*decision.notes, *decision.warnings]
        patch = decision.patch
        if patch:
            for kind in decision.mutation_kinds:
                state.metrics.mutations.labels(kind).inc()
            response = patched_response(req, patch, warnings=warnings, dumps=state.codec.dumps)
            return Outcome(response, "patched", len(decision.mutation_kinds), len(warnings))
        return Outcome(allowed_response(req, warnings=warnings), "allowed", 0, len(warnings))
    # /validate: Pod and template warnings were already shown by the mutating call.
    warnings = list(decision.warnings) if is_configmap else []
    if decision.violations:
        return Outcome(
            denied_response(req, decision.denial_message(), warnings=warnings),
            "denied",
            0,
            len(warnings),
        )
    return Outcome(allowed_response(req, warnings=warnings), "allowed", 0, len(warnings))


async def _read_body(request: web.Request, endpoint: str) -> bytes | web.Response:
    """The body, or the 400/413 answer explaining why it cannot be a review."""
    state = request.app[STATE]
    # The exact header the API server sends is checked first: parsing it costs more.
    exact = request.headers.get("Content-Type") == "application/json"
    if not exact and request.content_type != "application/json":
        state.metrics.rejected.labels(endpoint, "400").inc()
        got = request.headers.get("Content-Type", "none")
        return _plain(400, f"Content-Type must be application/json, got {got}")
    too_large = (
        f"request body is larger than {MAX_BODY_BYTES} bytes (limit sized for an UPDATE review "
        "of two 3 MiB objects); this is not an AdmissionReview from the API server"
    )
    length = request.content_length
    if length is not None and length > MAX_BODY_BYTES:
        state.metrics.rejected.labels(endpoint, "413").inc()
        return _plain(413, too_large)
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        state.metrics.rejected.labels(endpoint, "413").inc()
        return _plain(413, too_large)
    if not body.strip():
        state.metrics.rejected.labels(endpoint, "400").inc()
        return _plain(400, "request body is empty; expected an AdmissionReview JSON object")
    return body


def _make_review_handler(
    endpoint: str,
) -> Callable[[web.Request], Coroutine[Any, Any, web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        state = request.app[STATE]
        body = await _read_body(request, endpoint)
        if isinstance(body, web.Response):
            return body
        start = time.perf_counter()
        try:
            data = state.codec.loads(body)
        except (ValueError, RecursionError) as exc:
            # orjson.JSONDecodeError and json.JSONDecodeError are ValueErrors; so is bad UTF-8.
            state.metrics.rejected.labels(endpoint, "400").inc()
            return _plain(400, f"request body is not valid JSON: {exc}")
        try:
            req = decode_review(data)
        except ReviewDecodeError as exc:
            state.metrics.rejected.labels(endpoint, "400").inc()
            return _plain(400, f"request body is not an AdmissionReview: {exc}")
        outcome = _decide(state, endpoint, req)
        try:
            payload = state.codec.dumps(outcome.response)
        except (TypeError, ValueError) as exc:
            # Unreachable for well-formed decisions; kept so an encoder surprise is a denial.
            log.error("cannot encode the response for uid %s: %s", req.uid, exc)
            outcome = Outcome(
                denied_response(req, f"internal error encoding the response: {exc}"), "error", 0, 0
            )
            payload = std_dumps(outcome.response)
        elapsed = time.perf_counter() - start
        kind_label = _label(req.kind, WORKLOAD_KINDS)
        state.metrics.review_done(
            endpoint, kind_label, _label(req.operation, OPERATIONS), outcome.result, elapsed
        )
        if review_log.isEnabledFor(logging.INFO):
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
                "durationMs": round(elapsed * 1000, 3),
            }
            if state.review_sink is None:
                review_log.info("review", extra={"fields": fields})
            else:
                state.review_sink(fields)
        return web.Response(body=payload, content_type="application/json")

    return handle


async def _healthz(request: web.Request) -> web.Response:
    return _plain(200, "ok")


async def _readyz(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.shutting_down:
        return _plain(503, "shutting down")
    if not state.store.ready:
        detail = state.store.stats.last_error or "waiting for the first list of CRL ConfigMaps"
        return _plain(503, f"policies not synced yet: {detail}")
    return _plain(200, "ok")


async def _metrics(request: web.Request) -> web.Response:
    registry = request.app[STATE].metrics.registry
    return web.Response(
        body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


async def _policies(request: web.Request) -> web.Response:
    state = request.app[STATE]
    document = state.store.current.to_json()
    document["ready"] = state.store.ready
    return web.Response(body=std_dumps(document), content_type="application/json")


async def _background(app: web.Application) -> AsyncIterator[None]:
    """Run the policy source and the certificate reload loop for the app's lifetime."""
    state = app[STATE]
    if state.policy_source is not None:
        state.background.append(asyncio.create_task(_guarded(state.policy_source)))
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


async def _guarded(source: PolicySource) -> None:
    # A policy source is designed never to raise; if it does anyway, admission keeps the last
    # snapshot and the error is visible in logs and /readyz rather than killing the process.
    try:
        await source()
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("the policy source stopped; serving the last policies loaded")


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
) -> web.Application:
    """The admission app; `evaluator` and `policy_source` are seams for tests and serve.

    `review_sink` replaces `review_log.info` for the per-review line (serve passes the batched
    handler's direct writer); the default goes through logging, where tests capture it.
    """
    state = WebhookState(
        config=config,
        store=store,
        evaluator=evaluator,
        codec=codec or json_codec(),
        metrics=Metrics.create(store, cert_reloader),
        cert_reloader=cert_reloader,
        cert_reload_interval=cert_reload_interval,
        policy_source=policy_source,
        review_sink=review_sink,
    )
    # client_max_size also guards chunked bodies that carry no Content-Length.
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[STATE] = state
    app.router.add_post("/mutate", _make_review_handler("mutate"))
    app.router.add_post("/validate", _make_review_handler("validate"))
    _add_probe_routes(app)
    app.router.add_get("/policies", _policies)
    app.cleanup_ctx.append(_background)
    return app


def _add_probe_routes(app: web.Application) -> None:
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)


def create_metrics_app(admission_app: web.Application) -> web.Application:
    """Plain-HTTP app for Prometheus and probes, sharing the admission app's state."""
    app = web.Application(client_max_size=1024)
    app[STATE] = admission_app[STATE]
    _add_probe_routes(app)
    return app


# ---------------------------------------------------------------------------- serve


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="0.0.0.0", help="listen address (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8443, help="HTTPS port (default: %(default)s)")
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        help="plain-HTTP port for /metrics, /healthz, /readyz (default: 0 = off)",
    )
    parser.add_argument("--tls-cert", metavar="FILE", help="serving certificate (PEM), reloaded")
    parser.add_argument("--tls-key", metavar="FILE", help="serving key (PEM), reloaded")
    parser.add_argument(
        "--self-signed",
        action="store_true",
        help="generate a CA and a localhost serving certificate into --cert-dir",
    )
    parser.add_argument(
        "--cert-dir",
        metavar="DIR",
        help="with --self-signed: where to write them (default: a fresh temp dir); "
        "otherwise: read DIR/tls.crt and DIR/tls.key",
    )
    parser.add_argument(
        "--policies", metavar="DIR", help="CRL ConfigMap files (default: watch kube-public)"
    )
    parser.add_argument(
        "--policies-poll",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="with --policies: check the files for changes this often; 0 loads them once "
        "(default: %(default)s)",
    )
    parser.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: in-cluster)")
    parser.add_argument("--config", metavar="FILE", help="webhook config YAML")
    parser.add_argument("--log-format", choices=("json", "text"), default="json")
    parser.add_argument(
        "--log-level", choices=("debug", "info", "warning", "error"), default="info"
    )


def _tls_files(args: argparse.Namespace) -> tuple[Path, Path]:
    """Where the serving pair is, generating it for --self-signed; raises ValueError."""
    if args.self_signed:
        cert_dir = (
            Path(args.cert_dir) if args.cert_dir else Path(tempfile.mkdtemp(prefix="gpu-webhook-"))
        )
        ips = ["127.0.0.1", "::1"]
        if args.host not in ("0.0.0.0", "::", "", "localhost", *ips):
            ips.append(args.host)
        try:
            paths = write_certificates(cert_dir, ["localhost"], ips)
        except (OSError, ValueError) as exc:
            raise ValueError(
                f"cannot write a self-signed certificate into {cert_dir}: {exc}"
            ) from exc
        print(f"CA certificate: {paths.ca_cert} (curl --cacert {paths.ca_cert} ...)", flush=True)
        return paths.cert, paths.key
    if args.tls_cert and args.tls_key:
        return Path(args.tls_cert), Path(args.tls_key)
    if args.tls_cert or args.tls_key:
        raise ValueError("--tls-cert and --tls-key must be given together")
    if args.cert_dir:
        return Path(args.cert_dir) / "tls.crt", Path(args.cert_dir) / "tls.key"
    raise ValueError(
        "no serving certificate: pass --tls-cert FILE --tls-key FILE, --cert-dir DIR "
        "(from `gpu-webhook certs`), or --self-signed for a local run"
    )


def _policy_source(args: argparse.Namespace, store: PolicyStore) -> PolicySource | None:
    """Load file policies now (a bad directory fails the start), or prepare the cluster watch."""
    if args.policies:
        # webhook.filesource imports no kubernetes client (~13 MiB RSS) for a process that never
        # talks to a cluster.
        files = FileSource(Path(args.policies), interval=args.policies_poll)
        store.replace(files.load())
        if args.policies_poll <= 0:
            return None
        return functools.partial(files.run, store)
    # Imported here for the same reason: only the in-cluster mode needs the kubernetes client.
    from webhook.watcher import ConfigMapWatcher  # noqa: PLC0415

    watcher = ConfigMapWatcher(store, kubeconfig=args.kubeconfig)
    return watcher.run


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    if os.environ.get("GPU_WEBHOOK_DISABLE_UVLOOP"):
        return None
    try:
        import uvloop  # noqa: PLC0415 - optional dependency (the `fast` extra)
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


async def _flush_logs(handler: BatchedStreamHandler) -> None:
    while True:
        await asyncio.sleep(handler.interval)
        handler.flush()


async def _serve(
    app: web.Application,
    args: argparse.Namespace,
    reloader: CertReloader,
    log_handler: BatchedStreamHandler,
) -> None:
    flusher = asyncio.create_task(_flush_logs(log_handler))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # Short grace: the API server's timeoutSeconds is a few seconds, so a review still running
    # after 10 s has already been given up on.
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=10.0)
    await runner.setup()
    runners = [runner]
    try:
        await web.TCPSite(runner, args.host, args.port, ssl_context=reloader.context).start()
        if args.metrics_port:
            metrics_runner = web.AppRunner(create_metrics_app(app), access_log=None)
            await metrics_runner.setup()
            runners.append(metrics_runner)
            await web.TCPSite(metrics_runner, args.host, args.metrics_port).start()
        state = app[STATE]
        log.info(
            "serving admission reviews on https://%s:%d (json=%s, loop=%s, metrics port %s)",
            args.host,
            args.port,
            state.codec.name,
            type(loop).__module__.split(".")[0],
            args.metrics_port or "off",
        )
        await stop.wait()
        log.info("shutting down: finishing reviews in flight")
        state.shutting_down = True
    finally:
        for each in reversed(runners):
            await each.cleanup()
        flusher.cancel()
        log_handler.flush()


def serve_command(args: argparse.Namespace) -> int:
    """`gpu-webhook serve`: 0 after a clean shutdown, 2 when the setup is unusable."""
    log_handler = configure_logging(args.log_format, args.log_level)
    try:
        config = load_config(Path(args.config) if args.config else None)
        cert_file, key_file = _tls_files(args)
        reloader = CertReloader(cert_file, key_file)
        store = PolicyStore()
        source = _policy_source(args, store)
    except (ConfigError, ManifestError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    codec = json_codec(prefer_orjson=not os.environ.get("GPU_WEBHOOK_DISABLE_ORJSON"))
    app = create_app(
        config,
        store,
        codec=codec,
        cert_reloader=reloader,
        policy_source=source,
        review_sink=functools.partial(log_handler.write, review_log, "review"),
    )
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(_serve(app, args, reloader, log_handler))
    except OSError as exc:
        print(f"error: cannot serve: {exc}", file=sys.stderr)
        return 2
    return 0
