"""One pod spec evaluated (SPEC §6): its containers through every rule family, then placement,
gathered into the Decision for a pod or a workload template."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.access.control import AccessFinding, container_families, ephemeral_containers
from webhook.core.base.annotations import parse_opt_out
from webhook.core.base.patches import Draft
from webhook.core.base.shapes import as_dict, is_mapping
from webhook.core.base.wording import Message, fit
from webhook.core.config.model import ANNOTATION_ENV_FIXES, WebhookConfig
from webhook.core.evaluation.containers import (
    AccessUpdate,
    access_findings,
    apply_access,
    apply_fixes,
    apply_resources,
)
from webhook.core.evaluation.families import (
    NVIDIA_ONLY,
    access_families,
    claimed_families,
    sure_families,
)
from webhook.core.images.facts import ImageEnv, ImageFacts, ImageQuery
from webhook.core.kinds.registry import WorkloadKind
from webhook.core.outcome.decision import (
    CUDA,
    Decision,
    PodState,
    Violation,
    short,
)
from webhook.core.placement.engine import place_family
from webhook.core.placement.gate import TableFamily
from webhook.core.placement.inventory import NodeInventory
from webhook.core.placement.place import CudaFamily
from webhook.core.placement.vendors import Vendor, vendor_of
from webhook.core.policies.gpu_keys import unknown_gpu_warning
from webhook.core.policies.policyset import PolicySet
from webhook.core.runtimefix.apply import apply_runtime_fixes
from webhook.core.runtimefix.rdma import NamespaceLevels
from webhook.core.workloads.claims import (
    ClaimIndex,
    classes_of,
    nvidia_classes,
    pod_claims,
)
from webhook.core.workloads.pods import (
    ContainerRef,
    PodSpecRef,
    find_pod_specs,
)


def access_applies(config: WebhookConfig, namespace: str | None) -> bool:
    """Whether GPU access control judges pods of `namespace`."""
    # `mode != "off"` is GpuAccess.checks, without its interpreted property.
    rules = config.gpu_access
    return rules.mode != "off" and namespace not in rules.exempt_namespaces


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
    levels: NamespaceLevels | None = None,
    platforms: Mapping[str, tuple[str, ...]] | None = None,
    image_env: ImageEnv | None = None,
) -> None:
    pod = state.pod
    # Env fixes only ever add changes and warnings: a violations-only caller skips them.
    # Placement always runs: containers that no single node can serve are a violation.
    env_fixes_on = False
    if not violations_only:
        opted_out, warning = parse_opt_out(
            ANNOTATION_ENV_FIXES, as_dict(pod.annotations).get(ANNOTATION_ENV_FIXES)
        )
        env_fixes_on = not opted_out
        if warning:
            state.warnings.append(short(warning))
    known = classes_of(claims)
    nvidia = nvidia_classes(config.gpu_device_classes, claims)
    dra = pod_claims(pod.spec, namespace, claims, nvidia)
    state.warnings += dra.warnings
    # Claims on the other vendors' DRA device classes (AMD's gpu.amd.com, ...): their
    # containers have that family's devices (its unknown-claim warning is dra's).
    vendor_claims = pod_claims(pod.spec, namespace, claims, known.vendors)
    gpu: list[tuple[ContainerRef, set[str]]] = []
    unknown: list[str] = []
    # id(container) -> the device families it requests (GPU access control). A claim the
    # cache does not know yet makes no device container: its container is judged like any.
    devices: dict[int, frozenset[str]] = {}
    # The same for GPU access control: only the claims surely allocated from a vendor's class.
    access_devices: dict[int, frozenset[str]] = {}
    keyed: list[tuple[ContainerRef, set[str]]] = []  # every container's keys (runtime fixes)
    # Every vendor's accelerator containers (SPEC §14): the runtime fixes' containers.
    accelerators: list[tuple[ContainerRef, set[str]]] = []
    # Containers on other vendors' devices (SPEC §13), by vendor: their driver-release gate.
    vendors: dict[str, tuple[Vendor, list[ContainerRef]]] = {}
    for c in pod.containers:
        keys = apply_resources(state, c, policies, config)
        keyed.append((c, keys.asked))
        # KEP-5004 names (a DeviceClass's extendedResourceName, deviceclass.resource.
        # kubernetes.io/<class>) are the class's vendor's devices, served by DRA (SPEC §13).
        drawn = known.resources(keys.asked, nvidia) if keys.asked else {}
        if drawn:
            keys.unknown = [key for key in keys.unknown if key not in drawn]
        # CRL rules govern extended resources only; a DRA claim on a GPU device class makes a
        # GPU container for placement and env fixes (SPEC §6).
        # Only the claims' requests it names (resources.claims[].request) count.
        on_gpu_claim = dra.uses_gpu(c.container) or "nvidia" in drawn.values()
        families = container_families(c.container)
        if drawn:
            families |= frozenset(f for f in drawn.values() if f != "nvidia")
        if keys.crl or keys.gpu or on_gpu_claim:
            gpu.append((c, keys.asked))
            if env_fixes_on:
                apply_fixes(state, c, keys.asked, config)
            # The configured GPU resources and device classes are NVIDIA's (config/model.py).
            if not families and (keys.gpu or on_gpu_claim or keys.crl):
                families = NVIDIA_ONLY
        if vendor_claims.gpu:
            families |= claimed_families(vendor_claims, c.container, known)
        if families and (dra.gpu or vendor_claims.gpu):
            sure = access_families(
                c.container, keys.gpu or keys.crl, drawn, dra, vendor_claims, known, nvidia
            )
            if sure:
                access_devices[id(c.container)] = sure
        elif families:
            access_devices[id(c.container)] = families
        if families:
            devices[id(c.container)] = families
            accelerators.append((c, keys.asked))
            # Not for the CUDA rules' containers (checked first: most GPU pods are NVIDIA's).
            if not (keys.crl or keys.gpu or on_gpu_claim):
                vendor = vendor_of(families, config.accelerators)
                if vendor is not None:
                    vendors.setdefault(vendor.name, (vendor, []))[1].append(c)
        if keys.unknown:
            unknown += [key for key in keys.unknown if key not in unknown]
    if unknown and not violations_only:
        state.warnings.append(unknown_gpu_warning(sorted(unknown)))
    state.gpu_containers = len(gpu)
    if gpu:
        state.runtimes += [CUDA] * len(gpu)
    if vendors:
        # Each gated vendor's containers, by its runtime (the metrics' containers per runtime).
        state.runtimes += [v.runtime for v, listed in vendors.values() for _ in listed]
    if access_applies(config, namespace):
        apply_access(state, access_devices, config, violations_only, audit, image_env=image_env)
    if gpu:
        place_family(
            state,
            CudaFamily(gpu, policies, images),
            config,
            inventory,
            violations_only=violations_only,
            daemonset=daemonset,
        )
    if vendors and (gpu or len(vendors) > 1):
        # One node has one vendor's devices and drivers: the other vendors' gates are not run.
        if not violations_only:
            state.warnings.append(
                short("containers of different accelerator vendors: no node runs them all")
            )
    elif vendors:
        vendor, containers = next(iter(vendors.values()))
        place_family(
            state,
            TableFamily(vendor, containers, image_env),
            config,
            inventory,
            violations_only=violations_only,
            daemonset=daemonset,
        )
    apply_runtime_fixes(
        state,
        accelerators,
        keyed,
        policies,
        config,
        inventory,
        levels,
        namespace,
        daemonset,
        platforms,
        devices,
        violations_only,
    )


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
    levels: NamespaceLevels | None = None,
    platforms: Mapping[str, tuple[str, ...]] | None = None,
    image_env: ImageEnv | None = None,
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
    runtimes: list[str] = []
    runtime_unknown: list[tuple[str, str]] = []
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
            levels,
            platforms,
            image_env,
        )
        templates = templates or pod.is_template
        if state.unresolved:
            unresolved += state.unresolved
        if state.access:
            access_found += state.access
        if state.placements:
            placements += state.placements
        if state.runtimes:
            runtimes += state.runtimes
        if state.runtime_unknown:
            runtime_unknown += state.runtime_unknown
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
            runtimes=tuple(runtimes) if runtimes else (),
            runtime_unknown=tuple(runtime_unknown) if runtime_unknown else (),
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
        warnings=_unique(warnings),
        mutation_kinds=tuple(kinds) if mutated is not None else (),
        original=obj,
        mutated=mutated,
        draft=draft if mutated is not None and draft.writes is not None else None,
        unresolved_images=unresolved_images,
        access=tuple(access_found),
        placements=tuple(placements) if mutated is not None and placements else (),
        gpu_containers=gpu_containers,
        runtimes=tuple(runtimes) if runtimes else (),
        runtime_unknown=tuple(runtime_unknown) if runtime_unknown else (),
    )


def _unique(texts: list[str]) -> tuple[str, ...]:
    """tuple(dict.fromkeys(texts)): each text once, in order (none or one: nothing to drop)."""
    if len(texts) < 2:
        return tuple(texts)
    return tuple(dict.fromkeys(texts))


def _update_devices(
    pod: PodSpecRef, config: WebhookConfig, namespace: str | None, claims: ClaimIndex | None
) -> dict[int, frozenset[str]]:
    """id(container) -> device families, for a Pod UPDATE (no CRL or placement runs): its
    resources' families, NVIDIA for the config's GPU resources and GPU DRA claims."""
    known = classes_of(claims)
    nvidia = nvidia_classes(config.gpu_device_classes, claims)
    dra = pod_claims(pod.spec, namespace, claims, nvidia)
    vendor_claims = pod_claims(pod.spec, namespace, claims, known.vendors)
    gpu_names = config.gpu_resources
    devices: dict[int, frozenset[str]] = {}
    for c in pod.containers:
        families = container_families(c.container)
        resources = c.container.get("resources")
        limits = resources.get("limits") if is_mapping(resources) else None
        keys = [key for key in limits if isinstance(key, str)] if is_mapping(limits) else []
        drawn = known.resources(keys, nvidia) if keys else {}
        if drawn:
            families |= frozenset(f for f in drawn.values() if f != "nvidia")
        if not families:
            named = any(key in gpu_names for key in keys)
            if named or "nvidia" in drawn.values():
                families = NVIDIA_ONLY
        families |= sure_families(dra, vendor_claims, c.container, known, nvidia)
        if families:
            devices[id(c.container)] = families
    return devices


def evaluate_pod_update(
    entry: WorkloadKind,
    obj: Mapping[str, Any],
    old: Mapping[str, Any],
    config: WebhookConfig,
    ref: str,
    ns: str | None,
    claims: ClaimIndex | None,
    *,
    sub_resource: str = "",
    violations_only: bool = False,
    image_env: ImageEnv | None = None,
    written: tuple[AccessFinding, ...] = (),
) -> Decision:
    """GPU access control for a Pod UPDATE (SPEC §12 "What reaches the webhook"): a plain
    update (an image swapped) or one through the pods/ephemeralcontainers subresource (kubectl
    debug). Only what the update introduces is judged; env is written to new ephemeral
    containers only (the API server forbids any other env change on a Pod UPDATE)."""
    specs = find_pod_specs(entry, obj)
    old_specs = find_pod_specs(entry, old)
    if not specs or not old_specs:
        return Decision(handled=False, object_ref=ref)
    pod, old_pod = specs[0], old_specs[0]
    ephemeral = sub_resource == "ephemeralcontainers"
    draft = Draft(obj, record=not violations_only and ephemeral)
    state = PodState(ref, pod, draft)
    old_state = PodState(ref, old_pod, Draft(old, record=False))
    old_found, _ = access_findings(old_state, _update_devices(old_pod, config, ns, claims), config)
    old_names = {c.name for c in ephemeral_containers(old_pod.spec)}
    patchable = (
        frozenset(
            (c.list_name, c.name) for c in ephemeral_containers(pod.spec) if c.name not in old_names
        )
        if ephemeral
        else frozenset()
    )
    update = AccessUpdate(
        frozenset(f.text() for f in old_found),
        {(c.list_name, c.name): c.container.get("image") for c in old_pod.containers},
        patchable,
        ungated=bool(old_pod.spec.get("schedulingGates")) and not pod.spec.get("schedulingGates"),
        written=written,
    )
    devices = _update_devices(pod, config, ns, claims)
    apply_access(state, devices, config, violations_only, False, update, image_env)
    mutated: Mapping[str, Any] | None = draft.root if draft.changed else None
    return Decision(
        object_ref=ref,
        violations=tuple(state.violations),
        notes=tuple(fit(n) for n in state.notes),
        warnings=tuple(dict.fromkeys(fit(w) for w in state.warnings)),
        mutation_kinds=tuple(state.kinds) if mutated is not None else (),
        original=obj,
        mutated=mutated,
        draft=draft if mutated is not None and draft.writes is not None else None,
        access=tuple(state.access),
        unresolved_images=tuple(dict.fromkeys(state.unresolved)),
    )
