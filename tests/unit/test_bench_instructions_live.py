"""bench/bench_instructions.py's live-server breakdown: the stage figures of a live dump (the
markers called from the event loop, no measured loop), the tables by stage and by ELF object
(each webhook minus the no-op), the markers' overhead, and the marked server's command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import bench.bench_instructions as instr
from bench.harness.callgrind import parse

# A live window's dump: the event loop (uvloop) runs the handler's task, which calls the
# markers; TLS and the loop's own work are outside every marker.
LIVE = """\
# callgrind format
version: 1
creator: callgrind-3.19.0
positions: line
events: Ir
summary: 1000

ob=(1) /x/uvloop/loop.cpython-311-x86_64-linux-gnu.so
fn=(1) __pyx_f_6uvloop_4loop_4Loop__run
0 100
cob=(2) /lib/libpython3.11.so.1.0
cfn=(2) _PyEval_EvalFrameDefault
calls=1 0
0 700
cob=(3) /usr/lib/libssl.so.3
cfn=(3) SSL_read
calls=2 0
0 200

ob=(2)
fn=(2)
0 150
cob=(4) /build/gwb_marks.so
cfn=(4) gwb_stage_decode
calls=1 0
0 300
cfn=(5) gwb_stage_evaluation
calls=1 0
0 250

ob=(4)
fn=(4)
0 10
cob=(5) /site-packages/orjson/orjson.so
cfn=(6) loads
calls=1 0
0 290

fn=(5)
0 5
cfn=(7) gwb_stage_placement
calls=1 0
0 45
cob=(2)
cfn=(8) PyObject_Call
calls=1 0
0 200

fn=(7)
0 45

ob=(2)
fn=(8)
0 200

ob=(5)
fn=(6)
0 290

ob=(3)
fn=(3)
0 200
"""


def empty_plan() -> dict[str, dict[str, list[str]]]:
    return {
        stage: {"intercepted": [], "symbols": [], "native": [], "missing": []}
        for stage in instr.STAGES
    }


def test_stage_costs_of_a_live_dump() -> None:
    profile = parse(LIVE.splitlines(keepends=True))
    assert profile.total == 1000
    costs = instr.stage_costs(profile, empty_plan())
    assert costs["decode"] == 300
    assert costs["evaluation"] == 250
    assert costs["placement"] == 45  # inside evaluation: not subtracted twice
    assert costs["patch"] == costs["log"] == 0
    # The rest: the loop, the interpreter outside the markers, TLS.
    assert costs["other"] == 100 + 150 + 200 == 1000 - 300 - 250


def run(per_review: int, objects: dict[str, int], stages: dict[str, int] | None = None) -> Any:
    out: dict[str, Any] = {"per_review": per_review, "objects": objects}
    if stages is not None:
        out["stages"] = stages
        out["info"] = {"plan": empty_plan()}
    return out


def stages_of(total: int, decode: int) -> dict[str, int]:
    values = dict.fromkeys(instr.LIVE_ROWS, 0)
    values.update(total=total, decode=decode, other=total - decode)
    return values


RESULTS: dict[str, list[dict[str, Any]]] = {
    "no-op": [run(100, {"TLS": 40, "CPython": 60}), run(102, {"TLS": 40, "CPython": 62})],
    "tree": [
        run(300, {"TLS": 41, "CPython": 200, "markers": 1}, stages_of(300, 90)),
        run(302, {"TLS": 41, "CPython": 202, "markers": 1}, stages_of(302, 92)),
    ],
    "tree unmarked": [run(297, {"TLS": 41, "CPython": 198}), run(299, {"TLS": 41, "CPython": 200})],
}


def test_live_stages_medians_and_the_noop_column() -> None:
    table = instr.live_stages(RESULTS)
    assert list(table) == list(instr.LIVE_ROWS)
    assert table["decode"] == {"no-op": None, "tree": 91}
    assert table["total"] == {"no-op": 101, "tree": 301}
    # The no-op's whole total is aiohttp, TLS, the loop (and its one-line handler).
    assert table["other"] == {"no-op": 101, "tree": 210}
    # An unmarked run has no stages: not a column.
    assert "tree unmarked" not in table["total"]


def test_live_objects_each_webhook_minus_the_noop() -> None:
    table = instr.live_objects(RESULTS)
    assert table["CPython"]["no-op"] == 61
    assert table["CPython"]["tree"] == 201
    assert table["CPython"]["tree - no-op"] == 140
    assert table["TLS"]["tree - no-op"] == 1
    # An object only the webhook runs: the no-op's 0.
    assert table["markers"] == {
        "no-op": 0,
        "tree": 1,
        "tree unmarked": 0,
        "tree - no-op": 1,
        "tree unmarked - no-op": 0,
    }


def test_markers_overhead() -> None:
    assert instr.markers_overhead(RESULTS) == {"tree": round((301 / 298 - 1) * 100, 2)}
    assert instr.markers_overhead({"tree": RESULTS["tree"]}) == {}


def test_print_live(capsys: pytest.CaptureFixture[str]) -> None:
    instr.print_live(RESULTS)
    out = capsys.readouterr().out
    assert "tree: the markers add +1.01 % to the total (vs 'tree unmarked')" in out
    assert "live: instructions per review by stage" in out
    assert instr.LIVE_REST in out
    assert "tree - no-op" in out
    assert "tree: 2 runs; spread of any stage at most" in out


def test_live_server_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The marked server's wrapper takes `gpu-webhook serve`'s command line unchanged."""
    seen: list[Any] = []

    def serve_child(args: Any) -> int:
        seen.append(args)
        return 0

    monkeypatch.setattr(instr, "serve_child", serve_child)
    argv = ["live-server", "--tree", "/t", "--marks", "/m", "--out", "/o/info.json"]
    serve = ["serve", "--host", "127.0.0.1", "--port", "1", "--policies-poll", "0"]
    assert instr.main([*argv, *serve]) == 0
    assert seen[0].serve == serve
    assert Path(seen[0].tree) == Path("/t")


def test_proc_stat_user_system_and_faults() -> None:
    """/proc/PID/stat (proc(5)): a command with spaces and ")" in it; minflt is field 10,
    majflt 12, utime 14, stime 15 (clock ticks)."""
    import os

    from bench.harness.proc import CpuUsage, cpu_usage, parse_stat

    tick = os.sysconf("SC_CLK_TCK")
    text = "4242 (gpu (web) hook) S 1 4242 4242 0 -1 4194560 1500 0 7 0 300 120 0 0 20 0 3 0"
    usage = parse_stat(text)
    assert usage == CpuUsage(300 / tick, 120 / tick, 1500, 7)
    assert usage - CpuUsage(100 / tick, 20 / tick, 500, 7) == CpuUsage(
        200 / tick, 100 / tick, 1000, 0
    )
    assert cpu_usage(os.getpid()).minor_faults > 0


def test_print_live_objects_without_unmarked_repeats(capsys: pytest.CaptureFixture[str]) -> None:
    instr.print_live(RESULTS)
    header = next(
        line
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("live: instructions per review by object")
    )
    assert header.split()[-5:] == ["no-op", "tree", "tree", "-", "no-op"]
    assert "unmarked" not in header
