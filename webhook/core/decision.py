"""What an evaluation concludes (Decision, Violation) and the per-pod-spec state rules fill."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from webhook.core.patches import Draft, diff
from webhook.core.workloads import ContainerRef, PodSpecRef

NOTE_LIMIT = 120


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule; `message` is the sentence shown to the user."""

    message: str
    object_ref: str
    container: str = ""
    field: str = ""
    rule: str = ""
    configmap: str = ""


@dataclass(frozen=True)
class Decision:
    """What the webhook concludes about one object."""

    handled: bool = True
    object_ref: str = ""
    violations: tuple[Violation, ...] = ()
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    mutation_kinds: tuple[str, ...] = ()
    # Why the object was allowed without evaluation ("the pod template is unchanged", ...).
    reason: str = ""
    original: Mapping[str, Any] | None = field(default=None, repr=False)
    mutated: Mapping[str, Any] | None = field(default=None, repr=False)

    @property
    def allowed(self) -> bool:
        return not self.violations

    @cached_property
    def patch(self) -> list[dict[str, Any]]:
        if self.mutated is None or self.original is None:
            return []
        return diff(self.original, self.mutated)

    def denial_message(self) -> str:
        if len(self.violations) == 1:
            return self.violations[0].message
        lines = [f"{self.object_ref}: {len(self.violations)} GPU policy violations:"]
        lines += [f"- {v.message}" for v in self.violations]
        return "\n".join(lines)


def short(text: str) -> str:
    return text if len(text) <= NOTE_LIMIT else text[: NOTE_LIMIT - 1] + "…"


def container_label(ref: ContainerRef) -> str:
    kind = "init container" if ref.list_name == "initContainers" else "container"
    return f'{kind} "{ref.name}"'


@dataclass
class PodState:
    """Accumulates the outcome of one pod spec while the rules run."""

    ref: str
    pod: PodSpecRef
    draft: Draft
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)

    def container_path(self, c: ContainerRef) -> tuple[str | int, ...]:
        if c.index < 0:  # a container-like field of the spec (KServe `model`), not a list item
            return (*self.pod.spec_path, c.list_name)
        return (*self.pod.spec_path, c.list_name, c.index)

    def note(self, kind: str, text: str) -> None:
        self.kinds.append(kind)
        self.notes.append(short(text))
