"""Benchmark of registry lookups (SPEC §4 step 6): cold and cached lookup latency against a
registry on loopback, and how long admission takes when the image's CUDA comes from the
registry, from the cache, from the reference, or when the registry hangs.

Run: .venv/bin/python bench/bench_registry.py [--runs N] [--budget S] [--json]
The registry is the CNCF distribution binary (../shared/tools/registry/build.sh; or set
GPU_WEBHOOK_REGISTRY_BIN) with Bearer-token auth and the test token server; without the binary
the in-process fake registry of the tests is used instead, and the output says so.
Not a test: figures (median/p90 ms) to compare runs on the same machine.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import cli  # noqa: E402
from bench.harness.core import ImageQuery  # noqa: E402
from bench.harness.servers import admission_app, certificates, workdir  # noqa: E402
from bench.harness.timing import figures_ms as figures  # noqa: E402
from bench.harness.timing import timed  # noqa: E402
from tests.fakeregistry import FakeRegistry, HangingServer  # noqa: E402
from tests.helpers import GPU, container, pod  # noqa: E402
from tests.ociimages import image  # noqa: E402
from tests.realregistry import LoopThread, Registry, TokenServer, push, registry_binary  # noqa: E402
from tests.registryhelpers import client  # noqa: E402
from webhook.registry.resolver import ImageResolver  # noqa: E402
from webhook.tls.certs import CertPaths  # noqa: E402

IMAGE = image({"arm64": ["CUDA_VERSION=12.6.0"], "amd64": ["CUDA_VERSION=12.4.1"]})


async def measure(
    host: str, tls: CertPaths, runs: int, budget: float, extra: tuple[str, ...]
) -> dict[str, Any]:
    """`extra`: more hosts to list (the token server, another loopback host)."""
    ref = f"{host}/public/trainer:v3"
    out: dict[str, Any] = {}

    # Cold: a new client per lookup (TLS handshake, 401, token, index, manifest, config).
    cold = []
    for _ in range(runs):
        c = client(tls.ca_cert, host, *extra)
        cold.append(await timed(lambda c=c: c.lookup(ref, "amd64")))  # type: ignore[misc]
        await c.close()
    out["cold_lookup"] = figures(cold)

    # Warm connection and token, no cache: the same client, lookup after lookup.
    c = client(tls.ca_cert, host, *extra)
    await c.lookup(ref, "amd64")
    out["lookup_reused_connection"] = figures(
        [await timed(lambda: c.lookup(ref, "amd64")) for _ in range(runs)]
    )
    await c.close()

    # Cached: the resolver answers from its cache.
    c = client(tls.ca_cert, host, *extra)
    resolver = ImageResolver(c, c.config.registry_lookups)
    query = [ImageQuery(ref)]
    await resolver.resolve(query)
    cached = [await timed(lambda: resolver.resolve(query)) for _ in range(runs * 50)]
    out["cached_resolve"] = figures(cached)
    await resolver.close()

    # Admission over HTTP (aiohttp test server on loopback).
    hang = HangingServer()
    await hang.start()
    c = client(tls.ca_cert, host, hang.host, *extra, budget_seconds=budget, timeout_seconds=30)
    resolver = ImageResolver(c, c.config.registry_lookups)
    async with admission_app(c.config, resolver) as send:

        async def mutate(image_ref: str) -> None:
            await send(pod(container("main", image_ref, limits={GPU: "1"})))

        known = "nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04"
        await mutate(known)
        out["admission_known_from_reference"] = figures(
            [await timed(lambda: mutate(known)) for _ in range(runs * 5)]
        )
        out["admission_first_pod_registry_lookup"] = figures([await timed(lambda: mutate(ref))])
        out["admission_cached_image"] = figures(
            [await timed(lambda: mutate(ref)) for _ in range(runs * 5)]
        )
        hung = f"{hang.host}/team/trainer:1"
        out["admission_registry_hangs_first_pod"] = figures([await timed(lambda: mutate(hung))])
        out["admission_registry_hangs_next_pods"] = figures(
            [await timed(lambda: mutate(hung)) for _ in range(runs)]
        )
    await hang.close()
    return out


def main() -> int:
    parser = cli.parser(__doc__)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--budget", type=float, default=2.0)
    cli.add_json(parser)
    args = parser.parse_args()
    binary = registry_binary()
    with workdir("gpu-webhook-registry-") as work:
        tls = certificates(work)
        thread = LoopThread()
        registries: list[Registry] = []
        try:
            if binary is not None:
                tokens = TokenServer(tls, {"alice": "s3cret"})
                thread.run(tokens.start())
                storage = work / "storage"
                opened = Registry(binary, tls, storage)
                bundle = tokens.bundle(work / "bundle.pem")
                secured = Registry(binary, tls, storage, tokens.auth_options(bundle))
                registries += [opened, secured]
                opened.start(work)
                secured.start(work)
                asyncio.run(push(opened.host, tls.ca_cert, "public/trainer", "v3", IMAGE))
                host, what = secured.host, f"distribution registry {binary} with token auth"
                extra: tuple[str, ...] = (tokens.host,)
            else:
                fake = FakeRegistry(tls, auth="bearer")
                fake.push("public/trainer", "v3", IMAGE)
                host = thread.run(fake.start())
                what = "in-process fake registry (no registry binary found)"
                extra = ()
            result = {
                "registry": what,
                **asyncio.run(measure(host, tls, args.runs, args.budget, extra)),
            }
        finally:
            for registry in registries:
                registry.stop()
            thread.stop()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"registry: {result.pop('registry')}")
        for name, fig in result.items():
            print(
                f"{name:40} median {fig['median_ms']:>9.3f} ms  p90 {fig['p90_ms']:>9.3f} ms  "
                f"max {fig['max_ms']:>9.3f} ms  (n={fig['n']})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
