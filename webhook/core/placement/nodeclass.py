"""Never strand a pod (SPEC §13): the one rule every placement path decides its terms with.

Per vendor (NVIDIA's CUDA: ranges.py; the driver-release gate of AMD ROCm and Huawei Ascend
CANN: gate.py) the nodes of the vendor are *fit* (their driver runs the pod), *unfit* (their
driver, or device, is known and does not run it) or *unknown* (no label, an empty one, or a
value no table row maps). Each path classifies its own nodes (what its labels mean differs);
this module holds what is the same for all of them:

- `judge`: the decide step of every family's plan, on every axis: the verdict and the warning
  it carries (the engine, engine.py, runs the rest of the pod-level sequence).
- `decide`: some fit -> required onto the fit ones (`REQUIRE`), and the unknown ones are
  counted in a warning (`unknown_warning`); none fit but some unknown -> only the unfit ones
  are kept off (`AVOID`: `NotIn`/`DoesNotExist` terms every unknown node meets, with no label
  or with a value no row maps), with a warning (`avoid_warning`); every node known and unfit
  -> `noCompatibleNode` (`NONE`: warn or deny, as before). `unknownNodes: exclude` (config)
  makes "none fit" mean `NONE` whatever the unknown nodes are: Pending rather than a gamble.
- `exclusion_terms`: the terms that keep a pod off nodes whose first present label (of an
  ordered list, the admin's before the labeller's) holds one of the excluded values.
- the warnings, which name the label and the value format an admin sets to make an unknown
  node known, whole: at the line limit the other words get shorter (base/wording.py).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from webhook.core.base.wording import Message, Wording
from webhook.core.placement.terms import cross

Term = list[dict[str, Any]]

REQUIRE = "require"  # some node fits: required onto the fit ones
AVOID = "avoid"  # none fits, some unknown: kept off the unfit ones only
NONE = "none"  # every node known and unfit (or unknownNodes: exclude): noCompatibleNode


def decide(fit: int, unknown: int, unknown_nodes: str) -> str:
    """The one decision (SPEC §13 "Never strand a pod"): `fit`, `unknown`: how many of the
    vendor's nodes are so; `unknown_nodes`: the config's `unknownNodes` (allow | exclude)."""
    if fit:
        return REQUIRE
    if unknown and unknown_nodes == "allow":
        return AVOID
    return NONE


def judge(
    fit: int,
    unknown: int,
    unfit: int,
    unknown_nodes: str,
    nodes: str,
    what: str,
    wanted: str,
    hints: Sequence[Hint],
    why: str = "",
    avoid_what: str = "",
) -> tuple[str, Message]:
    """The decide step every family's plan takes (engine.py, SPEC §13), on one axis (a vendor's
    driver; CUDA's version; CUDA's compute capability): the verdict of `decide` and the
    warning it carries ('' for none). REQUIRE: the `unknown` nodes not used are counted
    (`why`: the first one's reason); AVOID: the pod may land on them, kept off the `unfit`
    ones (`wanted`: what it needs, `avoid_what`: the fact unknown, default `what`); NONE:
    no warning here, the family's `noCompatibleNode` sentence is recorded by the caller
    (needs.record_problem: warn or deny). `nodes`: the plural naming the family's nodes;
    `hints`: the labels that make a node known (read only when some node is unknown)."""
    verdict = decide(fit, unknown, unknown_nodes)
    if verdict == REQUIRE:
        return verdict, unknown_warning(unknown, nodes, what, hints, why) if unknown else ""
    if verdict == AVOID:
        return verdict, avoid_warning(unknown, unfit, nodes, avoid_what or what, wanted, hints)
    return verdict, ""


class Hint:
    """The label an admin sets to make an unknown node known, and its value's format."""

    # Written out: a NamedTuple's or @dataclass's constructor stays interpreted under mypyc.
    def __init__(self, key: str, value: str) -> None:
        self.key = key
        self.value = value  # `<amdgpu driver release>`

    def __str__(self) -> str:
        return f"{self.key}={self.value}"


def version_hints(major: str, minor: str) -> tuple[Hint, Hint]:
    """The pair of integer labels that make a node's version known (CUDA's schemes, GFD's
    compute capability)."""
    return Hint(major, "<major>"), Hint(minor, "<minor>")


def _count(count: int, nodes: str) -> str:
    """`1 AMD GPU node`, `3 AMD GPU nodes` (`nodes`: the plural)."""
    return f"{count} {nodes if count != 1 else nodes.removesuffix('s')}"


def unknown_warning(
    unknown: int, nodes: str, what: str, hints: Sequence[Hint], why: str = ""
) -> Wording:
    """Some nodes fit and the pod is required onto them; `unknown` more of the vendor's
    nodes are not used because their `what` (`amdgpu driver`, `CUDA`) is unknown (`why`:
    the first one's reason, `amd.com/gpu.driver-version is empty`)."""
    label = " ".join(map(str, hints))
    counted = _count(unknown, nodes)
    because = (f"{counted} not used ({why}): label {label}",) if why else ()
    return Wording(
        (
            *because,
            f"{counted} not used, {'its' if unknown == 1 else 'their'} {what} is unknown: "
            f"label {label}",
            f"{counted} not used ({what} unknown): label {label}",
            f"{unknown} unknown not used: label {label}",
            f"label {label}",
        )
    )


def avoid_warning(
    unknown: int, unfit: int, nodes: str, what: str, runtime: str, hints: Sequence[Hint]
) -> Wording:
    """No node is known to run `runtime`: the pod is only kept off the `unfit` ones and may
    land on the `unknown` ones."""
    label = " ".join(map(str, hints))
    counted = _count(unknown, nodes)
    off = f", kept off {unfit} unfit" if unfit else ""
    return Wording(
        (
            f"no node is known to run {runtime}{off}; {counted} with unknown {what} "
            f"may run it: label {label}",
            f"no node known to run {runtime}{off}; {unknown} unknown may: label {label}",
            f"{runtime} on no known node{off}; {unknown} unknown may: label {label}",
            f"no node known to run {runtime}: label {label}",
            f"{runtime} unknown: label {label}",
            f"label {label}",
        )
    )


def _first(keys: Sequence[str], i: int) -> Term:
    """The key at `i` is the first of `keys` a node carries (those before it: none)."""
    return [{"key": k, "operator": "DoesNotExist"} for k in keys[:i]]


def exclusion_terms(keys: Sequence[str], excluded: Mapping[str, Collection[str]]) -> list[Term]:
    """Terms a node meets unless the first of `keys` it carries holds a value of
    `excluded[key]` ([] when nothing is excluded: no constraint).

    A node without any of the keys, and one whose value is not excluded (a value no table row
    maps among them), meet them: `NotIn` matches a node without the key, and a key after an
    excluded one is read only where the ones before it are absent (`DoesNotExist`), as the
    gate reads it. Exact: one term per key up to the last one with an excluded value."""
    last = max((i for i, k in enumerate(keys) if excluded.get(k)), default=-1)
    terms: list[Term] = []
    for i, key in enumerate(keys[: last + 1]):
        values = sorted(excluded.get(key) or ())
        term = _first(keys, i)
        if i < last:
            # Carried first: not excluded. (The last key's term also holds the nodes without
            # any of the keys, NotIn matching a node without it.)
            term.append({"key": key, "operator": "Exists"})
        if values:
            term.append({"key": key, "operator": "NotIn", "values": values})
        terms.append(term)
    return terms


def both(left: list[Term], right: list[Term]) -> list[Term]:
    """Nodes that meet `left` and `right` ([] on a side: no constraint from it)."""
    return cross(left, right)


def absent_terms(keys: Sequence[str]) -> list[Term]:
    """One term: a node carrying none of `keys` (CUDA: a node advertising no CUDA version)."""
    return [[{"key": k, "operator": "DoesNotExist"} for k in dict.fromkeys(keys)]]
