"""The evaluation core: object + policy snapshot + config -> Decision. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.access import control as access
from webhook.core.base.annotations import parse_opt_out
from webhook.core.base.errors import ObjectShapeError
from webhook.core.base.patches import Draft
from webhook.core.base.quantity import format_quantity
from webhook.core.base.wording import Message, after, fit
from webhook.core.config.model import ANNOTATION_ENV_FIXES, WebhookConfig
from webhook.core.envfix.fixes import env_fixes
from webhook.core.evaluation.updates import allowed_untouched, may_mutate_template, templates_equal
from webhook.core.images.facts import ImageFacts, ImageQuery
from webhook.core.kinds.registry import WorkloadKind
from webhook.core.outcome.decision import (
    Decision,
    PodState,
    Violation,
    container_label,
    short,
)
from webhook.core.placement.cuda import known_cuda_image
from webhook.core.placement.inventory import NodeInventory
from webhook.core.placement.place import place
from webhook.core.policies.crl import (
    CRL_NAMESPACE,
    CRL_PREFIX,
    LABEL_ENABLED,
    LABEL_TYPE,
    TYPE_VALUE,
    parse_configmap,
)
from webhook.core.policies.gpu_keys import GpuKeys, says_gpu, unknown_gpu_warning
from webhook.core.policies.policyset import PolicySet
from webhook.core.policies.resources import (
    MISSING,
    ResourceLists,
    ResourceProblem,
    check,
    defaults,
    used_policies,
    value_checks,
)
from webhook.core.workloads.claims import ClaimIndex, pod_claims
from webhook.core.workloads.devices import VISIBLE_DEVICES, VOID
from webhook.core.workloads.pods import (
    ContainerRef,
    find_pod_specs,
    handles_kind,
    lookup,
    object_ref,
)

# Template mutation (config switch) applies to the built-in controllers' templates only.
_MUTABLE_GROUPS = frozenset({"", "apps", "batch"})

__all__ = ["Decision", "Violation", "evaluate", "evaluate_configmap", "handles_kind"]


def _violation(ref: str, where: str, problem: ResourceProblem) -> Violation:
    policy = problem.policy
    value = "" if problem.value is MISSING else f"={format_quantity(problem.value)!r}"
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


def _resources(
    state: PodState, c: ContainerRef, policies: PolicySet, config: WebhookConfig
) -> GpuKeys:
    """Defaults then checks for one container; returns what its keys ask for.

    A key set to zero asks for nothing (SPEC §3): it uses no group, is not asked for, makes
    no GPU container, and only its own value checks run.
    """
    where = container_label(c)
    lists = ResourceLists.of(c.container, f"{state.ref} {where}")
    keys = lists.keys()
    if not keys:
        return GpuKeys(keys, False, False, [])
    # Only keys that can make a GPU container need their values read (cpu, memory need not:
    # an extended resource is always domain-prefixed, so without a "/" only an exact name can
    # match, and no pattern or name check runs for them).
    by_key, gpu_names = policies.by_key, config.gpu_resources
    candidates = [
        key
        for key in keys
        if key in by_key
        or key in gpu_names.exact
        or ("/" in key and (key in gpu_names or says_gpu(key, config)))
    ]
    if not candidates:
        return GpuKeys(keys, False, False, [])
    zero_keys = lists.zero_keys(candidates)
    asked = keys - zero_keys if zero_keys else keys
    gpu = False
    unknown: list[str] = []
    for key in candidates:
        if key in zero_keys or key in policies.by_key:
            continue
        if key in gpu_names:
            gpu = True
        else:
            unknown.append(key)
    used = used_policies(asked, policies)
    is_pod = not state.pod.is_template
    if zero_keys:
        used_groups = {p.group for p in used}
        zero = [
            policy
            for key in sorted(zero_keys)
            if (policy := policies.by_key.get(key)) is not None and policy.group not in used_groups
        ]
        state.violations += [
            _violation(state.ref, where, p) for p in value_checks(lists, zero, is_pod=is_pod)
        ]
    if not used:
        return GpuKeys(asked, False, gpu, unknown)
    changes = defaults(lists, used)
    derived: frozenset[tuple[str, str]] = frozenset()
    if changes:
        limits, requests = dict(lists.limits), dict(lists.requests)
        resources = (*state.container_path(c), "resources")
        for change in changes:
            state.draft.set((*resources, change.field), change.key, change.value)
            (limits if change.field == "limits" else requests)[change.key] = change.value
            value = format_quantity(change.value)
            if change.kind == "resource-default":
                state.note(change.kind, f"defaulted {change.key}={value} in {where}")
            else:
                state.note(change.kind, f"set requests.{change.key}={value} from limits in {where}")
        lists = ResourceLists(limits, requests)
        asked |= {change.key for change in changes}
        derived = frozenset((change.field, change.key) for change in changes)
    state.violations += [
        _violation(state.ref, where, p) for p in check(lists, used, is_pod=is_pod, derived=derived)
    ]
    return GpuKeys(asked, True, gpu, unknown)


def _env(state: PodState, c: ContainerRef, keys: set[str], config: WebhookConfig) -> None:
    additions, warnings = env_fixes(c.container, keys, config.env_fixes)
    where = container_label(c)
    state.warnings += [after(f"{where}: ", w) for w in warnings]
    if not additions:
        return
    env = c.container.get("env")
    if env is not None and not isinstance(env, list):
        raise ObjectShapeError(f"{state.ref} {where}: env must be a list")
    state.draft.extend(
        state.container_path(c), "env", [{"name": a.name, "value": a.value} for a in additions]
    )
    for add in additions:
        state.note("env-fix", f"set {add.name}={add.value} in {where} ({add.rule} fix)")


_IMAGE_FINDING = (
    "runs a CUDA image, which gives it every GPU of its node, but requests no GPU: "
    "gpuAccess enforce sets NVIDIA_VISIBLE_DEVICES=void"
)
# Said once per denial, after the findings (Violation.description).
_ACCESS_WHY = "GPUs reached without a request are counted by no quota, CRL or scheduler."


def _access(
    state: PodState,
    gpu: list[ContainerRef],
    config: WebhookConfig,
    violations_only: bool,
    audit: bool,
) -> None:
    """GPU access control for one pod spec (SPEC §12): findings become warnings (`warn`) or
    violations (`enforce`), and under `enforce` containers whose image would hand them every
    GPU of the node get NVIDIA_VISIBLE_DEVICES=void."""
    rules = config.gpu_access
    enforce = rules.mode == "enforce"
    found, candidates = access.findings(
        state.pod, gpu, config.gpu_request_advice, rules.runtime_class_names
    )
    for finding in found:
        detail = f"{state.ref}, {finding.text()}."
        violation = Violation(
            f"{detail} {_ACCESS_WHY}",
            state.ref,
            finding.container,
            rule=access.RULE,
            configmap=access.POLICY,
            detail=detail,
            description=_ACCESS_WHY,
        )
        state.access.append(violation)
        if enforce:
            state.violations.append(violation)
        elif not violations_only:
            state.warnings.append(short(finding.text()))
    # Outside enforce, what void would change is only listed for the audit.
    if violations_only or rules.void_image_devices == "off" or not (enforce or audit):
        return
    for candidate in candidates:
        c = candidate.ref
        known = candidate.cuda or known_cuda_image(c.container.get("image"), config)
        if not known and not (enforce and rules.void_image_devices == "all"):
            continue
        where = container_label(c)
        if not enforce:
            # Not a warning: every CPU pod on a CUDA image would get one. The audit lists it,
            # so an admin sees what `enforce` would change before switching it on.
            state.access.append(
                Violation(
                    f"{state.ref}, {where} {_IMAGE_FINDING}.",
                    state.ref,
                    where,
                    rule=access.RULE,
                    configmap=access.POLICY,
                )
            )
            continue
        env = c.container.get("env")
        if env is not None and not isinstance(env, list):
            raise ObjectShapeError(f"{state.ref} {where}: env must be a list")
        state.draft.extend(
            state.container_path(c), "env", [{"name": VISIBLE_DEVICES, "value": VOID}]
        )
        why = "its CUDA image would give it every GPU" if known else "it requests no GPU"
        state.note("gpu-access", f"set {VISIBLE_DEVICES}=void in {where}: {why}")


def _note_prefixes(role: str) -> tuple[str, ...]:
    """What a template's notes start with, longest first (the role is never left out)."""
    if not role:
        return ("will apply to pods: ", "for pods: ")
    return (f"will apply to {role} pods: ", f"for {role} pods: ")


def _evaluate_spec(
    state: PodState,
    policies: PolicySet,
    config: WebhookConfig,
    inventory: NodeInventory | None,
    claims: ClaimIndex | None,
    namespace: str | None,
    violations_only: bool,
    images: ImageFacts | None = None,
    daemonset: bool = False,
    audit: bool = False,
) -> None:
    pod = state.pod
    # Env fixes only ever add changes and warnings: a violations-only caller skips them.
    # Placement always runs: containers that no single node can serve are a violation.
    env_fixes_on = False
    if not violations_only:
        opted_out, warning = parse_opt_out(
            ANNOTATION_ENV_FIXES, pod.annotations.get(ANNOTATION_ENV_FIXES)
        )
        env_fixes_on = not opted_out
        if warning:
            state.warnings.append(short(warning))
    dra = pod_claims(pod.spec, namespace, claims, config.gpu_device_classes)
    state.warnings += dra.warnings
    gpu: list[tuple[ContainerRef, set[str]]] = []
    unknown: list[str] = []
    # Containers that request GPUs (or may, through a claim the cache does not know yet).
    devices: list[ContainerRef] = []
    for c in pod.containers:
        keys = _resources(state, c, policies, config)
        # CRL rules govern extended resources only; a DRA claim on a GPU device class makes a
        # GPU container for placement and env fixes (SPEC §6).
        # Only the claims' requests it names (resources.claims[].request) count.
        on_gpu_claim = dra.uses_gpu(c.container)
        if keys.crl or keys.gpu or on_gpu_claim:
            gpu.append((c, keys.asked))
            devices.append(c)
            if env_fixes_on:
                _env(state, c, keys.asked, config)
        elif dra.unknown and dra.may_use_gpu(c.container):
            devices.append(c)
        if keys.unknown:
            unknown += [key for key in keys.unknown if key not in unknown]
    if unknown and not violations_only:
        state.warnings.append(unknown_gpu_warning(sorted(unknown)))
    state.gpu_containers = len(gpu)
    if config.gpu_access.checks and namespace not in config.gpu_access.exempt_namespaces:
        _access(state, devices, config, violations_only, audit)
    if gpu:
        place(
            state,
            gpu,
            config,
            inventory,
            policies,
            violations_only=violations_only,
            images=images,
            daemonset=daemonset,
        )


def _evaluate_pod(
    entry: WorkloadKind,
    obj: Mapping[str, Any],
    policies: PolicySet,
    config: WebhookConfig,
    ref: str,
    ns: str | None,
    inventory: NodeInventory | None,
    claims: ClaimIndex | None,
    *,
    mutate_template: bool,
    violations_only: bool = False,
    images: ImageFacts | None = None,
    audit: bool = False,
) -> Decision:
    """`ref` and `ns` are the object reference and namespace evaluate() already worked out."""
    # The places written are recorded only when a patch can be asked for: a Pod's (or a
    # mutated template's) full evaluation.
    draft = Draft(
        obj,
        record=not violations_only and (mutate_template or not entry.templates),
    )
    violations: list[Violation] = []
    notes: list[tuple[str, Message]] = []  # (role, note)
    warnings: list[str] = []
    kinds: list[str] = []
    unresolved: list[ImageQuery] = []
    access_found: list[Violation] = []
    placements: list[str] = []
    cuda_unknown: list[str] = []
    gpu_containers = 0
    templates = False
    # A DaemonSet's pods are pinned to their nodes and get no affinity (SPEC §4): its template
    # says so. Unless the template itself is mutated: the controller runs pods only on the
    # nodes its required affinity matches (pkg/controller/daemon NodeShouldRunDaemonPod ->
    # predicates -> nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)).
    daemonset = entry.group == "apps" and entry.kind == "DaemonSet" and not mutate_template
    for pod in find_pod_specs(entry, obj):
        # A template with a role names it in every message: `PyTorchJob ml/bert, replica
        # Worker, container "pytorch": ...`. A pod made up from an operator's fields (TrainJob's
        # trainer) drafts on its own scratch object: there is nothing of the object to mutate.
        pod_draft = draft
        if pod.scratch is not None:
            pod_draft, mutate_template = Draft(pod.scratch), False
        state = PodState(f"{ref}, {pod.role}" if pod.role else ref, pod, pod_draft)
        _evaluate_spec(
            state,
            policies,
            config,
            inventory,
            claims,
            ns,
            violations_only,
            images,
            daemonset,
            audit,
        )
        templates = templates or pod.is_template
        if state.unresolved:
            unresolved += state.unresolved
        if state.access:
            access_found += state.access
        if state.placements:
            placements += state.placements
        if state.cuda_unknown:
            cuda_unknown += state.cuda_unknown
        gpu_containers += state.gpu_containers
        violations += state.violations
        kinds += state.kinds
        notes += [(pod.role, n) for n in state.notes]
        # `replica Worker: <warning>`: the role stays whole, the wording gets shorter (fit).
        prefixes = (f"{pod.role}: ",) if pod.role else ("",)
        warnings += [fit(w, prefixes) for w in state.warnings]
    unresolved_images = tuple(dict.fromkeys(unresolved)) if unresolved else ()
    if violations_only:
        return Decision(
            object_ref=ref,
            violations=tuple(violations),
            unresolved_images=unresolved_images,
            access=tuple(access_found),
            gpu_containers=gpu_containers,
            cuda_unknown=tuple(cuda_unknown) if cuda_unknown else (),
        )
    mutated: Mapping[str, Any] | None = draft.root if draft.changed else None
    # Operator workloads are never mutated (their operator builds the pods; GitOps drift).
    if templates and not mutate_template:
        texts = [fit(n, _note_prefixes(role)) for role, n in notes]
        mutated = None
    else:
        texts = [fit(n) for _, n in notes]
    return Decision(
        object_ref=ref,
        violations=tuple(violations),
        notes=tuple(texts),
        warnings=tuple(dict.fromkeys(warnings)),
        mutation_kinds=tuple(kinds) if mutated is not None else (),
        original=obj,
        mutated=mutated,
        draft=draft if mutated is not None and draft.writes is not None else None,
        unresolved_images=unresolved_images,
        access=tuple(access_found),
        placements=tuple(placements) if mutated is not None and placements else (),
        gpu_containers=gpu_containers,
        cuda_unknown=tuple(cuda_unknown) if cuda_unknown else (),
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
    inventory: NodeInventory | None = None,
    claims: ClaimIndex | None = None,
    violations_only: bool = False,
    images: ImageFacts | None = None,
    audit: bool = False,
) -> Decision:
    """Evaluate one admitted object. Raises only WebhookError subclasses on malformed input.

    `violations_only=True` (what /validate needs) returns the same violations for Pods and
    templates but skips the work that can only produce changes and warnings, so its Decision
    has no notes, warnings or patch. CRL ConfigMaps are always evaluated in full.

    `group` is the object's API group ("" for the core group, None when unknown: then it is
    taken from the object's apiVersion); `sub_resource` and `old_object` come from the
    AdmissionReview; `inventory` and `claims` are the cluster snapshots (None: not known);
    `images` the CUDA versions read from images' registries, for the images an earlier
    evaluation listed in `Decision.unresolved_images` (SPEC §4 step 6). `audit=True` also
    lists, in `Decision.access`, the containers `gpuAccess: enforce` would give
    NVIDIA_VISIBLE_DEVICES=void (what the audit reports, never a warning).
    """
    if not isinstance(obj, Mapping):
        raise ObjectShapeError(f"the object must be a JSON object, got {type(obj).__name__}")
    kind = kind or (obj.get("kind") if isinstance(obj.get("kind"), str) else None) or ""
    # DELETE and CONNECT are never denied (nothing to check, and a denial could only wedge
    # whoever deletes); Pods are checked once, on CREATE (a Pod's spec is all but immutable).
    if operation not in ("CREATE", "UPDATE"):
        return Decision(handled=False, object_ref=object_ref(kind, obj, namespace))
    entry = None
    if kind != "ConfigMap":
        entry = lookup(kind, obj, group, config)
        if entry is None or (entry.kind == "Pod" and entry.group == "" and operation != "CREATE"):
            return Decision(handled=False, object_ref=object_ref(kind, obj, namespace))
    ref = object_ref(kind, obj, namespace)
    # Early "allowed because ..." guards (SPEC §6, updates and the controllers that make them):
    # no evaluation, no patch, no warning.
    if reason := allowed_untouched(kind, obj, sub_resource):
        return Decision(object_ref=ref, reason=reason)
    if entry is None:
        return evaluate_configmap(obj, policies, operation=operation, namespace=namespace)
    meta = obj.get("metadata")
    # A namespace that is not a string is no namespace (the API server never sends one; a
    # manifest given to the CLI may hold anything).
    meta_ns = meta.get("namespace") if isinstance(meta, Mapping) else None
    ns = namespace or (meta_ns if isinstance(meta_ns, str) else None)
    if ns in config.exempt_namespaces:
        return Decision(object_ref=ref, reason=f"namespace {ns} is exempt")
    if (
        operation == "UPDATE"
        and old_object is not None
        and templates_equal(entry.group, kind, obj, old_object, config)
    ):
        # One comparison of the templates, no second evaluation.
        return Decision(object_ref=ref, reason="the pod template is unchanged")
    # Template mutation (config switch) only for the built-in controllers' templates, and
    # never where the API server forbids the change (a Job's template on UPDATE).
    mutate_template = (
        config.mutate_templates
        and entry.group in _MUTABLE_GROUPS
        and may_mutate_template(kind, operation)
    )
    return _evaluate_pod(
        entry,
        obj,
        policies,
        config,
        ref,
        ns,
        inventory,
        claims,
        mutate_template=mutate_template,
        violations_only=violations_only,
        images=images,
        audit=audit,
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
    if labels.get(LABEL_ENABLED) != "true":
        # SPEC §6: turning a CRL off is always allowed, so an admin can disable a broken
        # policy without fixing it first; what is wrong with it is still said, as warnings.
        return Decision(
            object_ref=ref,
            warnings=tuple(short(w) for w in (*parsed.warnings, *parsed.errors)),
        )
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
