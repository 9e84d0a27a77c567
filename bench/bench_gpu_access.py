"""Benchmark of GPU access control (SPEC §12): what the evaluation of one pod costs with
`gpuAccess` off, warn and enforce, for the pods its chart entry sends.

Under `enforce` with void injection, the chart's gpu-access entry sends every pod that requests
no GPU: each then costs one /mutate and one /validate review. This measures the evaluation part
of such a review (the server's fixed cost per review is bench_server.py's), and what the rules
add to a GPU pod's review in every mode.

Run: .venv/bin/python bench/bench_gpu_access.py [--rounds N] [--inner N]
Not a test: prints µs per evaluation (median of rounds, all variants interleaved in the same
rounds) and each mode's ratio to `off` measured in the same rounds.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import cli  # noqa: E402
from bench.harness.core import WebhookConfig, evaluate, load_config  # noqa: E402
from bench.harness.report import Column, Table  # noqa: E402
from bench.harness.timing import interleaved, paired_ratio  # noqa: E402
from webhook.sources.files import load_policy_dir  # noqa: E402

CUDA_IMAGE = "nvidia/cuda:12.4.1-runtime-ubuntu22.04"


def _pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml", "labels": {"app": "p"}},
        "spec": {"containers": list(containers), **spec},
    }


def _container(image: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": "app",
        "image": image,
        "command": ["python", "serve.py"],
        "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "PORT", "value": "8080"}],
        "resources": {"limits": {"cpu": "2", "memory": "4Gi"}},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        **extra,
    }


OBJECTS: dict[str, dict[str, Any]] = {
    # Sent to the gpu-access entry only under enforce with void injection.
    "CPU pod, plain image": _pod(
        _container("python:3.12-slim"), volumes=[{"name": "data", "emptyDir": {}}]
    ),
    "CPU pod, CUDA image": _pod(_container(CUDA_IMAGE), volumes=[{"name": "data", "emptyDir": {}}]),
    # Sent in every mode but off: a bypass in the spec.
    "CPU pod, NVIDIA_VISIBLE_DEVICES": _pod(
        _container(
            "python:3.12-slim",
            env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
        ),
        volumes=[{"name": "data", "emptyDir": {}}],
    ),
    # Sent by the pods entry whatever the mode: what the rules add to a GPU pod.
    "GPU pod": _pod(
        {
            **_container(CUDA_IMAGE),
            "resources": {"limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}},
        },
        volumes=[{"name": "data", "emptyDir": {}}],
    ),
}
MODES = ("off", "warn", "enforce")
TABLE = Table(
    Column("object", 34, align="<"),
    *(Column(f"{mode} µs", 11, ".1f") for mode in MODES),
    Column("warn/off", 8, ".2f", before="  "),
    Column("enf/off", 7, ".2f"),
)


def main() -> int:
    parser = cli.parser(__doc__)
    cli.add_rounds(parser, rounds=20, inner=500)
    args = parser.parse_args()
    policies = load_policy_dir(ROOT / "configmaps")
    configs: dict[str, WebhookConfig] = {
        mode: load_config({"gpuAccess": {"mode": mode}}) for mode in MODES
    }
    variants = {
        (name, mode): (lambda obj=obj, config=config: evaluate(obj, policies, config))
        for name, obj in OBJECTS.items()
        for mode, config in configs.items()
    }
    # Each variant warmed just before each of its samples (the caches of the one before).
    samples = interleaved(variants, args.rounds, args.inner, rewarm=True)
    print(TABLE.header())
    for name in OBJECTS:
        medians = [statistics.median(samples[(name, mode)]) for mode in MODES]
        off = samples[(name, "off")]
        ratios = [paired_ratio(samples[(name, mode)], off) for mode in ("warn", "enforce")]
        print(TABLE.row(name, *medians, *ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
