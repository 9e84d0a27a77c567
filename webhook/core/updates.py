"""Updates and the controllers that make them (SPEC §6): which requests pass untouched."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
        if isinstance(ref, Mapping) and ref.get("controller") is True:
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
    if not isinstance(meta, Mapping):
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
