"""`NVIDIA_REQUIRE_*` variables read the way NVIDIA's container stack reads them, for forward
compatibility (SPEC §4): which driver branches an image declares it runs on.

NVIDIA's CUDA images declare, in `NVIDIA_REQUIRE_CUDA`, the native rule and the driver branches
their `cuda-compat` package supports, e.g. nvidia/cuda:12.8.1's
`cuda>=12.8 brand=unknown,driver>=470,driver<471 brand=tesla,driver>=535,driver<536 …`.

The grammar is the one both readers in NVIDIA's stack share:
- libnvidia-container src/cli/dsl.c `dsl_evaluate` (what the legacy-mode hook runs through
  `nvidia-container-cli --require`): the value is split on " " into alternatives that are
  ORed, each split on "," into constraints that are ANDed; empty pieces are skipped. A
  constraint is NAME OP VALUE, NAME up to the first of `<>=!`, OP exactly one of
  `= != < <= > >=`, VALUE non-empty; an unknown NAME or OP is "invalid expression" (the
  container does not start). Versions compare component by component as integers
  (`dsl_compare_version`: only digits and dots; "535.104.05" ≥ "535").
- nvidia-container-toolkit internal/config/image/cuda_image.go `GetRequirements`: every
  variable named `NVIDIA_REQUIRE_*` except `NVIDIA_REQUIRE_JETPACK` is a requirement, all of
  them ANDed (internal/requirements/constraints/factory.go `New`: `AND(constraints)`, each built
  by `newConstraintFromRequirement` with the same " " = OR, "," = AND split); and
  `NVIDIA_DISABLE_REQUIRE` set to a true value (Go strconv.ParseBool) turns them all off.
  Its properties are `cuda`, `driver`, `arch` (versions) and `brand` (a string)
  (internal/requirements/requirements.go).

What is read here is never wider than what the image declares: a node with driver branch B is
forward compatible only when, for every variable, some alternative holds on *every* driver of
branch B using only `driver` and `brand` constraints. An alternative with any other constraint
(`cuda`, `arch`, an unknown name, a malformed one) is not used — the toolkit's Go reader skips
unknown names, which would widen the alternative, so that reading is not followed here. `brand`
constraints are taken as met: the admin's `forwardCompatibleNodes` names the data-center nodes
where forward compatibility holds, and no node label carries NVML's brand.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

# Half-open ranges of driver branches [low, high), high None for unbounded, sorted and disjoint.
Branches = tuple[tuple[int, int | None], ...]

_PREFIX = "NVIDIA_REQUIRE_"
_JETPACK = "NVIDIA_REQUIRE_JETPACK"
_OPERATORS = frozenset(("=", "!=", "<", "<=", ">", ">="))
_VERSION = re.compile(r"[0-9.]{1,64}")
# strconv.ParseBool's true values.
_TRUE = frozenset(("1", "t", "T", "TRUE", "true", "True"))
# A value longer than any real one (nvidia/cuda 12.8.1's is ~2.7 kB) is not read at all.
MAX_VALUE_LENGTH = 16384
# The driver branches a node can have: a documented ceiling, not NVIDIA's rule. NVIDIA's Linux
# driver branches are three-digit numbers (R450 … R580: the CUDA Toolkit release notes' driver
# table; GFD's nvidia.com/cuda.driver-version.major carries it), so a branch from 1000 on is
# one no node has. What an image declares is read within it: a pod writing
# `driver>=1,driver<999999999` costs as much as one writing `driver>=1,driver<1000`, and the
# webhook never lists more than MAX_DRIVER_BRANCH values (SPEC §4, issue 37 defect 1).
MAX_DRIVER_BRANCH = 1000
_CEILING: Branches = ((0, MAX_DRIVER_BRANCH),)


def _version(text: str) -> tuple[int, ...] | None:
    """dsl_compare_version's reading: digits and dots only, components compared as integers,
    trailing zero components not counted."""
    if not _VERSION.fullmatch(text):
        return None
    parts = [p for p in text.split(".") if p]
    if not parts:
        return None
    numbers = [int(p) for p in parts]
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers)


def _constraint_branches(operator: str, value: tuple[int, ...]) -> Branches:
    """The branches B all of whose drivers (B ≤ version < B+1) satisfy `driver OP value`
    (`value` as _version gives it: "535" is (535,), "535.104.05" is (535, 104, 5))."""
    head, whole = value[0], len(value) == 1
    if operator == ">=":  # B.x ≥ 535 for every x iff B ≥ 535; ≥ 535.104 only from 536 on
        return ((head if whole else head + 1, None),)
    if operator == ">":  # 535.0 is not > 535: only from the next branch on
        return ((head + 1, None),)
    if operator in ("<", "<="):  # every B.x below (or at) the value iff B+1 ≤ value
        return ((0, head),)
    if operator == "!=":  # the branch that holds the value has a driver equal to it
        return ((0, head), (head + 1, None))
    return ()  # "=": no branch has a single driver version


def intersect(a: Branches, b: Branches) -> Branches:
    """The branches in both. Both are sorted and disjoint (_normalise): one merge pass, so an
    image's text costs time linear in its length, never its square."""
    out: list[tuple[int, int | None]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        (low_a, high_a), (low_b, high_b) = a[i], b[j]
        low = max(low_a, low_b)
        highs = [h for h in (high_a, high_b) if h is not None]
        high = min(highs) if highs else None
        if high is None or low < high:
            out.append((low, high))
        # The range that ends first meets nothing further on the other side.
        if high_a is not None and (high_b is None or high_a <= high_b):
            i += 1
        else:
            j += 1
    return tuple(out)


def _normalise(ranges: list[tuple[int, int | None]]) -> Branches:
    merged: list[tuple[int, int | None]] = []
    for low, high in sorted(ranges, key=lambda r: r[0]):
        if merged:
            last_low, last_high = merged[-1]
            if last_high is None or low <= last_high:
                top = None if last_high is None or high is None else max(last_high, high)
                merged[-1] = (last_low, top)
                continue
        merged.append((low, high))
    return tuple(merged)


_ALL: Branches = ((0, None),)


def _alternative(alternative: str) -> Branches | None:
    """The driver branches on which the alternative holds for every driver; None when it is
    not usable for forward compatibility (another property, a malformed constraint)."""
    allowed = _ALL
    bounded = False
    for constraint in alternative.split(","):
        if not constraint:
            continue
        name_end = next((i for i, ch in enumerate(constraint) if ch in "<>=!"), -1)
        if name_end <= 0:
            return None
        name = constraint[:name_end].lower()  # dsl.c compares names case-insensitively
        rest = constraint[name_end:]
        op_end = next((i for i, ch in enumerate(rest) if ch not in "<>=!"), len(rest))
        operator, value = rest[:op_end], rest[op_end:]
        if operator not in _OPERATORS or not value:
            return None
        if name == "brand":
            if operator not in ("=", "!="):
                return None  # dsl_compare_string: anything else is invalid
            continue
        if name != "driver":
            return None
        parsed = _version(value)
        if parsed is None:
            return None
        allowed = intersect(allowed, _constraint_branches(operator, parsed))
        bounded = True
    return allowed if bounded else None


def _variable(value: str) -> Branches:
    found: list[tuple[int, int | None]] = []
    for alternative in value.split(" "):
        if not alternative:
            continue
        branches = _alternative(alternative)
        if branches:
            found += branches
    return _normalise(found)


def requirements_disabled(env: Mapping[str, str | None]) -> bool:
    """NVIDIA_DISABLE_REQUIRE set to a true value: the toolkit checks no requirement."""
    disable = env.get("NVIDIA_DISABLE_REQUIRE")
    return disable is not None and disable in _TRUE


def requirement_variables(env: Mapping[str, str | None]) -> list[str] | None:
    """The values of the requirement variables the toolkit reads (None: disabled)."""
    if requirements_disabled(env):
        return None
    return [
        value
        for name, value in env.items()
        if name.startswith(_PREFIX) and not name.startswith(_JETPACK) and value is not None
    ]


def forward_branches(env: Mapping[str, str | None]) -> Branches:
    """Driver branches the image declares forward compatibility for: on each, every
    NVIDIA_REQUIRE_* variable holds through its driver/brand alternatives. () for none."""
    values = requirement_variables(env)
    if not values or not any(v.strip() for v in values):
        return ()
    if any(len(v) > MAX_VALUE_LENGTH for v in values):
        return ()
    result = _ALL
    for value in values:
        if not value.strip():
            continue  # an empty requirement is no constraint (factory.go: nil, skipped)
        result = intersect(result, _variable(value))
        if not result:
            return ()
    # Only finite sets: "driver>=535" alone on a variable is a branch floor, not forward
    # compatibility (any newer driver is the native rule's business anyway). Then only the
    # branches a node can have (MAX_DRIVER_BRANCH): narrower than declared, never wider.
    return intersect(tuple(r for r in result if r[1] is not None), _CEILING)


def branch_count(branches: Branches) -> int:
    """How many branches `branches` holds (all finite), without listing them."""
    return sum(high - low for low, high in branches if high is not None)


def holds(branches: Branches, branch: int) -> bool:
    """Whether `branch` is one of `branches`."""
    return any(low <= branch and (high is None or branch < high) for low, high in branches)


def only(branches: Branches, wanted: Iterable[int]) -> Branches:
    """The branches of `branches` that are in `wanted` (e.g. those the inventory's nodes have)."""
    return _normalise([(b, b + 1) for b in sorted(set(wanted)) if holds(branches, b)])


def branch_list(branches: Branches) -> list[int]:
    """Every branch in `branches` (all finite), ascending. Bounded: forward_branches keeps
    them below MAX_DRIVER_BRANCH."""
    return [b for low, high in branches if high is not None for b in range(low, high)]
