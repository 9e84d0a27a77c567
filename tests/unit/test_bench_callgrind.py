"""bench/harness/callgrind.py's reader of callgrind's output and bench/bench_instructions.py's
stage figures from it: self and inclusive costs, name compression, calls, recursion, the ELF
object groups; and one real callgrind run of the markers when valgrind is installed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.bench_instructions import stage_costs
from bench.harness.callgrind import (
    build_marks,
    footprint,
    grouped,
    object_group,
    parse,
    read,
    symbol_sizes,
)

# The shape callgrind 3.19 writes (docs/callgrind-format): compressed names, a `calls=` line
# followed by the call's inclusive cost, relative positions (+N/-N/*), a recursion level
# (fn'2) and a self call beyond --separate-recs.
PROFILE = """\
# callgrind format
version: 1
creator: callgrind-3.19.0
cmd:  python --callgrind-out-file=x t.py
positions: line
events: Ir
summary: 670

ob=(1) /lib/libpython3.11.so.1.0
fl=(1) ceval.c
fn=(1) gwb_measure_mutate
0 10
cob=(2) /build/gwb_marks.so
cfi=(2) marks.c
cfn=(2) gwb_stage_decode
calls=4 0
0 300
cfn=(3) CPyDef_reviews___build
calls=1 0
0 200
+2 5
* 5

ob=(2)
fl=(2)
fn=(2)
0 20
cob=(3) /site-packages/orjson/orjson.so
cfn=(4) loads
calls=4 0
0 250
cfn=(5) gwb_stage_decode'2
calls=1 0
0 30

fn=(5)
0 30

ob=(3)
fn=(4)
-1 250

ob=(4) /build/8aea__mypyc.so
fn=(3)
0 120
cfn=(3)
calls=2 0
0 999
cfn=(6) PyDict_SetItem
calls=3 0
0 80

ob=(1)
fn=(6)
0 80

fn=(7) CPyPy_reviews___build
0 100
cfn=(3)
calls=1 0
0 50

ob=(4)
fn=(3)
0 50
"""


def test_self_and_inclusive_costs() -> None:
    profile = parse(PROFILE.splitlines(keepends=True))
    # Self costs add up to the summary; a call's cost is never its caller's self cost.
    assert profile.total == 670
    assert profile.self_cost["gwb_measure_mutate"] == 20
    assert profile.inclusive("gwb_measure_mutate") == 20 + 300 + 200
    # The decode marker: itself, orjson, its own second recursion level (a callee by name).
    assert profile.inclusive("gwb_stage_decode") == 20 + 250 + 30
    assert profile.inclusive("loads") == 250
    # A self call (recursion beyond --separate-recs) is already in the merged self cost.
    assert profile.inclusive("CPyDef_reviews___build") == 120 + 50 + 80
    assert profile.edges[("CPyPy_reviews___build", "CPyDef_reviews___build")] == 50
    assert ("CPyDef_reviews___build", "CPyDef_reviews___build") not in profile.edges
    assert profile.inclusive("never ran") == 0


def test_cost_by_object_and_group() -> None:
    profile = parse(PROFILE.splitlines(keepends=True))
    assert profile.by_object == {
        "/lib/libpython3.11.so.1.0": 20 + 80 + 100,
        "/build/gwb_marks.so": 20 + 30,
        "/site-packages/orjson/orjson.so": 250,
        "/build/8aea__mypyc.so": 120 + 50,
    }
    # Positions are relative (+2, *, -1) but only the cost column is read: 5 + 5 counted.
    assert sum(profile.by_object.values()) == profile.total
    assert grouped(profile.by_object) == {
        "orjson": 250,
        "CPython (interpreter, objects, runtime)": 200,
        "compiled webhook (mypyc)": 170,
        "benchmark markers": 50,
    }


def test_touched_functions_per_object() -> None:
    # Only functions that ran an instruction of their own count (a caller's call cost does not).
    profile = parse(PROFILE.splitlines(keepends=True))
    assert profile.touched == {
        "/lib/libpython3.11.so.1.0": {
            "gwb_measure_mutate",
            "PyDict_SetItem",
            "CPyPy_reviews___build",
        },
        "/build/gwb_marks.so": {"gwb_stage_decode", "gwb_stage_decode'2"},
        "/site-packages/orjson/orjson.so": {"loads"},
        "/build/8aea__mypyc.so": {"CPyDef_reviews___build"},
    }


def test_footprint_sizes_the_functions_an_object_defines(tmp_path: Path) -> None:
    if shutil.which("nm") is None or shutil.which("cc") is None:
        pytest.skip("needs nm and a C compiler (binutils, gcc) to build a sized object")
    source = tmp_path / "two.c"
    source.write_text(
        "int gwb_small(int x) { return x + 1; }\n"
        "int gwb_big(int x) { int s = 0; for (int i = 0; i < x; i++) s += i * x; return s; }\n"
    )
    lib = tmp_path / "libtwo.so"
    subprocess.run(["cc", "-O0", "-shared", "-fPIC", "-o", str(lib), str(source)], check=True)
    sizes = symbol_sizes(str(lib))
    assert sizes["gwb_small"] > 0 and sizes["gwb_big"] > sizes["gwb_small"]
    text = f"""events: Ir
ob=(1) {lib}
fn=(1) gwb_small
0 3
fn=(2) gwb_big
0 9
fn=(3) gwb_not_in_the_object
0 1
"""
    got = footprint(parse(text.splitlines(keepends=True)))
    assert got == {
        "other objects": {
            "functions": 3,
            "sized": 2,
            "bytes": sizes["gwb_small"] + sizes["gwb_big"],
        }
    }
    # An object that is not on disk is counted, not sized.
    assert symbol_sizes(str(tmp_path / "gone.so")) == {}


def test_summary_mismatch_is_an_error() -> None:
    broken = PROFILE.replace("summary: 670", "summary: 999")
    with pytest.raises(ValueError, match="add up to 670, the file says 999"):
        parse(broken.splitlines(keepends=True))


@pytest.mark.parametrize(
    ("name", "group"),
    [
        ("/usr/lib/x86_64-linux-gnu/libssl.so.3", "TLS (_ssl, libssl, libcrypto)"),
        ("/x/lib-dynload/_ssl.cpython-311-x86_64-linux-gnu.so", "TLS (_ssl, libssl, libcrypto)"),
        (
            "/x/aiohttp/_http_parser.cpython-311-x86_64-linux-gnu.so",
            "aiohttp C (HTTP parser, writer)",
        ),
        ("/x/uvloop/loop.cpython-311-x86_64-linux-gnu.so", "uvloop + libuv (event loop)"),
        ("/x/build/compiled/webhook/core/kinds/builtin.cpython-311.so", "compiled webhook (mypyc)"),
        (
            "/x/lib-dynload/binascii.cpython-311-x86_64-linux-gnu.so",
            "CPython's other C modules (binascii, ...)",
        ),
        ("/usr/lib/x86_64-linux-gnu/libc.so.6", "libc"),
        ("???", "other objects"),
    ],
)
def test_object_groups(name: str, group: str) -> None:
    assert object_group(name) == group


def test_stage_costs_markers_and_native_symbols() -> None:
    profile = parse(PROFILE.splitlines(keepends=True))
    plan: dict[str, dict[str, list[str]]] = {
        stage: {"intercepted": [], "symbols": [], "native": [], "missing": []}
        for stage in ("decode", "evaluation", "patch", "answer", "log", "counters")
    }
    # build: compiled and intercepted too (its Python entry point's calls are the marker's).
    plan["answer"]["native"] = ["CPyDef_reviews___build"]
    costs = stage_costs(profile, plan)
    assert costs["decode"] == 300
    # Called natively from gwb_measure_mutate (200); through CPyPy_ (50): not counted again.
    assert costs["answer"] == 200
    assert costs["total"] == 670
    assert costs["other"] == 670 - 300 - 200
    # Counted by symbol only (a native class's member): every caller but its own stage's.
    plan["answer"] = {"intercepted": [], "symbols": ["CPyDef_reviews___build"], "native": []}
    assert stage_costs(profile, plan)["answer"] == 200 + 50


@pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("cc") is None,
    reason="valgrind or a C compiler is not installed (make bench-deps)",
)
def test_real_callgrind_run_of_the_markers(tmp_path: Path) -> None:
    """callgrind counts only the measured function, one dump each, and the reader agrees with
    callgrind's own total; a stage marker's inclusive cost is what it ran."""
    marks, why = build_marks(tmp_path / "marks")
    assert marks is not None, why
    script = tmp_path / "t.py"
    script.write_text(
        "import json, sys\n"
        f"sys.path.insert(0, {str(marks)!r})\n"
        "import gwb_marks as m\n"
        "m.start_instrumentation()\n"
        "body = json.dumps({'a': list(range(50))})\n"
        "def loop(n):\n"
        "    for _ in range(n):\n"
        "        m.gwb_stage_decode(json.loads, body)\n"
        "loop(20)\n"  # warm-up: CPython 3.11 specializes the loop's bytecode first
        "m.gwb_measure_mutate(loop, 20)\n"
        "m.gwb_measure_validate(loop, 40)\n"
    )
    out = tmp_path / "cg.out"
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            "--collect-atstart=no",
            "--toggle-collect=gwb_measure_*",
            "--dump-after=gwb_measure_mutate",
            "--dump-after=gwb_measure_validate",
            f"--callgrind-out-file={out}",
            sys.executable,
            str(script),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    first, second = read(Path(f"{out}.1")), read(Path(f"{out}.2"))
    assert read(out).total == 0  # nothing outside the measured loops
    assert first.inclusive("gwb_measure_mutate") == first.total > 0
    assert second.inclusive("gwb_measure_validate") == second.total
    assert first.inclusive("gwb_stage_decode") < first.total
    # Twice the loops, twice the instructions: deterministic counts (within 1 %).
    assert abs(second.total / first.total - 2) < 0.02
