"""The C load generator: `wrk` (Debian package `wrk`, built with LuaJIT) with a Lua script that
sends the review mix, a new request `uid` on every request, and in the distinct mix a new object
every time. Its own CPU is measured (wait4's rusage), so a run shows it was not the limit.

Body templates are written one per line as `PATH<TAB>BODY`; the script fills the placeholders:

- `@UID@`  a new request uid per request (the API server sends a new one for every call);
- `@SEQ@`  (distinct mix) a request counter, from a random start per run, put where the
           evaluation reads it (the object's name and an env value in every container), so no
           two requests carry the same object, not even across runs against one server;
- `@NAME@` (replicas mix, /validate only) a 5-character generated name suffix;
- `@PODUID@`, `@TIME@` what the API server sets per pod: metadata.uid (/validate), the time
  in managedFields and (/validate) creationTimestamp.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.harness.proc import activity, cpu_usage, taskset

LUA = r"""
-- Each template is split once, at init, into literal pieces and placeholders; a request is one
-- table.concat of its pieces. (Six string.gsub scans of a 3-6 KB body per request made wrk,
-- not the no-op server, the limit of the fast no-op run.)
local templates = {}
local n = 0
local counter = 0
local thread_id = 0
local headers = {["Content-Type"] = "application/json"}
local alphabet = "bcdfghjklmnpqrstvwxz2456789"
local second = -1
local stamp = ""

local function split(body)
  local pieces = {}
  local at = 1
  while true do
    local s, e, name = string.find(body, "@(%u+)@", at)
    if not s then break end
    pieces[#pieces + 1] = string.sub(body, at, s - 1)
    pieces[#pieces + 1] = name  -- even index: a placeholder, filled per request
    at = e + 1
  end
  pieces[#pieces + 1] = string.sub(body, at)
  return pieces
end

function init(args)
  for line in io.lines(args[1]) do
    local tab = string.find(line, "\t", 1, true)
    n = n + 1
    templates[n] = {string.sub(line, 1, tab - 1), split(string.sub(line, tab + 1))}
  end
  thread_id = tonumber(args[2] or "0")
  -- Each run starts its counter elsewhere: a server that saw an earlier run (the warm-up)
  -- must not see the same objects again.
  counter = tonumber(args[3] or "0")
end

local function suffix(i)
  local out = {}
  for _ = 1, 5 do
    local k = i % 27
    out[#out + 1] = string.sub(alphabet, k + 1, k + 1)
    i = math.floor(i / 27)
  end
  return table.concat(out)
end

function request()
  counter = counter + 1
  local t = templates[(counter % n) + 1]
  local now = os.time()
  if now ~= second then
    second = now
    stamp = os.date("!%Y-%m-%dT%H:%M:%SZ", now)
  end
  local values = {
    UID = string.format("%08x-0000-4000-8000-%012x", thread_id, counter),
    SEQ = string.format("%d", counter),
    NAME = suffix(counter),
    PODUID = string.format("%08x-1111-4000-8000-%012x", thread_id, counter),
    TIME = stamp,
  }
  local pieces = t[2]
  local out = {}
  for i = 1, #pieces do
    if i % 2 == 0 then
      out[i] = values[pieces[i]]
    else
      out[i] = pieces[i]
    end
  end
  return wrk.format("POST", t[1], headers, table.concat(out))
end
"""


@dataclass
class WrkResult:
    rps: float
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    non_2xx: int
    socket_errors: int
    wrk_cpu: float  # cores the load generator used during the run
    server_cpu: float  # cores the server process used during the run
    kinstructions_per_review: int  # user-space instructions / 1000 (0: perf not available)
    # server_cpu split into user and system mode (cores), and the server's minor page faults
    # per request (/proc/PID/stat): where a server's system time per review comes from.
    server_user_cpu: float = 0.0
    server_system_cpu: float = 0.0
    server_minor_faults_per_request: float = 0.0
    # The server's system calls, bytes and context switches per request (proc.activity).
    server_activity_per_request: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, float | int]:
        return dict(self.__dict__)


def wrk_path() -> str | None:
    return shutil.which("wrk")


def write_templates(directory: Path, rows: list[tuple[str, str]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "mix.lua"
    script.write_text(LUA)
    bodies = directory / "bodies.tsv"
    with bodies.open("w") as out:
        for path, body in rows:
            if "\n" in body or "\t" in path:
                raise ValueError("templates are one line each")
            out.write(f"{path}\t{body}\n")
    return directory


def _ms(text: str) -> float:
    match = re.fullmatch(r"([0-9.]+)(us|ms|s)", text)
    if not match:
        raise ValueError(f"unexpected wrk latency {text!r}")
    value, unit = float(match.group(1)), match.group(2)
    return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value


def run_wrk(
    url: str,
    templates: Path,
    server_pid: int,
    *,
    seconds: float,
    connections: int,
    cpus: set[int] | None = None,
    warmup: float = 0.0,
) -> WrkResult:
    """One wrk run (one thread, `connections` keep-alive connections) and its CPU figures;
    `warmup` seconds of a run first, not measured (imports, caches, connections)."""
    if warmup:
        run_wrk(url, templates, server_pid, seconds=warmup, connections=connections, cpus=cpus)
    argv = ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--latency", "--timeout", "10s"]
    argv += ["-s", str(templates / "mix.lua"), url, "--", str(templates / "bodies.tsv"), "1"]
    argv.append(str(random.randrange(10**12)))
    if cpus:
        argv = taskset(cpus) + argv
    server_before = cpu_usage(server_pid)
    activity_before = activity(server_pid)
    # Instructions the server ran in user space (perf, from Debian's linux-perf, where the
    # machine exposes counters): repeatable where the wall-clock rate swings with the machine.
    counter = None
    perf_out = templates / "perf.csv"
    if shutil.which("perf"):
        perf = ["perf", "stat", "-x,", "-e", "instructions:u", "-o", str(perf_out)]
        counter = subprocess.Popen(
            [*perf, "-p", str(server_pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    began = time.monotonic()
    process = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    out = process.stdout.read().decode()
    err = process.stderr.read().decode()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - began
    server = cpu_usage(server_pid) - server_before
    activity_after = activity(server_pid)
    server_cpu = (server.user + server.system) / wall
    instructions = 0
    if counter is not None:
        counter.send_signal(signal.SIGINT)
        counter.wait(timeout=30)
        found = re.search(r"^(\d+),[^,]*,instructions", perf_out.read_text(), re.M)
        instructions = int(found.group(1)) if found else 0
    if process.returncode != 0:
        raise RuntimeError(f"wrk failed ({process.returncode}): {err or out}")
    total = re.search(r"(\d+) requests in ([0-9.]+)(ms|s|m)", out)
    rate = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    p50 = re.search(r"\s50%\s+(\S+)", out)
    p99 = re.search(r"\s99%\s+(\S+)", out)
    if not (total and rate and p50 and p99):
        raise RuntimeError(f"cannot read wrk's output:\n{out}")
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return WrkResult(
        rps=float(rate.group(1)),
        requests=int(total.group(1)),
        seconds=seconds,
        p50_ms=_ms(p50.group(1)),
        p99_ms=_ms(p99.group(1)),
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        socket_errors=sum(int(g) for g in errors.groups()) if errors else 0,
        wrk_cpu=round((usage.ru_utime + usage.ru_stime) / wall, 3),
        server_cpu=round(server_cpu, 3),
        kinstructions_per_review=round(instructions / int(total.group(1)) / 1000),
        server_user_cpu=round(server.user / wall, 3),
        server_system_cpu=round(server.system / wall, 3),
        server_minor_faults_per_request=round(server.minor_faults / int(total.group(1)), 2),
        server_activity_per_request={
            key: round((activity_after[key] - activity_before.get(key, 0)) / int(total.group(1)), 2)
            for key in activity_after
        },
    )
