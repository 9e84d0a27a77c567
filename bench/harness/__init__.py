"""The benchmarks' shared harness: everything a benchmark under bench/ runs on but does not measure.

- core:     the evaluation core's names the benchmarks use, imported in this one place
- tree:     the webhook's modules imported from another checkout (`--tree`, a previous release)
- cli:      the argument parser and the common options (--rounds/--inner, --json, --tree)
- timing:   timing loops, percentiles, round-by-round ratios
- proc:     a process's RSS and CPU time (/proc), CPU pinning
- report:   tables printed the same way by every benchmark
- servers:  on loopback: the webhook and the no-op server in their own processes, the fake API
            server (in a thread or a process), the in-process admission app, TLS material
- objects:  the reviews and policies the server benchmarks send and load
- load:     the load generators: Python (loadgen), open loop in C (openloop), wrk (wrk)
- processes: `python -m bench.harness noop|client`, the harness's own child processes
"""

from pathlib import Path

# The repository root (bench/harness/__init__.py -> the checkout).
REPO = Path(__file__).resolve().parents[2]
