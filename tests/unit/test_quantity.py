"""Kubernetes quantity parsing: exact values, YAML numbers, and clear errors for bad input."""

from __future__ import annotations

from fractions import Fraction

import pytest
import yaml

from webhook.core.errors import QuantityError, WebhookError
from webhook.core.quantity import format_quantity, parse_quantity, parse_quantity_text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", Fraction(1)),
        ("100", Fraction(100)),
        ("0", Fraction(0)),
        ("1k", Fraction(1000)),
        ("500m", Fraction(1, 2)),
        ("1000m", Fraction(1)),
        ("0.5", Fraction(1, 2)),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("5e-1", Fraction(1, 2)),
        ("2Gi", Fraction(2 * 2**30)),
        ("1Ki", Fraction(1024)),
        ("1Mi", Fraction(2**20)),
        ("3M", Fraction(3_000_000)),
        ("1G", Fraction(10**9)),
        ("250u", Fraction(1, 4000)),
        ("7n", Fraction(7, 10**9)),
        ("+2", Fraction(2)),
        ("-1", Fraction(-1)),
        (" 4 ", Fraction(4)),
    ],
)
def test_parse_quantity_strings(text: str, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        ("v: 1", Fraction(1)),
        ("v: 200", Fraction(200)),
        ("v: 0.5", Fraction(1, 2)),
        ("v: 1.0", Fraction(1)),
        ("v: 1e3", Fraction(1000)),  # PyYAML reads this as the string "1e3"
        ("v: 2.5e2", Fraction(250)),
    ],
)
def test_parse_quantity_yaml_numbers(yaml_text: str, expected: Fraction) -> None:
    assert parse_quantity(yaml.safe_load(yaml_text)["v"]) == expected


def test_float_is_exact_decimal_not_binary() -> None:
    # 0.1 as a binary float is not 1/10; the quantity the user wrote is.
    assert parse_quantity(0.1) == Fraction(1, 10)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            "abc",
            "'abc' is not a Kubernetes quantity (expected a number with an optional suffix "
            "such as 1, 100, 1k, 500m, 1e3 or 2Gi)",
        ),
        (
            "",
            "'' is not a Kubernetes quantity (expected a number with an optional suffix "
            "such as 1, 100, 1k, 500m, 1e3 or 2Gi)",
        ),
        (
            "$GPU_PER_NODE",
            "'$GPU_PER_NODE' is not a Kubernetes quantity (expected a number with an optional "
            "suffix such as 1, 100, 1k, 500m, 1e3 or 2Gi)",
        ),
        (
            "1 k",
            "'1 k' is not a Kubernetes quantity (expected a number with an optional suffix "
            "such as 1, 100, 1k, 500m, 1e3 or 2Gi)",
        ),
        (
            "2gi",
            "'2gi' is not a Kubernetes quantity (expected a number with an optional suffix "
            "such as 1, 100, 1k, 500m, 1e3 or 2Gi)",
        ),
        ("1e1001", "'1e1001' has an exponent out of range"),
        (True, "True is a boolean, not a quantity"),
        (False, "False is a boolean, not a quantity"),
        (float("nan"), "nan is not a finite quantity"),
        (float("inf"), "inf is not a finite quantity"),
        ([1], "a quantity must be a string or a number, got list"),
        ({"a": 1}, "a quantity must be a string or a number, got dict"),
        (
            "1" * 5000,
            "'11111111111111111111'… (5000 characters) is too long to be a Kubernetes quantity",
        ),
    ],
)
def test_invalid_quantities_raise_quantity_error(raw: object, message: str) -> None:
    with pytest.raises(QuantityError) as info:
        parse_quantity(raw)
    assert str(info.value) == message
    # Callers catch WebhookError (the admission path) or ValueError (generic parsing code).
    assert isinstance(info.value, WebhookError)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("raw", "shown"),
    [("500m", "500m"), (2, "2"), (0.5, "0.5"), (True, "true"), (None, "null")],
)
def test_format_quantity_shows_the_value_as_written(raw: object, shown: str) -> None:
    assert format_quantity(raw) == shown


# --- the exact Kubernetes grammar (k8s.io/apimachinery/pkg/api/resource/quantity.go) ---------

HINT = "expected a number with an optional suffix such as 1, 100, 1k, 500m, 1e3 or 2Gi"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # parseQuantityString lets every part of the number be empty: these are all zero.
        ("+", Fraction(0)),
        ("-", Fraction(0)),
        (".", Fraction(0)),
        ("+.", Fraction(0)),
        ("E", Fraction(0)),  # empty number, suffix E (exa)
        ("00", Fraction(0)),
        ("1.", Fraction(1)),
        ("+.5", Fraction(1, 2)),
        ("-.5", Fraction(-1, 2)),
        # A decimal SI suffix wins over an exponent: "1E" is one exa, "1E3" is 1000.
        ("1E", Fraction(10**18)),
        ("1e+3", Fraction(1000)),
        ("1E-3", Fraction(1, 1000)),
        ("1e99", Fraction(10**99)),
        ("1.5k", Fraction(1500)),
        # Binary SI values are capped at 2^63-1 (quantity.go: "8Ei" parses as 2^63-1).
        ("8Ei", Fraction(2**63 - 1)),
        # Kept down to nano, rounding away from zero ("0.9n" becomes "1n").
        ("0.9n", Fraction(1, 10**9)),
        ("-0.9n", Fraction(-1, 10**9)),
        ("1.0000000001", Fraction(1_000_000_001, 10**9)),
        ("1e-99999", Fraction(1, 10**9)),
        # Not capped at int64 for decimal values.
        ("18446744073709551616", Fraction(18446744073709551616)),
        ("1" * 300, Fraction(int("1" * 300))),
        # interpret() converts the parsed exponent with int32(): 2^32 wraps to 0.
        ("1e4294967296", Fraction(1)),
    ],
)
def test_kubernetes_grammar_edge_cases(text: str, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # Unicode digits: Python's \d and int() take them, Kubernetes does not.
        ("４", f"'４' is not a Kubernetes quantity ({HINT})"),
        ("٥٠", f"'٥٠' is not a Kubernetes quantity ({HINT})"),
        ("1_000", f"'1_000' is not a Kubernetes quantity ({HINT})"),
        ("1..", f"'1..' is not a Kubernetes quantity ({HINT})"),
        ("1e3.5", f"'1e3.5' is not a Kubernetes quantity ({HINT})"),
        ("1e", f"'1e' is not a Kubernetes quantity: 'e' is not a suffix ({HINT})"),
        ("e", f"'e' is not a Kubernetes quantity: 'e' is not a suffix ({HINT})"),
        ("1E+", f"'1E+' is not a Kubernetes quantity: 'E+' is not a suffix ({HINT})"),
        ("1k3", f"'1k3' is not a Kubernetes quantity: 'k3' is not a suffix ({HINT})"),
        ("1Ki3", f"'1Ki3' is not a Kubernetes quantity: 'Ki3' is not a suffix ({HINT})"),
        ("1eE3", f"'1eE3' is not a Kubernetes quantity: 'eE3' is not a suffix ({HINT})"),
        ("1 k", f"'1 k' is not a Kubernetes quantity ({HINT})"),
    ],
)
def test_kubernetes_grammar_rejections(text: str, message: str) -> None:
    with pytest.raises(QuantityError) as info:
        parse_quantity(text)
    assert str(info.value) == message


def test_whitespace_is_trimmed_as_unmarshal_json_does_but_not_by_the_grammar() -> None:
    # Quantity.UnmarshalJSON calls ParseQuantity(strings.TrimSpace(...)): a manifest value
    # with surrounding (Unicode) space decodes; ParseQuantity itself refuses it.
    assert parse_quantity("\u00a04\t") == 4
    assert parse_quantity("\u20034") == 4  # EM SPACE, category Zs
    with pytest.raises(QuantityError):
        parse_quantity_text(" 4")
    # \x1c is whitespace to Python's str.strip but not to Go's unicode.IsSpace.
    with pytest.raises(QuantityError):
        parse_quantity("\x1c4")


def test_null_reads_as_zero_like_unmarshal_json() -> None:
    # UnmarshalJSON: `null` leaves a zero Quantity, so `limits: {nvidia.com/gpu: null}` is 0.
    assert parse_quantity(None) == 0
    assert parse_quantity(yaml.safe_load("v: ~")["v"]) == 0


def test_json_numbers_parse_as_their_text() -> None:
    assert parse_quantity(1e20) == 10**20
    assert parse_quantity(1e-5) == Fraction(1, 100000)
