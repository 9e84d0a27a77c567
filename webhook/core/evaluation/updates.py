"""Updates and the controllers that make them (SPEC §6): which requests pass untouched, and
whether an update changed anything the evaluation reads of a pod template."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.base.errors import ObjectShapeError
from webhook.core.base.shapes import is_mapping
from webhook.core.config.model import WebhookConfig
from webhook.core.config.runtime_fixes import ANNOTATION_INJECTED_SHM
from webhook.core.images.facts import pod_archs
from webhook.core.placement import cuda
from webhook.core.policies.native_cel import UpdateReads
from webhook.core.workloads.devices import (
    ACCESS_ENV_EXACT,
    ACCESS_ENV_PREFIXES,
    DEVICE_ANNOTATION_PREFIXES,
    DEVICE_ENV_NAMES,
    access_env,
)
from webhook.core.workloads.pods import PodSpecRef, find_pod_specs, lookup

# Owners whose template was already checked and whose controller makes these objects:
# (kind of the object, API group of the owner, kind of the owner).
#  - The Deployment controller creates ReplicaSets from the Deployment's template and keeps
#    updating the old ones during a rollout: kubernetes pkg/controller/deployment/sync.go,
#    scaleReplicaSet, sets spec.replicas and the desired-replicas annotations with a full
#    ReplicaSets().Update. It also finds a Deployment's ReplicaSet by comparing templates
#    (EqualIgnoreHash in pkg/controller/deployment/util/deployment_util.go), so a template
#    changed by a webhook would make it create another ReplicaSet.
#  - The CronJob controller creates Jobs from spec.jobTemplate (pkg/controller/cronjob).
_CONTROLLED = {("ReplicaSet", "apps", "Deployment"), ("Job", "batch", "CronJob")}
_CONTROLLED_KINDS = frozenset(kind for kind, _, _ in _CONTROLLED)


def _controller(meta: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(API group, kind, name) of the ownerReference with controller: true, if any."""
    refs = meta.get("ownerReferences")
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if is_mapping(ref) and ref.get("controller") is True:
            api_version = ref.get("apiVersion")
            group = api_version.rpartition("/")[0] if isinstance(api_version, str) else ""
            return group, str(ref.get("kind", "")), str(ref.get("name", ""))
    return None


def allowed_untouched(kind: str, obj: Mapping[str, Any], sub_resource: str) -> str:
    """Why the request is allowed without evaluation, or "" when it must be evaluated."""
    if sub_resource:
        # status (every controller's status writes), scale (kubectl scale, the HPA): no pod
        # template can change through them.
        return f"a request for the {sub_resource} subresource changes no pod template"
    meta = obj.get("metadata")
    if not is_mapping(meta):
        return ""
    if meta.get("deletionTimestamp"):
        # While an object is being deleted, the garbage collector removes the
        # foregroundDeletion/orphan finalizers with a PATCH, an UPDATE for admission
        # (kubernetes pkg/controller/garbagecollector/garbagecollector.go, removeFinalizer):
        # denying it would keep the object forever.
        return "the object is being deleted"
    owner = _controller(meta) if kind in _CONTROLLED_KINDS else None
    if owner is not None and (kind, owner[0], owner[1]) in _CONTROLLED:
        return f"controlled by {owner[1]} {owner[2]}, whose template is checked"
    return ""


def may_mutate_template(kind: str, operation: str) -> bool:
    """Whether a template change by the webhook could be stored.

    A Job's pod template is immutable: kubernetes pkg/apis/batch/validation/validation.go,
    ValidateJobSpecUpdate -> validatePodTemplateUpdate (only a suspended Job's scheduling
    directives may change), so a patch to it on UPDATE would make the API server reject it.
    """
    return not (operation == "UPDATE" and kind == "Job")


# --- Whether an update changed what the evaluation reads (templates_equal) ---

# Pod annotations the webhook reads (config/labels.py): its own, nothing else.
_READ_ANNOTATIONS = (
    "features.alauda.io/cuda-version",
    "features.alauda.io/cuda-affinity",
    "features.alauda.io/env-fixes",
    "features.alauda.io/min-compute-capability",
    "features.alauda.io/cuda-compatibility",
    "features.alauda.io/runtime-fixes",
)
# What GPU access control reads (SPEC §12, access/control.py), compared when it is on: the device
# env names, a container's privileged flag and mounts, the pod's hostPath volumes, its
# RuntimeClass and its CDI annotations. Adding `privileged: true` to a template is a change.
_ACCESS_ENV = frozenset({*DEVICE_ENV_NAMES, "NVIDIA_REQUIRE_CUDA"})
# Env the CUDA detection reads (placement/cuda.py detect; every NVIDIA_REQUIRE_* the toolkit reads).
_CUDA_ENV = "CUDA_VERSION"
_REQUIRE_PREFIX = "NVIDIA_REQUIRE_"


def _env_names(config: WebhookConfig) -> frozenset[str]:
    """Env names the config makes relevant: what env fixes set (a user's value is never
    overridden) and what compute-capability rules match."""
    names = {_CUDA_ENV}
    if config.gpu_access.checks:
        names |= _ACCESS_ENV
    for fix in config.env_fixes:
        names.update(fix.env)
    for rule in config.compute_capability_rules:
        names.update(name for name, _ in rule.compiled[2])
    return frozenset(names)


def update_reads(config: WebhookConfig) -> UpdateReads:
    """What `_evaluated_part` reads under `config`, for the native policy (its limits: see
    webhook.core.policies.native_cel.unchanged)."""
    access = config.gpu_access.checks
    names = _env_names(config) | (ACCESS_ENV_EXACT if access else frozenset())
    return UpdateReads(
        env_names=tuple(sorted(names)),
        env_prefixes=(_REQUIRE_PREFIX, *(ACCESS_ENV_PREFIXES if access else ())),
        exact_resources=tuple(sorted(config.gpu_resources.exact)),
        annotations=_READ_ANNOTATIONS,
        access=access,
        cdi_prefixes=DEVICE_ANNOTATION_PREFIXES,
    )


def _read_env(env: Any, names: frozenset[str], access: bool = False) -> Any:
    # No env and an env of other names read the same: adding the first unrelated variable
    # (Stakater Reloader's) to a container is no change.
    if env is None:
        return []
    if not isinstance(env, list):
        return env
    return [
        e
        for e in env
        if not is_mapping(e)
        or not isinstance(e.get("name"), str)
        or e["name"] in names
        or e["name"].startswith(_REQUIRE_PREFIX)
        or (access and access_env(e["name"]))
    ]


def _read_resources(resources: Any, config: WebhookConfig) -> Any:
    """The extended resources and claims: cpu, memory, ephemeral-storage and hugepages (names
    without a domain) are no key of any rule (a CRL key is domain-qualified; an exact GPU
    resource name without one is kept)."""
    if resources is None:
        return {}
    if not is_mapping(resources):
        return resources
    exact = config.gpu_resources.exact
    read: dict[str, Any] = {}
    for field, values in resources.items():
        if field in ("limits", "requests") and is_mapping(values):
            kept = {
                k: v for k, v in values.items() if not isinstance(k, str) or "/" in k or k in exact
            }
            # Limits of cpu only read as no limits: setting the first cpu limit is no change.
            if kept:
                read[field] = kept
        else:
            read[field] = values  # claims, and whatever else a future field holds
    return read


def _evaluated_part(pod: PodSpecRef, config: WebhookConfig) -> tuple[Any, ...]:
    """Everything of one pod spec that the evaluation reads, and nothing else (SPEC §6): the
    images, the extended resources (not cpu/memory), the env names the config makes relevant
    and envFrom, claims, the compute-capability rules a container matches (they read
    arguments), the annotations the webhook reads, and the pod's architecture where it can
    select an image's CUDA.

    Not in it, on purpose: other env vars (Stakater Reloader bumps one to roll a Deployment
    out), cpu/memory (rightsizing tools), other arguments, nodeSelector, affinity,
    tolerations, schedulingGates, labels and a Job's `suspend`. Kueue starts an admitted Job
    with one UPDATE that sets `suspend: false` and its ResourceFlavor's nodeSelector/tolerations
    in the template, and restores them on eviction (kueue pkg/podset/podset.go
    Merge/RestorePodSetsInfo, called from pkg/controller/jobs/job/job_controller.go
    RunWithPodSetsInfo); the JobSet controller does the same to its child Jobs. The API server
    allows those changes to a suspended Job's template (kubernetes
    pkg/registry/batch/job/strategy.go, validationOptionsForJob: scheduling directives only
    while the old Job is suspended and never started; in 1.36 the
    MutablePodResourcesForSuspendedJobs gate also lets resources change, and such a change is
    judged here like any other). Re-judging unchanged resources would only wedge a start.
    """
    names = _env_names(config)
    rules = config.compute_capability_rules
    access = config.gpu_access.checks
    containers = []
    by_arch = False
    for c in pod.containers:
        item = c.container
        env = cuda.env_values(item)
        compute = cuda.compute_requirement(item, rules, "", env) if rules else None
        containers.append(
            (
                c.list_name,
                c.index,
                c.name,
                item.get("image"),
                _read_resources(item.get("resources"), config),
                _read_env(item.get("env"), names, access),
                item.get("envFrom"),
                compute.version if compute is not None else None,
                *(_access_part(item) if access else ()),
            )
        )
        if not by_arch and isinstance(item.get("image"), str):
            # The architecture picks the CUDA of an image known per architecture, and the
            # platform a registry lookup reads for an image nothing else knows.
            detection = cuda.detect(item, config, env)
            by_arch = bool(detection.by_arch) or (
                detection.requirement is None and config.registry_lookups.enabled
            )
    annotations = tuple(pod.annotations.get(a) for a in _READ_ANNOTATIONS)
    archs = pod_archs(pod.spec) if by_arch else ()
    pod_access = _pod_access_part(pod) if access else ()
    return (
        pod.template_path,
        annotations,
        pod.spec.get("resourceClaims"),
        archs,
        containers,
        pod_access,
        _memory_part(pod) if ANNOTATION_INJECTED_SHM in pod.annotations else (),
    )


def _memory_part(pod: PodSpecRef) -> tuple[Any, ...]:
    """The memory limits (pod-level and the app containers') of a template carrying the
    webhook's own /dev/shm, sized from them (runtimefix/shm.py): a new limit resizes it."""
    limits = [_memory_limit(pod.spec)]
    containers = pod.spec.get("containers")
    for c in containers if isinstance(containers, list) else ():
        limits.append(_memory_limit(c))
    return tuple(limits)


def _memory_limit(holder: Any) -> Any:
    resources = holder.get("resources") if is_mapping(holder) else None
    limits = resources.get("limits") if is_mapping(resources) else None
    return limits.get("memory") if is_mapping(limits) else None


def _access_part(container: Mapping[str, Any]) -> tuple[Any, ...]:
    context = container.get("securityContext")
    privileged = context.get("privileged") if is_mapping(context) else None
    return privileged, container.get("volumeMounts")


def _pod_access_part(pod: PodSpecRef) -> tuple[Any, ...]:
    volumes = pod.spec.get("volumes")
    host_paths = (
        [v for v in volumes if is_mapping(v) and "hostPath" in v]
        if isinstance(volumes, list)
        else volumes
    )
    cdi = sorted(
        (k, v)
        for k, v in pod.annotations.items()
        if isinstance(k, str) and k.startswith(DEVICE_ANNOTATION_PREFIXES)
    )
    return host_paths, pod.spec.get("runtimeClassName"), cdi


def templates_equal(
    group: str | None,
    kind: str,
    obj: Mapping[str, Any],
    old: Mapping[str, Any],
    config: WebhookConfig | None = None,
) -> bool:
    """Whether every pod template of `obj` equals the one at the same path in `old` in
    everything the evaluation reads (SPEC §6; see `_evaluated_part`).

    Both the set of template paths and each template's evaluated content must match: adding a
    worker group or changing one container's image or resources counts as a change, a new
    nodeSelector does not. Unknown kinds: False.
    """
    entry = lookup(kind, obj, group, config)
    if entry is None or not is_mapping(old):
        return False
    config = config if config is not None else WebhookConfig()
    try:
        new_parts = [_evaluated_part(p, config) for p in find_pod_specs(entry, obj)]
        old_parts = [_evaluated_part(p, config) for p in find_pod_specs(entry, old)]
    except ObjectShapeError:
        return False
    return new_parts == old_parts
