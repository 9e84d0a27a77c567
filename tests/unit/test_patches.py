"""JSONPatch generation: pointer escaping, missing parents, list appends, copy-on-write drafts."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.core.base.errors import ObjectShapeError
from webhook.core.base.patches import Draft, diff, escape


@pytest.mark.parametrize(
    ("token", "escaped"),
    [
        ("tencent.com/vcuda-core", "tencent.com~1vcuda-core"),
        ("a~b", "a~0b"),
        ("~/", "~0~1"),
        ("/~1", "~1~01"),  # '~' is escaped first, so an existing "~1" survives
        ("plain", "plain"),
        ("", ""),
    ],
)
def test_escape(token: str, escaped: str) -> None:
    assert escape(token) == escaped


def check(before: Any, after: Any) -> list[dict[str, Any]]:
    ops = diff(before, after)
    assert jsonpatch.apply_patch(copy.deepcopy(before), ops) == after
    return ops


@pytest.mark.parametrize(
    ("before", "after", "ops"),
    [
        ({"a": 1}, {"a": 1}, []),
        ({"a": 1}, {"a": 2}, [{"op": "replace", "path": "/a", "value": 2}]),
        ({"a": 1}, {"a": 1, "b": {"c": 1}}, [{"op": "add", "path": "/b", "value": {"c": 1}}]),
        ({"a": 1, "b": 2}, {"a": 1}, [{"op": "remove", "path": "/b"}]),
        (
            {"limits": {}},
            {"limits": {"tencent.com/vcuda-core": "1"}},
            [{"op": "add", "path": "/limits/tencent.com~1vcuda-core", "value": "1"}],
        ),
        ({"x~y": 1}, {"x~y": 2}, [{"op": "replace", "path": "/x~0y", "value": 2}]),
        (
            {"l": [1]},
            {"l": [1, 2, 3]},
            [{"op": "add", "path": "/l/1", "value": 2}, {"op": "add", "path": "/l/2", "value": 3}],
        ),
        (
            {"l": [1, 2, 3]},
            {"l": [1]},
            [{"op": "remove", "path": "/l/2"}, {"op": "remove", "path": "/l/1"}],
        ),
        (
            {"l": [{"a": 1}]},
            {"l": [{"a": 1, "b": 2}]},
            [{"op": "add", "path": "/l/0/b", "value": 2}],
        ),
        ({"a": "1"}, {"a": 1}, [{"op": "replace", "path": "/a", "value": 1}]),  # type matters
        ({"a": True}, {"a": 1}, [{"op": "replace", "path": "/a", "value": 1}]),
        ({"a": {"b": 1}}, {"a": [1]}, [{"op": "replace", "path": "/a", "value": [1]}]),
    ],
)
def test_diff(before: Any, after: Any, ops: list[dict[str, Any]]) -> None:
    assert check(before, after) == ops


def test_draft_adds_missing_parents_and_shares_untouched_subtrees() -> None:
    original: dict[str, Any] = {
        "metadata": {"name": "p"},
        "spec": {
            "containers": [{"name": "c"}, {"name": "d", "resources": {"limits": {"cpu": "1"}}}]
        },
    }
    snapshot = copy.deepcopy(original)
    draft = Draft(original)
    assert not draft.changed
    limits = draft.writable(("spec", "containers", 0, "resources", "limits"))
    limits["tencent.com/vcuda-core"] = "10"
    requests = draft.writable(("spec", "containers", 1, "resources", "requests"))
    requests["nvidia.com/gpu"] = "1"
    assert draft.changed
    assert original == snapshot  # the original is never written
    assert draft.root["metadata"] is original["metadata"]  # untouched subtree shared
    ops = check(original, draft.root)
    assert ops == [
        {
            "op": "add",
            "path": "/spec/containers/0/resources",
            "value": {"limits": {"tencent.com/vcuda-core": "10"}},
        },
        {
            "op": "add",
            "path": "/spec/containers/1/resources/requests",
            "value": {"nvidia.com/gpu": "1"},
        },
    ]


def test_draft_list_append() -> None:
    original: dict[str, Any] = {
        "spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "1"}]}]}
    }
    draft = Draft(original)
    c = draft.writable(("spec", "containers", 0))
    c["env"] = [*c["env"], {"name": "B", "value": "2"}]
    assert check(original, draft.root) == [
        {"op": "add", "path": "/spec/containers/0/env/1", "value": {"name": "B", "value": "2"}}
    ]


def test_draft_writes_twice_to_the_same_copy() -> None:
    original: dict[str, Any] = {"a": {"b": {}}}
    draft = Draft(original)
    draft.writable(("a", "b"))["x"] = 1
    draft.writable(("a", "b"))["y"] = 2
    assert draft.root == {"a": {"b": {"x": 1, "y": 2}}}
    assert original == {"a": {"b": {}}}


def test_draft_refuses_to_write_into_a_scalar() -> None:
    draft = Draft({"spec": {"affinity": "none"}})
    with pytest.raises(ObjectShapeError, match="expected an object or a list, found str"):
        draft.writable(("spec", "affinity", "nodeAffinity"))


# Random drafts: an object, then writes as the rules make them (set a key below a path that may
# be missing, null or present; append to a list that may be missing): the patch built from the
# writes gives the draft, as the full diff does.
_leaf = st.one_of(st.integers(0, 3), st.text("ab", max_size=2), st.none())
_tree = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.dictionaries(st.sampled_from(["a", "b", "c/d", "e~f"]), inner, max_size=3),
        st.lists(inner, max_size=3),
    ),
    max_leaves=12,
)
_key = st.sampled_from(["a", "b", "c/d", "e~f"])
_write = st.tuples(st.sampled_from(["set", "extend"]), st.lists(_key, max_size=3), _key, _tree)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_key, _tree, max_size=4), st.lists(_write, min_size=1, max_size=4))
def test_patch_from_writes_gives_the_draft(original: dict[str, Any], writes: list[Any]) -> None:
    before = copy.deepcopy(original)
    draft = Draft(original)
    for how, path, key, value in writes:
        try:
            if how == "set":
                draft.set(tuple(path), key, value)
            else:
                draft.extend(tuple(path), key, [value])
        except ObjectShapeError:
            return  # a path through a list or scalar: refused before anything is written
    assert original == before  # never modified in place
    ops = draft.ops()
    assert jsonpatch.apply_patch(copy.deepcopy(original), ops) == draft.root
    assert jsonpatch.apply_patch(copy.deepcopy(original), diff(original, draft.root)) == draft.root


def test_a_draft_that_records_nothing_still_gives_its_patch_by_the_full_diff() -> None:
    original: dict[str, Any] = {"spec": {"containers": [{"name": "a"}]}}
    draft = Draft(original, record=False)
    draft.extend(("spec", "containers", 0), "env", [{"name": "X", "value": "1"}])
    assert draft.writes is None
    assert draft.ops() == [
        {"op": "add", "path": "/spec/containers/0/env", "value": [{"name": "X", "value": "1"}]}
    ]
