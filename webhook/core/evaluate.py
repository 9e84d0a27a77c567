"""The evaluation core: object + policy snapshot + config -> Decision. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.claims import ClaimIndex
from webhook.core.config import ANNOTATION_ENV_FIXES, WebhookConfig
from webhook.core.crl import CRL_NAMESPACE, CRL_PREFIX, LABEL_TYPE, TYPE_VALUE, parse_configmap
from webhook.core.decision import Decision, PodState, Violation, container_label, short
from webhook.core.errors import ObjectShapeError
from webhook.core.patches import Draft
from webhook.core.placement import place
from webhook.core.policyset import PolicySet
from webhook.core.quantity import format_quantity
from webhook.core.rules import cuda
from webhook.core.rules.envfix import env_fixes
from webhook.core.rules.resources import (
    ResourceLists,
    ResourceProblem,
    check,
    defaults,
    used_policies,
)
from webhook.core.workloads import ContainerRef, find_pod_spec, handles_kind, object_ref

__all__ = ["Decision", "Violation", "evaluate", "evaluate_configmap", "handles_kind"]


def _violation(ref: str, where: str, problem: ResourceProblem) -> Violation:
    policy = problem.policy
    value = "" if problem.value is None else f"={format_quantity(problem.value)!r}"
    field_name = f"{problem.field}.{policy.key}"
    detail = (
        f"{ref}, {where}: {field_name}{value} {problem.problem} "
        f"({problem.rule} in ConfigMap {policy.configmap})"
    )
    description = policy.description_en.rstrip(".")
    text = f"{detail}. {description}." if description else f"{detail}."
    return Violation(
        text,
        ref,
        where,
        field_name,
        problem.rule,
        policy.configmap,
        detail=f"{detail}.",
        description=f"{description}." if description else "",
    )


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


def _evaluate_pod(
    kind: str,
    obj: Mapping[str, Any],
    policies: PolicySet,
    config: WebhookConfig,
    namespace: str | None,
    inventory: cuda.NodeInventory | None,
    violations_only: bool = False,
) -> Decision:
    ref = object_ref(kind, obj, namespace)
    pod = find_pod_spec(kind, obj)
    if pod is None:
        return Decision(object_ref=ref)
    state = PodState(ref, pod, Draft(obj))
    # Env fixes only ever add changes and warnings; the CUDA rule can deny only against a node
    # inventory with noCompatibleNode: deny. A violations-only caller skips what cannot deny.
    env_fixes_on = not violations_only and pod.annotations.get(ANNOTATION_ENV_FIXES) != "false"
    cuda_on = not violations_only or (inventory is not None and config.no_compatible_node == "deny")
    gpu: list[tuple[ContainerRef, set[str]]] = []
    for c in pod.containers:
        keys, crl = _resources(state, c, policies)
        if crl or not keys.isdisjoint(config.gpu_resource_names):
            gpu.append((c, keys))
            if env_fixes_on:
                _env(state, c, keys, config)
    if gpu and cuda_on:
        place(state, gpu, config, inventory)
    if violations_only:
        return Decision(object_ref=ref, violations=tuple(state.violations))
    notes = state.notes
    mutated: Mapping[str, Any] | None = state.draft.root if state.draft.changed else None
    if pod.is_template and not config.mutate_templates:
        notes = [short(f"will apply to pods: {n}") for n in notes]
        mutated = None
    return Decision(
        object_ref=ref,
        violations=tuple(state.violations),
        notes=tuple(notes),
        warnings=tuple(dict.fromkeys(state.warnings)),
        mutation_kinds=tuple(state.kinds) if mutated is not None else (),
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
    if not handles_kind(kind) or (kind == "Pod" and operation != "CREATE"):
        return Decision(handled=False, object_ref=object_ref(kind, obj, namespace))
    meta = obj.get("metadata")
    ns = namespace or (meta.get("namespace") if isinstance(meta, Mapping) else None)
    if ns in config.exempt_namespaces:
        return Decision(
            object_ref=object_ref(kind, obj, namespace), reason=f"namespace {ns} is exempt"
        )
    return _evaluate_pod(kind, obj, policies, config, namespace, inventory, violations_only)


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
