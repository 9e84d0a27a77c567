"""Kubernetes quantity parsing: exact values, YAML numbers, and clear errors for bad input."""

from __future__ import annotations

import json
import os
import random
import subprocess
from fractions import Fraction

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.core.base.errors import QuantityError, QuantityRangeError, WebhookError
from webhook.core.base.quantity import format_quantity, parse_quantity, parse_quantity_text


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
        ("1e4000", "'1e4000' is 10^4000 or more, beyond what this webhook evaluates"),
        (True, "True is a boolean, not a quantity"),
        (False, "False is a boolean, not a quantity"),
        (float("nan"), "nan is not a finite quantity"),
        (float("inf"), "inf is not a finite quantity"),
        ([1], "a quantity must be a string or a number, got list"),
        ({"a": 1}, "a quantity must be a string or a number, got dict"),
        (
            "1" * 5000,
            "'11111111111111111111'… (5000 characters) is 10^4000 or more, beyond what this "
            "webhook evaluates",
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


HINT = "expected a number with an optional suffix such as 1, 100, 1k, 500m, 1e3 or 2Gi"


# --- Kubernetes' own cases ----------------------------------------------------------------------
# The rows below are the cases of k8s.io/apimachinery pkg/api/resource/quantity_test.go (Kubernetes
# v1.36.2: TestQuantityParse, TestParseQuantityString, TestQuantityParseEmit, TestQuantityString,
# TestJSONWhitespace, TestQuantityUnmarshalCBOR), each with the value its expected Quantity has
# (decQuantity(i, e) is i * 10^e).

KI, MI, GI, TI, PI, EI = (2**n for n in (10, 20, 30, 40, 50, 60))
MAX_ALLOWED = Fraction(2**63 - 1)  # math.go maxAllowed: the cap of binary-suffixed values


def dec(i: int | str, e: int) -> Fraction:
    return Fraction(i) * Fraction(10) ** e


# TestQuantityParse's table.
APIMACHINERY_PARSE = [
    ("0", dec(0, 0)),
    ("0n", dec(0, 0)),
    ("0u", dec(0, 0)),
    ("0m", dec(0, 0)),
    ("0Ki", dec(0, 0)),
    ("0k", dec(0, 0)),
    ("0Mi", dec(0, 0)),
    ("0M", dec(0, 0)),
    ("0Gi", dec(0, 0)),
    ("0G", dec(0, 0)),
    ("0Ti", dec(0, 0)),
    ("0T", dec(0, 0)),
    ("1", dec(1, 0)),
    ("1Ki", Fraction(KI)),
    ("8Ki", Fraction(8 * KI)),
    ("7Mi", Fraction(7 * MI)),
    ("6Gi", Fraction(6 * GI)),
    ("5Ti", Fraction(5 * TI)),
    ("4Pi", Fraction(4 * PI)),
    ("3Ei", Fraction(3 * EI)),
    ("10Ti", Fraction(10 * TI)),
    ("100Ti", Fraction(100 * TI)),
    ("5n", dec(5, -9)),
    ("4u", dec(4, -6)),
    ("3m", dec(3, -3)),
    ("9", dec(9, 0)),
    ("8k", dec(8, 3)),
    ("50k", dec(5, 4)),
    ("7M", dec(7, 6)),
    ("6G", dec(6, 9)),
    ("5T", dec(5, 12)),
    ("40T", dec(4, 13)),
    ("300T", dec(3, 14)),
    ("2P", dec(2, 15)),
    ("1E", dec(1, 18)),
    ("1E-3", dec(1, -3)),
    ("1e3", dec(1, 3)),
    ("1E6", dec(1, 6)),
    ("1e9", dec(1, 9)),
    ("1E12", dec(1, 12)),
    ("1e15", dec(1, 15)),
    ("1E18", dec(1, 18)),
    ("1e14", dec(1, 14)),
    ("1e13", dec(1, 13)),
    ("100.035k", dec(100035, 0)),
    ("0.001", dec(1, -3)),
    ("0.0005k", dec(5, -1)),
    ("0.005", dec(5, -3)),
    ("0.05", dec(5, -2)),
    ("0.5", dec(5, -1)),
    ("0.00050k", dec(5, -1)),
    ("0.00500", dec(5, -3)),
    ("0.05000", dec(5, -2)),
    ("0.50000", dec(5, -1)),
    ("0.5e0", dec(5, -1)),
    ("0.5e-1", dec(5, -2)),
    ("0.5e-2", dec(5, -3)),
    ("10.035M", dec(10035, 3)),
    ("1.2e3", dec(12, 2)),
    ("1.3E+6", dec(13, 5)),
    ("1.40e9", dec(14, 8)),
    ("1.53E12", dec(153, 10)),
    ("1.6e15", dec(16, 14)),
    ("1.7E18", dec(17, 17)),
    ("9.01", dec(901, -2)),
    ("8.1k", dec(81, 2)),
    ("7.123456M", dec(7123456, 0)),
    ("6.987654321G", dec(6987654321, 0)),
    ("5.444T", dec(5444, 9)),
    ("40.1T", dec(401, 11)),
    ("300.2T", dec(3002, 11)),
    ("2.5P", dec(25, 14)),
    ("1.01E", dec(101, 16)),
    # "Things that saturate/round"
    ("3.001n", dec(4, -9)),
    ("1.1E-9", dec(2, -9)),
    ("0.0000000001", dec(1, -9)),
    ("0.0000000005", dec(1, -9)),
    ("0.00000000050", dec(1, -9)),
    ("0.5e-9", dec(1, -9)),
    ("0.9n", dec(1, -9)),
    ("0.00000012345", dec(124, -9)),
    ("0.00000012354", dec(124, -9)),
    ("9Ei", MAX_ALLOWED),
    ("9223372036854775807Ki", MAX_ALLOWED),
    ("12E", dec(12, 18)),
    # "We'll accept fractional binary stuff, too."
    ("100.035Ki", dec(10243584, -2)),
    ("0.5Mi", Fraction(MI // 2)),
    ("0.05Gi", dec(536870912, -1)),
    ("0.025Ti", dec(274877906944, -1)),
    # "Things written by trolls"
    ("0.000000000001Ki", dec(2, -9)),
    (".001", dec(1, -3)),
    (".0001k", dec(100, -3)),
    ("1.", dec(1, 0)),
    ("1.G", dec(1, 9)),
]
# TestParseQuantityString's inputs (it checks the scanner's parts; these are their values).
APIMACHINERY_SCANNER = [
    ("0.025Ti", dec(274877906944, -1)),
    ("1.025Ti", dec(11269994184704, -1)),
    ("-1.025Ti", dec(-11269994184704, -1)),
    (".", Fraction(0)),
    ("-.", Fraction(0)),
    ("1E-3", dec(1, -3)),
]
# TestQuantityParseEmit: the canonical text each parses to, as a value.
APIMACHINERY_EMIT = [
    ("1Ki", Fraction(KI)),
    ("1Mi", Fraction(MI)),
    ("1Gi", Fraction(GI)),
    ("1024Mi", Fraction(GI)),
    ("1000M", dec(1, 9)),
    (".001Ki", dec(1024, -3)),
    (".000001Ki", dec(1024, -6)),
    (".000000001Ki", dec(1024, -9)),
    (".000000000001Ki", dec(2, -9)),
]


@pytest.mark.parametrize(
    ("text", "expected"), APIMACHINERY_PARSE + APIMACHINERY_SCANNER + APIMACHINERY_EMIT
)
def test_apimachinery_parse_table(text: str, expected: Fraction) -> None:
    assert parse_quantity_text(text) == expected
    # TestQuantityParse also parses every row with "-" and with "+" in front.
    if not text.startswith("-"):
        assert parse_quantity_text("-" + text) == -expected
        assert parse_quantity_text("+" + text) == expected


# TestQuantityString: an alternate spelling parses to the same value as the canonical one.
APIMACHINERY_ALTERNATES = [
    ("1Gi", "1024Mi"),
    ("300Mi", "307200Ki"),
    ("1001Gi", "1025024Mi"),
    ("1Ti", "1024Gi"),
    ("5", "5000m"),
    ("500m", "0.5"),
    ("1G", "1000M"),
    ("1G", "0.001T"),
    ("1m", "1000u"),
    ("1080m", "1.08"),
    ("1080m", "1080000000n"),
    ("1e9", ".001e12"),
    ("1e-3", "0.001e0"),
    ("1e-9", "1000e-12"),
    ("0", "00"),
]


@pytest.mark.parametrize(("canonical", "alternate"), APIMACHINERY_ALTERNATES)
def test_apimachinery_alternate_spellings(canonical: str, alternate: str) -> None:
    assert parse_quantity_text(alternate) == parse_quantity_text(canonical)


@pytest.mark.parametrize(
    "text",
    [
        # TestQuantityParse's `invalid` list, "trailing whitespace is forbidden" included.
        "1.1.M",
        "1+1.0M",
        "0.1mi",
        "0.1am",
        "aoeu",
        ".5i",
        "1i",
        "-3.01i",
        "-3.01e-",
        " 1",
        "1 ",
        "",  # "expected empty string to return error"
        "Non-Numeric",  # TestQuantityParseNonNumericPanic
    ],
)
def test_apimachinery_invalid(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity_text(text)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # TestJSONWhitespace: UnmarshalJSON trims; JSON numbers are their text.
        (" 1", 1),
        ("1 ", 1),
        (1, 1),
        (10, 10),
        (-1, -1),
        # TestQuantityUnmarshalCBOR "whitespace": h'20090a0d314d20090a0d'.
        (" \t\n\r1M \t\n\r", 10**6),
    ],
)
def test_apimachinery_whitespace_of_decoded_values(raw: object, expected: int) -> None:
    assert parse_quantity(raw) == expected


# --- issue 18 defect 4, each checked against ParseQuantity's source ----------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # The slow path (quantity.go:348-351) hands the number's text to inf.Dec.SetString,
        # which needs a digit: ErrNumeric. Pi and Ei take that path for every number (their
        # "precision" is negative), as does an exponent below -9.
        ("Pi", f"'Pi' is not a Kubernetes quantity: no digit before 'Pi' ({HINT})"),
        ("Ei", f"'Ei' is not a Kubernetes quantity: no digit before 'Ei' ({HINT})"),
        ("+Pi", f"'+Pi' is not a Kubernetes quantity: no digit before 'Pi' ({HINT})"),
        ("-.Ei", f"'-.Ei' is not a Kubernetes quantity: no digit before 'Ei' ({HINT})"),
        ("e-10", f"'e-10' is not a Kubernetes quantity: no digit before 'e-10' ({HINT})"),
        (".e-10", f"'.e-10' is not a Kubernetes quantity: no digit before 'e-10' ({HINT})"),
        # strconv.ParseInt(exponent, 10, 64) fails past int64 (suffix.go interpret).
        (
            "1e9223372036854775808",
            f"'1e9223372036854775808' is not a Kubernetes quantity: "
            f"'e9223372036854775808' is not a suffix ({HINT})",
        ),
    ],
)
def test_a_number_without_a_digit_is_an_error_where_kubernetes_says_so(
    text: str, message: str
) -> None:
    with pytest.raises(QuantityError) as info:
        parse_quantity(text)
    assert str(info.value) == message


@pytest.mark.parametrize(
    "text",
    # The int64 fast path (quantity.go:316-346) reads num+denom, "0" when there is none, and
    # never looks for a digit: Kubernetes accepts these as 0 (checked with ParseQuantity
    # itself, see scripts/quantity-oracle.sh). The rule "the number needs a digit"
    # holds only on the slow path.
    ["Ki", "Mi", "Gi", "Ti", ".Ki", "k", "E", "n", "e-9", "+", "-", ".", "+.", "-.", "-0"],
)
def test_an_empty_number_on_the_fast_path_is_zero_as_in_kubernetes(text: str) -> None:
    assert parse_quantity(text) == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Exact: the mantissa's length counts, not the exponent alone.
        ("1" + "0" * 2500 + "e-2001", Fraction(10**499)),
        ("1" + "0" * 2500 + "e-2509", dec(1, -9)),
        ("1" + "0" * 2500 + "e-2510", dec(1, -9)),  # 1e-10 rounds up to 1n
        ("123" + "0" * 2500 + "e-2510", dec(13, -9)),  # 12.3n rounds up to 13n
        ("1e-2000000000", dec(1, -9)),  # below 1n: 1n, without computing 10^2000000000
        ("-1e-2000000000", dec(-1, -9)),
        ("0e-2000000000", Fraction(0)),
        ("0." + "0" * 5000 + "1", dec(1, -9)),
        ("1." + "0" * 5000 + "1Ki", Fraction(1024) + dec(1, -9)),
        ("1" * 5000 + "Ki", MAX_ALLOWED),
        ("-1" + "0" * 30 + "Ei", -MAX_ALLOWED),
        ("1e3999", Fraction(10**3999)),
        # interpret() converts the parsed exponent with int32(): 2^32 wraps to 0, -2^63 too.
        ("1e4294967296", Fraction(1)),
        ("1e-9223372036854775808", Fraction(1)),
        ("1e+0003", Fraction(1000)),
    ],
)
def test_long_mantissas_and_exponents_are_exact(text: str, expected: Fraction) -> None:
    assert parse_quantity_text(text) == expected


def test_a_long_mantissa_rounds_up_to_nano() -> None:
    # 5000 ones times 10^-4990: ten ones, the point, ones: the digits down to nano, plus one.
    assert parse_quantity_text("1" * 5000 + "e-4990") == Fraction(int("1" * 19) + 1, 10**9)


@pytest.mark.parametrize(
    "text",
    [
        "1e4000",
        "1e2147483647",  # Go: an int64 mantissa with scale 2147483647
        "1.5e-2147483648",  # Go: the scale wraps in int32, 15e2147483647
        "9" * 4001,
    ],
)
def test_values_of_10_to_the_4000_are_refused_not_computed(text: str) -> None:
    with pytest.raises(QuantityRangeError) as info:
        parse_quantity(text)
    assert "is 10^4000 or more, beyond what this webhook evaluates" in str(info.value)


def test_whitespace_is_trimmed_as_unmarshal_json_does_but_not_by_the_grammar() -> None:
    # Quantity.UnmarshalJSON/UnmarshalCBOR call ParseQuantity(strings.TrimSpace(...)): a value
    # with surrounding space decodes; ParseQuantity itself refuses it.
    assert parse_quantity("\u00a04\t") == 4
    assert parse_quantity("\u20034") == 4  # EM SPACE, category Zs
    # White_Space but not category Zs: LINE/PARAGRAPH SEPARATOR, NEXT LINE, \v and \f.
    assert parse_quantity("\u20284\u2029") == 4
    assert parse_quantity("\x854\x0b\x0c") == 4
    with pytest.raises(QuantityError):
        parse_quantity_text(" 4")
    # Not White_Space, so not trimmed by Go: \x1c (Python's isspace says yes), ZERO WIDTH
    # SPACE, MONGOLIAN VOWEL SEPARATOR (White_Space until Unicode 6.3), BOM.
    for char in ("\x1c", "\u200b", "\u180e", "\ufeff"):
        with pytest.raises(QuantityError):
            parse_quantity(char + "4")


def test_null_reads_as_zero_like_unmarshal_json() -> None:
    # UnmarshalJSON: `null` leaves a zero Quantity, so `limits: {nvidia.com/gpu: null}` is 0.
    assert parse_quantity(None) == 0
    assert parse_quantity(yaml.safe_load("v: ~")["v"]) == 0


def test_json_numbers_parse_as_their_text() -> None:
    assert parse_quantity(1e20) == 10**20
    assert parse_quantity(1e-5) == Fraction(1, 100000)
    with pytest.raises(QuantityRangeError):
        parse_quantity(10**4000)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # Unicode digits: Python's \d and int() take them, Kubernetes does not.
        ("４", f"'４' is not a Kubernetes quantity ({HINT})"),
        ("٥٠", f"'٥٠' is not a Kubernetes quantity ({HINT})"),
        ("1e٥", f"'1e٥' is not a Kubernetes quantity ({HINT})"),
        ("1_000", f"'1_000' is not a Kubernetes quantity ({HINT})"),
        ("1..", f"'1..' is not a Kubernetes quantity ({HINT})"),
        ("1e3.5", f"'1e3.5' is not a Kubernetes quantity ({HINT})"),
        ("1e", f"'1e' is not a Kubernetes quantity: 'e' is not a suffix ({HINT})"),
        ("e", f"'e' is not a Kubernetes quantity: 'e' is not a suffix ({HINT})"),
        ("1E+", f"'1E+' is not a Kubernetes quantity: 'E+' is not a suffix ({HINT})"),
        ("1k3", f"'1k3' is not a Kubernetes quantity: 'k3' is not a suffix ({HINT})"),
        ("1Ki3", f"'1Ki3' is not a Kubernetes quantity: 'Ki3' is not a suffix ({HINT})"),
        ("1eE3", f"'1eE3' is not a Kubernetes quantity: 'eE3' is not a suffix ({HINT})"),
        ("1e+-3", f"'1e+-3' is not a Kubernetes quantity ({HINT})"),
        ("1 k", f"'1 k' is not a Kubernetes quantity ({HINT})"),
    ],
)
def test_kubernetes_grammar_rejections(text: str, message: str) -> None:
    with pytest.raises(QuantityError) as info:
        parse_quantity(text)
    assert str(info.value) == message


# --- formatting: what the webhook writes parses back to the same value ------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Fraction(0), "0"),
        (Fraction(1), "1"),
        (Fraction(1500), "1500"),
        (Fraction(2000), "2k"),
        (Fraction(GI), "1073741824"),
        (Fraction(10**18), "1E"),
        (Fraction(10**19), "1e19"),
        (Fraction(10**499), "1e499"),
        (Fraction(1, 2), "500m"),
        (Fraction(-1, 2), "-500m"),
        (dec(124, -9), "124n"),
        (dec(5, -6), "5u"),
    ],
)
def test_format_quantity_of_a_value(value: Fraction, text: str) -> None:
    assert format_quantity(value) == text
    assert parse_quantity(text) == value


def test_format_quantity_refuses_a_value_no_quantity_has() -> None:
    with pytest.raises(ValueError, match="is not a whole number of nano units"):
        format_quantity(Fraction(1, 3))


# Texts shaped like quantities: sign, digits, point, digits, any suffix or exponent.
_quantity_texts = st.builds(
    lambda *parts: "".join(parts),
    st.sampled_from(["", "+", "-"]),
    st.text("0123456789", max_size=25),
    st.sampled_from(["", "."]),
    st.text("0123456789", max_size=15),
    st.sampled_from([*"numkMGTPE", "", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e", "E", "i"]),
    st.one_of(st.just(""), st.integers(-40, 40).map(str), st.integers(0, 40).map("+{}".format)),
) | st.text("0123456789.+-eEinumkKMGTP", max_size=12)


@settings(max_examples=400, deadline=None)
@given(_quantity_texts)
def test_format_of_a_parsed_value_parses_back_to_it(text: str) -> None:
    try:
        value = parse_quantity(text)
    except QuantityError:
        return
    assert parse_quantity(format_quantity(value)) == value
    assert parse_quantity(format_quantity(text)) == value  # a text is shown as written


# --- against the real ParseQuantity, where it is built ----------------------------------------

ORACLE = os.environ.get("GPU_WEBHOOK_QUANTITY_ORACLE", "")


@pytest.mark.skipif(
    not ORACLE,
    reason="set GPU_WEBHOOK_QUANTITY_ORACLE to a binary built by scripts/quantity-oracle.sh "
    "(it needs a Kubernetes source tree and Go) to compare with Kubernetes' own ParseQuantity",
)
def test_same_answers_as_kubernetes_parse_quantity() -> None:
    rng = random.Random(18)
    texts = [_sample_text(rng) for _ in range(20000)]
    texts += [text for text, _ in APIMACHINERY_PARSE] + ["Pi", "Ki", "e-10", "+", "1" * 5000]
    lines = "".join(json.dumps({"mode": "parse", "text": text}) + "\n" for text in texts)
    done = subprocess.run(
        [ORACLE], input=lines, capture_output=True, text=True, timeout=300, check=True
    )
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(answers) == len(texts)
    differences = []
    for text, go in zip(texts, answers, strict=True):
        try:
            mine: Fraction | str = parse_quantity_text(text)
        except QuantityRangeError:
            continue  # Kubernetes keeps it; this webhook refuses it on purpose
        except QuantityError:
            mine = "error"
        expected = parse_quantity_text(go["string"]) if go["ok"] else "error"
        if mine != expected:
            differences.append((text, go, mine))
    assert differences == []


def _sample_text(rng: random.Random) -> str:
    if rng.random() < 0.3:
        return "".join(rng.choice("0123456789.+-eEinumkKMGTP ") for _ in range(rng.randint(0, 8)))
    number = "".join(rng.choice("0123456789") for _ in range(rng.choice([0, 1, 2, 5, 18, 19, 30])))
    if rng.random() < 0.5:
        number += "." + "".join(rng.choice("00123456789") for _ in range(rng.choice([0, 1, 9, 12])))
    suffix = rng.choice(["", "n", "m", "k", "E", "Ki", "Ti", "Pi", "Ei", "e", "E", "i"])
    if suffix in ("e", "E") and rng.random() < 0.9:
        suffix += rng.choice(["", "+", "-"]) + str(rng.choice([0, 3, 9, 10, 11, 19, 28, 499]))
    return rng.choice(["", "+", "-"]) + number + suffix
