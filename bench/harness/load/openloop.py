"""The open-loop C load generator (openloop.c beside this file): build it, run it, read its JSON.

Request k is due at start + k/rate whether or not earlier ones were answered; latency runs from
the scheduled time, so a slow answer delays (and is charged to) the requests queued behind it
instead of silently lowering the offered rate (no coordinated omission). The bodies are the
templates bench.harness.load.wrk writes, filled the same way as its Lua script.

The generator is built with the system's C compiler and OpenSSL (Debian: `gcc`, `libssl-dev`;
`make bench-deps`) into a cache directory, once per version of the source.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness.proc import cpu_seconds, taskset

SOURCE = Path(__file__).resolve().with_name("openloop.c")


def openloop_path(cache_dir: Path) -> tuple[Path | None, str]:
    """The generator's binary, built into `cache_dir` if needed: (path, "") or (None, why not)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None, "no C compiler (cc) on PATH: apt-get install gcc (make bench-deps)"
    source = SOURCE.read_bytes()
    binary = cache_dir / f"openloop-{hashlib.sha256(source).hexdigest()[:16]}"
    if binary.exists():
        return binary, ""
    cache_dir.mkdir(parents=True, exist_ok=True)
    # Built beside its final name and renamed: a concurrent build never runs a half-written file.
    fd, partial = tempfile.mkstemp(prefix=".openloop-", dir=cache_dir)
    os.close(fd)
    argv = [compiler, "-O2", "-Wall", "-Wextra", "-o", partial, str(SOURCE), "-lssl", "-lcrypto"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        os.unlink(partial)
        detail = done.stderr.strip().splitlines()
        hint = ""
        if any("openssl/" in line for line in detail):
            hint = " (OpenSSL headers missing: apt-get install libssl-dev, make bench-deps)"
        return None, f"cannot build {SOURCE.name}{hint}: {' '.join(detail[:3])}"
    os.replace(partial, binary)
    return binary, ""


def run_openloop(
    port: int,
    ca: Path,
    templates_dir: Path,
    rate: float,
    requests: int,
    connections: int,
    server_pid: int,
    cpus: set[int] | None = None,
    *,
    binary: Path | None = None,
    seed: int | None = None,
    timeout: float = 10.0,
    realtime: bool = False,
) -> dict[str, Any]:
    """One open-loop run against https://localhost:`port` (127.0.0.1) at `rate` requests/s.

    Returns the generator's JSON (see openloop.c) plus `server_cpu`, the cores the server
    process used over the generator's lifetime (its connection set-up included); the
    generator's own share of a core while it ran its schedule is `cpu_share`.

    `realtime` runs the generator under SCHED_FIFO (util-linux's `chrt -f 10`; needs root or
    CAP_SYS_NICE): on a machine shared with other busy processes their time slices, not the
    generator, made its send lag p99 2-4 ms on its core; under SCHED_FIFO it stays ~0.1 ms.
    """
    if binary is None:
        binary, why = openloop_path(templates_dir)
        if binary is None:
            raise RuntimeError(why)
    if seed is None:
        # Each run starts its counter elsewhere: a server that saw an earlier run must not see
        # the same objects again (as with wrk).
        seed = random.randrange(10**12)
    argv = [str(binary), "127.0.0.1", str(port), str(ca), str(templates_dir / "bodies.tsv")]
    argv += [f"{rate:g}", str(requests), str(connections), str(seed), f"{timeout:g}"]
    if cpus:
        argv = taskset(cpus) + argv
    if realtime:
        argv = ["chrt", "-f", "10", *argv]
    server_before = cpu_seconds(server_pid)
    began = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.monotonic() - began
    server_cpu = (cpu_seconds(server_pid) - server_before) / wall
    if done.returncode != 0:
        raise RuntimeError(
            f"openloop failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}"
        )
    result: dict[str, Any] = json.loads(done.stdout)
    result["server_cpu"] = round(server_cpu, 3)
    return result
