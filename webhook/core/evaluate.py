"""The evaluation core: object + policy snapshot + config -> Decision. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.claims import ClaimIndex, container_claims, pod_claims
from webhook.core.config import ANNOTATION_ENV_FIXES, WebhookConfig
from webhook.core.crl import CRL_NAMESPACE, CRL_PREFIX, LABEL_TYPE, TYPE_VALUE, parse_configmap
from webhook.core.decision import (
    NOTE_LIMIT,
    Decision,
    PodState,
    Violation,
    container_label,
    short,
)
from webhook.core.errors import ObjectShapeError
from webhook.core.patches import Draft
from webhook.core.placement import place
from webhook.core.policyset import PolicySet
from webhook.core.quantity import format_quantity
from webhook.core.registry import WorkloadKind
from webhook.core.rules import cuda
from webhook.core.rules.envfix import env_fixes
from webhook.core.rules.resources import (
    ResourceLists,
    ResourceProblem,
    check,
    defaults,
    used_policies,
)
from webhook.core.workloads import (
    ContainerRef,
    find_pod_specs,
    handles_kind,
    lookup,
    object_ref,
    templates_equal,
)

# Template mutation (config switch) applies to the built-in controllers' templates only.
_MUTABLE_GROUPS = frozenset({"", "apps", "batch"})

__all__ = ["Decision", "Violation", "evaluate", "evaluate_configmap", "handles_kind"]


def _violation(ref: str, where: str, problem: ResourceProblem) -> Violation:
    policy = problem.policy
    value = "" if problem.value is None else f"={format_quantity(problem.value)!r}"
    field_name = f"{problem.field}.{policy.key}"
    text = (
        f"{ref}, {where}: {field_name}{value} {problem.problem} "
        f"({problem.rule} in ConfigMap {policy.configmap})"
    )
    if policy.description_en:
        text += f". {policy.description_en.rstrip('.')}"
    return Violation(text + ".", ref, where, field_name, problem.rule, policy.configmap)


def _resources(state: PodState, c: ContainerRef, policies: PolicySet) -> tuple[set[str], bool]:
    """Defaults then checks for one container; returns (keys used, uses a CRL group)."""
    where = container_label(c)
    lists = ResourceLists.of(c.container, f"{state.ref} {where}")
    keys = lists.keys()
    used = used_policies(keys, policies)
    if not used:
        return keys, False
    changes = defaults(lists, used)
    if changes:
        limits, requests = dict(lists.limits), dict(lists.requests)
        for change in changes:
            target = state.draft.writable((*state.container_path(c), "resources", change.field))
            target[change.key] = change.value
            (limits if change.field == "limits" else requests)[change.key] = change.value
            value = format_quantity(change.value)
            if change.kind == "resource-default":
                state.note(change.kind, f"defaulted {change.key}={value} in {where}")
            else:
                state.note(change.kind, f"set requests.{change.key}={value} from limits in {where}")
        lists = ResourceLists(limits, requests)
        keys = lists.keys()
    state.violations += [
        _violation(state.ref, where, p)
        for p in check(lists, used, is_pod=not state.pod.is_template)
    ]
    return keys, True


def _env(state: PodState, c: ContainerRef, keys: set[str], config: WebhookConfig) -> None:
    additions, warnings = env_fixes(c.container, keys, config.env_fixes)
    where = container_label(c)
    state.warnings += [short(f"{where}: {w}") for w in warnings]
    if not additions:
        return
    container = state.draft.writable(state.container_path(c))
    env = container.get("env")
    if env is not None and not isinstance(env, list):
        raise ObjectShapeError(f"{state.ref} {where}: env must be a list")
    new_env = list(env or [])
    for add in additions:
        new_env.append({"name": add.name, "value": add.value})
        state.note("env-fix", f"set {add.name}={add.value} in {where} ({add.rule} fix)")
    container["env"] = new_env


def _with_role(role: str, warning: str) -> str:
    """`replica Worker: <warning>` when it fits in a warning; else the warning alone, since its
    advice (the annotation to set, ...) matters more than the role and must not be cut."""
    if not role:
        return warning
    text = f"{role}: {warning}"
    return text if len(text) <= NOTE_LIMIT else warning


def _evaluate_spec(
    state: PodState,
    policies: PolicySet,
    config: WebhookConfig,
    inventory: cuda.NodeInventory | None,
    claims: ClaimIndex | None,
    namespace: str | None,
    violations_only: bool,
) -> None:
    pod = state.pod
    # Env fixes only ever add changes and warnings; the CUDA rule can deny only against a node
    # inventory with noCompatibleNode: deny. A violations-only caller skips what cannot deny.
    env_fixes_on = not violations_only and pod.annotations.get(ANNOTATION_ENV_FIXES) != "false"
    cuda_on = not violations_only or (inventory is not None and config.no_compatible_node == "deny")
    dra = pod_claims(pod.spec, namespace, claims, config.gpu_device_classes)
    state.warnings += dra.warnings
    gpu: list[tuple[ContainerRef, set[str]]] = []
    for c in pod.containers:
        keys, crl = _resources(state, c, policies)
        # CRL rules govern extended resources only; a DRA claim on a GPU device class makes a
        # GPU container for placement and env fixes (SPEC §6).
        on_gpu_claim = bool(dra.gpu) and not dra.gpu.isdisjoint(container_claims(c.container))
        if crl or on_gpu_claim or not keys.isdisjoint(config.gpu_resource_names):
            gpu.append((c, keys))
            if env_fixes_on:
                _env(state, c, keys, config)
    if gpu and cuda_on:
        place(state, gpu, config, inventory)


def _evaluate_pod(
    entry: WorkloadKind,
    obj: Mapping[str, Any],
    policies: PolicySet,
    config: WebhookConfig,
    namespace: str | None,
    inventory: cuda.NodeInventory | None,
    claims: ClaimIndex | None,
    violations_only: bool = False,
) -> Decision:
    ref = object_ref(entry.kind, obj, namespace)
    meta = obj.get("metadata")
    ns = namespace or (meta.get("namespace") if isinstance(meta, Mapping) else None)
    draft = Draft(obj)
    violations: list[Violation] = []
    notes: list[tuple[str, str]] = []  # (role, note)
    warnings: list[str] = []
    kinds: list[str] = []
    templates = False
    for pod in find_pod_specs(entry, obj):
        # A template with a role names it in every message: `PyTorchJob ml/bert, replica
        # Worker, container "pytorch": ...`.
        state = PodState(f"{ref}, {pod.role}" if pod.role else ref, pod, draft)
        _evaluate_spec(state, policies, config, inventory, claims, ns, violations_only)
        templates = templates or pod.is_template
        violations += state.violations
        kinds += state.kinds
        notes += [(pod.role, n) for n in state.notes]
        warnings += [_with_role(pod.role, w) for w in state.warnings]
    if violations_only:
        return Decision(object_ref=ref, violations=tuple(violations))
    mutated: Mapping[str, Any] | None = draft.root if draft.changed else None
    texts = [n for _, n in notes]
    # Operator workloads are never mutated (their operator builds the pods; GitOps drift).
    if templates and (not config.mutate_templates or entry.group not in _MUTABLE_GROUPS):
        texts = [short(f"will apply to {role + ' ' if role else ''}pods: {n}") for role, n in notes]
        mutated = None
    return Decision(
        object_ref=ref,
        violations=tuple(violations),
        notes=tuple(texts),
        warnings=tuple(dict.fromkeys(warnings)),
        mutation_kinds=tuple(kinds) if mutated is not None else (),
        original=obj,
        mutated=mutated,
    )


def evaluate(
    obj: Mapping[str, Any],
    policies: PolicySet,
    config: WebhookConfig,
    *,
    kind: str | None = None,
    group: str | None = None,
    namespace: str | None = None,
    operation: str = "CREATE",
    sub_resource: str = "",
    old_object: Mapping[str, Any] | None = None,
    inventory: cuda.NodeInventory | None = None,
    claims: ClaimIndex | None = None,
    violations_only: bool = False,
) -> Decision:
    """Evaluate one admitted object. Raises only WebhookError subclasses on malformed input.

    `violations_only=True` (what /validate needs) returns the same violations for Pods and
    templates but skips the work that can only produce changes and warnings, so its Decision
    has no notes, warnings or patch. CRL ConfigMaps are always evaluated in full.

    `group` is the object's API group ("" for the core group, None when unknown: then it is
    taken from the object's apiVersion); `sub_resource` and `old_object` come from the
    AdmissionReview; `inventory` and `claims` are the cluster snapshots (None: not known).
    """
    if not isinstance(obj, Mapping):
        raise ObjectShapeError(f"the object must be a JSON object, got {type(obj).__name__}")
    kind = kind or (obj.get("kind") if isinstance(obj.get("kind"), str) else None) or ""
    if operation not in ("CREATE", "UPDATE"):
        return Decision(handled=False, object_ref=object_ref(kind, obj, namespace))
    if kind == "ConfigMap":
        return evaluate_configmap(obj, policies, operation=operation, namespace=namespace)
    entry = lookup(kind, obj, group, config)
    if entry is None or (entry.kind == "Pod" and entry.group == "" and operation != "CREATE"):
        return Decision(handled=False, object_ref=object_ref(kind, obj, namespace))
    meta = obj.get("metadata")
    ns = namespace or (meta.get("namespace") if isinstance(meta, Mapping) else None)
    if ns in config.exempt_namespaces:
        return Decision(object_ref=object_ref(kind, obj, namespace))
    if (
        operation == "UPDATE"
        and old_object is not None
        and templates_equal(entry.group, kind, obj, old_object, config)
    ):
        # SPEC §6: an UPDATE that leaves every pod template as it was is allowed untouched.
        return Decision(object_ref=object_ref(kind, obj, namespace))
    return _evaluate_pod(
        entry, obj, policies, config, namespace, inventory, claims, violations_only
    )


def evaluate_configmap(
    cm: Mapping[str, Any],
    policies: PolicySet,
    *,
    operation: str = "CREATE",
    namespace: str | None = None,
) -> Decision:
    """Admission of a CRL ConfigMap (SPEC §6): lint, plus duplicate keys among enabled CRLs."""
    meta = cm.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name") if isinstance(meta.get("name"), str) else ""
    ns = meta.get("namespace") or namespace or ""
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    assert isinstance(name, str) and isinstance(labels, Mapping)
    ref = f"ConfigMap {ns}/{name}"
    crl_name = ns == CRL_NAMESPACE and name.startswith(CRL_PREFIX)
    # The type label is shared with other feature types: only its CRL value makes a CRL. A
    # cf-crl-* ConfigMap with another value is most likely a typo, so it is linted (denied).
    typed = labels.get(LABEL_TYPE) == TYPE_VALUE or (crl_name and LABEL_TYPE in labels)
    if not typed:
        if crl_name:
            return Decision(
                object_ref=ref,
                warnings=(f"{ref} has no {LABEL_TYPE} label: it is not a CRL and is inactive",),
            )
        return Decision(handled=False, object_ref=ref)
    if ns != CRL_NAMESPACE:
        return Decision(
            object_ref=ref,
            warnings=(
                short(
                    f"{ref} is labelled as a CRL but CRLs are read from kube-public only: ignored"
                ),
            ),
        )
    parsed = parse_configmap({**cm, "metadata": {**meta, "namespace": ns}})
    violations = [Violation(f"{ref}: {error}.", ref, rule="crl") for error in parsed.errors]
    lim = parsed.limitation
    if parsed.active and lim is not None:
        holder = policies.by_key.get(lim.key)
        if holder is not None and holder.configmap != lim.configmap:
            violations.append(
                Violation(
                    f"{ref}: key {lim.key} is already defined by the enabled ConfigMap "
                    f"{holder.configmap}; edit that one, disable it first, or set "
                    'features.alauda.io/enabled: "false" here.',
                    ref,
                    rule="unique key",
                )
            )
    return Decision(
        object_ref=ref,
        violations=tuple(violations),
        # No "{ref}: " prefix: kubectl shows these right under the object being applied, and
        # the prefix pushed the meaning ("...: this policy is inactive") past the 120-char cut.
        warnings=tuple(short(w) for w in parsed.warnings),
    )
