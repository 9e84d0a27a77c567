"""Kubernetes quantity parsing: exact values, YAML numbers, and clear errors for bad input."""

from __future__ import annotations

from fractions import Fraction

import pytest
import yaml

from webhook.core.errors import QuantityError, WebhookError
from webhook.core.quantity import format_quantity, parse_quantity


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
        ("1e99", "'1e99' has an exponent out of range"),
        (True, "True is a boolean, not a quantity"),
        (False, "False is a boolean, not a quantity"),
        (float("nan"), "nan is not a finite quantity"),
        (float("inf"), "inf is not a finite quantity"),
        (None, "a quantity must be a string or a number, got NoneType"),
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
    [("500m", "500m"), (2, "2"), (0.5, "0.5"), (True, "True"), (None, "None")],
)
def test_format_quantity_shows_the_value_as_written(raw: object, shown: str) -> None:
    assert format_quantity(raw) == shown
