"""Audit (SPEC §6): what the evaluation says of objects that already run, grouped by owner.

Pure: the caller lists the cluster page by page (webhook.sources.audit), evaluates every object
with the admission core and hands each Decision here. Objects are grouped by their top owner,
found by following `ownerReferences` with `controller: true` through the workloads listed
(Pod → ReplicaSet → Deployment; Pod → Job → CronJob; an operator's pods → its PyTorchJob), so
a Deployment's template and its 100 pods are one finding with counts. Memory is bounded by the
owners, never by the pods: a pod adds to its controller's counters and is then dropped.

A Pod that controls a workload (LeaderWorkerSet: the leader Pod of each group controls the
group's worker StatefulSet) is kept as an owner, found because the workload naming it was
registered before the pods are listed (the sources list workloads first). How one object's
controller is read (and Knative's label links) is webhook.core.audit.owners; what a finding
holds is webhook.core.audit.findings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.audit.findings import SOURCE, AuditResult, Finding, Problem, policy_name
from webhook.core.audit.owners import Ref, controller_ref, object_ref
from webhook.core.base.errors import WebhookError
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.outcome.decision import CUDA, Decision, Violation
from webhook.core.placement.inventory import NodeInventory
from webhook.core.policies.policyset import PolicySet
from webhook.core.workloads.claims import ClaimIndex
from webhook.core.workloads.pods import object_ref as ref_text

# ownerReferences chains are short (Pod → ReplicaSet → Deployment → an operator's object);
# the cap only guards against a cycle of references.
MAX_OWNER_DEPTH = 8
# Phases of pods that will not run again (core/v1 PodPhase): what they asked for is history.
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


def _strip(message: str, ref: str) -> str:
    """`Pod ml/a-1, container "c": x` -> `container "c": x` (the finding names the object)."""
    if ref and message.startswith(ref):
        rest = message[len(ref) :]
        if rest[:2] in (", ", ": "):
            return rest[2:]
    return message


def _uid(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    uid = meta.get("uid") if isinstance(meta, Mapping) else None
    return uid if isinstance(uid, str) else ""


class Audit:
    """Accumulates evaluations; `result()` merges them by top owner.

    Register every listed workload with `owner()` (cheap: its reference and its controller's,
    kept by uid) and feed every Decision to `add()`, in any order: owners are resolved only in
    `result()`, once every workload is known.
    """

    def __init__(self) -> None:
        # uid -> (the object, its controller): workloads, and the pods that control one.
        self._owners: dict[str, tuple[Ref, Ref | None]] = {}
        # uids of the Pods a registered workload names as its controller (LeaderWorkerSet).
        self._owner_pods: set[str] = set()
        # Findings keyed by the object's immediate controller (or the object itself).
        self._buckets: dict[tuple[str, str, str, str], tuple[Ref, Finding]] = {}
        self.workloads = 0
        self.pods = 0
        self.finished_pods = 0
        self.skipped = 0  # objects admission lets pass unevaluated
        self.notes: list[str] = []
        # Containers of the pods evaluated whose runtime version nothing told, by runtime (CUDA,
        # ROCm, CANN: Decision.runtime_unknown), the same count for every vendor.
        self.runtime_unknown: dict[str, int] = {}

    def owner(self, obj: Mapping[str, Any], api_version: str, kind: str) -> None:
        """Register a listed workload. Call it for every workload before the pods are added:
        a Pod that controls a workload (LeaderWorkerSet's leader) is kept as an owner only if
        the workload naming it was registered first."""
        ref = object_ref(obj, api_version, kind)
        if ref.uid:
            controller = controller_ref(obj)
            self._owners[ref.uid] = (ref, controller)
            if controller is not None and controller.kind == "Pod" and controller.group == "":
                self._owner_pods.add(controller.uid)

    def add(self, obj: Mapping[str, Any], api_version: str, kind: str, decision: Decision) -> None:
        """One object's evaluation (a workload's template(s), or a Pod)."""
        is_pod = kind == "Pod" and api_version == "v1"
        if is_pod and _uid(obj) in self._owner_pods:
            # Kept whatever its evaluation: the owner chain goes through it.
            pod_ref = object_ref(obj, api_version, kind)
            self._owners[pod_ref.uid] = (pod_ref, controller_ref(obj))
        if not decision.handled or (decision.reason and decision.allowed):
            # Not evaluated (an exempt namespace, a Deployment's ReplicaSet, an object being
            # deleted): admission would let it pass untouched, so the audit does too.
            self.skipped += 1
            return
        ref = object_ref(obj, api_version, kind)
        controller = controller_ref(obj) if is_pod else None
        denied = not decision.allowed
        changed = is_pod and decision.mutated is not None and bool(decision.notes)
        # Access findings that are violations are listed with them.
        warned = [v for v in decision.access if v not in decision.violations]
        if is_pod:
            self.pods += 1
            for runtime, _ in decision.runtime_unknown:
                self.runtime_unknown[runtime] = self.runtime_unknown.get(runtime, 0) + 1
            if controller is None and not (denied or changed or warned):
                # Pods are counted per owner only: a clean standalone pod costs nothing.
                return
        else:
            self.workloads += 1
        finding = self._bucket(controller or ref)
        if is_pod:
            finding.pods += 1
            finding.pods_denied += denied
            finding.pods_changed += changed
        else:
            finding.owner_evaluated = True
            finding.owner_denied = finding.owner_denied or denied
        example = ref.name if is_pod else ""
        for v in decision.violations:
            finding.add_problem(
                finding.denied,
                Problem(
                    policy_name(v.configmap),
                    v.rule or "evaluation",
                    _strip(v.message, decision.object_ref),
                    pods=int(is_pod),
                    in_owner=not is_pod,
                    example=example,
                ),
            )
        for v in warned:
            finding.add_problem(
                finding.access,
                Problem(
                    policy_name(v.configmap),
                    v.rule,
                    _strip(v.detail or v.message, decision.object_ref).rstrip("."),
                    pods=int(is_pod),
                    in_owner=not is_pod,
                    example=example,
                ),
            )
        if changed:
            # A pod's notes and mutation kinds are appended together (PodState.note).
            for rule, note in zip(decision.mutation_kinds, decision.notes, strict=False):
                finding.add_problem(
                    finding.changes, Problem(SOURCE, rule, note, pods=1, example=example)
                )

    def finished(self) -> None:
        """A pod skipped because it finished (Succeeded/Failed)."""
        self.finished_pods += 1

    def _bucket(self, anchor: Ref) -> Finding:
        held = self._buckets.get(anchor.key)
        if held is None:
            finding = Finding(anchor)
            self._buckets[anchor.key] = (anchor, finding)
            return finding
        return held[1]

    def top(self, ref: Ref) -> Ref:
        """The top owner of `ref` among the listed workloads: a controller that was not
        listed (its kind is not audited, or it is forbidden) ends the chain as itself."""
        seen: set[str] = set()
        current = ref
        for _ in range(MAX_OWNER_DEPTH):
            entry = self._owners.get(current.uid) if current.uid else None
            if entry is None:
                return current
            listed, controller = entry
            seen.add(current.uid)
            if controller is None or controller.uid in seen:
                return listed
            current = controller
        return current

    def result(self) -> AuditResult:
        merged: dict[tuple[str, str, str, str], Finding] = {}
        for anchor, finding in self._buckets.values():
            owner = self.top(anchor)
            held = merged.get(owner.key)
            if held is None:
                # The listed object's reference (with its uid and served apiVersion) when known.
                listed = self._owners.get(owner.uid)
                held = merged[owner.key] = Finding(listed[0] if listed else owner)
            held.merge(finding)
        findings = sorted(
            (f for f in merged.values() if f.denied or f.changes or f.access),
            key=lambda f: (f.owner.namespace, f.owner.kind, f.owner.name),
        )
        return AuditResult(
            tuple(findings),
            self.workloads,
            self.pods,
            self.finished_pods,
            self.skipped,
            tuple(self.notes),
            # CUDA first, then the other runtimes by name: the same order on every run.
            tuple(sorted(self.runtime_unknown.items(), key=lambda i: (i[0] != CUDA, i[0]))),
        )


def audit_config(config: WebhookConfig) -> WebhookConfig:
    """The config an audit evaluates with: GPU access findings are listed in every mode (SPEC
    §12), so an admin sees what `warn` or `enforce` would meet before switching them on."""
    if config.gpu_access.checks:
        return config
    access = config.gpu_access.model_copy(update={"mode": "warn"})
    return config.model_copy(update={"gpu_access": access})


def pod_finished(obj: Mapping[str, Any]) -> bool:
    status = obj.get("status")
    return isinstance(status, Mapping) and status.get("phase") in FINISHED_PHASES


def evaluate_object(
    obj: Mapping[str, Any],
    api_version: str,
    kind: str,
    policies: PolicySet,
    config: WebhookConfig,
    *,
    inventory: NodeInventory | None = None,
    claims: ClaimIndex | None = None,
) -> Decision:
    """What admission would answer to this object's creation now (a workload's next change
    re-checks its template the same way). Pods are evaluated in full (their changes are
    reported); workloads for violations only (their notes describe what pods get anyway).
    Never raises: an object the core cannot evaluate is a denial, as in admission."""
    is_pod = kind == "Pod" and api_version == "v1"
    try:
        return evaluate(
            obj,
            policies,
            config,
            kind=kind,
            group=api_version.rpartition("/")[0],
            operation="CREATE",
            inventory=inventory,
            claims=claims,
            violations_only=not is_pod,
            audit=True,
        )
    except WebhookError as exc:
        text = f"cannot evaluate: {exc}"
        rule = "object shape"
    except Exception as exc:  # admission answers an internal error with a denial too
        text = f"internal error evaluating: {type(exc).__name__}: {exc}"
        rule = "internal error"
    ref = ref_text(kind, obj)
    return Decision(object_ref=ref, violations=(Violation(f"{ref}: {text}.", ref, rule=rule),))
