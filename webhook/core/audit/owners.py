"""Owners (SPEC §6): the reference an audit finding names, and the controller an object points to.

An object's owner is its ownerReference with `controller: true`; webhook.core.audit.audit
follows these links through the workloads listed (Pod → ReplicaSet → Deployment; Pod → Job →
CronJob; an operator's pods → its PyTorchJob) to group objects by their top owner.

A controller the audit does not list but whose children's labels name their owner (Knative:
a Revision's Deployment and pods carry the Service's name and uid) is replaced by that owner
(LABEL_PARENTS), so the chain goes on to the Knative Service and, in KServe's serverless
mode, to the InferenceService that controls it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

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


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
