"""The shared opt-out reading for features.alauda.io/* annotations."""

from __future__ import annotations

import pytest

from webhook.core.base.annotations import parse_opt_out

A = "features.alauda.io/cuda-affinity"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, (False, "")),
        ("false", (True, "")),
        ("NO", (True, "")),
        ("0", (True, "")),
        ("Off", (True, "")),
        ("true", (False, "")),
        ("yes", (False, "")),
        ("1", (False, "")),
        ("on", (False, "")),
        ("flase", (False, f"annotation {A}='flase' not understood: use false/no/0/off to opt out")),
        (
            "x" * 40,
            (False, f"annotation {A}='{'x' * 19}…' not understood: use false/no/0/off to opt out"),
        ),
    ],
)
def test_parse_opt_out(value: str | None, expected: tuple[bool, str]) -> None:
    assert parse_opt_out(A, value) == expected
    assert len(expected[1]) <= 120
