"""JSON encode/decode for the request path: orjson when installed (the `fast` extra)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NamedTuple


class JsonCodec(NamedTuple):
    """JSON decode/encode pair; `name` says which library is in use (logged at start)."""

    name: str
    loads: Callable[[bytes], Any]
    dumps: Callable[[Any], bytes]


def std_dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON with the standard library."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def json_codec(prefer_orjson: bool = True) -> JsonCodec:
    if prefer_orjson:
        try:
            import orjson  # noqa: PLC0415 - optional dependency

            return JsonCodec("orjson", orjson.loads, orjson.dumps)
        except ImportError:
            pass
    return JsonCodec("json", json.loads, std_dumps)
