"""The evaluation core: object + policy snapshot + config -> Decision. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.access.control import AccessFinding
from webhook.core.access.patterns import annotation_reads
from webhook.core.base.errors import ObjectShapeError
from webhook.core.base.shapes import is_mapping
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.pods import access_applies, evaluate_pod, evaluate_pod_update
from webhook.core.evaluation.updates import allowed_untouched, may_mutate_template, templates_equal
from webhook.core.images.facts import ImageEnv, ImageFacts
from webhook.core.kinds.registry import WorkloadKind
from webhook.core.outcome.decision import (
    Decision,
    Violation,
    short,
)
from webhook.core.placement.inventory import NodeInventory
from webhook.core.policies.crl import (
    CRL_NAMESPACE,
    CRL_PREFIX,
    LABEL_ENABLED,
    LABEL_TYPE,
    TYPE_VALUE,
    parse_configmap,
)
from webhook.core.policies.policyset import PolicySet
from webhook.core.workloads.claims import ClaimIndex
from webhook.core.workloads.pods import (
    handles_kind,
    lookup,
    object_ref,
)

# Template mutation (config switch) applies to the built-in controllers' templates only.
_MUTABLE_GROUPS = frozenset({"", "apps", "batch"})

__all__ = ["Decision", "Violation", "evaluate", "evaluate_configmap", "handles_kind"]


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
    namespace_levels: Mapping[str, str] | None = None,
    image_platforms: Mapping[str, tuple[str, ...]] | None = None,
    image_env: ImageEnv | None = None,
    username: str | None = None,
    groups: tuple[str, ...] = (),
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
    `namespace_levels`: namespace -> its pod-security.kubernetes.io/enforce label ("" when
    unlabelled), the snapshot the RDMA fix reads (None: not known, SPEC §14);
    `image_platforms`: image -> the linux architectures its registry index lists, what the
    lookups of `images` read on the way (the image-architecture fix's last source);
    `image_env`: image -> the other vendors' variables its config sets (ROCM_VERSION,
    PYTORCH_ROCM_ARCH), for the images an earlier evaluation listed with a vendor's runtime
    (the driver-release gate's last source, SPEC §13).
    `username` and `groups`: who makes the request (the AdmissionReview's userInfo; None: not
    known, as for the CLI, and then no Pod UPDATE's annotation change is judged).
    """
    if not is_mapping(obj):
        raise ObjectShapeError(f"the object must be a JSON object, got {type(obj).__name__}")
    kind = kind or (obj.get("kind") if isinstance(obj.get("kind"), str) else None) or ""
    # DELETE and CONNECT are never denied (nothing to check, and a denial could only wedge
    # whoever deletes); Pods are checked once, on CREATE (a Pod's spec is all but immutable).
    if operation not in ("CREATE", "UPDATE"):
        return Decision(handled=False, object_ref=object_ref(kind, obj, namespace))
    entry = None
    if kind != "ConfigMap":
        entry = lookup(kind, obj, group, config)
        if entry is None:
            return Decision(handled=False, object_ref=object_ref(kind, obj, namespace))
        if entry.kind == "Pod" and entry.group == "" and operation != "CREATE":
            # A Pod's spec is all but immutable: an UPDATE is judged by GPU access control
            # only (an image swapped, an ephemeral container added), SPEC §12.
            return _pod_update(
                entry,
                obj,
                config,
                namespace,
                sub_resource,
                old_object,
                claims,
                violations_only,
                image_env,
                username,
                groups,
            )
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
    meta_ns = meta.get("namespace") if is_mapping(meta) else None
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
    return evaluate_pod(
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
        levels=namespace_levels,
        platforms=image_platforms,
        image_env=image_env,
    )


def _pod_update(
    entry: WorkloadKind,
    obj: Mapping[str, Any],
    config: WebhookConfig,
    namespace: str | None,
    sub_resource: str,
    old_object: Mapping[str, Any] | None,
    claims: ClaimIndex | None,
    violations_only: bool,
    image_env: ImageEnv | None = None,
    username: str | None = None,
    groups: tuple[str, ...] = (),
) -> Decision:
    ref = object_ref("Pod", obj, namespace)
    meta = obj.get("metadata")
    meta_ns = meta.get("namespace") if is_mapping(meta) else None
    ns = namespace or (meta_ns if isinstance(meta_ns, str) else None)
    if (
        sub_resource not in ("", "ephemeralcontainers")
        or not is_mapping(old_object)
        or ns in config.exempt_namespaces
        or not access_applies(config, ns)
    ):
        return Decision(handled=False, object_ref=ref)
    if is_mapping(meta) and meta.get("deletionTimestamp"):
        return Decision(object_ref=ref, reason="the object is being deleted")
    if _update_part(obj, sub_resource) == _update_part(old_object, sub_resource):
        # Every pod UPDATE reaches the access entry (no matchConditions): the controllers'
        # label and ownerReference changes are answered without an evaluation.
        return Decision(object_ref=ref, reason="nothing GPU access control reads changed")
    return evaluate_pod_update(
        entry,
        obj,
        old_object,
        config,
        ref,
        ns,
        claims,
        sub_resource=sub_resource,
        violations_only=violations_only,
        image_env=image_env,
        written=annotation_writes(obj, old_object, config, username, groups)
        if sub_resource == ""
        else (),
    )


def annotation_writes(
    obj: Mapping[str, Any],
    old: Mapping[str, Any],
    config: WebhookConfig,
    username: str | None,
    groups: tuple[str, ...],
) -> tuple[AccessFinding, ...]:
    """The annotations a container of the pod reads a device variable from (MindCluster's
    `fieldRef` to `huawei.com/<type>`) that this update adds, changes or removes, when its user
    is none of gpuAccess.annotationWriters: the kubelet reads the annotation again when it
    restarts the container, so a tenant who rewrites it and crashes the container gets the NPUs
    it names. Not judged when the user is not known (username None)."""
    rules = config.gpu_access
    if username is None or username in rules.annotation_writers:
        return ()
    if any(group in rules.annotation_writer_groups for group in groups):
        return ()
    spec = old.get("spec")
    reads = annotation_reads(spec) if is_mapping(spec) else []
    if not reads:
        return ()
    new, was = _annotations(obj), _annotations(old)
    found: dict[str, AccessFinding] = {}
    for container, variable, key in reads:
        if (key in new) == (key in was) and new.get(key) == was.get(key):
            continue
        finding = AccessFinding(
            f'container "{container}"',
            f"reads {key} as {variable}",
            "only gpuAccess.annotationWriters may change it",
            gpu=True,
        )
        found.setdefault(finding.text(), finding)
    return tuple(found.values())


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if is_mapping(meta) else None
    return annotations if is_mapping(annotations) else {}


def _update_part(obj: Mapping[str, Any], sub_resource: str) -> tuple[Any, ...]:
    """What an UPDATE can change that GPU access control reads. A Pod UPDATE: the images and
    the annotations (kubernetes pkg/apis/core/validation/validation.go, ValidatePodUpdate: of
    the spec only images, activeDeadlineSeconds, tolerations, terminationGracePeriodSeconds and
    a gated pod's scheduling directives may change; env, volumes, mounts and security contexts
    may not). The subresource: the ephemeral containers (pkg/registry/core/pod/strategy.go,
    dropNonEphemeralContainerUpdates drops every other change)."""
    spec = obj.get("spec")
    spec = spec if is_mapping(spec) else {}
    if sub_resource == "ephemeralcontainers":
        return (spec.get("ephemeralContainers"),)
    images = [
        [c.get("image") if is_mapping(c) else c for c in items]
        if isinstance(items := spec.get(list_name), list)
        else items
        for list_name in ("initContainers", "containers")
    ]
    meta = obj.get("metadata")
    # Whether the pod is gated: removing its last scheduling gate re-judges its DRA claims
    # (pods.py evaluate_pod_update), which may have been replaced while it waited.
    gated = bool(spec.get("schedulingGates"))
    return (images, meta.get("annotations") if is_mapping(meta) else None, gated)


def evaluate_configmap(
    cm: Mapping[str, Any],
    policies: PolicySet,
    *,
    operation: str = "CREATE",
    namespace: str | None = None,
) -> Decision:
    """Admission of a CRL ConfigMap (SPEC §6): lint, plus duplicate keys among enabled CRLs."""
    meta = cm.get("metadata")
    meta = meta if is_mapping(meta) else {}
    name = meta.get("name") if isinstance(meta.get("name"), str) else ""
    ns = meta.get("namespace") or namespace or ""
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    assert isinstance(name, str) and is_mapping(labels)
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
