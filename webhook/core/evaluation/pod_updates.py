"""A Pod UPDATE and the pods/ephemeralcontainers subresource (SPEC §12, what reaches the
webhook): GPU access control judges what the update changes, and patches only what the API
server lets change.

What an update can change, in kubernetes pkg/apis/core/validation/validation.go:
- ValidatePodUpdate (the pod itself): of the spec only `containers[*].image`,
  `initContainers[*].image`, `activeDeadlineSeconds`, additions to `tolerations`,
  `terminationGracePeriodSeconds` and the scheduling directives of a gated pod; metadata
  (annotations) may change. Env, volumes, mounts and the security context are immutable, so
  no patch can set a device variable: a container whose new image needs `void` is denied.
- ValidatePodEphemeralContainersUpdate (`kubectl debug`): ephemeral containers may be added,
  never changed or removed; pkg/registry/core/pod/strategy.go, dropNonEphemeralContainerUpdates,
  drops every other change of the request (a patch elsewhere would be lost silently). Only the
  new ephemeral containers are patched.

A finding already there before the update (a pod admitted under `warn`, or before `enforce`) is
not a reason to refuse it: the update is judged on what it adds, so a controller's label or
annotation change never wedges on a pod that already runs (the audit lists that pod).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.access import control as access_control
from webhook.core.base.patches import Draft
from webhook.core.base.shapes import is_mapping
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.pods import evaluate_pod
from webhook.core.images.facts import ImageFacts
from webhook.core.kinds.registry import WorkloadKind
from webhook.core.outcome.decision import Decision, Violation
from webhook.core.placement.inventory import NodeInventory
from webhook.core.policies.policyset import PolicySet
from webhook.core.workloads.claims import ClaimIndex

EPHEMERAL = "ephemeralcontainers"
_LISTS = ("initContainers", "containers", "ephemeralContainers")
_LABELS = {"initContainers": "init container", "ephemeralContainers": "ephemeral container"}


def _items(obj: Mapping[str, Any], list_name: str) -> list[Any]:
    spec = obj.get("spec")
    items = spec.get(list_name) if is_mapping(spec) else None
    return items if isinstance(items, list) else []


def _name(item: Any) -> Any:
    return item.get("name") if is_mapping(item) else None


def _images(obj: Mapping[str, Any]) -> dict[tuple[str, Any], Any]:
    """(list, container name) -> image, for every container of the pod."""
    return {
        (list_name, _name(item)): item.get("image") if is_mapping(item) else None
        for list_name in _LISTS
        for item in _items(obj, list_name)
    }


def _annotations(obj: Mapping[str, Any]) -> Any:
    meta = obj.get("metadata")
    return meta.get("annotations") if is_mapping(meta) else None


def read_part(obj: Mapping[str, Any], sub_resource: str) -> tuple[Any, ...]:
    """What an update can change that GPU access control reads: every container's image and
    the pod's annotations (ValidatePodUpdate), or the ephemeral containers (the subresource)."""
    if sub_resource == EPHEMERAL:
        return (_items(obj, "ephemeralContainers"),)
    return (_images(obj), _annotations(obj))


def evaluate_pod_update(
    entry: WorkloadKind,
    obj: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    policies: PolicySet,
    config: WebhookConfig,
    ref: str,
    ns: str | None,
    inventory: NodeInventory | None,
    claims: ClaimIndex | None,
    *,
    sub_resource: str,
    violations_only: bool,
    images: ImageFacts | None,
    audit: bool,
) -> Decision:
    """GPU access control of a Pod UPDATE (sub_resource "") or of ephemeral containers added
    through the subresource. Always evaluated with its draft (a /validate call must see the
    `void` an update cannot set), then shaped for `violations_only`."""

    def judge(pod: Mapping[str, Any]) -> Decision:
        return evaluate_pod(
            entry,
            pod,
            policies,
            config,
            ref,
            ns,
            inventory,
            claims,
            mutate_template=False,
            images=images,
            audit=audit,
            access_only=True,
        )

    new = judge(obj)
    before = judge(old) if old is not None else Decision()
    seen = {v.message for v in before.access}
    access = tuple(v for v in new.access if v.message not in seen)
    shown = set(before.warnings)
    warnings = tuple(w for w in new.warnings if w not in shown)
    violations = [v for v in new.violations if v.message not in seen]
    patchable = _new_ephemeral(obj, old) if sub_resource == EPHEMERAL else set()
    draft, kept, refused = _restrict(new, obj, old, patchable)
    violations += [_cannot_set(ref, where, names) for where, names in refused]
    if violations_only:
        return Decision(object_ref=ref, violations=tuple(violations), access=access)
    notes = tuple(n for n in new.notes if any(f'"{name}"' in n for name in kept))
    return Decision(
        object_ref=ref,
        violations=tuple(violations),
        notes=notes,
        warnings=warnings,
        mutation_kinds=new.mutation_kinds if draft is not None else (),
        original=obj,
        mutated=draft.root if draft is not None else None,
        draft=draft,
        access=access,
    )


def _new_ephemeral(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> set[int]:
    """Indexes of the ephemeral containers this request adds (names are unique in a pod)."""
    existing = {_name(item) for item in _items(old, "ephemeralContainers")} if old else set()
    return {
        index
        for index, item in enumerate(_items(obj, "ephemeralContainers"))
        if _name(item) not in existing
    }


def _restrict(
    new: Decision, obj: Mapping[str, Any], old: Mapping[str, Any] | None, patchable: set[int]
) -> tuple[Draft | None, set[str], list[tuple[str, list[str]]]]:
    """The draft's writes kept where the API server takes them (new ephemeral containers):
    (a draft holding only those, the names of the containers patched, and for each container
    whose new image needs a change an update cannot make: its label and the env names)."""
    writes = new.draft.writes if new.draft is not None else None
    if not writes or new.draft is None:
        return None, set(), []
    root = new.draft.root
    kept: dict[tuple[str | int, ...], set[str]] = {}
    refused: dict[tuple[str, int], list[str]] = {}
    for path in writes:
        if len(path) < 4 or path[0] != "spec" or not isinstance(path[2], int):
            continue  # nothing but containers is written by access control
        list_name, index, key = path[1], path[2], path[3]
        if list_name == "ephemeralContainers" and index in patchable:
            kept.setdefault(path[:3], set()).add(str(key))
        elif key == "env" and len(path) == 5:
            entry = root["spec"][list_name][index]["env"][path[4]]
            refused.setdefault((str(list_name), index), []).append(str(entry.get("name")))
    old_images = _images(old) if old is not None else {}
    problems = []
    for (list_name, index), names in refused.items():
        item = _items(obj, list_name)[index]
        name = _name(item)
        # A container whose image did not change runs as it did before the update.
        if (list_name, name) in old_images and old_images[(list_name, name)] == item.get("image"):
            continue
        problems.append((f'{_LABELS.get(list_name, "container")} "{name}"', names))
    if not kept:
        return None, set(), problems
    draft = Draft(obj)
    patched: set[str] = set()
    for prefix, keys in kept.items():
        source = root["spec"][prefix[1]][prefix[2]]
        patched.add(str(source.get("name")))
        for key in sorted(keys):
            draft.set(prefix, key, source[key])
    return draft, patched, problems


def _cannot_set(ref: str, where: str, names: list[str]) -> Violation:
    settings = ", ".join(f"{n}=void" for n in dict.fromkeys(names))
    detail = (
        f"{ref}, {where}: its new image may reach every GPU of the node and a pod update "
        f"cannot set {settings} (env is immutable): recreate the pod instead."
    )
    return Violation(
        detail,
        ref,
        where,
        rule=access_control.RULE,
        configmap=access_control.POLICY,
        detail=detail,
    )
