"""bench/bench_instructions.py's code footprint (issue 49 item 3): the Python-level pass that
counts the functions and modules each review touches, the module names it groups them by, and
the table it prints beside callgrind's native functions and code bytes."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

import bench.bench_instructions as instr


@pytest.mark.parametrize(
    ("filename", "module"),
    [
        ("/work/main/webhook/core/evaluation/pods.py", "webhook/core/evaluation/pods"),
        ("/v/lib/python3.11/site-packages/aiohttp/web_protocol.py", "aiohttp"),
        ("/v/lib/python3.11/site-packages/typing_extensions.py", "typing_extensions"),
        ("/usr/lib/python3.11/asyncio/events.py", "stdlib/events"),
    ],
)
def test_module_of(filename: str, module: str) -> None:
    assert instr._module_of(filename) == module


def _leaf(text: str) -> int:
    return len(json.dumps(text))


def _review(kind: str) -> None:
    if kind == "wide":
        _leaf(kind)
    len(kind)


def test_python_footprint_counts_per_review_and_the_union() -> None:
    class Cache:
        def __init__(self) -> None:
            self.cleared = 0

        def check_generation(self, generation: tuple[object, ...]) -> None:
            self.cleared += 1

    cache = Cache()
    state = SimpleNamespace(decisions=cache)
    seen: list[tuple[str, list[Any]]] = []

    def run(endpoint: str, batch: list[Any]) -> list[int]:
        seen.append((endpoint, batch))
        for kind in batch:
            _review(kind)
        return [200]

    got = instr._python_footprint(state, ["narrow", "wide"], "mutate", run)
    # Each review alone, each after the decision cache was emptied.
    assert seen == [("mutate", ["narrow"]), ("mutate", ["wide"])]
    assert cache.cleared == 2
    assert got["reviews"] == 2
    # narrow: _review; wide: _review, _leaf and json.dumps' Python functions (mean of the two).
    assert got["union_python_functions"] > 2
    assert got["python_functions"] < got["union_python_functions"]
    assert got["union_python_modules"] >= 2  # this test module and stdlib/__init__ (json)
    # len() and the C encoder are C callables called from Python.
    assert got["union_c_callables"] >= 1
    assert instr._python_footprint(state, [], "mutate", run) == {}


def test_print_footprint(capsys: pytest.CaptureFixture[str]) -> None:
    native = {
        "compiled webhook (mypyc)": {"functions": 368, "sized": 360, "bytes": 607 * 1024},
        "CPython (interpreter, objects, runtime)": {
            "functions": 545,
            "sized": 540,
            "bytes": 264 * 1024,
        },
    }
    python = {
        "reviews": 10,
        "python_functions": 47.8,
        "python_modules": 13.8,
        "c_callables": 27.8,
        "union_python_functions": 49,
        "union_python_modules": 15,
        "webhook_python_functions": 1,
        "union_c_callables": 29,
    }
    run = {
        "info": {"python_footprint": {"mutate": python, "validate": python}},
        "mutate": {"footprint": native},
        "validate": {"footprint": native},
    }
    instr.print_footprint({"tree": [run]})
    out = capsys.readouterr().out
    assert "compiled webhook (mypyc)" in out
    assert "368, 607" in out
    assert "native code in all" in out and "913, 871" in out
    assert "per review: interpreted functions" in out and "47.8" in out
