"""Benchmark of GPU access control (SPEC §12): what the evaluation of one pod review costs under
`gpuAccess: warn` and `enforce` — a plain pod, a CUDA-image pod, a GPU pod, a 50-container pod,
and the Pod UPDATEs the access entry now receives — and, with `--baseline DIR`, the same against
another checkout (main) measured in the same sitting.

The chart's gpu-access entry has no matchConditions (a padded pod could push any condition past
the API server's CEL budget), so every pod CREATE and UPDATE outside the exempt namespaces costs
one /mutate and one /validate review. This measures the evaluation part of such a review (the
server's fixed cost per review is bench_server.py's).

Run: .venv/bin/python bench/bench_gpu_access.py [--rounds N] [--inner N]
     .venv/bin/python bench/bench_gpu_access.py --baseline ../wt/main [--pairs N]
Not a test: prints µs per evaluation (median of rounds, all variants interleaved in the same
rounds). With --baseline, child processes measure each checkout in turn (baseline, this tree,
baseline, ...: `--pairs` times); the ratio is this tree / baseline per pair, median over pairs.
"""

from __future__ import annotations

import copy
import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import cli  # noqa: E402
from bench.harness.report import Column, Table  # noqa: E402
from bench.harness.timing import interleaved  # noqa: E402

CUDA_IMAGE = "nvidia/cuda:12.4.1-runtime-ubuntu22.04"


def _pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml", "labels": {"app": "p"}},
        "spec": {"containers": list(containers), "volumes": [{"name": "data", "emptyDir": {}}]},
    }


def _container(image: str, name: str = "app", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "command": ["python", "serve.py"],
        "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "PORT", "value": "8080"}],
        "resources": {"limits": {"cpu": "2", "memory": "4Gi"}},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        **extra,
    }


PLAIN = _pod(_container("python:3.12-slim"))
CREATES: dict[str, dict[str, Any]] = {
    "plain pod": PLAIN,
    "CUDA-image pod, no GPU": _pod(_container(CUDA_IMAGE)),
    "GPU pod": _pod(
        {
            **_container(CUDA_IMAGE),
            "resources": {"limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}},
        }
    ),
    "50-container pod": _pod(*(_container("python:3.12-slim", f"c{i}") for i in range(50))),
}


def _relabelled(pod: dict[str, Any]) -> dict[str, Any]:
    new = copy.deepcopy(pod)
    new["metadata"]["labels"] = {"app": "p", "pod-template-hash": "abc"}
    return new


def _swapped(pod: dict[str, Any]) -> dict[str, Any]:
    new = copy.deepcopy(pod)
    new["spec"]["containers"][0]["image"] = CUDA_IMAGE
    return new


# (new object, oldObject): a controller's label, and an image swap.
UPDATES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "UPDATE, label only": (_relabelled(PLAIN), PLAIN),
    "UPDATE, image swapped": (_swapped(PLAIN), PLAIN),
}
MODES = ("warn", "enforce")
NAMES = (*CREATES, *UPDATES)


def measure(tree: Path, rounds: int, inner: int) -> dict[str, list[float]]:
    """µs per evaluation of every (object, mode) with the webhook of `tree`."""
    sys.path.insert(0, str(tree))  # before any import of the webhook: that tree's modules
    from webhook.core.config.model import load_config
    from webhook.core.evaluation.evaluate import evaluate
    from webhook.sources.files import load_policy_dir

    policies = load_policy_dir(ROOT / "configmaps")
    configs = {
        mode: load_config(
            {"gpuAccess": {"mode": mode}, "registryLookups": {"publicRegistries": False}}
        )
        for mode in MODES
    }

    def create(obj: dict[str, Any], config: Any) -> Callable[[], object]:
        return lambda: evaluate(obj, policies, config)

    def update(new: dict[str, Any], old: dict[str, Any], config: Any) -> Callable[[], object]:
        return lambda: evaluate(new, policies, config, operation="UPDATE", old_object=old)

    variants: dict[tuple[str, str], Callable[[], object]] = {}
    for mode, config in configs.items():
        for name, obj in CREATES.items():
            variants[(name, mode)] = create(obj, config)
        for name, (new, old) in UPDATES.items():
            variants[(name, mode)] = update(new, old, config)
    samples = interleaved(variants, rounds, inner, rewarm=True)
    return {f"{name}|{mode}": samples[(name, mode)] for name, mode in samples}


TABLE = Table(
    Column("object", 24, align="<"),
    *(Column(f"{mode} µs", 11, ".1f") for mode in MODES),
)
COMPARED = Table(
    Column("object", 24, align="<"),
    *(
        column
        for mode in MODES
        for column in (
            Column(f"{mode} base µs", 13, ".1f"),
            Column("now µs", 8, ".1f"),
            Column("now/base", 8, ".2f"),
        )
    ),
)


def _child(tree: Path, rounds: int, inner: int) -> dict[str, float]:
    """Median µs per variant, measured in a fresh process importing `tree`'s webhook."""
    command = [sys.executable, __file__, "--tree", str(tree), "--json"]
    result = subprocess.run(
        [*command, "--rounds", str(rounds), "--inner", str(inner)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    medians: dict[str, float] = json.loads(result.stdout)
    return medians


def compare(baseline: Path, pairs: int, rounds: int, inner: int) -> None:
    base_runs, now_runs = [], []
    for _ in range(pairs):
        base_runs.append(_child(baseline, rounds, inner))
        now_runs.append(_child(ROOT, rounds, inner))
    print(f"baseline {baseline} vs this tree {ROOT}: {pairs} pairs of processes")
    print(COMPARED.header())
    for name in NAMES:
        cells: list[float] = []
        for mode in MODES:
            key = f"{name}|{mode}"
            base = statistics.median(run[key] for run in base_runs)
            now = statistics.median(run[key] for run in now_runs)
            ratio = statistics.median(
                n[key] / b[key] for n, b in zip(now_runs, base_runs, strict=True)
            )
            cells += [base, now, ratio]
        print(COMPARED.row(name, *cells))


def main() -> int:
    parser = cli.parser(__doc__)
    cli.add_rounds(parser, rounds=20, inner=200)
    cli.add_tree(parser)
    cli.add_json(parser, help="print the medians as JSON (what --baseline's children do)")
    parser.add_argument("--baseline", type=Path, help="another checkout to compare with")
    parser.add_argument("--pairs", type=int, default=3, help="process pairs with --baseline")
    args = parser.parse_args()
    if args.baseline is not None:
        compare(args.baseline.resolve(), args.pairs, args.rounds, args.inner)
        return 0
    samples = measure(args.tree.resolve(), args.rounds, args.inner)
    medians = {key: statistics.median(values) for key, values in samples.items()}
    if args.json:
        print(json.dumps(medians))
        return 0
    print(TABLE.header())
    for name in NAMES:
        print(TABLE.row(name, *(medians[f"{name}|{mode}"] for mode in MODES)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
