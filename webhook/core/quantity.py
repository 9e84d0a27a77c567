"""Kubernetes resource quantities ("1", "100", "1k", "500m", "1e3", "2Gi") as exact fractions."""

from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache

from webhook.core.errors import QuantityError

# Grammar from k8s.io/apimachinery/pkg/api/resource/quantity.go:
#   <quantity> ::= <signedNumber><suffix>
#   <suffix>   ::= <binarySI> | <decimalExponent> | <decimalSI>
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)"
)
_MULTIPLIERS: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


# Far longer than any real quantity; also keeps Fraction() below Python's limit on the
# number of digits an int may be parsed from (ValueError past 4300 digits).
_MAX_LENGTH = 100


@lru_cache(maxsize=4096)
def _parse_text(text: str) -> Fraction:
    if len(text) > _MAX_LENGTH:
        raise QuantityError(
            f"{text[:20]!r}… ({len(text)} characters) is too long to be a Kubernetes quantity"
        )
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise QuantityError(
            f"{text!r} is not a Kubernetes quantity (expected a number with an optional "
            "suffix such as 1, 100, 1k, 500m, 1e3 or 2Gi)"
        )
    value = Fraction(match["number"])
    if match["exp"]:
        exponent = int(match["exp"][1:])
        if abs(exponent) > 30:
            raise QuantityError(f"{text!r} has an exponent out of range")
        value *= Fraction(10) ** exponent
    else:
        value *= _MULTIPLIERS[match["suffix"] or ""]
    return value


def parse_quantity(raw: object) -> Fraction:
    """Parse a quantity as written in a manifest (string, or a YAML/JSON number)."""
    if isinstance(raw, bool):
        raise QuantityError(f"{raw!r} is a boolean, not a quantity")
    if isinstance(raw, int):
        return Fraction(raw)
    if isinstance(raw, float):
        if not math.isfinite(raw):
            raise QuantityError(f"{raw!r} is not a finite quantity")
        return Fraction(str(raw))
    if isinstance(raw, str):
        return _parse_text(raw.strip())
    raise QuantityError(f"a quantity must be a string or a number, got {type(raw).__name__}")


def format_quantity(raw: object) -> str:
    """The value as the user wrote it, for messages."""
    return raw if isinstance(raw, str) else repr(raw) if isinstance(raw, bool) else str(raw)
