"""The two JSON codecs of the request path accept and refuse the same bodies, with equal values.

orjson is the `fast` extra; without it (`pip install .`) the standard-library codec answers.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.admission.jsoncodec import json_codec, std_dumps, std_loads

ORJSON = json_codec(prefer_orjson=True)
needs_orjson = pytest.mark.skipif(
    ORJSON.name != "orjson", reason="orjson is not installed (the `fast` extra): nothing to compare"
)
REFUSED = object()


def outcome(loads: Any, body: bytes) -> Any:
    try:
        return loads(body)
    except (ValueError, RecursionError):
        return REFUSED


@dataclass(frozen=True)
class Refused:
    message: str


NOT_FINITE = "is not a JSON value (JSON numbers are finite: no NaN or Infinity)"
# body -> what the standard-library codec answers: a value, or Refused(the ValueError's text).
CASES: list[tuple[bytes, Any]] = [
    (b'{"a": NaN}', Refused(f"NaN {NOT_FINITE}")),
    (b"[Infinity]", Refused(f"Infinity {NOT_FINITE}")),
    (b"-Infinity", Refused(f"-Infinity {NOT_FINITE}")),
    (b"1e400", Refused("the number 1e400 is beyond the range of a double")),
    (b"-1.5E309", Refused("the number -1.5E309 is beyond the range of a double")),
    (b"1" + b"0" * 400, Refused(f"the number 1{'0' * 39} is beyond the range of a double")),
    (b"1e-400", 0.0),
    (b"18446744073709551615", 2**64 - 1),
    (b"18446744073709551616", float(2**64)),
    (b"-9223372036854775808", -(2**63)),
    (b"-9223372036854775809", -float(2**63)),
    (b'"\\ud83d\\ude00"', "\U0001f600"),
    (
        b'{"name": "\\ud800"}',
        Refused("a string holds a lone UTF-16 surrogate escape (\\ud800-\\udfff without its pair)"),
    ),
    (b'"\\\\ud800"', "\\ud800"),  # an escaped backslash, then text: no surrogate
    (
        b'"\xed\xa0\x80"',
        Refused("'utf-8' codec can't decode byte 0xed in position 1: invalid continuation byte"),
    ),
    (b'"\xff"', Refused("'utf-8' codec can't decode byte 0xff in position 1: invalid start byte")),
    (
        b"\xef\xbb\xbf{}",
        Refused("the body starts with a byte order mark; send UTF-8 JSON without one"),
    ),
    (
        "{}".encode("utf-16"),
        Refused("'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"),
    ),
    (b'{"a": 1, "a": 2}', {"a": 2}),
]


@pytest.mark.parametrize(("body", "expected"), CASES)
def test_standard_library_codec(body: bytes, expected: Any) -> None:
    if isinstance(expected, Refused):
        with pytest.raises(ValueError, match=f"^{re.escape(expected.message)}$"):
            std_loads(body)
    else:
        value = std_loads(body)
        assert value == expected
        assert type(value) is type(expected)


@needs_orjson
@pytest.mark.parametrize("body", [body for body, _ in CASES])
def test_orjson_gives_the_same_outcome(body: bytes) -> None:
    ours, theirs = outcome(std_loads, body), outcome(ORJSON.loads, body)
    assert (ours is REFUSED) == (theirs is REFUSED)
    if ours is not REFUSED:
        assert ours == theirs
        assert type(ours) is type(theirs)


def test_standard_library_codec_never_writes_nan() -> None:
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        std_dumps([{"op": "add", "path": "/x", "value": math.nan}])
    assert std_dumps({"a": [1, "ü"]}) == '{"a":[1,"ü"]}'.encode()


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@needs_orjson
@settings(max_examples=200, deadline=None)
@given(JSON_VALUES, st.booleans())
def test_codecs_agree_on_json_documents(value: Any, ascii_only: bool) -> None:
    # ensure_ascii writes lone surrogates of st.text() as \\udXXX escapes, which both refuse.
    body = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    ours, theirs = outcome(std_loads, body), outcome(ORJSON.loads, body)
    assert (ours is REFUSED) == (theirs is REFUSED)
    if ours is not REFUSED:
        assert ours == theirs


# JSON's punctuation, digits, letters of its literals and NaN/Infinity, escapes, and bytes
# that are not UTF-8 (a BOM, an encoded surrogate, 0xff) or control characters.
SPECIAL = [
    b"\xff",
    b"\x00",
    b"\xef\xbb\xbf",
    b"\xed\xa0\x80",
    b"NaN",
    b"Infinity",
    b"\\ud800",
    b"1e999",
]
TOKENS = st.sampled_from(
    [*(bytes([c]) for c in b'{}[]",:0123456789.eE+- \t\n\rntrufalsNIiy\\u'), *SPECIAL]
)


@needs_orjson
@settings(max_examples=500, deadline=None)
@given(st.lists(TOKENS, max_size=16).map(b"".join))
def test_codecs_agree_on_arbitrary_bytes(body: bytes) -> None:
    ours, theirs = outcome(std_loads, body), outcome(ORJSON.loads, body)
    assert (ours is REFUSED) == (theirs is REFUSED), body
    if ours is not REFUSED:
        assert repr(ours) == repr(theirs), body
