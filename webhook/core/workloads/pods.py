"""Pod specs inside admitted objects, found through the workload registry (core/kinds/registry)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from webhook.core.base.errors import ObjectShapeError
from webhook.core.base.shapes import as_dict, is_mapping
from webhook.core.config.model import WebhookConfig, WorkloadEntry
from webhook.core.kinds.builtin import BUILTIN_KINDS
from webhook.core.kinds.registry import Found, Path, TemplateRule, WorkloadKind, follow, walk

CONTAINER_LISTS = ("initContainers", "containers")
# Objects without apiVersion (hand-written test input, `review` of partial manifests) are
# looked up by kind among the core/apps/batch kinds only: an operator's kind needs its group
# (a batch.volcano.sh Job is not a batch/v1 Job).
_KIND_ONLY_GROUPS = frozenset({"", "apps", "batch"})


@dataclass(slots=True)  # not frozen: built per review, and frozen __init__ is ~5x slower
class ContainerRef:
    list_name: str  # "containers", "initContainers", or the key of a container-like field
    index: int  # -1 for a container-like field (one object, not a list item)
    name: str
    container: Mapping[str, Any]
    # Where the pods get an image when this container names none (registry rule image_from).
    image_from: str = ""

    # Written out, here and in the per-review classes of the core: mypyc compiles a written
    # __init__ but leaves the one @dataclass generates interpreted, 2-7k instructions per object
    # (issue 40). The fields above keep @dataclass's __eq__ and __repr__.
    def __init__(
        self,
        list_name: str,
        index: int,
        name: str,
        container: Mapping[str, Any],
        image_from: str = "",
    ) -> None:
        self.list_name = list_name
        self.index = index
        self.name = name
        self.container = container
        self.image_from = image_from


@dataclass(slots=True)  # not frozen: built per review, and frozen __init__ is ~5x slower
class PodSpecRef:
    """A pod spec inside an object: where it is, its role, annotations and containers."""

    template_path: tuple[str | int, ...]
    is_template: bool  # True for workload templates (not defaulted by the API server as Pods)
    annotations: Mapping[str, str]
    spec: Mapping[str, Any]
    containers: tuple[ContainerRef, ...]
    spec_path: tuple[str | int, ...] = ()
    role: str = ""  # "replica Worker", "head", "task mpiworker"; "" for single-template kinds
    # A pod made up from an operator's fields (registry form "container"): {"spec": spec}, on
    # which the rules draft their changes, never on the object (these are never mutated).
    scratch: Mapping[str, Any] | None = None
    # False when no annotation of the object reaches these pods (registry `annotations: ()`):
    # then advice to set a pod annotation here could not be followed.
    annotatable: bool = True
    # The operator runs these pods by digest (registry rule by_digest: Knative).
    by_digest: bool = False

    def __init__(  # written out, as ContainerRef's
        self,
        template_path: tuple[str | int, ...],
        is_template: bool,
        annotations: Mapping[str, str],
        spec: Mapping[str, Any],
        containers: tuple[ContainerRef, ...],
        spec_path: tuple[str | int, ...] = (),
        role: str = "",
        scratch: Mapping[str, Any] | None = None,
        annotatable: bool = True,
        by_digest: bool = False,
    ) -> None:
        self.template_path = template_path
        self.is_template = is_template
        self.annotations = annotations
        self.spec = spec
        self.containers = containers
        self.spec_path = spec_path
        self.role = role
        self.scratch = scratch
        self.annotatable = annotatable
        self.by_digest = by_digest


class Registry:
    """Workload kinds by (group, kind): built-ins, replaced or extended by the config."""

    def __init__(self, extra: tuple[WorkloadEntry, ...] = ()) -> None:
        kinds = {(k.group, k.kind): k for k in BUILTIN_KINDS}
        kinds.update({(e.group, e.kind): e.to_kind() for e in extra})
        self.kinds: Mapping[tuple[str, str], WorkloadKind] = kinds
        self.by_kind_only: Mapping[str, WorkloadKind] = {
            k.kind: k for k in kinds.values() if k.group in _KIND_ONLY_GROUPS
        }
        self.kind_names = frozenset(kind for _, kind in kinds)

    def lookup(self, group: str | None, kind: str) -> WorkloadKind | None:
        if group is None:
            return self.by_kind_only.get(kind)
        return self.kinds.get((group, kind))


@lru_cache(maxsize=16)
def _registry(extra: tuple[WorkloadEntry, ...]) -> Registry:
    return Registry(extra)


_DEFAULT = Registry()


def registry_for(config: WebhookConfig | None) -> Registry:
    """The registry of a config, built once per distinct `workloads:` list."""
    extra = config.workloads if config is not None else ()
    return _registry(extra) if extra else _DEFAULT


def group_of(obj: Mapping[str, Any]) -> str | None:
    """The API group from apiVersion ("apps/v1" -> "apps", "v1" -> ""); None without one."""
    api_version = obj.get("apiVersion")
    if not isinstance(api_version, str) or not api_version:
        return None
    return api_version.rpartition("/")[0]


def lookup(
    kind: str, obj: Mapping[str, Any], group: str | None = None, config: WebhookConfig | None = None
) -> WorkloadKind | None:
    return registry_for(config).lookup(group if group is not None else group_of(obj), kind)


def handles_kind(kind: str, group: str | None = None, config: WebhookConfig | None = None) -> bool:
    """Whether `kind` (in `group`; None: a core/apps/batch kind) carries pod templates."""
    return registry_for(config).lookup(group, kind) is not None


def _where(kind: str, path: tuple[str | int, ...]) -> str:
    return kind + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def _mapping(value: Any, kind: str, path: tuple[str | int, ...]) -> Mapping[str, Any]:
    # The message is built only on error: this runs for every template of every review.
    if value is None:
        return _EMPTY
    if not isinstance(value, dict) and not isinstance(value, Mapping):
        got = type(value).__name__
        raise ObjectShapeError(f"{_where(kind, path)} must be an object, got {got}")
    return value


_EMPTY: Mapping[str, Any] = {}


def _containers(
    spec: Mapping[str, Any], kind: str, at: tuple[str | int, ...], tpl: TemplateRule
) -> list[ContainerRef]:
    found: list[ContainerRef] = []
    fields = as_dict(spec)
    for list_name in CONTAINER_LISTS:
        items = fields.get(list_name)
        if items is None:
            continue
        if not isinstance(items, list):
            raise ObjectShapeError(f"{_where(kind, (*at, list_name))} must be a list")
        for index, item in enumerate(items):
            if not is_mapping(item):
                raise ObjectShapeError(
                    f"{_where(kind, (*at, list_name))}[{index}] must be an object"
                )
            name = as_dict(item).get("name")
            label = name if isinstance(name, str) else f"#{index}"
            found.append(ContainerRef(list_name, index, label, item, tpl.image_from))
    for key in tpl.containers:
        item = fields.get(key)
        if item is None:
            continue
        item = _mapping(item, kind, (*at, key))
        name = item.get("name")
        label = name if isinstance(name, str) and name else key
        found.append(ContainerRef(key, -1, label, item, tpl.image_from))
    return found


def _annotations(kind: str, obj: Mapping[str, Any], paths: tuple[Path, ...]) -> Mapping[str, Any]:
    """The maps at `paths` (from the object's root) merged in order, the last one winning."""
    merged: Mapping[str, Any] = _EMPTY
    for path in paths:
        found = _mapping(follow(obj, path), kind, path)
        if found:
            merged = {**merged, **found} if merged else found
    return merged


def _virtual_pod(kind: str, obj: Mapping[str, Any], tpl: TemplateRule, hit: Found) -> PodSpecRef:
    """The pod an operator makes around the container it builds from the rule's fields."""
    virtual = tpl.virtual
    assert virtual is not None  # rule() refuses form "container" without one
    node = _mapping(hit.node, kind, hit.path)
    container: dict[str, Any] = {"name": virtual.name}
    for field, path in (("image", virtual.image), ("env", virtual.env)):
        value = follow(node, path) if path is not None else None
        if value is not None:
            container[field] = value
    resources = follow(node, virtual.resources)
    if resources is not None:
        container["resources"] = _mapping(resources, kind, (*hit.path, *virtual.resources))
    spec = {"containers": [container]}
    annotations = _annotations(kind, obj, tpl.annotations or ())
    return PodSpecRef(
        template_path=hit.path,
        is_template=True,
        annotations=_strings(annotations),
        spec=spec,
        containers=(ContainerRef("containers", 0, virtual.name, container, tpl.image_from),),
        spec_path=("spec",),
        role=hit.role,
        scratch={"spec": spec},
        annotatable=bool(tpl.annotations),
    )


def _strings(annotations: Mapping[str, Any]) -> Mapping[str, str]:
    if not annotations:
        return _EMPTY
    return {k: v for k, v in annotations.items() if isinstance(v, str)}


def _pod_spec(
    kind: str, obj: Mapping[str, Any], tpl: TemplateRule, hit: Found
) -> PodSpecRef | None:
    path = hit.path
    if tpl.form == "container":
        return _virtual_pod(kind, obj, tpl, hit)
    node = _mapping(hit.node, kind, path)
    if tpl.form == "podspec":
        spec, spec_path = node, path
        if tpl.annotations is not None:
            annotations = _annotations(kind, obj, tpl.annotations)
        else:
            # KServe's ComponentExtensionSpec carries the pod annotations as `annotations`;
            # the object's own annotations reach its pods too (KServe propagates them).
            meta = _mapping(as_dict(obj).get("metadata"), kind, ("metadata",))
            outer = _mapping(as_dict(meta).get("annotations"), kind, ("metadata", "annotations"))
            own = _mapping(as_dict(node).get("annotations"), kind, (*path, "annotations"))
            annotations = {**outer, **own} if own else outer
    else:
        # as_dict: the reads of decoded JSON's dicts are direct dict calls (shapes.as_dict).
        fields = as_dict(node)
        meta = _mapping(fields.get("metadata"), kind, (*path, "metadata"))
        annotations = _mapping(
            as_dict(meta).get("annotations"), kind, (*path, "metadata", "annotations")
        )
        if tpl.annotations is not None:
            annotations = _annotations(kind, obj, tpl.annotations)
        raw_spec = fields.get("spec")
        if raw_spec is None:
            return None
        spec_path = (*path, "spec")
        spec = _mapping(raw_spec, kind, spec_path)
    return PodSpecRef(
        template_path=path,
        is_template=bool(tpl.path),
        annotations=_strings(annotations),
        spec=spec,
        containers=tuple(_containers(spec, kind, spec_path, tpl)),
        spec_path=spec_path,
        role=hit.role,
        annotatable=tpl.annotations != (),
        by_digest=tpl.by_digest,
    )


def find_pod_specs(entry: WorkloadKind, obj: Mapping[str, Any]) -> list[PodSpecRef]:
    """Every pod spec of an object of a registered kind, in rule order (may be empty)."""
    specs: list[PodSpecRef] = []
    for tpl in entry.rules:
        for hit in walk(entry.kind, obj, tpl):
            ref = _pod_spec(entry.kind, obj, tpl, hit)
            if ref is not None:
                specs.append(ref)
    return specs


def find_pod_spec(kind: str, obj: Mapping[str, Any]) -> PodSpecRef | None:
    """The pod spec of a core/apps/batch kind, or None when the object carries none."""
    entry = registry_for(None).by_kind_only.get(kind)
    if entry is None:
        return None
    specs = find_pod_specs(entry, obj)
    return specs[0] if specs else None


def object_ref(kind: str, obj: Mapping[str, Any], namespace: str | None = None) -> str:
    """`Pod default/train` style reference for messages (generateName shown as `name*`)."""
    found = as_dict(obj).get("metadata")
    meta = as_dict(found) if is_mapping(found) else _EMPTY
    name = meta.get("name") or (f"{meta['generateName']}*" if meta.get("generateName") else None)
    ns = meta.get("namespace") or namespace
    if not name:
        return kind
    return f"{kind} {ns}/{name}" if ns else f"{kind} {name}"
