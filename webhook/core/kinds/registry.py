"""Workload registry as data: (API group, kind) -> where pod templates live, plus a path walker.

A path is dot-separated keys with two wildcards: `*` visits every value of a map (the key is
captured, e.g. a Kubeflow replica type) and `[*]` visits every item of a list (the item's
name field is captured, e.g. a Volcano task name). A role is a format string over the
captures (`replica {0}`). Walking never raises anything but ObjectShapeError.

The built-in kinds, each citing the operator's Go types, are in core/kinds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from webhook.core.base.errors import ObjectShapeError
from webhook.core.base.shapes import is_mapping

# template: a PodTemplateSpec (metadata + spec); podspec: an object with PodSpec fields inlined
# (KServe components, LLMInferenceService workloads). `containers` of a rule name extra keys of
# the pod spec that hold one container-like object with `resources` which the operator turns
# into a container (KServe's `model` and framework fields). container: no pod spec at all, only
# fields from which the operator builds one container of pods it makes from elsewhere (a
# Kubeflow TrainJob's `spec.trainer`: image, env and resourcesPerNode go into the training
# runtime's `node` container); the rule's `virtual` says which fields.
Form = Literal["template", "podspec", "container"]
MAP_WILDCARD = "*"
LIST_WILDCARD = "[*]"
_KEY = re.compile(r"[A-Za-z0-9_.-]+|\*|\[\*\]")

Path = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class VirtualContainer:
    """A container an operator builds from fields of its own object, each a path (no wildcard)
    relative to the rule's path: `resources` a ResourceRequirements, `image` a string, `env` a
    list of EnvVar. `name` is the container the pods get (for messages)."""

    name: str
    resources: Path
    image: Path | None = None
    env: Path | None = None


@dataclass(frozen=True, slots=True)
class TemplateRule:
    path: Path
    role: str = ""
    form: Form = "template"
    name_field: str = "name"  # what a list wildcard captures from each item
    containers: tuple[str, ...] = ()
    wildcards: bool = False
    # Keys of a podspec-form object that are not pod fields (scaling, traffic): an UPDATE
    # changing only these leaves the template unchanged (SPEC §6 update rules).
    not_pod: frozenset[str] = frozenset()
    virtual: VirtualContainer | None = None
    # Where a container of these pods that names no image gets one ("the ServingRuntime"): its
    # CUDA version is then unknowable here, and the pods are checked when they are created, so
    # no "CUDA version unknown" advice is given for it. "": an image is the user's to give.
    image_from: str = ""
    # Paths (from the object's root, no wildcard) of the annotation maps its pods get, merged
    # in order; None: the form's own (a template's metadata.annotations; for podspec, the
    # object's metadata.annotations and the object's own `annotations`; none for container).
    annotations: tuple[Path, ...] | None = None
    # The operator runs the pods by digest, not by the tag the template names (Knative: the
    # tag is resolved once per revision): what only the tag tells is not what the pods get.
    by_digest: bool = False


@dataclass(frozen=True, slots=True)
class WorkloadKind:
    group: str
    kind: str
    rules: tuple[TemplateRule, ...]
    source: str = ""  # the Go type the paths come from, for /policies and the docs
    # Whether some rule reaches a template (not the object's own pod spec): set once here, read
    # by every evaluation.
    templates: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "templates", any(rule.path for rule in self.rules))


@dataclass(slots=True)
class Found:
    """One template reached by a rule: its concrete path, role label and the object there.

    Built for every template of every review: not frozen, and with a written __init__ (mypyc
    leaves @dataclass's own interpreted, and a NamedTuple's __new__ too)."""

    path: tuple[str | int, ...]
    role: str
    form: Form
    node: Any

    def __init__(self, path: tuple[str | int, ...], role: str, form: Form, node: Any) -> None:
        self.path = path
        self.role = role
        self.form = form
        self.node = node


def parse_path(text: str) -> Path:
    """`spec.workerGroupSpecs[*].template` -> ("spec", "workerGroupSpecs", "[*]", "template")."""
    parts: list[str] = []
    for raw in text.replace("[*]", ".[*]").split("."):
        if not raw:
            continue
        if not _KEY.fullmatch(raw):
            raise ValueError(f"path {text!r}: {raw!r} is not a key, '*' or '[*]'")
        parts.append(raw)
    if not parts:
        raise ValueError("path must not be empty")
    return tuple(parts)


def plain_path(text: str) -> Path:
    """A path of keys only (no wildcard): annotation maps and virtual container fields."""
    parsed = parse_path(text)
    if MAP_WILDCARD in parsed or LIST_WILDCARD in parsed:
        raise ValueError(f"path {text!r}: no wildcard allowed here")
    return parsed


def virtual_container(
    name: str, resources: str, image: str = "", env: str = ""
) -> VirtualContainer:
    if not name:
        raise ValueError("a virtual container needs the name of the container it becomes")
    return VirtualContainer(
        name,
        plain_path(resources),
        plain_path(image) if image else None,
        plain_path(env) if env else None,
    )


def rule(
    path: str,
    role: str = "",
    form: Form = "template",
    name_field: str = "name",
    containers: tuple[str, ...] = (),
    *,
    virtual: VirtualContainer | None = None,
    image_from: str = "",
    annotations: tuple[str, ...] | None = None,
    not_pod: frozenset[str] = frozenset(),
    by_digest: bool = False,
) -> TemplateRule:
    parsed = parse_path(path) if path else ()
    wildcards = sum(p in (MAP_WILDCARD, LIST_WILDCARD) for p in parsed)
    try:
        role.format(*([""] * wildcards))
    except (IndexError, KeyError, ValueError) as exc:
        raise ValueError(
            f"role {role!r} of path {path!r} may only use {{0}}..{{{wildcards - 1}}} "
            f"(one per wildcard)"
        ) from exc
    if (form == "container") != (virtual is not None):
        raise ValueError(
            f"path {path!r}: form container needs a container (name, resources, image, env), "
            "and only that form takes one"
        )
    if form == "container" and containers:
        raise ValueError(f"path {path!r}: form container takes no containers list")
    return TemplateRule(
        parsed,
        role,
        form,
        name_field,
        containers,
        wildcards > 0,
        not_pod,
        virtual,
        image_from,
        None if annotations is None else tuple(plain_path(a) for a in annotations),
        by_digest,
    )


def follow(node: Any, path: Path) -> Any:
    """The value at a wildcard-free `path` below `node`; None when a step is missing or is not
    an object (the caller checks the shape of what it needs)."""
    for part in path:
        if not is_mapping(node):
            return None
        node = node.get(part)
    return node


def _where(kind: str, path: tuple[str | int, ...]) -> str:
    text = kind
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def walk(kind: str, obj: Mapping[str, Any], tpl: TemplateRule) -> list[Found]:
    """Every object at the rule's path, in document order; a missing key or null is no
    template, not an error.

    A list, not a generator: a review walks every rule of its kind to the end, and resuming a
    generator costs more than the list it would save."""
    found: list[Found] = []
    _descend(kind, tpl, obj, 0, (), (), found)
    return found


def _descend(
    kind: str,
    tpl: TemplateRule,
    node: Any,
    depth: int,
    at: tuple[str | int, ...],
    captures: tuple[str, ...],
    found: list[Found],
) -> None:
    """Follow plain keys in a loop and recurse only at a wildcard, once per child: the plain
    steps (most of every path) cost no stack entry and no tuple of their own."""
    path = tpl.path
    while depth < len(path):
        part = path[depth]
        if part == LIST_WILDCARD:
            if not isinstance(node, list):
                raise ObjectShapeError(
                    f"{_where(kind, at)} must be a list, got {type(node).__name__}"
                )
            for index, item in enumerate(node):
                if item is None:
                    continue
                label = item.get(tpl.name_field) if is_mapping(item) else None
                label = label if isinstance(label, str) and label else f"#{index}"
                _descend(kind, tpl, item, depth + 1, (*at, index), (*captures, label), found)
            return
        if not is_mapping(node):
            raise ObjectShapeError(
                f"{_where(kind, at)} must be an object, got {type(node).__name__}"
            )
        if part == MAP_WILDCARD:
            for key, value in node.items():
                if value is not None:
                    name = str(key)
                    _descend(kind, tpl, value, depth + 1, (*at, name), (*captures, name), found)
            return
        node = node.get(part)
        if node is None:
            return
        at = (*at, part)
        depth += 1
    # Built-in kinds have no wildcard, hence no captures: no role formatting for them.
    found.append(Found(at, tpl.role.format(*captures) if captures else tpl.role, tpl.form, node))
