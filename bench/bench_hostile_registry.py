"""A hostile registry against the webhook (issue 29 part 2, SPEC §12 "Registry lookups under
attack"): peak RSS and the longest event-loop block of the webhook process while its lookups
read the worst documents under the caps, and the latency of unrelated pods admitted meanwhile.

The registry (tests/fakeregistry.py, TLS on 127.0.0.1) runs in a child process, so the figures
are the webhook's alone. It serves, under `--repos` repository names each (every name is a
lookup of its own), the documents that cost the most while still inside the caps of
webhook/registry/documents.py:
- values:  an 8 MiB config with nearly MAX_JSON_VALUES tiny values (parsed; CUDA 12.4 read)
- env:     an 8 MiB config of MAX_ENV_ENTRIES - 2 Env entries of 1.5 KiB, and a CUDA_VERSION
           padded with 1 MiB of spaces (read: CUDA 12.4)
- index:   a 4 MiB index of MAX_INDEX_MANIFESTS entries with long annotations and ~60,000
           values (parsed, its amd64 entry then read)
- bloat:   the issue's 8 MiB config of 1.7 million entries and 4 MiB index of empty objects
           (refused before any parse)
- deep:    2 MiB of nesting (refused before any parse)
Each hostile pod names 16 images on 4 architectures (what one review may start); the webhook
runs with the chart's defaults (maxConcurrent 8, budget 2 s). Meanwhile a pod whose CUDA the
reference tells is admitted every 20 ms.

Measured in the webhook process: VmRSS sampled every 10 ms (and VmHWM), the event-loop lag (a
task that sleeps 1 ms and notes how late it wakes), and each unrelated review's latency.

    .venv/bin/python bench/bench_hostile_registry.py  # figures: docs/concepts/images.md
    .venv/bin/python bench/bench_hostile_registry.py --repos 4     # smoke run
Loopback only. Not a test: figures to compare on one machine.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import cli  # noqa: E402
from bench.harness.proc import status_kib  # noqa: E402
from bench.harness.servers import admission_app, certificates, workdir  # noqa: E402
from bench.harness.timing import lower_quantile  # noqa: E402
from tests.fakeregistry import FakeRegistry  # noqa: E402
from tests.helpers import GPU, container, pod  # noqa: E402
from tests.ociimages import OCI_INDEX, OCI_MANIFEST, config_image, digest, dumps, image, raw_top  # noqa: E402
from tests.registryhelpers import client  # noqa: E402
from webhook.registry import documents  # noqa: E402
from webhook.registry.resolver import ImageResolver  # noqa: E402
from webhook.tls.certs import CertPaths  # noqa: E402

MIB = 1024 * 1024
ARCHS = ("amd64", "arm64", "ppc64le", "s390x")


def _pad(document: dict[str, Any], size: int) -> bytes:
    """`document` with a string field that brings it to `size` bytes."""
    base = len(dumps({**document, "padding": ""}))
    return dumps({**document, "padding": "p" * max(size - base - 16, 0)})


def hostile_documents() -> dict[str, Any]:
    """name -> Built (tests.ociimages), each at the worst point under the caps."""
    out: dict[str, Any] = {}
    many = ["" for _ in range(documents.MAX_JSON_VALUES - 64)]
    out["values"] = config_image(
        _pad({"config": {"Env": ["CUDA_VERSION=12.4"]}, "x": many}, 8 * MIB - 1024)
    )
    env = [f"V{i}=" + "v" * 1500 for i in range(documents.MAX_ENV_ENTRIES - 2)]
    env.append("CUDA_VERSION=12.4" + " " * MIB)
    out["env"] = config_image(_pad({"config": {"Env": env}}, 8 * MIB - 1024))
    # An index: its amd64 entry is a real small image; the rest long, value-heavy entries.
    small = image(["CUDA_VERSION=12.4.1"], index=False)
    media, body = small.top
    entries: list[dict[str, Any]] = [
        {"mediaType": media, "digest": digest(body), "size": len(body),
         "platform": {"os": "linux", "architecture": arch}}
        for arch in ARCHS
    ]  # fmt: skip
    filler = documents.MAX_INDEX_MANIFESTS - len(entries)
    per_entry = (documents.MAX_JSON_VALUES - 2000) // filler
    for i in range(filler):
        entries.append(
            {
                "digest": "sha256:" + "0" * 64,
                "platform": {"os": "linux", "architecture": f"x{i}"},
                "annotations": {f"a{j}": "" for j in range(per_entry - 6)},
            }
        )
    index = _pad({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}, 4 * MIB - 1024)
    built = raw_top(OCI_INDEX, index)
    built.blobs.update(small.blobs)
    built.manifests.append(small.top)
    out["index"] = built
    out["bloat-config"] = config_image(dumps({"config": {"Env": [""] * 1_700_000}}))
    out["bloat-index"] = raw_top(
        OCI_INDEX, b'{"manifests":[' + b",".join([b"{}"] * 1_300_000) + b"]}"
    )
    out["deep"] = raw_top(OCI_MANIFEST, b'{"x":' + b"[" * MIB + b"]" * MIB + b"}")
    return out


def _serve(tls: CertPaths, repos: int, pipe: Connection) -> None:
    """The child process: the fake registry with every document under `repos` names each."""

    async def run() -> None:
        fake = FakeRegistry(tls)
        for name, built in hostile_documents().items():
            for r in range(repos):
                fake.push(f"hostile/{name}-{r}", "1", built)
        await fake.start()
        pipe.send(fake.host)
        await asyncio.get_running_loop().run_in_executor(None, pipe.recv)  # until told to stop
        await fake.close()

    asyncio.run(run())


async def measure(
    host: str, tls: CertPaths, repos: int, interval: float, baseline: float
) -> dict[str, Any]:
    c = client(tls.ca_cert, host, timeout_seconds=30)
    resolver = ImageResolver(c, c.config.registry_lookups)
    async with admission_app(c.config, resolver) as mutate:
        return await _attack(mutate, resolver, host, repos, interval, baseline)


async def _attack(
    mutate: Callable[[Any], Awaitable[float]],
    resolver: ImageResolver,
    host: str,
    repos: int,
    interval: float,
    baseline: float,
) -> dict[str, Any]:
    known = pod(
        container("main", "nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04", limits={GPU: "1"})
    )
    for _ in range(20):
        await mutate(known)  # warm
    rss_before = status_kib("VmRSS")
    peak = [rss_before]
    lags: list[float] = []
    stop = asyncio.Event()

    async def monitor() -> None:
        while not stop.is_set():
            started = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - started - 0.001)
            if len(lags) % 10 == 0:
                peak[0] = max(peak[0], status_kib("VmRSS"))

    unrelated: list[float] = []

    async def steady() -> None:
        while not stop.is_set():
            unrelated.append(await mutate(known))
            await asyncio.sleep(interval)

    def hostile_pod(names: list[str]) -> dict[str, Any]:
        containers = [
            container(f"c{i}", f"{host}/hostile/{name}:1", limits={GPU: "1"})
            for i, name in enumerate(names)
        ]
        arch = {"key": "kubernetes.io/arch", "operator": "In", "values": list(ARCHS)}
        terms = {"nodeSelectorTerms": [{"matchExpressions": [arch]}]}
        affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}}
        return pod(*containers, affinity=affinity)

    names = [f"{kind}-{r}" for r in range(repos) for kind in hostile_documents_names()]
    tasks = [asyncio.create_task(monitor()), asyncio.create_task(steady())]
    # Baseline: the same monitor and unrelated pods, no lookup (what the machine's own load
    # and the reviews themselves cost the loop).
    await asyncio.sleep(baseline)
    base_lags, base_unrelated = list(lags), list(unrelated)
    lags.clear()
    unrelated.clear()
    started = time.perf_counter()
    hostile_latency: list[float] = []
    # Pods of 4 images x 4 architectures: 16 lookups, what one review may start.
    batches = [names[i : i + 4] for i in range(0, len(names), 4)]
    for batch in batches:
        hostile_latency.append(await mutate(hostile_pod(batch)))
    while resolver.in_flight:
        await asyncio.sleep(0.05)
    elapsed = time.perf_counter() - started
    await asyncio.sleep(0.2)
    stop.set()
    await asyncio.gather(*tasks)
    results: dict[str, int] = {}
    for row in resolver.entries():
        results[row["result"]] = results.get(row["result"], 0) + 1
    details = sorted({row["source"] for row in resolver.entries()})
    ordered = sorted(unrelated)
    return {
        "hostile_lookups": len(names) * len(ARCHS),
        "hostile_pods": len(batches),
        "seconds": round(elapsed, 2),
        "results": results,
        "details": details,
        "rss_before_mib": round(rss_before / 1024, 1),
        "rss_peak_mib": round(max(peak[0], status_kib("VmHWM")) / 1024, 1),
        "baseline_loop_block_max_ms": round(max(base_lags) * 1000, 1),
        "baseline_loop_block_p99_ms": round(lower_quantile(base_lags, 0.99) * 1000, 1),
        "baseline_unrelated_max_ms": round(max(base_unrelated) * 1000, 1),
        "loop_block_max_ms": round(max(lags) * 1000, 1),
        "loop_block_p99_ms": round(lower_quantile(lags, 0.99) * 1000, 1),
        "unrelated_reviews": len(ordered),
        "unrelated_median_ms": round(statistics.median(ordered) * 1000, 1),
        "unrelated_max_ms": round(ordered[-1] * 1000, 1),
        "hostile_review_max_ms": round(max(hostile_latency) * 1000, 1),
    }


def hostile_documents_names() -> list[str]:
    return ["values", "env", "index", "bloat-config", "bloat-index", "deep"]


def main() -> int:
    parser = cli.parser(__doc__)
    parser.add_argument("--repos", type=int, default=16, help="names per document (default 16)")
    parser.add_argument(
        "--interval", type=float, default=0.02, help="seconds between unrelated pods"
    )
    parser.add_argument(
        "--baseline", type=float, default=5.0, help="seconds measured before any lookup"
    )
    cli.add_json(parser)
    args = parser.parse_args()
    with workdir("gpu-webhook-hostile-") as work:
        tls = certificates(work)
        ours, theirs = multiprocessing.Pipe()
        child = multiprocessing.get_context("spawn").Process(
            target=_serve, args=(tls, args.repos, theirs)
        )
        child.start()
        try:
            host = ours.recv()
            out = asyncio.run(measure(host, tls, args.repos, args.interval, args.baseline))
        finally:
            ours.send("stop")
            child.join(30)
            if child.is_alive():
                child.kill()
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for key, value in out.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
