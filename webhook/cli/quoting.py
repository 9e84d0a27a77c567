"""Label and annotation values that YAML read as numbers or booleans: "quote it".

Kubernetes' ObjectMeta has `labels` and `annotations` as map[string]string, so the API server
(and `kubectl apply`) refuses `cuda-version: 12.4` or `enabled: true` unquoted: YAML makes them
a float and a bool. Worse, an unquoted `12.10` is the number 12.1. The webhook never sees such
an object, so the offline review reports it as the reason the object would be refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

_KINDS = {bool: "a boolean", int: "a number", float: "a number"}


def _metadata_blocks(obj: Any, path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every `metadata` mapping in the object (its own and its pod templates'), with its path."""
    stack: list[tuple[Any, str]] = [(obj, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, Mapping):
            for key, value in node.items():
                child = f"{where}.{key}" if where else str(key)
                if key == "metadata" and isinstance(value, Mapping):
                    yield child, value
                elif isinstance(value, Mapping | list):
                    stack.append((value, child))
        elif isinstance(node, list):
            stack.extend((item, f"{where}[{i}]") for i, item in enumerate(node))


def unquoted_values(obj: Any) -> list[str]:
    """One message per label or annotation value that is not a string."""
    problems: list[str] = []
    for where, metadata in _metadata_blocks(obj, ""):
        for field in ("labels", "annotations"):
            values = metadata.get(field)
            if not isinstance(values, Mapping):
                continue
            for key, value in values.items():
                if isinstance(value, str) or value is None:
                    continue
                written = json.dumps(value) if isinstance(value, bool | int | float) else "..."
                kind = _KINDS.get(type(value), f"a {type(value).__name__}")
                problems.append(
                    f"{where}.{field}[{key!r}] is {kind} ({written}), but {field[:-1]} values "
                    f'are strings and Kubernetes refuses it: quote it ({key}: "{written}")'
                )
    return problems
