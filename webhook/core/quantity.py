"""Kubernetes resource quantities ("1", "100", "1k", "500m", "1e3", "2Gi") as exact fractions."""

from __future__ import annotations

import math
import re
import unicodedata
from fractions import Fraction
from functools import lru_cache

from webhook.core.errors import QuantityError

# The grammar of k8s.io/apimachinery/pkg/api/resource/quantity.go, as its scanner
# (parseQuantityString) reads it:
#   <quantity> ::= <signedNumber><suffix>; <number> ::= <digits> | <digits>. | .<digits> | ...
# but the scanner is looser than that comment: every part of the number may be empty, so "+",
# "-", "." and "+." parse as 0 (only "" is an error), and "1." is 1. Digits are the ASCII
# '0'..'9' only (Python's \d and int() would accept "４" or "٥٠"; re.ASCII and the explicit
# class keep them out). The suffix is a run of [eEinumkKMGTP], an optional sign and digits,
# then the end of the string; which runs mean something is decided by suffixHandler.interpret.
# Possessive quantifiers: the number takes every digit it can, as the Go scanner does.
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*+)(?:\.(?P<frac>[0-9]*+))?"
    r"(?P<suffix>[eEinumkKMGTP]*+[+-]?[0-9]*+)",
    re.ASCII,
)
# suffix.go: decimal SI suffixes (n..E, "" included) win over binary ones, which win over an
# exponent. So "1E" is 1 exa, "1E3" is 1000, and "1e" (no table entry, nothing after the e)
# is an error.
_DECIMAL_SI: dict[str, int] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_BINARY_SI: dict[str, int] = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
# strconv.ParseInt(s, 10, 64) as interpret() calls it on the part after e/E.
_EXPONENT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_INT64_MAX = 2**63 - 1
_NANO = 10**9
# ParseQuantity keeps a binary-suffixed value only up to 2^63-1 ("8Ei" parses as 2^63-1).
_BINARY_CAP = Fraction(_INT64_MAX)
# Kubernetes has no length limit; Python refuses to make an int of more than 4300 digits, and
# no real quantity comes near this.
_MAX_LENGTH = 4000
# Kubernetes computes 10^exponent for any int32 exponent; a positive one this large is no
# device count, and computing it would stall the request path. Negative ones need no bound:
# any non-zero value below 1n rounds up to 1n.
_MAX_EXPONENT = 1000

_SYNTAX_HINT = "expected a number with an optional suffix such as 1, 100, 1k, 500m, 1e3 or 2Gi"


def _go_space(char: str) -> bool:
    """unicode.IsSpace, what strings.TrimSpace trims (Python's isspace also takes \\x1c-\\x1f)."""
    return char in "\t\n\v\f\r \x85\xa0" or unicodedata.category(char) == "Zs"


def trim_space(text: str) -> str:
    """strings.TrimSpace: what Quantity.UnmarshalJSON removes before parsing."""
    start, end = 0, len(text)
    while start < end and _go_space(text[start]):
        start += 1
    while end > start and _go_space(text[end - 1]):
        end -= 1
    return text[start:end]


def _interpret(suffix: str, text: str) -> tuple[int, int, bool]:
    """(base, exponent, binary) of a suffix, as suffixHandler.interpret in suffix.go."""
    if suffix in _DECIMAL_SI:
        return 10, _DECIMAL_SI[suffix], False
    if suffix in _BINARY_SI:
        return 2, _BINARY_SI[suffix], True
    if len(suffix) > 1 and suffix[0] in "eE" and _EXPONENT.fullmatch(suffix[1:]):
        exponent = int(suffix[1:])
        if abs(exponent) <= _INT64_MAX:
            # ParseInt gives an int64 that interpret() converts with int32(parsed): wraps.
            return 10, (exponent + 2**31) % 2**32 - 2**31, False
    raise QuantityError(
        f"{text!r} is not a Kubernetes quantity: {suffix!r} is not a suffix ({_SYNTAX_HINT})"
    )


@lru_cache(maxsize=4096)
def parse_quantity_text(text: str) -> Fraction:
    """ParseQuantity: the exact Kubernetes grammar, no whitespace allowed."""
    if len(text) > _MAX_LENGTH:
        raise QuantityError(
            f"{text[:20]!r}… ({len(text)} characters) is too long to be a Kubernetes quantity"
        )
    match = _QUANTITY.fullmatch(text) if text else None
    if match is None:
        raise QuantityError(f"{text!r} is not a Kubernetes quantity ({_SYNTAX_HINT})")
    base, exponent, binary = _interpret(match["suffix"], text)
    digits = (match["int"] or "0") + "." + (match["frac"] or "0")
    value = Fraction(digits)
    if not value:
        return value
    if base == 10 and exponent > _MAX_EXPONENT:
        raise QuantityError(f"{text!r} has an exponent out of range")
    if base == 10 and exponent < -2 * _MAX_EXPONENT:
        value = Fraction(1, _NANO)  # rounds up to 1n, see below
    else:
        value *= Fraction(base) ** exponent
    if binary and value > _BINARY_CAP:
        value = _BINARY_CAP
    if (value * _NANO).denominator != 1:
        # "This rounds non-zero values up to the minimum representable value" (quantity.go):
        # the value is kept down to nano only, rounding away from zero ("0.9n" -> "1n").
        value = Fraction(math.ceil(value * _NANO), _NANO)
    return -value if match["sign"] == "-" else value


@lru_cache(maxsize=4096)
def _parse_manifest_text(raw: str) -> Fraction:
    return parse_quantity_text(trim_space(raw))


def parse_quantity(raw: object) -> Fraction:
    """A quantity as the API server decodes it from a JSON/YAML manifest.

    Quantity.UnmarshalJSON reads `null` as zero and trims the text with strings.TrimSpace
    before ParseQuantity ("TODO: Remove support for leading/trailing whitespace"); a JSON
    number is its text; `true`/`false` are not quantities.
    """
    if type(raw) is str:  # what every manifest holds: straight to the cached parse
        return _parse_manifest_text(raw)
    if raw is None:
        return Fraction(0)
    if isinstance(raw, bool):
        raise QuantityError(f"{raw!r} is a boolean, not a quantity")
    if isinstance(raw, int):
        return Fraction(raw)
    if isinstance(raw, float):
        if not math.isfinite(raw):
            raise QuantityError(f"{raw!r} is not a finite quantity")
        return parse_quantity_text(repr(raw))
    if isinstance(raw, str):
        return _parse_manifest_text(raw)
    raise QuantityError(f"a quantity must be a string or a number, got {type(raw).__name__}")


def format_quantity(raw: object) -> str:
    """The value as the user wrote it, for messages (JSON spelling for null and booleans)."""
    if isinstance(raw, str):
        return raw
    if raw is None:
        return "null"
    if isinstance(raw, bool):
        return "true" if raw else "false"
    return str(raw)
