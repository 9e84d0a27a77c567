"""How many GPU containers of the real-manifest corpus get a CUDA version (SPEC §4), and from
where: the measure of issue 17 ("placement decided for 11 of 78 documents").

Run: .venv/bin/python bench/corpus_cuda.py [--corpus DIR] [--tree DIR] [--list] [--json]
  --tree DIR   import the webhook from another checkout (a previous release) to measure "before"
  --list       one line per GPU container: file, container, image, version, where it came from

Counts every container of every pod spec the webhook finds (built-in and operator kinds),
that requests a GPU-like extended resource with a value other than zero (NVIDIA GPUs, MIG,
time-slicing, HAMi and GPU-Manager vGPU, Volcano vGPU, gpushare; placeholders such as
$GPU_PER_NODE count, AMD does not), or a DRA claim when its file has a ResourceClaim(Template)
on an NVIDIA GPU device class. The answer is the webhook's own: the pod (template) annotation,
then `detect` with the default config; no registry lookup. Skips cleanly (exit 0) when the
corpus is absent.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import cli, tree  # noqa: E402

DEFAULT_CORPUS = ROOT.parent / "shared" / "corpus" / "manifests"
_DRA_CLASSES = frozenset({"gpu.nvidia.com", "mig.nvidia.com"})


@dataclass(frozen=True)
class Row:
    file: str
    document: int
    where: str  # kind, role and container
    image: str
    version: str | None
    source: str  # "annotation", "env", "table", "reference", "shipped", "" (unknown)


def _gpu_key(key: str) -> bool:
    if key.startswith("amd.com/"):
        return False
    return (
        (key.startswith("nvidia.com/") and ("gpu" in key or key.startswith("nvidia.com/mig-")))
        or key.startswith(("tencent.com/vcuda", "volcano.sh/vgpu", "aliyun.com/gpu"))
        or "gpu" in key.rsplit("/", 1)[-1]
    )


def _nonzero(value: Any) -> bool:
    return str(value).strip() not in ("0", "0.0")


def _gpu_container(container: Mapping[str, Any], dra: bool) -> bool:
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return False
    for field in ("limits", "requests"):
        values = resources.get(field)
        if isinstance(values, Mapping) and any(
            isinstance(k, str) and _gpu_key(k) and _nonzero(v) for k, v in values.items()
        ):
            return True
    return dra and bool(resources.get("claims"))


def _dra_gpu(documents: list[Any]) -> bool:
    text = json.dumps(documents, default=str)
    return any(f'"deviceClassName": "{c}"' in text for c in _DRA_CLASSES)


def _kind(source: str) -> str:
    if source.startswith("annotation"):
        return "annotation"
    if source.startswith("env"):
        return "env"
    if source.startswith("image table"):
        return "table"
    if source.startswith("shipped knowledge"):
        return "shipped"
    return "reference" if source.startswith("image ") else "other"


def measure(corpus: Path, checkout: Path = ROOT) -> list[Row]:
    core = tree.load(checkout, "config", "cuda", "workloads", "manifests")
    config = core["config"].WebhookConfig()
    cuda, workloads = core["cuda"], core["workloads"]
    rows: list[Row] = []
    for path in sorted(corpus.iterdir()):
        if path.suffix not in (".yaml", ".yml", ".json"):
            continue
        try:
            documents = core["manifests"].load_yaml_documents(path.read_text("utf-8"), path.name)
        except Exception:  # a broken file is not ours to count
            continue
        dra = _dra_gpu(documents)
        for index, obj in enumerate(documents):
            if not isinstance(obj, Mapping) or not isinstance(obj.get("kind"), str):
                continue
            entry = workloads.lookup(obj["kind"], obj, None, config)
            if entry is None:
                continue
            try:
                specs = workloads.find_pod_specs(entry, obj)
            except Exception:  # an object of the wrong shape: the webhook denies it
                continue
            for spec in specs:
                pod_req, _ = cuda.annotation_requirement(spec.annotations)
                for c in spec.containers:
                    if not _gpu_container(c.container, dra):
                        continue
                    req = pod_req or cuda.detect(c.container, config).requirement
                    image = c.container.get("image")
                    role = f" {spec.role}" if spec.role else ""
                    rows.append(
                        Row(
                            path.name,
                            index,
                            f"{obj['kind']}{role} {c.name}",
                            image if isinstance(image, str) else "",
                            str(req.version) if req else None,
                            _kind(req.source) if req else "",
                        )
                    )
    return rows


def summary(rows: list[Row]) -> dict[str, Any]:
    """Shares are of the containers with an image: one without (a KServe predictor takes its
    image from its ServingRuntime) is checked when its pods are created, not here."""
    with_image = [r for r in rows if r.image]
    decided = [r for r in with_image if r.version]
    return {
        "gpuContainers": len(rows),
        "withoutImage": len(rows) - len(with_image),
        "decided": len(decided),
        "share": round(len(decided) / len(with_image), 3) if with_image else None,
        "bySource": dict(Counter(r.source for r in decided).most_common()),
        "files": len({r.file for r in rows}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser(__doc__)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    cli.add_tree(parser)
    parser.add_argument("--list", action="store_true")
    cli.add_json(parser)
    args = parser.parse_args(argv)
    if not args.corpus.is_dir():
        print(f"corpus not found at {args.corpus}: skipped")
        return 0
    rows = measure(args.corpus, args.tree)
    result = summary(rows)
    if args.json:
        print(json.dumps({**result, "rows": [asdict(r) for r in rows] if args.list else None}))
        return 0
    if args.list:
        for r in rows:
            print(f"{r.file}#{r.document}\t{r.where}\t{r.image}\t{r.version or '-'}\t{r.source}")
    with_image = result["gpuContainers"] - result["withoutImage"]
    share = f"{result['share']:.0%}" if result["share"] is not None else "-"
    print(
        f"{result['decided']} of {with_image} GPU containers with an image decided ({share}); "
        f"{result['withoutImage']} more have no image; {result['files']} files; "
        f"by source: {result['bySource']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
