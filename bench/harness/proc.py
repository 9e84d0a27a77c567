"""A process's memory and CPU time, read from /proc (proc(5)), and CPU pinning."""

from __future__ import annotations

import os
from dataclasses import dataclass
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
    usage = cpu_usage(pid)
    return usage.user + usage.system


@dataclass(frozen=True)
class CpuUsage:
    """A process's CPU time so far, in user and in system mode (seconds), and its page faults
    (minor: no I/O, a page mapped or zeroed; major: read from disk)."""

    user: float
    system: float
    minor_faults: int
    major_faults: int

    def __sub__(self, other: CpuUsage) -> CpuUsage:
        return CpuUsage(
            self.user - other.user,
            self.system - other.system,
            self.minor_faults - other.minor_faults,
            self.major_faults - other.major_faults,
        )


def parse_stat(text: str) -> CpuUsage:
    """/proc/PID/stat's (proc(5)) minflt, majflt, utime and stime: fields 10, 12, 14 and 15,
    counted from 1; after the command's ")" (which may hold spaces) they are 0-based 7, 9, 11
    and 12. Times are in clock ticks."""
    fields = text.rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return CpuUsage(int(fields[11]) / tick, int(fields[12]) / tick, int(fields[7]), int(fields[9]))


def cpu_usage(pid: int) -> CpuUsage:
    return parse_stat(Path(f"/proc/{pid}/stat").read_text())


def activity(pid: int) -> dict[str, int]:
    """A process's system activity so far, all its threads: read and write system calls and
    their bytes (/proc/PID/io: syscr, syscw, rchar, wchar; read(2), write(2) and their
    relatives) and context switches (voluntary_ctxt_switches and nonvoluntary_ctxt_switches of
    each /proc/PID/task/TID/status: the process's status has its main thread's only)."""
    counts: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("syscr", "syscw", "rchar", "wchar"):
            counts[key] = int(value)
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "status").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.endswith("ctxt_switches"):
                counts[key] = counts.get(key, 0) + int(value)
    return counts


def taskset(cpus: set[int]) -> list[str]:
    """The prefix running a command on `cpus` only (util-linux's taskset)."""
    return ["taskset", "-c", ",".join(str(cpu) for cpu in sorted(cpus))]
