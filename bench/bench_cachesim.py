"""Simulated caches and branch predictor per admission review, under wrk's load: why the
webhook's CPU time per review grows faster than its instruction count (issue 40, item 1's
measured reason).

The live server (the webhook, `--compiled` its build/compiled, or the no-op of
bench/harness/servers.py) runs under `valgrind --tool=callgrind --cache-sim=yes
--branch-sim=yes` with instrumentation off; once it is ready, wrk (1 thread, `--connections`
keep-alive connections, the *distinct* mix of bench_server.py) warms it up for 5 s, then
`callgrind_control --zero`, wrk for `--seconds`, `callgrind_control --dump`. Every event of the
dump divided by the reviews wrk completed: instructions (Ir), data reads and writes, L1
instruction and data misses (I1mr, D1mr, D1mw), last-level misses (ILmr, DLmr, DLmw) and
conditional and indirect branches with their mispredictions (Bc/Bcm, Bi/Bim).

The simulated last level is `--ll` (default 1 MiB, 16-way, 64-byte lines: this machine's L2 per
core, which callgrind's two-level model leaves out when it takes the L3 as last level). wrk's 32
connections batch reviews per event-loop turn, as bench_server.py does; their 32 TLS handshakes
fall in the window (a few thousand instructions per review at valgrind's ~150 reviews/s: the
same for both servers). Counts, not times: the figures do not depend on the machine's load.

    .venv/bin/python bench/bench_cachesim.py --compiled            # the no-op and the webhook
"""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_instructions import (
    _control,
    fixed_hashes,
    valgrind_argv,
    wait_ready_long,
)
from bench.harness import cli
from bench.harness.callgrind import valgrind_path
from bench.harness.load.wrk import write_templates, wrk_path
from bench.harness.objects import server_templates
from bench.harness.report import Column, Table
from bench.harness.servers import (
    certificates,
    env,
    free_port,
    server_argv,
    wait_ready,
    workdir,
)

REPO = Path(__file__).resolve().parent.parent
EVENTS = (
    "Ir",
    "Dr",
    "Dw",
    "I1mr",
    "D1mr",
    "D1mw",
    "ILmr",
    "DLmr",
    "DLmw",
    "Bc",
    "Bcm",
    "Bi",
    "Bim",
)


def totals(text: str) -> dict[str, int]:
    """A callgrind dump's totals per event (its `events:` line names the columns of
    `totals:`/`summary:`)."""
    names: list[str] = []
    values: list[int] = []
    for line in text.splitlines():
        if line.startswith("events:"):
            names = line.split()[1:]
        elif line.startswith(("totals:", "summary:")):
            values = [int(v) for v in line.split()[1:]]
    if not names or not values:
        raise ValueError("not a callgrind dump with totals")
    return dict(zip(names, values, strict=False))


def _wrk(port: int, templates: Path, seconds: int, connections: int) -> int:
    argv = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "60s"]
    argv += ["-s", str(templates / "mix.lua"), f"https://localhost:{port}", "--"]
    argv += [str(templates / "bodies.tsv"), "1", "12345"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    found = re.search(r"(\d+) requests in", out)
    if not found:
        raise RuntimeError(f"cannot read wrk's output:\n{out}")
    return int(found.group(1))


def run_one(
    kind: str, tree: Path, work: Path, tls: Any, args: argparse.Namespace
) -> dict[str, Any]:
    """One server under callgrind with the caches simulated; events per review."""
    out = work / f"cg-{kind}"
    out.mkdir(parents=True)
    config = work / "config.yaml"
    config.write_text("registryLookups:\n  publicRegistries: false\n")
    templates = write_templates(work / "wrk", server_templates("distinct"))
    port = free_port()
    once = ("--policies-poll", "0")
    server = server_argv(kind, port, tls, REPO / "configmaps", config=config, extra=once)
    simulate = ("--instr-atstart=no", "--cache-sim=yes", "--branch-sim=yes", f"--LL={args.ll}")
    process = subprocess.Popen(
        valgrind_argv(out / "cg.%p", *simulate) + server,
        cwd=tree if kind == "webhook" else REPO,
        env=fixed_hashes(env(tree=tree if kind == "webhook" else None)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready_long(port, tls.ca_cert, process, wait_ready)
        _control(process.pid, "--instr=on")
        _wrk(port, templates, 5, args.connections)
        _control(process.pid, "--zero")
        reviews = _wrk(port, templates, args.seconds, args.connections)
        _control(process.pid, "--dump=measured")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    dumps = sorted(out.glob("cg.*.[0-9]"), key=lambda p: int(p.suffix[1:]))
    if not dumps:
        raise RuntimeError("callgrind wrote no dump of the measured window")
    events = totals(dumps[0].read_text(errors="replace"))
    return {"reviews": reviews, "per_review": {k: round(v / reviews) for k, v in events.items()}}


def main(argv: Sequence[str] | None = None) -> int:
    parser = cli.parser(__doc__)
    parser.add_argument("--compiled", action="store_true", help="the tree's build/compiled")
    parser.add_argument("--tree", default=str(REPO), help="the webhook's checkout")
    parser.add_argument("--seconds", type=int, default=25, help="wrk's measured run")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--ll", default="1048576,16,64", help="last level: size,ways,line")
    parser.add_argument("--json", default=None, help="also write the figures to FILE")
    args = parser.parse_args(argv)
    if valgrind_path() is None or wrk_path() is None:
        print("bench_cachesim: SKIPPED: needs valgrind and wrk (`make bench-deps`)")
        return 0
    tree = Path(args.tree).resolve()
    if args.compiled:
        tree = tree / "build" / "compiled"
        if not (tree / ".built").exists():
            raise SystemExit(f"{tree} is not built: run `make compiled`")
    results: dict[str, dict[str, Any]] = {}
    with workdir("gpu-webhook-cachesim-") as work:
        tls = certificates(work)
        for kind in ("noop", "webhook"):
            print(f"{kind} under callgrind with simulated caches", flush=True)
            results[kind] = run_one(kind, tree, work / kind, tls, args)
    noop, hook = results["noop"]["per_review"], results["webhook"]["per_review"]
    rows = [(e, noop.get(e, 0), hook.get(e, 0)) for e in EVENTS]
    table = Table(
        Column("event per review", 18, align="<"),
        Column("no-op", 10, ","),
        Column("webhook", 10, ","),
        Column("webhook / no-op", 16),
    )
    print(f"\nper review under wrk ({args.connections} connections), last level {args.ll}")
    print(table.header())
    for event, a, b in rows:
        print(table.row(event, a, b, f"{b / a:.2f}" if a else "-"))
    if args.json:
        import json

        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
