"""quantity.parsed (the request path's memoized parse) agrees with parse_quantity on every value
the quantity tests use: the same number (numerator, denominator), the same error kind, and
Parsed.same is Fraction's `==`."""

from __future__ import annotations

import itertools
from fractions import Fraction
from types import MappingProxyType

import pytest

from tests.unit.test_quantity import APIMACHINERY_EMIT, APIMACHINERY_PARSE, APIMACHINERY_SCANNER
from webhook.core.base.errors import QuantityError, QuantityRangeError
from webhook.core.base.quantity import parse_quantity, parsed
from webhook.core.base.shapes import as_dict

_MORE: list[object] = [
    "1",
    "0",
    "2",
    "8",
    "500m",
    "1k",
    " 4 ",
    "0.5",
    "-1",
    "+2",
    "1e3",
    "2Gi",
    "1Ki",
    "7n",
    "",
    "2gi",
    "Non-Numeric",
    "1e4000",
    "1" * 70,
    "1" * 5000,
    "0" * 80 + "3",
    None,
    0,
    1,
    -3,
    2.5,
    1e300,
    float("nan"),
    float("inf"),
    True,
    False,
    [1],
    {"a": 1},
    "\u20281\u2028",
    "४",
]
CORPUS: list[object] = [
    *(text for text, _ in APIMACHINERY_PARSE + APIMACHINERY_SCANNER + APIMACHINERY_EMIT),
    *_MORE,
]


def _general(raw: object) -> tuple[int, Fraction | None]:
    try:
        return 0, parse_quantity(raw)
    except QuantityRangeError:
        return 2, None
    except QuantityError:
        return 1, None


@pytest.mark.parametrize("raw", CORPUS, ids=repr)
def test_parsed_is_parse_quantity(raw: object) -> None:
    error, value = _general(raw)
    for _ in range(2):  # the first call parses (and keeps a short text), the second reads it
        got = parsed(raw)
        assert got.error == error
        assert got.value == value
        if value is not None:
            assert (got.numerator, got.denominator) == (value.numerator, value.denominator)
            assert bool(value) is (got.numerator != 0)


def test_same_is_fraction_equality() -> None:
    values = [*[raw for raw in CORPUS if type(raw) is str][:60], "1", "1000m", "1.0", "0", "-0"]
    for a, b in itertools.product(values, repeat=2):
        fa, fb = _general(a)[1], _general(b)[1]
        expected = fa is not None and fb is not None and fa == fb
        assert parsed(a).same(parsed(b)) is expected, (a, b)


def test_as_dict_reads_the_same() -> None:
    data = {"a": 1, "b": [2]}
    assert as_dict(data) is data
    proxy = MappingProxyType(data)
    copy = as_dict(proxy)
    assert copy == data and type(copy) is dict
