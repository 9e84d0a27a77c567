"""Audit (SPEC §6): what the evaluation says of objects that already run, grouped by owner.

Pure: the caller lists the cluster page by page (webhook.sources.audit), evaluates every object
with the admission core and hands each Decision here. Objects are grouped by their top owner,
found by following `ownerReferences` with `controller: true` through the workloads listed
(Pod → ReplicaSet → Deployment; Pod → Job → CronJob; an operator's pods → its PyTorchJob), so
a Deployment's template and its 100 pods are one finding with counts. Memory is bounded by the
owners, never by the pods: a pod adds to its controller's counters and is then dropped.

Two kinds of links are not plain listed workloads:
- a Pod that controls a workload (LeaderWorkerSet: the leader Pod of each group controls the
  group's worker StatefulSet) is kept as an owner, found because the workload naming it was
  registered before the pods are listed (the sources list workloads first);
- a controller the audit does not list but whose children's labels name their owner (Knative:
  a Revision's Deployment and pods carry the Service's name and uid) is replaced by that owner
  (LABEL_PARENTS), so the chain goes on to the Knative Service and, in KServe's serverless
  mode, to the InferenceService that controls it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from webhook.core.base.errors import WebhookError
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.outcome.decision import Decision, Violation
from webhook.core.placement.inventory import NodeInventory
from webhook.core.policies.policyset import PolicySet
from webhook.core.workloads.claims import ClaimIndex
from webhook.core.workloads.pods import object_ref as ref_text

SOURCE = "gpu-admission-webhook"
# Distinct problems kept per finding (a template's pods share theirs; this only bounds a
# pathological owner whose pods all differ); the rest is counted.
MAX_PROBLEMS = 50
# ownerReferences chains are short (Pod → ReplicaSet → Deployment → an operator's object);
# the cap only guards against a cycle of references.
MAX_OWNER_DEPTH = 8
# Phases of pods that will not run again (core/v1 PodPhase): what they asked for is history.
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
# A controller (group, kind) the audit does not list -> the labels its children carry that name
# the owner to group under instead, first found wins: (name label, uid label, apiVersion, kind).
# knative/serving: a Revision's Deployment (controller: the Revision, pkg/reconciler/revision/
# resources/deploy.go MakeDeployment) and its pods carry the Revision's labels (resources/meta.go
# makeLabels), which carry its Configuration's and, when a Service made it, the Service's name
# and uid (pkg/reconciler/configuration/resources/revision.go; the Configuration's labels are
# set by pkg/reconciler/service/resources/configuration.go MakeConfiguration).
_KNATIVE = "serving.knative.dev"
LABEL_PARENTS: dict[tuple[str, str], tuple[tuple[str, str, str, str], ...]] = {
    (_KNATIVE, "Revision"): (
        (f"{_KNATIVE}/service", f"{_KNATIVE}/serviceUID", f"{_KNATIVE}/v1", "Service"),
        (
            f"{_KNATIVE}/configuration",
            f"{_KNATIVE}/configurationUID",
            f"{_KNATIVE}/v1",
            "Configuration",
        ),
    ),
    (_KNATIVE, "Configuration"): (
        (f"{_KNATIVE}/service", f"{_KNATIVE}/serviceUID", f"{_KNATIVE}/v1", "Service"),
    ),
}


class Ref(NamedTuple):
    """An object as a finding and a report name it (an ObjectReference's fields)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.namespace, self.group, self.kind, self.name)

    def label(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"


def object_ref(obj: Mapping[str, Any], api_version: str, kind: str) -> Ref:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return Ref(
        api_version,
        kind,
        _text(meta.get("namespace")),
        _text(meta.get("name")),
        _text(meta.get("uid")),
    )


def controller_ref(obj: Mapping[str, Any]) -> Ref | None:
    """The ownerReference with `controller: true` (at most one, apimachinery's
    ValidateOwnerReferences), as a Ref in the object's namespace (owners are never in another
    namespace: the garbage collector treats such a reference as absent). A controller of a
    kind in LABEL_PARENTS is replaced by the owner the object's labels name."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    refs = meta.get("ownerReferences")
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            found = Ref(
                _text(ref.get("apiVersion")),
                _text(ref.get("kind")),
                _text(meta.get("namespace")),
                _text(ref.get("name")),
                _text(ref.get("uid")),
            )
            return _label_parent(found, meta.get("labels"))
    return None


def _label_parent(ref: Ref, labels: Any) -> Ref:
    if not isinstance(labels, Mapping):
        return ref
    for name_label, uid_label, api_version, kind in LABEL_PARENTS.get((ref.group, ref.kind), ()):
        name = labels.get(name_label)
        if isinstance(name, str) and name:
            return Ref(api_version, kind, ref.namespace, name, _text(labels.get(uid_label)))
    return ref


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


@dataclass
class Problem:
    """One distinct violation (or change) and where it was found among an owner's objects."""

    policy: str
    rule: str
    message: str  # without the object's own reference, which the finding names
    pods: int = 0  # pods it was found in
    in_owner: bool = False  # found in the owner's own template
    example: str = ""  # the first pod it was found in

    def merge(self, other: Problem) -> None:
        self.pods += other.pods
        self.in_owner = self.in_owner or other.in_owner
        self.example = self.example or other.example


@dataclass
class Finding:
    """Everything the audit found for one top owner (or a Pod without one)."""

    owner: Ref
    denied: dict[tuple[str, str, str], Problem] = field(default_factory=dict)
    changes: dict[tuple[str, str, str], Problem] = field(default_factory=dict)
    # GPU access findings admission only warns about (gpuAccess warn/off): denied ones are in
    # `denied` like every violation.
    access: dict[tuple[str, str, str], Problem] = field(default_factory=dict)
    pods: int = 0  # pods evaluated under this owner
    pods_denied: int = 0
    pods_changed: int = 0
    owner_evaluated: bool = False  # the owner's own object was listed and evaluated
    owner_denied: bool = False
    more: int = 0  # distinct problems past MAX_PROBLEMS

    @property
    def is_pod(self) -> bool:
        return self.owner.kind == "Pod" and self.owner.group == ""

    def add_problem(self, table: dict[tuple[str, str, str], Problem], problem: Problem) -> None:
        key = (problem.policy, problem.rule, problem.message)
        held = table.get(key)
        if held is not None:
            held.merge(problem)
        elif len(table) < MAX_PROBLEMS:
            table[key] = problem
        else:
            self.more += 1

    def merge(self, other: Finding) -> None:
        for problem in other.denied.values():
            self.add_problem(self.denied, problem)
        for problem in other.changes.values():
            self.add_problem(self.changes, problem)
        for problem in other.access.values():
            self.add_problem(self.access, problem)
        self.pods += other.pods
        self.pods_denied += other.pods_denied
        self.pods_changed += other.pods_changed
        self.owner_evaluated = self.owner_evaluated or other.owner_evaluated
        self.owner_denied = self.owner_denied or other.owner_denied
        self.more += other.more

    def scope(self) -> str:
        """What was evaluated: `template, 3 of 3 pods denied` style, for text and reports."""
        if self.is_pod:
            return "the pod"
        parts = []
        if self.owner_evaluated:
            parts.append("template denied" if self.owner_denied else "template allowed")
        if self.pods:
            parts.append(f"{self.pods_denied} of {self.pods} pod(s) denied")
            if self.pods_changed:
                parts.append(f"{self.pods_changed} of {self.pods} would change")
        return ", ".join(parts) or "no pods"

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.owner.namespace,
            "apiVersion": self.owner.api_version,
            "kind": self.owner.kind,
            "name": self.owner.name,
            "denied": bool(self.denied),
            "pods": self.pods,
            "podsDenied": self.pods_denied,
            "podsChanged": self.pods_changed,
            "templateEvaluated": self.owner_evaluated,
            "templateDenied": self.owner_denied,
            "violations": [_problem_json(p) for p in self.denied.values()],
            "changes": [_problem_json(p) for p in self.changes.values()],
            "gpuAccess": [_problem_json(p) for p in self.access.values()],
            "moreProblems": self.more,
        }


def _problem_json(problem: Problem) -> dict[str, Any]:
    return {
        "policy": problem.policy,
        "rule": problem.rule,
        "message": problem.message,
        "pods": problem.pods,
        "template": problem.in_owner,
        "examplePod": problem.example,
    }


def _strip(message: str, ref: str) -> str:
    """`Pod ml/a-1, container "c": x` -> `container "c": x` (the finding names the object)."""
    if ref and message.startswith(ref):
        rest = message[len(ref) :]
        if rest[:2] in (", ", ": "):
            return rest[2:]
    return message


def policy_name(configmap: str) -> str:
    """A violation's policy: its CRL ConfigMap's name (CRLs all live in kube-public), or the
    webhook itself for rules that are not a CRL's (CUDA placement, object shape)."""
    return configmap.rpartition("/")[2] if configmap else SOURCE


@dataclass(frozen=True)
class AuditResult:
    findings: tuple[Finding, ...]  # sorted by namespace, kind, name
    workloads: int  # workload objects evaluated (templates)
    pods: int  # pods evaluated
    finished_pods: int  # pods skipped because they will not run again
    skipped: int = 0  # objects admission lets pass unevaluated (exempt namespace, ...)
    notes: tuple[str, ...] = ()

    @property
    def denied(self) -> list[Finding]:
        return [f for f in self.findings if f.denied]

    @property
    def changed(self) -> list[Finding]:
        return [f for f in self.findings if f.changes]

    @property
    def access(self) -> list[Finding]:
        return [f for f in self.findings if f.access]

    def to_json(self) -> dict[str, Any]:
        return {
            "summary": {
                "denied": len(self.denied),
                "changed": len(self.changed),
                "gpuAccess": len(self.access),
                "workloads": self.workloads,
                "pods": self.pods,
                "finishedPods": self.finished_pods,
                "skipped": self.skipped,
            },
            "findings": [f.to_json() for f in self.findings],
            "notes": list(self.notes),
        }


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
        if is_pod and _text(_meta(obj).get("uid")) in self._owner_pods:
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
