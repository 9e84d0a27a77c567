"""bench/bench_cachesim.py's reading of a callgrind dump with simulated caches and branches:
every event of the `events:` line, from the `totals:` (or `summary:`) line."""

from __future__ import annotations

import pytest

from bench.bench_cachesim import totals

# The header callgrind 3.19 writes with --cache-sim=yes --branch-sim=yes (a dump's totals line).
DUMP = """\
# callgrind format
version: 1
creator: callgrind-3.19.0
positions: line
events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim
fl=(1) x.c
fn=(1) f
3 10 2 1 1 0 0 0 0 0 1 1 0 0
totals: 10 2 1 1 0 0 0 0 0 1 1 0 0
"""


def test_totals_names_every_event() -> None:
    got = totals(DUMP)
    assert got == {
        "Ir": 10, "Dr": 2, "Dw": 1, "I1mr": 1, "D1mr": 0, "D1mw": 0, "ILmr": 0,
        "DLmr": 0, "DLmw": 0, "Bc": 1, "Bcm": 1, "Bi": 0, "Bim": 0,
    }  # fmt: skip


def test_summary_line_is_read_when_there_is_no_totals_line() -> None:
    assert totals("events: Ir Bc\nsummary: 7 3\n") == {"Ir": 7, "Bc": 3}


def test_a_file_without_totals_is_refused() -> None:
    with pytest.raises(ValueError, match="not a callgrind dump with totals"):
        totals("events: Ir\nfn=(1) f\n1 5\n")
