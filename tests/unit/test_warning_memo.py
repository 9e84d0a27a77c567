"""limit_warnings' memo of cleaned warnings (admission/reviews.py) answers as a fresh clean."""

from __future__ import annotations

from webhook.admission import reviews
from webhook.admission.reviews import MAX_WARNING_CHARS, limit_warnings


def test_a_warning_seen_before_is_limited_as_the_first_time() -> None:
    warnings = [
        "plain",
        "\x1b[31mred\x1b[0m",
        "bidi \u202e override",
        "≥ 12.4",
        "x" * (MAX_WARNING_CHARS + 10),
        "\x00",
        "plain",
        *(f"warning {n} " + "y" * 200 for n in range(30)),
    ]
    reviews._CLEANED.clear()
    first = limit_warnings(warnings)
    assert len(reviews._CLEANED) == len(set(warnings))
    assert limit_warnings(warnings) == first
    assert limit_warnings(list(reversed(warnings)))[:3] != first[:3]


def test_the_memo_is_bounded() -> None:
    reviews._CLEANED.clear()
    for n in range(reviews._CLEANED_MAX + 5):
        assert limit_warnings([f"w{n}"]) == [f"w{n}"]
    assert len(reviews._CLEANED) <= reviews._CLEANED_MAX
