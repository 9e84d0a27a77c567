"""One pod spec evaluated (SPEC §6): its containers through every rule family, then placement,
gathered into the Decision for a pod or a workload template."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.base.annotations import parse_opt_out
from webhook.core.base.patches import Draft
from webhook.core.base.wording import Message, fit
from webhook.core.config.model import ANNOTATION_ENV_FIXES, WebhookConfig
from webhook.core.evaluation.containers import apply_access, apply_fixes, apply_resources
from webhook.core.images.facts import ImageFacts, ImageQuery
from webhook.core.kinds.registry import WorkloadKind
from webhook.core.outcome.decision import (
    Decision,
    PodState,
    Violation,
    short,
)
from webhook.core.placement.inventory import NodeInventory
from webhook.core.placement.place import place
from webhook.core.policies.gpu_keys import unknown_gpu_warning
from webhook.core.policies.policyset import PolicySet
from webhook.core.workloads.claims import ClaimIndex, pod_claims
from webhook.core.workloads.pods import (
    ContainerRef,
    find_pod_specs,
)


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
    access_only: bool = False,
) -> None:
    pod = state.pod
    if access_only:
        _access_only(state, policies, config, claims, namespace, audit)
        return
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
        keys = apply_resources(state, c, policies, config)
        # CRL rules govern extended resources only; a DRA claim on a GPU device class makes a
        # GPU container for placement and env fixes (SPEC §6).
        # Only the claims' requests it names (resources.claims[].request) count.
        on_gpu_claim = dra.uses_gpu(c.container)
        if keys.crl or keys.gpu or on_gpu_claim:
            gpu.append((c, keys.asked))
            devices.append(c)
            if env_fixes_on:
                apply_fixes(state, c, keys.asked, config)
        elif dra.unknown and dra.may_use_gpu(c.container):
            devices.append(c)
        if keys.unknown:
            unknown += [key for key in keys.unknown if key not in unknown]
    if unknown and not violations_only:
        state.warnings.append(unknown_gpu_warning(sorted(unknown)))
    state.gpu_containers = len(gpu)
    if config.gpu_access.checks and namespace not in config.gpu_access.exempt_namespaces:
        apply_access(state, devices, config, violations_only, audit)
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


def _access_only(
    state: PodState,
    policies: PolicySet,
    config: WebhookConfig,
    claims: ClaimIndex | None,
    namespace: str | None,
    audit: bool,
) -> None:
    """GPU access control alone (a Pod UPDATE, the ephemeralcontainers subresource): which
    containers have devices is read as on CREATE, on a scratch state, so that no CRL default,
    CRL violation, env fix or placement of the pod is judged again."""
    if not config.gpu_access.checks or namespace in config.gpu_access.exempt_namespaces:
        return
    scratch = PodState(state.ref, state.pod, Draft(state.draft.original, record=False))
    dra = pod_claims(state.pod.spec, namespace, claims, config.gpu_device_classes)
    devices: list[ContainerRef] = []
    for c in state.pod.containers:
        keys = apply_resources(scratch, c, policies, config)
        # As _evaluate_spec counts them: GPU keys, a GPU claim, or a claim not known yet.
        unknown_claim = dra.unknown and dra.may_use_gpu(c.container)
        if keys.crl or keys.gpu or dra.uses_gpu(c.container) or unknown_claim:
            devices.append(c)
    apply_access(state, devices, config, False, audit)


def evaluate_pod(
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
    access_only: bool = False,
) -> Decision:
    """`ref` and `ns` are the object reference and namespace evaluate() already worked out.
    `access_only`: GPU access control alone (pod_updates.py), always drafted in full."""
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
            access_only,
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
