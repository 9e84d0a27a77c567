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

import argparse
import importlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

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


def run(tree: Path, rounds: int, inner: int) -> dict[str, dict[str, Any]]:
    if str(tree) not in sys.path:
        sys.path.insert(0, str(tree))
    config_mod = importlib.import_module("webhook.core.config.model")
    cuda = importlib.import_module("webhook.core.placement.cuda")
    images = importlib.import_module("webhook.core.images.references")
    config = config_mod.WebhookConfig()
    env: dict[str, str | None] = {}
    results: dict[str, dict[str, Any]] = {}
    for label, image in IMAGES.items():
        container = {"name": "c", "image": image}
        cuda.detect(container, config, env)  # warm: compiled patterns, knowledge loaded
        cached: list[float] = []
        first: list[float] = []
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(inner):
                cuda.detect(container, config, env)
            cached.append((time.perf_counter() - start) / inner * 1e6)
            total = 0.0
            for _ in range(inner):
                cuda._image_detection.cache_clear()
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tree", type=Path, default=ROOT)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--inner", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results: dict[str, Any] = run(args.tree, args.rounds, args.inner)
    if args.json:
        print(json.dumps({"tree": str(args.tree), "results": results}))
        return 0
    print(f"tree {args.tree}")
    print(f"{'image':22} {'cached µs':>10} {'first µs':>10}  version")
    for label, r in results.items():
        print(f"{label:22} {r['cached_us']:10.2f} {r['first_us']:10.2f}  {r['version']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
