"""Draft.ops gives exactly the operations, in the same order, as main's implementation at the
start of issue 40's round (kept here as the reference): the edge goldens compare the answer's
bytes, so the faster walk must not change one operation."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_properties import CONFIGS, POLICIES, inventories, pods
from webhook.core.base.errors import ObjectShapeError
from webhook.core.base.patches import Draft, escape
from webhook.core.base.shapes import is_mapping
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.placement.inventory import NodeInventory


def reference_ops(draft: Draft) -> list[dict[str, Any]]:
    """Draft.ops as it was (d35ab93): a pointer string built per step, a set of pointers."""
    assert draft.writes is not None
    ops: list[dict[str, Any]] = []
    made: set[str] = set()
    for path in draft.writes:
        before: Any = draft.original
        after: Any = draft.root
        pointer = ""
        op = "replace"
        gone = False
        for part in path:
            if is_mapping(before):
                if not isinstance(part, str):
                    break
                present = part in before
            elif isinstance(before, list) and isinstance(part, int):
                present = part < len(before)
            else:
                break
            pointer = f"{pointer}/{escape(part) if isinstance(part, str) else part}"
            try:
                after = after[part]
            except (KeyError, IndexError, TypeError):
                gone = True
                break
            if pointer in made:
                break
            if not present:
                op = "add"
                break
            before = before[part]
        if gone or pointer in made:
            continue
        made.add(pointer)
        ops.append({"op": op, "path": pointer, "value": after})
    return ops


_keys = st.sampled_from(["a", "b", "c/d", "e~f", "0"])
_leaf = st.one_of(st.integers(0, 3), st.text("ab", max_size=2), st.none())
_tree = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.dictionaries(_keys, inner, max_size=3), st.lists(inner, min_size=0, max_size=3)
    ),
    max_leaves=12,
)
_step = st.one_of(_keys, st.integers(0, 2))
_write = st.tuples(
    st.sampled_from(["set", "extend", "writable"]), st.lists(_step, max_size=3), _keys, _tree
)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(_keys, _tree, max_size=4), st.lists(_write, min_size=1, max_size=12))
def test_ops_are_the_reference_ones_on_random_drafts(
    original: dict[str, Any], writes: list[Any]
) -> None:
    draft = Draft(original)
    for how, path, key, value in writes:
        try:
            if how == "set":
                draft.set(tuple(path), key, value)
            elif how == "extend":
                draft.extend(tuple(path), key, [value, key])
            else:
                draft.writable(tuple(path))
        except ObjectShapeError:
            continue  # refused before anything is written; later writes still count
    assert draft.ops() == reference_ops(draft)


def test_ops_are_the_reference_ones_on_hand_made_drafts() -> None:
    # A place patched whole, then written below (skipped); a parent replaced after a write
    # below it (gone); a null replaced by an object; the root's own place.
    draft = Draft({"a": {"b": 1}, "n": None, "l": [1]})
    draft.set(("a",), "c", {"x": 1})
    draft.set(("a", "c"), "y", 2)
    draft.set(("n",), "k", 1)
    draft.extend(("x", "y"), "z", [1, 2])
    draft.set(("x",), "y", 3)
    draft.extend((), "l", [2])
    assert draft.ops() == reference_ops(draft)
    assert [op["path"] for op in draft.ops()] == ["/a/c", "/n", "/x", "/l/1"]


@settings(max_examples=300, deadline=None)
@given(pods(), st.sampled_from(CONFIGS), inventories)
def test_ops_are_the_reference_ones_on_evaluations(
    obj: dict[str, Any], config: WebhookConfig, inventory: NodeInventory | None
) -> None:
    decision = evaluate(obj, POLICIES, config, inventory=inventory)
    if decision.draft is not None and decision.draft.root is decision.mutated:
        assert decision.patch == reference_ops(decision.draft)


def test_ops_are_the_reference_ones_past_eight_places() -> None:
    # Past eight places patched, Draft.ops looks them up in a set: the same operations.
    containers = [{"name": f"c{i}", "env": [{"name": "A", "value": "1"}]} for i in range(6)]
    draft = Draft({"spec": {"containers": containers}, "metadata": {}})
    for i in range(6):
        draft.extend(("spec", "containers", i), "env", [{"name": "B", "value": "2"}])
        draft.set(("spec", "containers", i, "resources"), "limits", {"x": "1"})
        draft.set(("spec", "containers", i, "resources", "limits"), "y", "2")
    draft.set(("metadata", "annotations"), "a/b~c", "1")
    draft.extend(("spec",), "volumes", [{"name": "dshm"}])
    draft.set(("spec", "containers", 0), "env", [])
    ops = draft.ops()
    assert ops == reference_ops(draft)
    assert len(ops) > 8
