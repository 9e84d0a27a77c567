"""Where pod specs live in Pod, Deployment, StatefulSet, DaemonSet, ReplicaSet, Job and CronJob."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core.errors import ObjectShapeError

# kind -> path of the pod template (object holding `metadata` and `spec`); () for a Pod itself.
TEMPLATE_PATHS: Mapping[str, tuple[str, ...]] = {
    "Pod": (),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
CONTAINER_LISTS = ("initContainers", "containers")


@dataclass(slots=True)  # not frozen: built per review, and frozen __init__ is ~5x slower
class ContainerRef:
    list_name: str  # "containers" or "initContainers"
    index: int
    name: str
    container: Mapping[str, Any]


@dataclass(slots=True)  # not frozen: built per review, and frozen __init__ is ~5x slower
class PodSpecRef:
    """A pod spec inside an object: the path to its template and its containers."""

    template_path: tuple[str, ...]
    is_template: bool  # True for workload templates (not defaulted by the API server as Pods)
    annotations: Mapping[str, str]
    spec: Mapping[str, Any]
    containers: tuple[ContainerRef, ...]

    @property
    def spec_path(self) -> tuple[str, ...]:
        return (*self.template_path, "spec")


def handles_kind(kind: str) -> bool:
    return kind in TEMPLATE_PATHS


def _mapping(value: Any, where: str, default_empty: bool = True) -> Mapping[str, Any]:
    if value is None and default_empty:
        return {}
    if not isinstance(value, Mapping):
        raise ObjectShapeError(f"{where} must be an object, got {type(value).__name__}")
    return value


def find_pod_spec(kind: str, obj: Mapping[str, Any]) -> PodSpecRef | None:
    """The pod spec of a handled kind, or None when the object carries none (e.g. no template)."""
    path = TEMPLATE_PATHS.get(kind)
    if path is None:
        return None
    node: Any = obj
    where = kind
    for part in path:
        node = _mapping(node, where).get(part)
        where = f"{where}.{part}"
        if node is None:
            return None
    template = _mapping(node, where)
    meta = _mapping(template.get("metadata"), f"{where}.metadata")
    annotations = _mapping(meta.get("annotations"), f"{where}.metadata.annotations")
    spec = template.get("spec")
    if spec is None:
        return None
    spec = _mapping(spec, f"{where}.spec")
    containers: list[ContainerRef] = []
    for list_name in CONTAINER_LISTS:
        items = spec.get(list_name)
        if items is None:
            continue
        if not isinstance(items, list):
            raise ObjectShapeError(f"{where}.spec.{list_name} must be a list")
        for index, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise ObjectShapeError(f"{where}.spec.{list_name}[{index}] must be an object")
            name = item.get("name")
            containers.append(
                ContainerRef(list_name, index, name if isinstance(name, str) else f"#{index}", item)
            )
    return PodSpecRef(
        template_path=path,
        is_template=bool(path),
        annotations={k: v for k, v in annotations.items() if isinstance(v, str)},
        spec=spec,
        containers=tuple(containers),
    )


def object_ref(kind: str, obj: Mapping[str, Any], namespace: str | None = None) -> str:
    """`Pod default/train` style reference for messages (generateName shown as `name*`)."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name") or (f"{meta['generateName']}*" if meta.get("generateName") else None)
    ns = meta.get("namespace") or namespace
    if not name:
        return kind
    return f"{kind} {ns}/{name}" if ns else f"{kind} {name}"
