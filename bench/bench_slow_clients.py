"""Slow clients against the real webhook over TLS: does memory stay bounded and is it returned?

`--clients` connections (default 1,500, as in SPEC §7) each send the headers of a review with a
large declared body (`--declared`, default 7 MB) and then `--hold` bytes of it (default 60 KB),
then trickle one byte a second. The server must close each within its body deadline. Measured on
the server process (/proc/<pid>/status VmRSS, sampled every 0.1 s): RSS before, peak RSS while
the clients are connected, and RSS after they are gone; plus how long the server took to close
the slow connections and the latency of ordinary reviews sent during the attack.

Loopback only, bounded in count (--clients ≤ 5,000) and time (--max-seconds).

    python bench/bench_slow_clients.py                 # the full figure (1,500 clients)
    python bench/bench_slow_clients.py --clients 200   # smoke run
    python bench/bench_slow_clients.py --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import ssl
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# `python bench/bench_slow_clients.py` puts bench/ on sys.path, not the repository root.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.harness import cli  # noqa: E402
from bench.harness.proc import rss_kib  # noqa: E402
from bench.harness.servers import certificates, server, workdir  # noqa: E402

EXAMPLE = (REPO / "examples" / "admissionreview-pod.json").read_bytes()
MAX_CLIENTS = 5000


async def _slow_client(
    port: int,
    context: ssl.SSLContext,
    gate: asyncio.Semaphore,
    args: argparse.Namespace,
    deadline: float,
) -> dict[str, Any]:
    """One slow client; returns whether it connected and when/how the server ended it."""
    started = time.monotonic()
    try:
        # Connections are opened a batch at a time so the client's own handshakes do not time
        # out; once connected, every client holds its connection concurrently.
        async with gate:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    "127.0.0.1", port, ssl=context, server_hostname="localhost"
                ),
                timeout=30,
            )
    except (OSError, TimeoutError):
        return {"connected": False}
    declared, hold = args.declared, args.hold
    connected = time.monotonic()
    status = ""
    try:
        writer.write(
            b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % declared + b" " * hold
        )
        await writer.drain()
        while time.monotonic() < deadline:
            try:
                data = await asyncio.wait_for(reader.read(65536), timeout=1.0)
            except TimeoutError:
                writer.write(b" ")  # the trickle: one byte a second
                await writer.drain()
                continue
            if not data:
                break
            if not status:
                status = data.split(b"\r\n", 1)[0].decode(errors="replace")
    except OSError:
        pass
    closed = time.monotonic()
    writer.close()
    return {
        "connected": True,
        "closed_by_server": closed < deadline,
        "held_seconds": closed - connected,
        "connect_seconds": connected - started,
        "connected_at": connected,
        "closed_at": closed,
        "status": status,
    }


async def _review_latencies(
    port: int, context: ssl.SSLContext, until: asyncio.Event
) -> list[float]:
    """Ordinary reviews, one every 0.25 s, on fresh connections, while the attack lasts."""
    latencies: list[float] = []
    request = (
        b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(EXAMPLE) + EXAMPLE
    )
    while not until.is_set():
        began = time.monotonic()
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    "127.0.0.1", port, ssl=context, server_hostname="localhost"
                ),
                timeout=10,
            )
            writer.write(request)
            answer = await asyncio.wait_for(reader.read(), timeout=10)
            writer.close()
            if answer.startswith(b"HTTP/1.1 200"):
                latencies.append(time.monotonic() - began)
        except (OSError, TimeoutError):
            pass
        await asyncio.sleep(0.25)
    return latencies


async def _sample_rss(pid: int, until: asyncio.Event, samples: list[int]) -> None:
    while not until.is_set():
        samples.append(rss_kib(pid))
        await asyncio.sleep(0.1)


async def _attack(args: argparse.Namespace, port: int, pid: int, ca: Path) -> dict[str, Any]:
    context = ssl.create_default_context(cafile=str(ca))
    done = asyncio.Event()
    samples: list[int] = []
    sampler = asyncio.create_task(_sample_rss(pid, done, samples))
    reviews = asyncio.create_task(_review_latencies(port, context, done))
    deadline = time.monotonic() + args.max_seconds
    gate = asyncio.Semaphore(100)
    results = await asyncio.gather(
        *(_slow_client(port, context, gate, args, deadline) for _ in range(args.clients))
    )
    done.set()
    latencies = await reviews
    await sampler
    connected = [r for r in results if r["connected"]]
    # How many held their connection at the same time (the figure the RSS peak belongs to).
    events = sorted(
        [(r["connected_at"], 1) for r in connected] + [(r["closed_at"], -1) for r in connected]
    )
    concurrent = peak_concurrent = 0
    for _, step in events:
        concurrent += step
        peak_concurrent = max(peak_concurrent, concurrent)
    held = [r["held_seconds"] for r in connected]
    statuses: dict[str, int] = {}
    for r in connected:
        statuses[r["status"] or "(closed without answer)"] = (
            statuses.get(r["status"] or "(closed without answer)", 0) + 1
        )
    return {
        "samples": samples,
        "connected": len(connected),
        "peak_concurrent": peak_concurrent,
        "closed_by_server": sum(1 for r in connected if r["closed_by_server"]),
        "held_seconds_median": round(statistics.median(held), 2) if held else None,
        "held_seconds_max": round(max(held), 2) if held else None,
        "statuses": statuses,
        "reviews_during_attack": len(latencies),
        "review_ms_median": round(statistics.median(latencies) * 1000, 1) if latencies else None,
        "review_ms_max": round(max(latencies) * 1000, 1) if latencies else None,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    # Each client is one file descriptor here and one in the server (which inherits the limit).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, max(soft, args.clients * 2 + 256))
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    # The image's malloc settings (Dockerfile ENV), so the figure is the deployed server's; the
    # webhook process inherits this environment (bench.harness.servers.env).
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "32768")
    os.environ.setdefault("MALLOC_TRIM_THRESHOLD_", "131072")
    with workdir("gpu-webhook-slow-") as work:
        tls = certificates(work)
        with server("webhook", tls, REPO / "configmaps", log_level="warning") as (port, pid):
            before = rss_kib(pid)
            attack = asyncio.run(_attack(args, port, pid, tls.ca_cert))
            time.sleep(2)  # let the event loop finish closing what the clients left behind
            after = rss_kib(pid)
    samples = attack.pop("samples")
    peak = max([before, *samples])
    return {
        "command": cli.command(),
        "clients": args.clients,
        "declared_bytes": args.declared,
        "held_bytes": args.hold,
        "rss_before_mib": round(before / 1024, 1),
        "rss_peak_mib": round(peak / 1024, 1),
        "rss_after_mib": round(after / 1024, 1),
        "rss_peak_growth_mib": round((peak - before) / 1024, 1),
        "rss_retained_mib": round((after - before) / 1024, 1),
        **attack,
    }


def _print(report: dict[str, Any]) -> None:
    print(
        f"{report['clients']} slow clients, each {report['held_bytes']} bytes of a declared "
        f"{report['declared_bytes']}-byte body, then one byte a second"
    )
    print(
        f"connected {report['connected']} (at most {report['peak_concurrent']} at once), "
        f"closed by the server {report['closed_by_server']} "
        f"(held median {report['held_seconds_median']} s, max {report['held_seconds_max']} s)"
    )
    print(f"answers: {report['statuses']}")
    print(
        f"server RSS: before {report['rss_before_mib']} MiB, peak {report['rss_peak_mib']} MiB "
        f"(+{report['rss_peak_growth_mib']}), after {report['rss_after_mib']} MiB "
        f"(retained {report['rss_retained_mib']})"
    )
    print(
        f"ordinary reviews during the attack: {report['reviews_during_attack']}, "
        f"median {report['review_ms_median']} ms, max {report['review_ms_max']} ms"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = cli.parser(__doc__)
    parser.add_argument("--clients", type=int, default=1500)
    parser.add_argument("--declared", type=int, default=7_000_000, help="declared body bytes")
    parser.add_argument("--hold", type=int, default=60_000, help="body bytes actually sent")
    parser.add_argument("--max-seconds", type=float, default=60.0, help="bound on the run")
    cli.add_json_file(parser)
    args = parser.parse_args(argv)
    if not 1 <= args.clients <= MAX_CLIENTS:
        parser.error(f"--clients must be 1-{MAX_CLIENTS}")
    report = run(args)
    _print(report)
    if args.json:
        cli.write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
