"""Versions placement compares (CUDA runtime/driver, GPU compute capability) and their parsing."""

from __future__ import annotations

import re
from typing import NamedTuple

# ASCII digits only (`\d` would accept "１２"), bounded so a hostile value costs nothing.
_VERSION = re.compile(r"v?([0-9]{1,6})(?:\.([0-9]{1,6}))?(?:\.[0-9]{1,9})*")
# Node label values Kubernetes parses with strconv.ParseInt for Gt/Lt (apimachinery
# pkg/labels/selector.go, Requirement.Matches). Label values cannot carry a sign (they start
# with an alphanumeric), so plain ASCII digits are exactly what matches.
_LABEL_INT = re.compile(r"[0-9]{1,18}")


class CudaVersion(NamedTuple):
    """major.minor; also used for compute capability (8.0, 7.5). A tuple: comparisons are
    native tuple comparisons, several times cheaper than an ordered dataclass's."""

    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    @classmethod
    def parse(cls, text: object) -> CudaVersion | None:
        """'12.4', '12.4.1', 'v11.8', '12' (= 12.0); None when it is not a version at all."""
        if not isinstance(text, str):
            return None
        match = _VERSION.fullmatch(text.strip())
        if not match:
            return None
        return cls(int(match[1]), int(match[2] or 0))

    @property
    def plausible(self) -> bool:
        """CUDA 1.0 (2007) up to any two-digit major: anything else is a typo or not CUDA."""
        return 1 <= self.major < 100


# Image tags: CUDA 7.0 is the oldest runtime any maintained image ships; a smaller number
# read from a tag is more likely an app version than a CUDA version.
MIN_IMAGE_GUESS = CudaVersion(7, 0)


def label_int(value: str | None) -> int | None:
    """A node label value as Kubernetes' Gt/Lt read it; None when they would not match."""
    if value is None or not _LABEL_INT.fullmatch(value):
        return None
    return int(value)
