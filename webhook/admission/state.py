"""What the handlers share: config, snapshot store, evaluator, codec, metrics (no globals)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from webhook.admission.decisions import DecisionCache
from webhook.admission.jsoncodec import JsonCodec
from webhook.admission.metrics import Metrics
from webhook.admission.reviews import Allowed
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import Decision
from webhook.registry.resolver import ImageResolver
from webhook.sources.store import PolicyStore
from webhook.tls.certs import CertReloader

log = logging.getLogger(__name__)

CERT_RELOAD_INTERVAL = 5.0


# `webhook.core.evaluation.evaluate.evaluate`, or a test's stand-in taking the same arguments.
Evaluator = Callable[..., Decision]


PolicySource = Callable[[], Coroutine[Any, Any, None]]
# Writes the per-review log line (fields) once the caller checked review_log's INFO level.
ReviewSink = Callable[[Mapping[str, Any]], None]


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
    # Other background tasks of the app's lifetime (the periodic audit), each guarded.
    tasks: tuple[PolicySource, ...] = ()
    review_sink: ReviewSink | None = None
    # Registry lookups of images' CUDA versions (None: switched off, SPEC §4 step 6).
    images: ImageResolver | None = None
    # Answers of reviews that differ only in their uid (None: off); see admission/decisions.py.
    decisions: DecisionCache | None = None
    shutting_down: bool = False
    # Readiness waits at most this long for the first list of the optional sources (Nodes, DRA
    # claims) once the policies are synced (SPEC §4), counted from `started`.
    ready_timeout: float = 30.0
    started: float = field(default_factory=time.monotonic)
    ready_timeout_logged: bool = False
    # Reviews whose handler runs (reading the body, evaluating): shutdown waits for them.
    in_flight: int = 0
    background: list[asyncio.Task[None]] = field(default_factory=list)


STATE = web.AppKey("state", WebhookState)


@dataclass(slots=True)  # not frozen: built per review, and frozen __init__ is ~5x slower
class Outcome:
    """One review's answer and what the metrics and the log line count of it."""

    # A denial's AdmissionReview, or an allowed answer not yet encoded (reviews.encode_allowed).
    response: dict[str, Any] | Allowed
    result: str  # allowed | patched | denied | error
    mutations: int
    warnings: int
    # The same body under the same snapshots always gets this answer (decision cache): not so
    # after a registry lookup (its cache ages) or an internal error.
    cacheable: bool = True
    mutation_kinds: tuple[str, ...] = ()
    # For the metrics (ReviewCounts.evaluated): the decision's own tuples, nothing built per
    # review but the denial's (configmap, rule) pairs and the unknown runtimes' (runtime,
    # reason) pairs. gpu_containers: the runtime of each accelerator container (Decision.runtimes).
    gpu_containers: tuple[str, ...] = ()
    placements: tuple[str, ...] = ()
    violations: tuple[tuple[str, str], ...] = ()
    cuda_unknown: tuple[tuple[str, str], ...] = ()

    # Written out, as the core's per-review classes do (workloads/pods.ContainerRef says why):
    # one per review; a NamedTuple's __new__ and @dataclass's __init__ stay interpreted.
    def __init__(
        self,
        response: dict[str, Any] | Allowed,
        result: str,
        mutations: int,
        warnings: int,
        cacheable: bool = True,
        mutation_kinds: tuple[str, ...] = (),
        gpu_containers: tuple[str, ...] = (),
        placements: tuple[str, ...] = (),
        violations: tuple[tuple[str, str], ...] = (),
        cuda_unknown: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.response = response
        self.result = result
        self.mutations = mutations
        self.warnings = warnings
        self.cacheable = cacheable
        self.mutation_kinds = mutation_kinds
        self.gpu_containers = gpu_containers
        self.placements = placements
        self.violations = violations
        self.cuda_unknown = cuda_unknown
