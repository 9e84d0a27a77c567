"""Copy-on-write drafts of admitted objects and RFC 6902 JSONPatch diffs between them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from webhook.core.base.errors import ObjectShapeError
from webhook.core.base.shapes import is_mapping


def escape(token: str) -> str:
    """JSON-pointer escaping (RFC 6901): '~' -> '~0', '/' -> '~1'."""
    if "~" in token or "/" in token:
        return token.replace("~", "~0").replace("/", "~1")
    return token


class Draft:
    """A mutable view of an object that copies only the containers it writes into.

    Unchanged subtrees stay the very same objects as in the original, which makes the
    diff cost proportional to what changed, not to the size of the object.
    """

    def __init__(self, original: Mapping[str, Any], *, record: bool = True) -> None:
        self.original = original
        self.root: Any = original
        self._owned: set[int] = set()
        # Every place written, as a path from the root, in order: the patch is built from
        # these (ops()), without walking the object for differences. None: not recorded (no
        # patch will be asked for: a template that is not mutated, a /validate evaluation).
        self.writes: list[tuple[str | int, ...]] | None = [] if record else None

    @property
    def changed(self) -> bool:
        return self.root is not self.original

    def _own(self, value: Any) -> Any:
        if id(value) in self._owned:
            return value
        if is_mapping(value):
            copy: Any = dict(value)
        elif isinstance(value, list):
            copy = list(value)
        else:
            raise ObjectShapeError(f"expected an object or a list, found {type(value).__name__}")
        self._owned.add(id(copy))
        return copy

    def writable(self, path: tuple[str | int, ...]) -> Any:
        """The dict or list at `path`, copied on first write; missing dicts are created."""
        node = self.root
        if node is self.original:  # the root is the one place copied without a parent
            node = self.root = self._own(node)
        owned = self._owned
        for part in path:
            # The admitted object may have the wrong shape (e.g. `affinity: []`): refuse
            # cleanly instead of indexing a list with a name.
            if isinstance(node, dict) and isinstance(part, str):
                child = node.get(part)
            elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                child = node[part]
            else:
                raise ObjectShapeError(
                    f"cannot write {'/'.join(str(p) for p in path)}: found "
                    f"{type(node).__name__} at {part!r}"
                )
            if child is None:
                child = node[part] = {}
                owned.add(id(child))
            elif id(child) not in owned:
                # First write below here: copy. An owned child already sits at this place
                # (copies are only ever put where they were made), so it needs no store.
                child = node[part] = self._own(child)
            node = child
        return node

    def _object_at(self, path: tuple[str | int, ...]) -> dict[str, Any]:
        """writable(path), which must be an object to write a key into."""
        node = self.writable(path)
        if type(node) is not dict:
            where = "/".join(str(p) for p in path)
            raise ObjectShapeError(f"cannot write into {where}: found {type(node).__name__}")
        return node

    def set(self, path: tuple[str | int, ...], key: str, value: Any) -> None:
        """`value` at path/key (parents copied or created as writable() does)."""
        self.set_in(self._object_at(path), path, key, value)

    def set_in(
        self, node: dict[str, Any], path: tuple[str | int, ...], key: str, value: Any
    ) -> None:
        """set() into `node`, what writable(path) returned (one walk for several writes)."""
        node[key] = value
        if self.writes is not None:
            self.writes.append((*path, key))

    def extend(self, path: tuple[str | int, ...], key: str, items: list[Any]) -> None:
        """Append `items` to the list at path/key (created when absent)."""
        node = self._object_at(path)
        current = node.get(key)
        if current is None:
            current = ()
        elif not isinstance(current, list):
            raise ObjectShapeError(f"{'/'.join(str(p) for p in (*path, key))} must be a list")
        start = len(current)
        new = [*current, *items]
        self._owned.add(id(new))
        node[key] = new
        if self.writes is not None:
            self.writes += [(*path, key, start + i) for i in range(len(items))]

    def ops(self) -> list[dict[str, Any]]:
        """The JSONPatch from the original to the draft, from the places written: for each,
        `add` at the first step the original lacks (the whole new subtree), or `replace`
        where it has a value; nothing twice, nothing below an `add` already made. Equal, once
        applied, to diff(original, root) (tests/unit/test_patches.py checks it on random
        drafts, tests/unit/test_properties.py on evaluations).

        Each place is walked once with no string built on the way; then it is skipped when a
        place already patched is a prefix of where the walk stopped (tuples compared: a
        review patches a handful of places), and the pointer is built once per operation
        (memoized: the same places come back review after review).
        tests/unit/test_patch_ops_exact.py checks the operations against the walk that
        built a pointer per step."""
        if self.writes is None:
            return diff(self.original, self.root)
        ops: list[dict[str, Any]] = []
        made: list[tuple[str | int, ...]] = []
        many: set[tuple[str | int, ...]] | None = None  # made as a set, once it grows
        original = self.original
        root = self.root
        for path in self.writes:
            before: Any = original
            after: Any = root
            depth = 0
            op = "replace"
            gone = False
            for part in path:
                # One lookup per step in the decoded JSON's dicts (`below`: _ABSENT if absent).
                if type(before) is dict:
                    if not isinstance(part, str):
                        break
                    below = before.get(part, _ABSENT)
                    present = below is not _ABSENT
                elif is_mapping(before):
                    if not isinstance(part, str):
                        break
                    present = part in before
                    below = before[part] if present else _ABSENT
                elif isinstance(before, list) and isinstance(part, int):
                    present = part < len(before)
                    below = before[part] if present else _ABSENT
                else:
                    break  # a null (or scalar) where the draft put an object: replaced whole
                depth += 1
                if type(after) is dict and isinstance(part, str):
                    after = after.get(part, _ABSENT)
                    if after is _ABSENT:
                        gone = True
                        break
                elif type(after) is list and isinstance(part, int) and 0 <= part < len(after):
                    after = after[part]
                else:
                    try:
                        after = after[part]
                    except (KeyError, IndexError, TypeError):
                        gone = True
                        break
                if not present:
                    op = "add"
                    break
                before = below
            # A later write replaced a parent of this place: its op holds the value.
            if gone:
                continue
            place = path if depth == len(path) else path[:depth]
            if many is not None:
                if _patched_in(many, place):
                    continue
                many.add(place)
            else:
                if _patched(made, place):
                    continue
                made.append(place)
                if len(made) > _FEW:
                    many = set(made)
            ops.append({"op": op, "path": pointer(place), "value": after})
        return ops


# Up to this many places patched, a new place is compared with each; past it, looked up.
_FEW: Final = 8


def _patched(made: list[tuple[str | int, ...]], place: tuple[str | int, ...]) -> bool:
    """Whether a place in `made` is `place` or above it (the root's own place () only
    matches itself: a pointer per step never checked "" but the last)."""
    depth = len(place)
    for other in made:
        size = len(other)
        if size > depth or (size == 0 and depth != 0):
            continue
        index = 0
        while index < size and other[index] == place[index]:
            index += 1
        if index == size:
            return True
    return False


def _patched_in(made: set[tuple[str | int, ...]], place: tuple[str | int, ...]) -> bool:
    """_patched, with `made` a set: each of place's prefixes looked up."""
    if not place:
        return place in made
    return any(place[:size] in made for size in range(1, len(place) + 1))


# JSON pointers of the places patched: the exact input is the place (a tuple of keys and
# indexes, never bools); bounded, emptied when full.
_POINTERS: Final[dict[tuple[str | int, ...], str]] = {}
_POINTERS_MAX: Final = 4096


def pointer(place: tuple[str | int, ...]) -> str:
    """The JSON pointer (RFC 6901) of `place`."""
    text = _POINTERS.get(place)
    if text is None:
        parts = [escape(part) if isinstance(part, str) else str(part) for part in place]
        text = "".join(["/" + part for part in parts])
        if len(_POINTERS) >= _POINTERS_MAX:
            _POINTERS.clear()
        _POINTERS[place] = text
    return text


_ABSENT: Final[Any] = object()


def diff(before: Any, after: Any, path: str = "") -> list[dict[str, Any]]:
    """JSONPatch turning `before` into `after`; subtrees that are the same object are skipped."""
    ops: list[dict[str, Any]] = []
    if before is not after:
        _diff(before, after, path, ops)
    return ops


def _diff(before: Any, after: Any, path: str, ops: list[dict[str, Any]]) -> None:
    # Every patched review runs this down each changed branch: one shared `ops` list instead
    # of a list per level concatenated on the way up, and `is` tests before any recursion.
    if is_mapping(before) and is_mapping(after):
        # A Draft never removes keys: the scan for removed ones is skipped when none is.
        if not before.keys() <= after.keys():
            ops += [
                {"op": "remove", "path": f"{path}/{escape(str(key))}"}
                for key in before
                if key not in after
            ]
        for key, value in after.items():
            old = before.get(key, _ABSENT)
            if old is value:  # shared (unchanged) subtrees cost nothing
                continue
            if old is _ABSENT:
                ops.append({"op": "add", "path": f"{path}/{escape(str(key))}", "value": value})
            else:
                _diff(old, value, f"{path}/{escape(str(key))}", ops)
        return
    if isinstance(before, list) and isinstance(after, list):
        common = min(len(before), len(after))
        for index in range(common):
            if before[index] is not after[index]:
                _diff(before[index], after[index], f"{path}/{index}", ops)
        if len(after) > common:
            ops += [
                {"op": "add", "path": f"{path}/{index}", "value": after[index]}
                for index in range(common, len(after))
            ]
        elif len(before) > common:
            ops += [
                {"op": "remove", "path": f"{path}/{index}"}
                for index in reversed(range(common, len(before)))
            ]
        return
    if type(before) is type(after) and before == after:
        return
    ops.append({"op": "replace", "path": path, "value": after})
