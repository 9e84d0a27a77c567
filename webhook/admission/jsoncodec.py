"""JSON encode/decode for the request path: orjson when installed (the `fast` extra).

Both codecs accept and refuse the same bodies, so `pip install .` without the `fast` extra
answers like the default install. orjson follows RFC 8259; the standard library's `json` is more
lenient, so `std_loads` refuses what orjson refuses: `NaN`/`Infinity` (which `json.dumps` would
then write into a patch, making it invalid JSON), numbers beyond a double, text that is not
UTF-8 (or starts with a byte order mark), lone UTF-16 surrogates. Integers outside the 64-bit
range become floats, as orjson reads them. One difference is left: the standard library stops
at Python's recursion limit (about 1,000 levels of nesting with the server's stack), orjson at
1,024 levels; the API server never sends objects nested that deep.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any, NamedTuple

# orjson reads integers in [-2**63, 2**64 - 1] exactly, any other as a double.
_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1
# A \uD800-\uDFFF escape: a UTF-16 surrogate, valid only as the half of a pair.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class JsonCodec(NamedTuple):
    """JSON decode/encode pair; `name` says which library is in use (logged at start)."""

    name: str
    loads: Callable[[bytes], Any]
    dumps: Callable[[Any], bytes]


def std_dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON with the standard library; never writes NaN or Infinity (ValueError)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value (JSON numbers are finite: no NaN or Infinity)")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} is beyond the range of a double")
    return value


def _int_like_orjson(text: str) -> int | float:
    value = int(text)
    if _INT_MIN <= value <= _INT_MAX:
        return value
    return _finite_float(text)


def std_loads(data: bytes) -> Any:
    """`json.loads`, refusing (ValueError) what orjson refuses; see the module docstring."""
    text = data.decode("utf-8")  # strict: no UTF-16/32 guessing, no encoded surrogates
    if text.startswith("\ufeff"):
        raise ValueError("the body starts with a byte order mark; send UTF-8 JSON without one")
    value = json.loads(
        text,
        parse_constant=_refuse_constant,
        parse_float=_finite_float,
        parse_int=_int_like_orjson,
    )
    if _SURROGATE_ESCAPE.search(text):
        # Rare (Go's encoder writes non-ASCII as UTF-8): a pair decoded into one character,
        # a lone half did not, and then the value cannot be encoded as UTF-8.
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(
                "a string holds a lone UTF-16 surrogate escape (\\ud800-\\udfff without its pair)"
            ) from None
    return value


def json_codec(prefer_orjson: bool = True) -> JsonCodec:
    if prefer_orjson:
        try:
            import orjson  # noqa: PLC0415 - optional dependency

            return JsonCodec("orjson", orjson.loads, orjson.dumps)
        except ImportError:
            pass
    return JsonCodec("json", std_loads, std_dumps)
