"""One decoded admission request evaluated into an Outcome: snapshots, registry lookups, answer."""

from __future__ import annotations

import logging
import traceback
from typing import Any

from webhook.admission.reviews import (
    ALLOWED,
    AdmissionRequest,
    allowed,
    denied_response,
)
from webhook.admission.state import Outcome, WebhookState
from webhook.core.base.errors import WebhookError
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import Decision
from webhook.core.placement.inventory import NodeInventory

# What evaluation sees while the node inventory's first list is still running (SPEC §4).
NOT_LISTED_YET = NodeInventory.not_listed_yet()

# The logger keeps the name it had when this was part of app.py: log lines and filters name it.
log = logging.getLogger("webhook.admission.app")


Snapshots = tuple[Any, WebhookConfig, NodeInventory | None, Any, Any]


def read_snapshots(state: WebhookState) -> Snapshots:
    """What an evaluation reads besides the review: policies, config, inventory, claims, and
    namespaces' Pod Security levels."""
    store = state.store
    return (
        store.current,
        # The config with a watched ConfigMap's image table, when there is one.
        store.config or state.config,
        # Cluster snapshots as they are now (None: not known); never fetched here.
        store.inventory if not store.inventory_pending else NOT_LISTED_YET,
        store.claims,
        store.namespace_levels,
    )


def _evaluate(
    state: WebhookState,
    endpoint: str,
    req: AdmissionRequest,
    snapshots: Snapshots,
    **images: Any,
) -> Decision:
    policies, config, inventory, claims, levels = snapshots
    if levels is not None:  # the RDMA runtime fix's input (SPEC §14)
        images = {**images, "namespace_levels": levels}
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
        # Who asks (gpuAccess.annotationWriters: a Pod UPDATE of an annotation a variable reads).
        username=req.username,
        groups=req.groups,
        **images,
    )


async def decide(
    state: WebhookState,
    endpoint: str,
    req: AdmissionRequest,
    snapshots: Snapshots,
) -> Outcome:
    """Evaluate and build the response; every exception becomes a denial, never an HTTP 500."""
    if req.object is None or req.operation not in ("CREATE", "UPDATE"):
        return Outcome(ALLOWED, "allowed", 0, 0)
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
            if found.facts or found.platforms or found.env:
                extra: dict[str, Any] = (
                    {"image_platforms": found.platforms} if found.platforms else {}
                )
                if found.env:
                    # Other vendors' variables of the configs (SPEC §13's driver-release gate).
                    extra["image_env"] = found.env
                decision = _evaluate(state, endpoint, req, snapshots, images=found.facts, **extra)
    except WebhookError as exc:
        what = _what(req)
        # The object does not have the shape its kind requires: say so, as the API server would.
        return Outcome(denied_response(req, f"cannot evaluate {what}: {exc}"), "denied", 0, 0)
    except Exception as error:  # not `exc`: mypyc types one name per async function (above)
        what = _what(req)
        # A 403 denial like any other (SPEC §7: a well-formed review never yields a 500); the
        # message says it is the webhook's fault, and failurePolicy does not apply to denials.
        log.error(
            "internal error evaluating %s (uid %s)\n%s", what, req.uid, traceback.format_exc()
        )
        name = type(error).__name__
        message = f"internal error evaluating {what}: {name}: {error}; see the webhook logs"
        return Outcome(denied_response(req, message), "error", 0, 0, cacheable=False)
    # An answer that waited on a registry depends on its cache's age, not only on the body.
    cacheable = not (decision.unresolved_images and state.images is not None)
    if not decision.handled:
        return Outcome(ALLOWED, "allowed", 0, 0)
    is_configmap = req.kind == "ConfigMap"
    if endpoint == "mutate":
        warnings = [*decision.notes, *decision.warnings, *lookup_warnings]
        patch = decision.patch
        # Accelerator containers (by runtime) and unknown runtime versions are counted by
        # /mutate only: /validate skips placement for most pods (evaluate's violations_only).
        gpu = decision.runtimes
        unknown = _unknown_reasons(state, decision.runtime_unknown, failed)
        if patch:
            response = allowed(patch, warnings, state.codec.dumps)
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
            allowed(None, warnings),
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
    return Outcome(allowed(None, warnings), "allowed", 0, len(warnings), cacheable)


def _what(req: AdmissionRequest) -> str:
    """The object as messages name it (only an answer that is not an evaluation's needs it)."""
    return f"{req.kind or 'object'} {req.ref or '(unnamed)'}"


def _unknown_reasons(
    state: WebhookState, unknown: tuple[tuple[str, str], ...], failed: dict[str, str] | None
) -> tuple[tuple[str, str], ...]:
    """(runtime label, reason) of each accelerator container whose runtime version is unknown
    (review_counts.CUDA_UNKNOWN_REASONS; the runtime lowercased: cuda, rocm, cann)."""
    if not unknown:
        return ()
    if state.images is None:
        return tuple((runtime.lower(), "lookups-off") for runtime, _ in unknown)
    # Not asked (no image, no architecture the pod may run on) or nothing failed: "not-known".
    found = failed or {}
    return tuple(
        (runtime.lower(), found.get(image, "not-known") if image else "not-known")
        for runtime, image in unknown
    )
