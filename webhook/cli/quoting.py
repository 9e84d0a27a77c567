"""Manifest text made safe to print, and label or annotation values that YAML read as numbers
or booleans: "quote it".

A name, an image or a message taken from a manifest may hold control characters: ESC starts a
terminal escape sequence (it can rewrite what the terminal shows), BEL rings, NUL and most C0
characters are not allowed in XML 1.0 even as character references, and the C1 characters
(U+0080-U+009F, e.g. U+009B, the one-character CSI) are escape sequences too on many terminals.
`printable` writes each as `\\uXXXX`, which reads the same in text, is the same string in JSON
and is plain text in XML; `PrintableOutput` does it to everything a command writes.

Kubernetes' ObjectMeta has `labels` and `annotations` as map[string]string, so the API server
(and `kubectl apply`) refuses `cuda-version: 12.4` or `enabled: true` unquoted: YAML makes them
a float and a bool. Worse, an unquoted `12.10` is the number 12.1. The webhook never sees such
an object, so the offline review reports it as the reason the object would be refused.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TextIO

_KINDS = {bool: "a boolean", int: "a number", float: "a number"}

# C0 but tab and newline (a carriage return rewrites the line on a terminal), DEL, C1, lone
# surrogates and the two non-characters XML 1.0 refuses (https://www.w3.org/TR/xml/#charsets).
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def printable(text: str) -> str:
    """`text` with every control character written as `\\uXXXX` (ESC as `\\u001b`)."""
    return _UNPRINTABLE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


class PrintableOutput(io.TextIOBase, TextIO):
    """A command's output stream that passes everything through `printable` (newlines and tabs
    the output's own layout uses are kept)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(printable(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:  # type: ignore[override]
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()


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
