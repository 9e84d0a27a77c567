"""The Python load generator (`python -m bench.harness client`, in its own process) and its
driver: closed loop (`--concurrency` in flight) or open loop (`--rate`)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import ssl
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import REPO
from bench.harness.objects import server_templates, workload_mix
from bench.harness.servers import CHILD, env
from bench.harness.timing import nearest_rank


async def _load(args: argparse.Namespace) -> dict[str, Any]:
    import aiohttp

    templates = server_templates(args.mix) if args.mix != "fixed" else None
    mix = workload_mix() if templates is None else [(e, b.encode()) for e, b in templates]
    context = ssl.create_default_context(cafile=args.ca)
    connector = aiohttp.TCPConnector(limit=args.concurrency, ssl=context, keepalive_timeout=60)
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    errors = 0
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(index: int, scheduled: float | None) -> None:
            nonlocal errors
            endpoint, body = mix[index % len(mix)]
            if templates is not None:
                # As wrk's Lua script (load/wrk.py): a new uid, object or name per request.
                body = (
                    body.replace(b"@UID@", f"00000000-0000-4000-8000-{index:012x}".encode())
                    .replace(b"@SEQ@", str(index).encode())
                    .replace(b"@NAME@", f"{index:05d}"[-5:].encode())
                    .replace(b"@PODUID@", f"00000000-1111-4000-8000-{index:012x}".encode())
                    .replace(b"@TIME@", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()).encode())
                )
            start = time.perf_counter() if scheduled is None else scheduled
            try:
                async with session.post(args.url + endpoint, data=body, headers=headers) as resp:
                    await resp.read()
                    statuses[resp.status] = statuses.get(resp.status, 0) + 1
            except (aiohttp.ClientError, OSError):
                errors += 1
                return
            latencies.append(time.perf_counter() - start)

        # Warm-up: open the keep-alive connections and let the server's caches settle.
        await asyncio.gather(*(one(args.requests + i, None) for i in range(args.concurrency * 4)))
        latencies.clear()
        statuses.clear()
        # The load generator's own cyclic GC paused it for up to ~20 ms, and in the open loop
        # every request due during such a pause was charged to the server as latency (p99
        # 14-20 ms instead of 2-4 ms at the same rate). No collection runs while measuring.
        gc.collect()
        gc.freeze()
        gc.disable()
        began = time.perf_counter()
        if args.rate:
            # Open loop: request i is due at began + i/rate whether or not earlier ones finished.
            # Only the requests in flight are kept: gathering all of them at the end blocked the
            # loop for ~10 ms while the last ones were answered, and that counted as latency.
            pending: set[asyncio.Task[None]] = set()
            for i in range(args.requests):
                due = began + i / args.rate
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                task = asyncio.create_task(one(i, due))
                pending.add(task)
                task.add_done_callback(pending.discard)
            await asyncio.gather(*pending)
        else:
            counter = iter(range(args.requests))

            async def worker() -> None:
                for i in counter:
                    await one(i, None)

            await asyncio.gather(*(worker() for _ in range(args.concurrency)))
        elapsed = time.perf_counter() - began
        gc.enable()
        gc.unfreeze()
    return {
        "requests": len(latencies),
        "errors": errors,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "seconds": round(elapsed, 3),
        "rps": round(len(latencies) / elapsed, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 3) if latencies else None,
        "p99_ms": round(nearest_rank(latencies, 99) * 1000, 3),
        "max_ms": round(max(latencies) * 1000, 3) if latencies else None,
    }


def client_main(args: argparse.Namespace) -> int:
    loop_factory = None
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:
        pass
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        result = runner.run(_load(args))
    print(json.dumps(result))
    return 0


@dataclass
class Measurement:
    name: str
    rps: float
    p50_ms: float | None
    p99_ms: float
    requests: int
    errors: int
    statuses: dict[str, int]


def drive(
    port: int,
    ca: Path,
    requests: int,
    concurrency: int,
    rate: float | None = None,
    mix: str = "fixed",
) -> dict[str, Any]:
    argv = [*CHILD, "client", "--url", f"https://localhost:{port}"]
    argv += ["--ca", str(ca), "--requests", str(requests), "--concurrency", str(concurrency)]
    argv += ["--mix", mix]
    if rate:
        argv += ["--rate", str(rate)]
    done = subprocess.run(
        argv, cwd=REPO, env=env(), capture_output=True, text=True, check=True, timeout=900
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def measure(name: str, result: dict[str, Any]) -> Measurement:
    return Measurement(
        name,
        result["rps"],
        result["p50_ms"],
        result["p99_ms"],
        result["requests"],
        result["errors"],
        result["statuses"],
    )
