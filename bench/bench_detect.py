"""Cost of knowing a container's CUDA version from its image (SPEC §4 steps 3-5), per call.

Run: .venv/bin/python bench/bench_detect.py [--tree DIR] [--rounds N] [--json]
  --tree DIR   import the webhook from another checkout (a previous release), to compare

Two paths: `cached` is what a review pays for an image already seen (replicas, resubmissions:
most reviews), `first` what it pays the first time (the per-image caches cleared before every
call). Images decided from the reference must not get slower than before shipped knowledge
existed: the table and the reference are read before it, and an image decided there never
reaches it. Not a test: prints medians (µs) to compare runs on the same machine.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import cli, tree  # noqa: E402
from bench.harness.report import Column, Table  # noqa: E402

IMAGES = {
    "tag (nvidia/cuda)": "nvidia/cuda:12.4.1-runtime-ubuntu22.04",
    "tag (pytorch cuda)": "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime",
    "tag (paddle)": "paddlepaddle/paddle:2.6.1-gpu-cuda12.0-cudnn8.9-trt8.6",
    "path (TGI DLC)": "us-docker.pkg.dev/deeplearning-platform-release/gcr.io/"
    "huggingface-text-generation-inference-cu124.2-3.ubuntu2204.py311",
    "shipped (Triton)": "nvcr.io/nvidia/tritonserver:24.05-py3",
    # a release whose CUDA differs by architecture (asked for linux/amd64, as a pod pinning none)
    "shipped per arch (vLLM)": "vllm/vllm-openai:v0.11.0",
    "unknown": "vllm/vllm-openai:latest",
}


TABLE = Table(
    Column("image", 22, align="<"),
    Column("cached µs", 10, ".2f"),
    Column("first µs", 10, ".2f"),
    Column("version", 1, align="<", before="  "),
)


def run(checkout: Path, rounds: int, inner: int) -> dict[str, dict[str, Any]]:
    modules = tree.load(checkout, "config", "cuda", "images")
    cuda, images = modules["cuda"], modules["images"]
    config = modules["config"].WebhookConfig()
    env: dict[str, str | None] = {}
    results: dict[str, dict[str, Any]] = {}
    for label, image in IMAGES.items():
        container = {"name": "c", "image": image}
        cuda.detect(container, config, env)  # warm: compiled patterns, knowledge loaded
        cached: list[float] = []
        first: list[float] = []
        for _ in range(rounds):
            # Inline, not through timing.per_call_us: a wrapper's call (~30 ns) would be 10 %
            # of the cached path.
            start = time.perf_counter()
            for _ in range(inner):
                cuda.detect(container, config, env)
            cached.append((time.perf_counter() - start) / inner * 1e6)
            total = 0.0
            for _ in range(inner):
                cuda._DETECTIONS.clear()
                images._image_version.cache_clear()
                start = time.perf_counter()
                cuda.detect(container, config, env)
                total += time.perf_counter() - start
            first.append(total / inner * 1e6)
        requirement = cuda.detect(container, config, env).requirement
        results[label] = {
            "cached_us": statistics.median(cached),
            "first_us": statistics.median(first),
            "version": str(requirement.version) if requirement else "-",
        }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser(__doc__)
    cli.add_tree(parser)
    cli.add_rounds(parser, rounds=15, inner=2000)
    cli.add_json(parser)
    args = parser.parse_args(argv)
    results: dict[str, Any] = run(args.tree, args.rounds, args.inner)
    if args.json:
        print(json.dumps({"tree": str(args.tree), "results": results}))
        return 0
    print(f"tree {args.tree}")
    print(TABLE.header())
    for label, r in results.items():
        print(TABLE.row(label, r["cached_us"], r["first_us"], r["version"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
