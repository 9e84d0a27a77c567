"""Timing loops, percentiles and round-by-round ratios, the same for every benchmark."""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from typing import Any, TypeVar

K = TypeVar("K", bound=Hashable)


def per_call_us(fn: Callable[[], object], inner: int) -> float:
    """Mean cost of one call of `fn` in µs, over `inner` calls back to back."""
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - start) / inner * 1e6


def interleaved(
    fns: Mapping[K, Callable[[], object]], rounds: int, inner: int, *, rewarm: bool = False
) -> dict[K, list[float]]:
    """Per-call cost in µs, `rounds` samples of `inner` calls each. The variants are
    interleaved round by round so machine noise hits them alike and ratios stay honest.
    Each is called once first to warm caches (regexes, quantities); `rewarm`: before every
    sample instead."""
    samples: dict[K, list[float]] = {name: [] for name in fns}
    if not rewarm:
        for fn in fns.values():
            fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            if rewarm:
                fn()
            samples[name].append(per_call_us(fn, inner))
    return samples


def paired_ratio(top: Sequence[float], bottom: Sequence[float]) -> float:
    """Median of the round-by-round ratios: both sides of a round ran back to back, so a noisy
    neighbour on the machine shifts them alike and cancels out."""
    return statistics.median(a / b for a, b in zip(top, bottom, strict=True))


def median_p90(samples: Sequence[float]) -> tuple[float, float]:
    return statistics.median(samples), statistics.quantiles(samples, n=10)[-1]


def nearest_rank(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))
    return ordered[index]


def lower_quantile(values: Sequence[float], q: float) -> float:
    """The value at index ⌊q·(n-1)⌋ of the sorted values (q from 0 to 1)."""
    return sorted(values)[int(q * (len(values) - 1))]


def figures_ms(samples: Sequence[float]) -> dict[str, float]:
    """Median, p90 and max in ms of durations in seconds, and their count."""
    return {
        "median_ms": round(statistics.median(samples) * 1000, 3),
        "p90_ms": round(lower_quantile(samples, 0.9) * 1000, 3),
        "max_ms": round(max(samples) * 1000, 3),
        "n": len(samples),
    }


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    """Seconds one awaited call took."""
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started
