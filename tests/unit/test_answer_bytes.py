"""The answer's glue, lean and unchanged: limit_warnings in one pass says what it said
before, and an allowed answer's bytes written directly (reviews.encode_allowed) are the bytes
the encoder writes for the AdmissionReview dict build_response makes, under both codecs."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.admission.jsoncodec import JsonCodec, json_codec
from webhook.admission.reviews import (
    API_V1,
    API_V1BETA1,
    MAX_WARNING_CHARS,
    MAX_WARNINGS,
    MAX_WARNINGS_BYTES,
    _shorten,
    allowed,
    allowed_dict,
    build_response,
    encode_allowed,
    limit_warnings,
)
from webhook.core.outcome.decision import clean_text

CODECS = [json_codec(prefer_orjson=False)]
if json_codec().name == "orjson":
    CODECS.append(json_codec())

_TEXT = st.text(st.characters(codec="utf-8"), max_size=40)
_PATCH = st.lists(
    st.fixed_dictionaries(
        {
            "op": st.sampled_from(["add", "replace"]),
            "path": _TEXT,
            "value": _TEXT | st.integers(-(2**53), 2**53),
        }
    ),
    max_size=4,
)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@settings(max_examples=200, deadline=None)
@given(
    version=st.sampled_from([API_V1, API_V1BETA1, "made.up/v9"]),
    uid=_TEXT,
    patch=_PATCH,
    # Empty and control-character-only warnings too: limit_warnings may leave none of them.
    warnings=st.lists(_TEXT | st.sampled_from(["", "\x1b", "defaulted x"]), max_size=25),
)
def test_encode_allowed_writes_what_build_response_encodes(
    codec: JsonCodec, version: str, uid: str, patch: list[dict[str, Any]], warnings: list[str]
) -> None:
    expected = codec.dumps(
        build_response(version, uid, patch=patch, warnings=warnings, dumps=codec.dumps)
    )
    answer = allowed(patch, warnings, codec.dumps)
    assert encode_allowed(version, uid, answer, codec.dumps) == expected
    assert codec.dumps(allowed_dict(version, uid, answer)) == expected


def _unique_as_before(warnings: list[str]) -> list[str]:
    """What limit_warnings kept before its one-pass form: cleaned, non-empty, shortened, the
    first of equal ones."""
    cleaned = (clean_text(w) for w in warnings if w)
    return list(dict.fromkeys(_shorten(w, MAX_WARNING_CHARS) for w in cleaned if w))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.text(st.characters(codec="utf-8"), max_size=300)
        | st.sampled_from(["", "\x1b[31m", "same", "ü" * 200, "x" * 400]),
        max_size=40,
    )
)
def test_limit_warnings_as_before(warnings: list[str]) -> None:
    unique = _unique_as_before(warnings)
    within = len(unique) <= MAX_WARNINGS and sum(len(w.encode()) for w in unique) <= (
        MAX_WARNINGS_BYTES
    )
    got = limit_warnings(warnings)
    # Within the budget, the kept warnings themselves; past it, the same cut of the same list.
    assert got == (unique if within else limit_warnings(unique))
    assert within or got[-1].startswith("and ")
