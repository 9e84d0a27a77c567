"""Kubernetes resource quantities ("1", "100", "1k", "500m", "1e3", "2Gi") as exact fractions.

Accepts and rejects exactly what ParseQuantity does, with the value it computes
(k8s.io/apimachinery v0.36 pkg/api/resource/quantity.go: parseQuantityString, ParseQuantity;
suffix.go: suffixHandler.interpret; gopkg.in/inf.v0 dec.go: Dec.SetString). Line numbers below
are those of quantity.go in Kubernetes 1.36.2. One deliberate difference: a value of 10^4000 or
more is refused (QuantityRangeError), see _MAX_DIGITS.
"""

from __future__ import annotations

import math
import re
from decimal import MAX_EMAX, MIN_EMIN, ROUND_CEILING, Context, Decimal
from fractions import Fraction
from functools import lru_cache

from webhook.core.base.errors import QuantityError, QuantityRangeError

# parseQuantityString (quantity.go:161-275), a byte scanner: an optional sign, leading zeros
# (skipped), the integer digits ("num", "0" when empty), an optional '.' and its digits
# ("denom"), then the suffix: a run of [eEinumkKMGTP], an optional sign and digits, and the end
# of the string, or ErrFormatWrong. Every part of the number may be empty: the scanner alone
# accepts "+", ".", "Pi"; whether a number without a digit is an error is decided later (see
# _exact). Digits are the ASCII '0'..'9' only: Python's \d and int() would take "４" or "٥٠";
# re.ASCII and the explicit classes keep them out. Possessive quantifiers take every character
# they can, as the Go loops do.
_SCAN = re.compile(
    r"(?P<sign>[+-]?)(?P<zeros>0*+)(?P<num>[0-9]*+)(?:\.(?P<denom>[0-9]*+))?"
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
_EXPONENT = re.compile(r"(?P<sign>[+-]?)(?P<digits>[0-9]+)", re.ASCII)
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_NANO = 10**9
# ParseQuantity caps a binary-suffixed value at 2^63-1 (quantity.go:379-380, maxAllowed in math.go).
_BINARY_CAP = _INT64_MAX
# maxInt64Factors (math.go): a decimal number of up to 18 digits takes the int64 fast path.
_MAX_INT64_FACTORS = 18
# Go keeps any decimal value exactly, however large (an int64 mantissa with an int32 exponent,
# or an inf.Dec). This webhook refuses a value of 10^4000 or more instead of building a number
# of that many digits on the request path: no resource comes near it, and for a mantissa of
# more than 18 digits the API server itself spends time and memory in proportion to the
# exponent (inf.Dec.Round, quantity.go:374, computes 10^(exponent+9)). Values below 10^4000
# need at most 4009 digits, under Python's 4300-digit int conversion limit.
_MAX_DIGITS = 4000
_TOO_LARGE = 10**_MAX_DIGITS
# Texts longer than this are parsed without the cache: 4096 cached keys of a megabyte each
# would hold gigabytes.
_CACHED_LENGTH = 64

_SYNTAX_HINT = "expected a number with an optional suffix such as 1, 100, 1k, 500m, 1e3 or 2Gi"

# strings.TrimSpace trims what unicode.IsSpace is true for: the Latin-1 spaces
# '\t' '\n' '\v' '\f' '\r' ' ' U+0085 U+00A0, and above Latin-1 the White_Space property
# (Go's src/unicode/graphic.go IsSpace, tables.go _White_Space). Python's str.isspace differs
# (it takes \x1c-\x1f); Unicode category Zs misses U+2028 and U+2029.
_GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)


def trim_space(text: str) -> str:
    """strings.TrimSpace: what Quantity.UnmarshalJSON and UnmarshalCBOR remove before parsing."""
    return text.strip(_GO_SPACE)


def _wrap32(value: int) -> int:
    """Go's int32 arithmetic: the result wraps around."""
    return (value + 2**31) % 2**32 - 2**31


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 40 else f"{text[:20]!r}… ({len(text)} characters)"


def _not_a_quantity(text: str, why: str = "") -> QuantityError:
    return QuantityError(f"{_shown(text)} is not a Kubernetes quantity{why} ({_SYNTAX_HINT})")


def _too_large(text: str) -> QuantityRangeError:
    return QuantityRangeError(
        f"{_shown(text)} is 10^{_MAX_DIGITS} or more, beyond what this webhook evaluates"
    )


def _interpret(suffix: str, text: str) -> tuple[int, bool]:
    """(exponent, binary) of a suffix, as suffixHandler.interpret in suffix.go: 10^exponent,
    or 2^exponent when binary."""
    if suffix in _DECIMAL_SI:
        return _DECIMAL_SI[suffix], False
    if suffix in _BINARY_SI:
        return _BINARY_SI[suffix], True
    # strconv.ParseInt(suffix[1:], 10, 64): a sign and ASCII digits within int64; then
    # int32(parsed), which wraps ("1e4294967296" is 1e0).
    found = _EXPONENT.fullmatch(suffix, 1) if suffix[:1] in ("e", "E") else None
    if found is not None:
        digits = found["digits"].lstrip("0") or "0"
        if len(digits) <= 19:
            parsed = int(found["sign"] + digits)
            if _INT64_MIN <= parsed <= _INT64_MAX:
                return _wrap32(parsed), False
    raise _not_a_quantity(text, f": {suffix!r} is not a suffix")


@lru_cache(maxsize=4096)
def _parse_cached(text: str) -> Fraction:
    return _parse(text)


def parse_quantity_text(text: str) -> Fraction:
    """ParseQuantity: the exact Kubernetes grammar and value, no whitespace allowed."""
    return _parse_cached(text) if len(text) <= _CACHED_LENGTH else _parse(text)


def _parse(text: str) -> Fraction:
    match = _SCAN.fullmatch(text) if text else None
    if match is None:  # "" is ErrFormatWrong too (quantity.go:279)
        raise _not_a_quantity(text)
    exponent, binary = _interpret(match["suffix"], text)
    num = match["num"] or "0"  # quantity.go:211 "if we stripped all numerator positions"
    denom = match["denom"] or ""
    negative = match["sign"] == "-"
    # The int64 fast path (quantity.go:296-346): a number of few enough digits whose scale,
    # after moving the decimal point, is at least nano. It reads num+denom, "0" when both are
    # empty, so "Ki", "k", "+" and "." are 0 here; only the slow path below needs a digit.
    if binary:
        precision = 15 - len(num) - exponent * 3 // 10 - 1 if not denom else -1
        scale, mantissa = 0, 1 << exponent
    else:
        precision = _MAX_INT64_FACTORS - (len(num) + len(denom))
        scale, mantissa = exponent, 1
    if precision >= 0:
        scale = _wrap32(scale - len(denom))  # int32 arithmetic, wraps as in Go
        if scale >= -9:
            # At most 18 digits (14 with a binary suffix): the product fits an int64, so
            # int64Multiply never refuses it and the value is exact.
            value = int(num + denom) * mantissa
            return _scaled(-value if negative else value, scale, text)
    return _exact(match, denom, exponent, binary, text)


def _scaled(value: int, scale: int, text: str) -> Fraction:
    """value * 10^scale for the fast path (scale >= -9: no rounding)."""
    if value == 0:
        return Fraction(0)
    if len(str(abs(value))) + scale > _MAX_DIGITS:
        raise _too_large(text)
    if scale >= 0:
        return Fraction(value * 10**scale)
    return Fraction(value, 10**-scale)


def _exact(match: re.Match[str], denom: str, exponent: int, binary: bool, text: str) -> Fraction:
    """The inf.Dec path (quantity.go:348-391): exact, then rounded up to nano, binary capped."""
    # amount.SetString(value): inf.Dec's scanner needs at least one digit ("no digits read"),
    # so here "Pi", "Ei", "+Pi", "e-10" and ".e-10" are ErrNumeric (quantity.go:349).
    digits = match["zeros"] + match["num"] + denom
    if not digits:
        raise _not_a_quantity(text, f": no digit before {match['suffix']!r}")
    significant = digits.lstrip("0")
    if not significant:
        return Fraction(0)  # amount is 0: Round is skipped, nothing to cap (quantity.go:373)
    # The scale of the inf.Dec is the number of digits after the point; a decimal suffix adds
    # -exponent to it (quantity.go:355, Scale.infScale negates, in int32: both wrap).
    power = -len(denom) if binary else -_wrap32(len(denom) + _wrap32(-exponent))
    stripped = significant.rstrip("0")
    power += len(significant) - len(stripped)
    # |number| = int(stripped) * 10^power, so 10^(magnitude-1) <= |number| < 10^magnitude.
    magnitude = len(stripped) + power
    nanos: int
    if binary:
        if magnitude > 19:  # >= 10^19 > 2^63-1 before the factor 2^exponent: capped
            nanos = _BINARY_CAP * _NANO
        elif magnitude <= -28:  # below 10^-28 * 2^60 < 1n: rounds up to 1n
            nanos = 1
        else:
            nanos = _binary_nanos(stripped, power, exponent)
    elif magnitude > _MAX_DIGITS:
        raise _too_large(text)
    elif power >= -9:
        nanos = int(stripped) * 10 ** (power + 9)
    elif magnitude <= -9:
        nanos = 1  # non-zero below 1n: "rounds non-zero values up" (quantity.go:369-375)
    else:
        # Keep the digits down to nano; the rest is not zero (no trailing zeros): round up.
        nanos = int(stripped[: magnitude + 9]) + 1
    if binary and nanos > _BINARY_CAP * _NANO:
        nanos = _BINARY_CAP * _NANO  # "The max is just a simple cap" (quantity.go:377-381)
    value = Fraction(nanos, _NANO)
    return -value if match["sign"] == "-" else value


def _binary_nanos(stripped: str, power: int, exponent: int) -> int:
    """ceil(int(stripped) * 10^power * 2^exponent * 10^9), exact for any number of digits."""
    if power >= -9:
        exact: int = int(stripped) * 10 ** (power + 9) << exponent
        return exact
    # A long fraction: decimal arithmetic reads the digits in linear time, and with this
    # precision the product and the ceiling are exact.
    context = Context(prec=len(stripped) + 40, Emax=MAX_EMAX, Emin=MIN_EMIN)
    number = context.multiply(Decimal(f"{stripped}E{power + 9}"), Decimal(1 << exponent))
    return int(number.to_integral_value(rounding=ROUND_CEILING, context=context))


@lru_cache(maxsize=4096)
def _parse_manifest_cached(raw: str) -> Fraction:
    return _parse(trim_space(raw))


def parse_quantity(raw: object) -> Fraction:
    """A quantity as the API server decodes it from a JSON/YAML manifest.

    Quantity.UnmarshalJSON (quantity.go:733-752) reads `null` as zero and trims the text with
    strings.TrimSpace before ParseQuantity; a JSON number is its text; `true`/`false` are not
    quantities. Note: UnmarshalJSON trims the JSON bytes without unescaping them, so a space
    that a JSON encoder wrote as an escape (Go's encoding/json escapes control characters and
    U+2028/U+2029) reaches ParseQuantity as `\\u2028` and fails there; UnmarshalCBOR trims the
    decoded text. This function sees decoded text and trims it, as CBOR and raw JSON do.
    """
    if type(raw) is str:  # what every manifest holds: straight to the cached parse
        if len(raw) <= _CACHED_LENGTH:
            return _parse_manifest_cached(raw)
        return _parse(trim_space(raw))
    if raw is None:
        return Fraction(0)
    if isinstance(raw, bool):
        raise QuantityError(f"{raw!r} is a boolean, not a quantity")
    if isinstance(raw, int):
        if raw.bit_length() > 13_000 and abs(raw) >= _TOO_LARGE:  # 13,000 bits < 10^4000
            raise QuantityRangeError(
                f"an integer of {raw.bit_length()} bits is 10^{_MAX_DIGITS} or more, "
                "beyond what this webhook evaluates"
            )
        return Fraction(raw)
    if isinstance(raw, float):
        if not math.isfinite(raw):
            raise QuantityError(f"{raw!r} is not a finite quantity")
        return parse_quantity_text(repr(raw))
    if isinstance(raw, str):
        return parse_quantity(str(raw))
    raise QuantityError(f"a quantity must be a string or a number, got {type(raw).__name__}")


class Parsed:
    """parse_quantity's answer for one manifest value, as the request path reads it: the
    value's numerator and denominator as plain ints (Fraction's are properties, and its `==`
    and `int()` run interpreted), or which error it raised (`error`: 0 none, 1 not a quantity,
    2 too large: QuantityRangeError)."""

    def __init__(self, value: Fraction | None, error: int) -> None:
        self.value = value
        self.error = error
        self.numerator: int = value.numerator if value is not None else 0
        self.denominator: int = value.denominator if value is not None else 1

    def same(self, other: Parsed) -> bool:
        """Whether both parsed and are the same number: Fraction's own `==` between two
        Fractions, which are kept in lowest terms with a positive denominator."""
        return (
            self.error == 0
            and other.error == 0
            and self.numerator == other.numerator
            and self.denominator == other.denominator
        )


# Manifest text -> its Parsed (texts of up to _CACHED_LENGTH characters): parse_quantity of a
# string is a pure function of the string, so the string is the whole key. Bounded: emptied
# when full, as a cache of the few values a cluster writes ("1", "2", "500m") refills at once.
_PARSED: dict[str, Parsed] = {}
_PARSED_MAX = 4096


def parsed(raw: object) -> Parsed:
    """parse_quantity(raw) as a Parsed: the same value, and QuantityError caught (any other
    exception propagates, as from parse_quantity)."""
    if type(raw) is str and len(raw) <= _CACHED_LENGTH:
        found = _PARSED.get(raw)
        if found is None:
            found = _parse_parts(raw)
            if len(_PARSED) >= _PARSED_MAX:
                _PARSED.clear()
            _PARSED[raw] = found
        return found
    return _parse_parts(raw)


def _parse_parts(raw: object) -> Parsed:
    try:
        return Parsed(parse_quantity(raw), 0)
    except QuantityRangeError:
        return Parsed(None, 2)
    except QuantityError:
        return Parsed(None, 1)


_SI_SUFFIX = {0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}


def canonical_quantity(value: Fraction) -> str:
    """A text ParseQuantity reads back as exactly this value (a multiple of 1n)."""
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    value = abs(value)
    if value.denominator == 1:
        number = str(value.numerator)
        zeros = len(number) - len(number.rstrip("0"))
        if zeros > 18:
            return f"{sign}{number[:-zeros]}e{zeros}"
        shift = zeros // 3 * 3
        return f"{sign}{number[: len(number) - shift]}{_SI_SUFFIX[shift]}"
    for shift, suffix in ((3, "m"), (6, "u"), (9, "n")):
        scaled = value * 10**shift
        if scaled.denominator == 1:
            return f"{sign}{scaled.numerator}{suffix}"
    raise ValueError(f"{value} is not a whole number of nano units: no quantity has that value")


def format_quantity(raw: object) -> str:
    """A value for messages: a manifest's value as the user wrote it (JSON spelling for null
    and booleans); a parsed value (Fraction) as a text the API server parses back to it."""
    if isinstance(raw, str):
        return raw
    if raw is None:
        return "null"
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, Fraction):
        return canonical_quantity(raw)
    return str(raw)
