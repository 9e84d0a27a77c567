"""What the runtime fixes (SPEC §14) add to an evaluation, measured in one process: the typical
GPU pod and the multi-container pod of bench_eval.py, evaluated (plus the JSONPatch) with the
runtime fixes all off (what the webhook did before them), with the shipped defaults (/dev/shm,
RDMA and architecture on: the pod gets the volume), and with the shipped defaults but /dev/shm
off (the defaults before /dev/shm was switched on: nothing to do for these pods), interleaved
round by round; with a 10-node inventory whose nodes are amd64 and arm64.

Run: .venv/bin/python bench/bench_runtime_fixes.py [--rounds N] [--inner N] [--json]
Not a test: prints median µs per object and the paired ratios to the "off" variant.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
COMPILED = os.environ.get("GPU_WEBHOOK_COMPILED", "")
if COMPILED:
    sys.path.insert(0, str(Path(COMPILED).resolve()))

import argparse  # noqa: E402

from bench.bench_eval import multi_container_pod, typical_pod  # noqa: E402
from bench.harness.core import NodeInventory, PolicySet, WebhookConfig, evaluate  # noqa: E402
from bench.harness.timing import interleaved, paired_ratio  # noqa: E402
from webhook.core.config.model import load_config  # noqa: E402

OFF = load_config(
    {
        "runtimeFixes": {
            "shm": {"enabled": False},
            "rdma": {"enabled": False},
            "architecture": {"enabled": False},
        }
    }
)
DEFAULTS = WebhookConfig()
NO_SHM = load_config({"runtimeFixes": {"shm": {"enabled": False}}})


def _inventory(config: WebhookConfig) -> NodeInventory:
    labels = {"cuda-major-version": "12", "cuda-minor-version": "4"}
    return NodeInventory.build(
        {
            f"n{i}": {**labels, "kubernetes.io/arch": "arm64" if i % 2 else "amd64"}
            for i in range(10)
        },
        config=config,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--inner", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    policies = PolicySet.empty()
    objects = {"typical GPU pod": typical_pod(), "multi-container pod": multi_container_pod()}
    variants = {"off": OFF, "defaults": DEFAULTS, "defaults without shm": NO_SHM}
    fns = {}
    for name, obj in objects.items():
        for variant, config in variants.items():
            inventory = _inventory(config)

            def run(obj=obj, config=config, inventory=inventory) -> object:  # type: ignore[no-untyped-def]
                return evaluate(obj, policies, config, inventory=inventory).patch

            fns[(name, variant)] = run
    samples = interleaved(fns, args.rounds, args.inner)
    results: dict[str, dict[str, float]] = {}
    for name in objects:
        base = samples[(name, "off")]
        row: dict[str, float] = {}
        for variant in variants:
            own = samples[(name, variant)]
            row[f"median_us {variant}"] = round(sorted(own)[len(own) // 2], 2)
            if variant != "off":
                row[f"ratio {variant}/off"] = round(paired_ratio(own, base), 3)
        results[name] = row
    core = "compiled" if COMPILED else "source"
    if args.json:
        print(json.dumps({"core": core, "results": results}, indent=2))
    else:
        print(f"evaluation core: {core}")
        for name, row in results.items():
            print(f"{name}: " + ", ".join(f"{k} {v}" for k, v in row.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
