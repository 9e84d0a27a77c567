"""What an evaluation concludes (Decision, Violation) and the per-pod-spec state rules fill."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final

from webhook.core.base.patches import Draft, diff
from webhook.core.base.wording import NOTE_LIMIT, Message
from webhook.core.images.facts import ImageQuery
from webhook.core.workloads.pods import ContainerRef, PodSpecRef

# A denial lists every violation up to this many, then says how many more (SPEC §7): 5,000
# broken containers must not make a 1 MB message that no one reads and that logs truncate.
# The runtime NVIDIA's containers are placed by (Decision.runtimes, runtime_unknown); other
# vendors' are their data's `runtime` (placement/vendors.py: ROCm, CANN).
CUDA: Final = "CUDA"
MAX_LISTED_VIOLATIONS = 20
# A single line (one violation, one policy description) is cut past this many characters.
MAX_LINE_CHARS = 400
MAX_DESCRIPTION_CHARS = 200

# ANSI escape sequences (CSI such as "\x1b[31m", and two-character escapes): removed whole, so
# no "[31m" debris is left behind.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|[@-Z\\-_])")


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule; `message` is the sentence shown to the user."""

    message: str
    object_ref: str
    container: str = ""
    field: str = ""
    rule: str = ""
    configmap: str = ""
    # `message` without the policy's description, and the description: a denial listing many
    # violations shows each description once (SPEC §7).
    detail: str = ""
    description: str = ""

    # Written out, frozen: as wording.Wording's (one per violation or GPU access finding).
    def __init__(
        self,
        message: str,
        object_ref: str,
        container: str = "",
        field: str = "",
        rule: str = "",
        configmap: str = "",
        detail: str = "",
        description: str = "",
    ) -> None:
        object.__setattr__(self, "message", message)
        object.__setattr__(self, "object_ref", object_ref)
        object.__setattr__(self, "container", container)
        object.__setattr__(self, "field", field)
        object.__setattr__(self, "rule", rule)
        object.__setattr__(self, "configmap", configmap)
        object.__setattr__(self, "detail", detail)
        object.__setattr__(self, "description", description)


@dataclass
class Decision:
    """What the webhook concludes about one object. Not changed once made; not frozen, as one
    is built per review and a frozen dataclass's __init__ costs several times more."""

    handled: bool = True
    object_ref: str = ""
    violations: tuple[Violation, ...] = ()
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    mutation_kinds: tuple[str, ...] = ()
    # Why the object was allowed without evaluation ("the pod template is unchanged", ...).
    reason: str = ""
    # GPU containers' images whose CUDA version nothing told (env, table, reference, shipped
    # knowledge): what a registry lookup could still answer (SPEC §4 step 6).
    unresolved_images: tuple[ImageQuery, ...] = ()
    # GPU access findings (SPEC §12) in any mode: under `enforce` they are violations too,
    # under `warn` warnings; the audit lists them either way.
    access: tuple[Violation, ...] = ()
    # For the metrics (set as mutation_kinds is, when the object is mutated): the rule of each
    # node affinity part injected (backward | minorVersion | forward | architecture-floor |
    # compute, injection.PLACEMENT_RULES).
    placements: tuple[str, ...] = ()
    # NVIDIA GPU containers evaluated; the runtime placement reads of every accelerator
    # container it evaluated, one entry per container ("CUDA" for NVIDIA's, the vendor's runtime,
    # "ROCm" or "CANN", for the driver-release gate's: SPEC §13); and (runtime, image) of each
    # whose runtime version nothing told where placement would have used it ("" when it names no
    # image; `unresolved_images` per container).
    gpu_containers: int = 0
    runtimes: tuple[str, ...] = ()
    runtime_unknown: tuple[tuple[str, str], ...] = ()
    original: Mapping[str, Any] | None = field(default=None, repr=False)
    mutated: Mapping[str, Any] | None = field(default=None, repr=False)
    # The draft that made `mutated`, when there is one: its patch is built from the places it
    # wrote (Draft.ops), not by walking both objects.
    draft: Draft | None = field(default=None, repr=False, compare=False)

    # Written out: @dataclass's own __init__ stays interpreted under mypyc (pods.ContainerRef).
    def __init__(
        self,
        handled: bool = True,
        object_ref: str = "",
        violations: tuple[Violation, ...] = (),
        notes: tuple[str, ...] = (),
        warnings: tuple[str, ...] = (),
        mutation_kinds: tuple[str, ...] = (),
        reason: str = "",
        unresolved_images: tuple[ImageQuery, ...] = (),
        access: tuple[Violation, ...] = (),
        placements: tuple[str, ...] = (),
        gpu_containers: int = 0,
        runtimes: tuple[str, ...] = (),
        runtime_unknown: tuple[tuple[str, str], ...] = (),
        original: Mapping[str, Any] | None = None,
        mutated: Mapping[str, Any] | None = None,
        draft: Draft | None = None,
    ) -> None:
        self.handled = handled
        self.object_ref = object_ref
        self.violations = violations
        self.notes = notes
        self.warnings = warnings
        self.mutation_kinds = mutation_kinds
        self.reason = reason
        self.unresolved_images = unresolved_images
        self.access = access
        self.placements = placements
        self.gpu_containers = gpu_containers
        self.runtimes = runtimes
        self.runtime_unknown = runtime_unknown
        self.original = original
        self.mutated = mutated
        self.draft = draft

    @property
    def cuda_unknown(self) -> tuple[str, ...]:
        """The images of the NVIDIA containers whose CUDA version is unknown (runtime_unknown's
        CUDA part)."""
        return tuple(image for runtime, image in self.runtime_unknown if runtime == CUDA)

    @property
    def allowed(self) -> bool:
        return not self.violations

    @cached_property
    def patch(self) -> list[dict[str, Any]]:
        if self.mutated is None or self.original is None:
            return []
        if self.draft is not None and self.draft.root is self.mutated:
            return self.draft.ops()
        return diff(self.original, self.mutated)

    def denial_message(self) -> str:
        """Every violation up to MAX_LISTED_VIOLATIONS, each policy description once, clean."""
        if len(self.violations) == 1:
            return _line(self.violations[0].message)
        listed = self.violations[:MAX_LISTED_VIOLATIONS]
        lines = [_line(f"{self.object_ref}: {len(self.violations)} GPU policy violations:")]
        lines += [f"- {_line(v.detail or v.message)}" for v in listed]
        more = len(self.violations) - len(listed)
        if more:
            lines.append(
                f"- and {more} more violation{'s' if more > 1 else ''}; run "
                "`gpu-webhook review -f <manifest>` to see them all"
            )
        descriptions = {v.configmap: v.description for v in listed if v.detail and v.description}
        if descriptions:
            lines.append("About these policies:")
            lines += [
                f"- {_line(f'{cm}: {_cut(text, MAX_DESCRIPTION_CHARS)}')}"
                for cm, text in descriptions.items()
            ]
        return "\n".join(lines)


# clean_text's answers: the same warnings and messages come back review after review (a
# workload's pods, a policy's wording). Keyed by the text, the whole input of a pure function;
# texts up to _CLEAN_LONGEST characters, emptied when full.
_CLEAN: Final[dict[str, str]] = {}
_CLEAN_MAX: Final = 4096
_CLEAN_LONGEST: Final = 1024


def clean_text(text: str) -> str:
    """`text` on one line with no control, format (bidi overrides, zero-width) or escape codes.

    Messages carry user data (names, images, ConfigMap descriptions) to terminals and HTTP
    Warning headers: U+202E or U+2066-2069 reorder what a reader sees, "\x1b[31m" recolours a
    terminal, and the API server refuses control characters in warnings.
    """
    if len(text) > _CLEAN_LONGEST or type(text) is not str:  # a str subclass is its own answer
        return _clean(text)
    cleaned = _CLEAN.get(text)
    if cleaned is None:
        if len(_CLEAN) >= _CLEAN_MAX:
            _CLEAN.clear()
        cleaned = _CLEAN[text] = _clean(text)
    return cleaned


def _clean(text: str) -> str:
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    # isprintable() is False for every category removed below (Other, Separator except the
    # ASCII space), so a printable text (with "≥", accents, CJK) is returned as it is.
    if text.isprintable():
        return text
    kept = (
        " " if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Co", "Cs") else ch
        for ch in text
    )
    return " ".join("".join(kept).split())


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _line(text: str) -> str:
    return _cut(clean_text(text), MAX_LINE_CHARS)


def short(text: str) -> str:
    return text if len(text) <= NOTE_LIMIT else text[: NOTE_LIMIT - 1] + "…"


def container_label(ref: ContainerRef) -> str:
    if ref.list_name == "initContainers":
        return f'init container "{ref.name}"'
    if ref.list_name == "ephemeralContainers":
        return f'ephemeral container "{ref.name}"'
    return f'container "{ref.name}"'


@dataclass
class PodState:
    """Accumulates the outcome of one pod spec while the rules run."""

    ref: str
    pod: PodSpecRef
    draft: Draft
    violations: list[Violation] = field(default_factory=list)
    # Fitted to 120 characters when the pod's role is put in front (evaluate.py).
    notes: list[Message] = field(default_factory=list)
    warnings: list[Message] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    unresolved: list[ImageQuery] = field(default_factory=list)
    access: list[Violation] = field(default_factory=list)
    placements: list[str] = field(default_factory=list)
    gpu_containers: int = 0
    runtimes: list[str] = field(default_factory=list)
    runtime_unknown: list[tuple[str, str]] = field(default_factory=list)

    def __init__(self, ref: str, pod: PodSpecRef, draft: Draft) -> None:  # as Decision's
        self.ref = ref
        self.pod = pod
        self.draft = draft
        self.violations = []
        self.notes = []
        self.warnings = []
        self.kinds = []
        self.unresolved = []
        self.access = []
        self.placements = []
        self.gpu_containers = 0
        self.runtimes = []
        self.runtime_unknown = []

    def unknown_runtime(self, runtime: str, *containers: ContainerRef) -> None:
        """Counts (Decision.runtime_unknown) each of `containers` whose `runtime` version
        nothing told, where placement would have used it: the same for every vendor."""
        for c in containers:
            image = c.container.get("image")
            self.runtime_unknown.append((runtime, image if isinstance(image, str) else ""))

    def container_path(self, c: ContainerRef) -> tuple[str | int, ...]:
        if c.index < 0:  # a container-like field of the spec (KServe `model`), not a list item
            return (*self.pod.spec_path, c.list_name)
        return (*self.pod.spec_path, c.list_name, c.index)

    def note(self, kind: str, text: Message) -> None:
        self.kinds.append(kind)
        self.notes.append(text)
