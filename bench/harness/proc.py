"""A process's memory and CPU time, read from /proc (proc(5)), and CPU pinning."""

from __future__ import annotations

import os
from pathlib import Path


def status_kib(field: str, pid: int | str = "self") -> int:
    """A KiB field of /proc/PID/status: VmRSS (resident now), VmHWM (its peak)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def rss_kib(pid: int | str = "self") -> int:
    return status_kib("VmRSS", pid)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of /proc/PID/stat (proc(5)); here 0-based after ")"
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def taskset(cpus: set[int]) -> list[str]:
    """The prefix running a command on `cpus` only (util-linux's taskset)."""
    return ["taskset", "-c", ",".join(str(cpu) for cpu in sorted(cpus))]
