"""The cluster's cost of admitting GPU pods, measured where the API server measures it: calls per
pod, admission latency per pod and webhook CPU per 1,000 pods, from kube-apiserver's own
/metrics, with the chart's webhook configurations under gpuAccess `warn` and `enforce`.

Run: .venv/bin/python bench/bench_apiserver.py [--pods 100] [--modes warn,enforce] [--json FILE]

On the real control plane of scripts/e2e-kapi.sh (kube-apiserver, kube-scheduler and
kube-controller-manager from KAPI_TOOLS' start.sh --controllers, on KAPI_DIR/KAPI_PORT/
KAPI_ETCD_PORT/KAPI_SCHEDULER_PORT/KAPI_CM_PORT), with the shipped policies in kube-public and
one GPU Node (node.sh). For each mode: `gpu-webhook serve` on 127.0.0.1:WEBHOOK_PORT (public
registry lookups off), registered by URL with the chart's own rendered configurations
(scripts/register-webhook-url.py --config), then one Job of N pods each asking for a GPU, in a
fresh namespace. kube-apiserver's /metrics is read before and after:
`apiserver_admission_webhook_request_total` (calls, per webhook name, type and operation) and
`apiserver_admission_webhook_admission_duration_seconds` (the histogram of each call's latency
as the API server sees it, TLS and network included). The webhook's CPU time is its process's
utime+stime from /proc over the same window.

Figures: calls per pod (the pod entries `pods.*` and `gpu-access.*`; the Job's own review, by
`workloads.*`, is shown per Job), each entry's p50/p99 per call (interpolated within the API
server's buckets, 5 ms, 25 ms, 100 ms, ...: coarse below 25 ms), the latency the webhook adds
per pod (mean: the histograms' sum over N; p50/p99: the sum of the entries' quantiles, an upper
estimate since the calls of one pod are not all slow together), and CPU seconds per 1,000 pods.
Not a test: figures to compare runs on the same machine.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import cli  # noqa: E402
from bench.harness.proc import cpu_seconds  # noqa: E402
from bench.harness.report import Column, Table  # noqa: E402

CALLS = "apiserver_admission_webhook_request_total"
DURATION = "apiserver_admission_webhook_admission_duration_seconds"
# The entries that review the pods themselves (webhooks.yaml): the rest review the Job.
POD_ENTRIES = ("pods.", "gpu-access.")
GPU_IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"

# One sample line of the Prometheus text format (exposition_formats.md): name, optional
# {labels}, value; a timestamp may follow. Label values are quoted, with \\, \" and \n escapes.
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?\s*')

Labels = tuple[tuple[str, str], ...]


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def parse_metrics(text: str) -> dict[str, dict[Labels, float]]:
    """The samples of a /metrics text by metric name, each by its sorted labels."""
    out: dict[str, dict[Labels, float]] = {}
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise ValueError(f"not a Prometheus sample line: {line!r}")
        name, raw, value = match.groups()
        labels: list[tuple[str, str]] = []
        if raw:
            pos = 0
            while pos < len(raw):
                label = _LABEL.match(raw, pos)
                if label is None:
                    raise ValueError(f"bad labels in: {line!r}")
                labels.append((label.group(1), _unescape(label.group(2))))
                pos = label.end()
        out.setdefault(name, {})[tuple(sorted(labels))] = float(value)
    return out


def delta(
    after: Mapping[str, Mapping[Labels, float]], before: Mapping[str, Mapping[Labels, float]]
) -> dict[str, dict[Labels, float]]:
    """after - before, sample by sample (a sample absent before counts from 0)."""
    return {
        name: {k: v - before.get(name, {}).get(k, 0.0) for k, v in samples.items()}
        for name, samples in after.items()
    }


def _get(labels: Labels, key: str) -> str:
    return dict(labels).get(key, "")


@dataclass
class Entry:
    """One webhook entry's calls and latency histogram (type: admit|validating)."""

    name: str
    type: str
    operation: str
    calls: float = 0.0
    seconds: float = 0.0
    count: float = 0.0
    buckets: dict[float, float] = field(default_factory=dict)  # le -> cumulative count

    def quantile(self, q: float) -> float:
        """The q-quantile of the histogram, linearly interpolated within its bucket (as
        PromQL's histogram_quantile does); NaN without observations."""
        return histogram_quantile(q, self.buckets)


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float:
    """PromQL's histogram_quantile on cumulative `buckets` (le -> count, +Inf included): the
    lower bound of the first bucket is 0; a quantile in the +Inf bucket is the highest finite
    bound."""
    ordered = sorted(buckets.items())
    if not ordered or ordered[-1][1] <= 0:
        return math.nan
    total = ordered[-1][1]
    rank = q * total
    lower, below = 0.0, 0.0
    for le, cumulative in ordered:
        if cumulative >= rank:
            if math.isinf(le):
                return lower
            inside = cumulative - below
            return lower + (le - lower) * ((rank - below) / inside if inside else 0.0)
        lower, below = le, cumulative
    return lower


def entries(diff: Mapping[str, Mapping[Labels, float]]) -> list[Entry]:
    """The webhook entries called in `diff`, by (name, type, operation), rejected or not."""
    found: dict[tuple[str, str, str], Entry] = {}

    def entry(labels: Labels) -> Entry:
        key = (_get(labels, "name"), _get(labels, "type"), _get(labels, "operation"))
        return found.setdefault(key, Entry(*key))

    for labels, value in diff.get(CALLS, {}).items():
        if value:
            entry(labels).calls += value
    for labels, value in diff.get(DURATION + "_sum", {}).items():
        if value:
            entry(labels).seconds += value
    for labels, value in diff.get(DURATION + "_count", {}).items():
        if value:
            entry(labels).count += value
    for labels, value in diff.get(DURATION + "_bucket", {}).items():
        if not value:
            continue
        le = float(_get(labels, "le"))
        kept = tuple(kv for kv in labels if kv[0] != "le")
        target = entry(kept)
        target.buckets[le] = target.buckets.get(le, 0.0) + value
    return sorted(found.values(), key=lambda e: (e.type, e.name, e.operation))


@dataclass(frozen=True)
class Figures:
    """What one mode's run cost: pods admitted, calls per pod, latency added per pod (s)."""

    pods: int
    calls_per_pod: float
    mutating_per_pod: float
    validating_per_pod: float
    mean_seconds: float
    p50_seconds: float
    p99_seconds: float
    cpu_seconds: float

    @property
    def cpu_per_1000(self) -> float:
        return self.cpu_seconds * 1000 / self.pods if self.pods else math.nan


def figures(found: Iterable[Entry], pods: int, cpu: float) -> Figures:
    """The per-pod figures of the pod entries' calls."""
    pod_entries = [e for e in found if e.name.startswith(POD_ENTRIES)]
    calls = sum(e.calls for e in pod_entries)
    mutating = sum(e.calls for e in pod_entries if e.type == "admit")
    seconds = sum(e.seconds for e in pod_entries)
    per = (lambda x: x / pods) if pods else (lambda x: math.nan)
    return Figures(
        pods,
        per(calls),
        per(mutating),
        per(calls - mutating),
        per(seconds),
        sum(e.quantile(0.5) for e in pod_entries),
        sum(e.quantile(0.99) for e in pod_entries),
        cpu,
    )


# --- the run: control plane, webhook, Jobs --------------------------------------------------


@dataclass
class Env:
    tools: Path
    kapi_dir: Path
    python: Path
    port: int
    work: Path

    @property
    def kubeconfig(self) -> Path:
        return self.kapi_dir / "kubeconfig"

    def run(self, *args: str | Path, **kw: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(a) for a in args], check=True, text=True, **kw)


def _api(env: Env) -> Any:
    from kubernetes import config

    # new_client_from_config is unannotated in the kubernetes client.
    return config.new_client_from_config(config_file=str(env.kubeconfig))  # type: ignore[no-untyped-call]


def scrape(api: Any) -> dict[str, dict[Labels, float]]:
    """kube-apiserver's /metrics, parsed (as the kubeconfig's admin)."""
    # kubernetes 37's ApiClient.call_api(method, url): the client's TLS and credentials.
    response = api.call_api("GET", api.configuration.host + "/metrics")
    response.read()
    return parse_metrics(response.data.decode())


def start_control_plane(env: Env) -> None:
    env.run("bash", env.tools / "start.sh", "--clean", "--controllers", stdout=subprocess.DEVNULL)
    import yaml
    from kubernetes import client

    api = _api(env)
    core = client.CoreV1Api(api)
    for path in sorted((ROOT / "configmaps").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                core.create_namespaced_config_map(
                    doc["metadata"].get("namespace", "kube-public"), doc
                )
    # One GPU node the scheduler can bind to (the inventory the evaluation places against).
    env.run(
        "bash",
        env.tools / "node.sh",
        "bench-gpu",
        "nvidia.com/cuda.runtime-version.major=12",
        "nvidia.com/cuda.runtime-version.minor=8",
        "nvidia.com/gpu.compute.major=9",
        "--capacity",
        "nvidia.com/gpu=8",
        env={
            **os.environ,
            "KUBECONFIG": str(env.kubeconfig),
            "PATH": f"{env.kapi_dir / 'bin'}:{os.environ['PATH']}",
        },
        stdout=subprocess.DEVNULL,
    )
    api.close()


def start_webhook(env: Env, mode: str, chart_tree: Path) -> tuple[subprocess.Popen[bytes], Path]:
    config = env.work / f"config-{mode}.yaml"
    config.write_text(f"registryLookups:\n  publicRegistries: false\ngpuAccess:\n  mode: {mode}\n")
    certs = env.work / f"certs-{mode}"
    log = open(env.work / f"webhook-{mode}.log", "wb")  # noqa: SIM115 (the process keeps it)
    proc = subprocess.Popen(
        [
            str(env.python.parent / "gpu-webhook"),
            "serve",
            "--self-signed",
            "--cert-dir",
            str(certs),
            "--host",
            "127.0.0.1",
            "--port",
            str(env.port),
            "--kubeconfig",
            str(env.kubeconfig),
            "--log-level",
            "warning",
            "--config",
            str(config),
            "--metrics-port",
            str(env.port + 1),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    import ssl
    import urllib.request

    for _ in range(240):
        if proc.poll() is not None:
            raise RuntimeError(f"the webhook exited; see {log.name}")
        try:
            context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
            with urllib.request.urlopen(
                f"https://127.0.0.1:{env.port}/readyz", context=context, timeout=2
            ):
                break
        except OSError:
            time.sleep(0.5)
    else:
        raise RuntimeError("the webhook never became ready")
    env.run(
        env.python,
        chart_tree / "scripts" / "register-webhook-url.py",
        "--url",
        f"https://127.0.0.1:{env.port}",
        "--ca-file",
        certs / "ca.crt",
        "--kubeconfig",
        env.kubeconfig,
        "--config",
        config,
        stdout=subprocess.DEVNULL,
    )
    # The API server reads webhook configurations through an informer: let it catch up.
    time.sleep(3)
    return proc, config


def job(name: str, pods: int) -> dict[str, Any]:
    container = {
        "name": "train",
        "image": GPU_IMAGE,
        "command": ["python", "train.py"],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"restartPolicy": "Never", "containers": [container]},
            },
        },
    }


def webhook_counts(env: Env) -> dict[str, float]:
    """The webhook's own reviews (by endpoint) and decision cache hits and misses."""
    import urllib.request

    url = f"http://127.0.0.1:{env.port + 1}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        metrics = parse_metrics(response.read().decode())
    counts: dict[str, float] = {}
    for labels, value in metrics.get("gpu_webhook_reviews_total", {}).items():
        key = "reviews /" + _get(labels, "endpoint")
        counts[key] = counts.get(key, 0.0) + value
    for what in ("hits", "misses"):
        counts[f"decision cache {what}"] = sum(
            metrics.get(f"gpu_webhook_decision_cache_{what}_total", {}).values()
        )
    return counts


def run_mode(
    env: Env, mode: str, pods: int, chart_tree: Path, variant: str
) -> tuple[Figures, list[Entry], dict[str, float]]:
    from kubernetes import client

    proc, _ = start_webhook(env, mode, chart_tree)
    api = _api(env)
    try:
        # The client's methods take dicts as well as its model classes (sanitized alike).
        core: Any = client.CoreV1Api(api)
        batch: Any = client.BatchV1Api(api)
        namespace = f"bench-{mode}-{variant}"
        core.create_namespace({"metadata": {"name": namespace}})
        time.sleep(1)
        before = scrape(api)
        own_before = webhook_counts(env)
        cpu_before = cpu_seconds(proc.pid)
        batch.create_namespaced_job(namespace, job("train", pods))
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            listed = core.list_namespaced_pod(namespace, label_selector="app=train")
            if len(listed.items) >= pods:
                break
            time.sleep(1)
        else:
            raise RuntimeError(f"only {len(listed.items)} of {pods} pods were created")
        time.sleep(2)  # the last pods' validating calls are counted before the create returns
        cpu = cpu_seconds(proc.pid) - cpu_before
        after = scrape(api)
        own = webhook_counts(env)
        own = {k: v - own_before.get(k, 0.0) for k, v in own.items()}
        found = entries(delta(after, before))
        return figures(found, pods, cpu), found, own
    finally:
        api.close()
        proc.terminate()
        proc.wait(30)


def report(mode: str, result: Figures, found: list[Entry], own: dict[str, float]) -> None:
    ms = 1000.0
    print(f"\n== gpuAccess.mode: {mode}: {result.pods} pods (one Job) ==")
    table = Table(
        Column("entry", 34, align="<"),
        Column("type", 10, align="<"),
        Column("op", 7, align="<"),
        Column("calls", 6),
        Column("p50 ms", 7, ".1f"),
        Column("p99 ms", 7, ".1f"),
        Column("mean ms", 8, ".1f"),
    )
    print(table.header())
    for e in found:
        mean = e.seconds / e.count * ms if e.count else math.nan
        short = e.name.split(".gpu-admission-webhook")[0]
        print(
            table.row(
                short,
                e.type,
                e.operation,
                f"{e.calls:.0f}",
                e.quantile(0.5) * ms,
                e.quantile(0.99) * ms,
                mean,
            )
        )
    print(
        f"calls per pod: {result.calls_per_pod:.2f} ({result.mutating_per_pod:.2f} mutating, "
        f"{result.validating_per_pod:.2f} validating)\n"
        f"admission latency added per pod: mean {result.mean_seconds * ms:.1f} ms, "
        f"p50 {result.p50_seconds * ms:.1f} ms, p99 {result.p99_seconds * ms:.1f} ms "
        "(p50/p99: the sum of the entries' quantiles)\n"
        f"webhook CPU per 1,000 pods: {result.cpu_per_1000:.2f} s"
        "\nthe webhook's own count: " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(own.items()))
    )


def main() -> int:
    parser = cli.parser(__doc__)
    parser.add_argument("--pods", type=int, default=100, help="pods per Job (default 100)")
    parser.add_argument("--modes", default="warn,enforce", help="gpuAccess modes (warn,enforce)")
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="DIR",
        help="also register the webhook as another checkout's chart and script do (e.g. the "
        "previous release), alternating with this one's, in the same sitting",
    )
    cli.add_json_file(parser)
    args = parser.parse_args()
    if not 1 <= args.pods <= 1000:
        parser.error("--pods must be 1..1000")
    tools = Path(os.environ.get("KAPI_TOOLS", ROOT.parent / "shared" / "tools" / "kapi"))
    kapi_dir = Path(os.environ.get("KAPI_DIR", Path.home() / ".cache" / "kapi"))
    os.environ["KAPI_DIR"] = str(kapi_dir)
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost,::1")
    os.environ.setdefault("no_proxy", "127.0.0.1,localhost,::1")
    work = Path(tempfile.mkdtemp(prefix="bench-apiserver-"))
    env = Env(
        tools, kapi_dir, Path(sys.executable), int(os.environ.get("WEBHOOK_PORT", "18443")), work
    )
    results: dict[str, Any] = {}
    trees = [("this", ROOT)]
    if args.baseline is not None:
        trees.insert(0, ("baseline", args.baseline.resolve()))
    start_control_plane(env)
    try:
        for mode in args.modes.split(","):
            for variant, tree in trees:
                result, found, own = run_mode(env, mode, args.pods, tree, variant)
                report(f"{mode}, {variant}", result, found, own)
                results[f"{mode}/{variant}"] = {
                    "pods": result.pods,
                    "callsPerPod": result.calls_per_pod,
                    "mutatingPerPod": result.mutating_per_pod,
                    "validatingPerPod": result.validating_per_pod,
                    "latencyPerPodMs": {
                        "mean": result.mean_seconds * 1000,
                        "p50": result.p50_seconds * 1000,
                        "p99": result.p99_seconds * 1000,
                    },
                    "webhookCpuSecondsPer1000Pods": result.cpu_per_1000,
                    "webhook": own,
                    "entries": [
                        {"name": e.name, "type": e.type, "operation": e.operation, "calls": e.calls}
                        for e in found
                    ],
                }
    finally:
        subprocess.run(
            [
                str(env.python),
                str(ROOT / "scripts" / "register-webhook-url.py"),
                "--delete",
                "--kubeconfig",
                str(env.kubeconfig),
            ],
            capture_output=True,
            check=False,
        )
        if os.environ.get("KEEP_KAPI") != "1":
            subprocess.run(["bash", str(tools / "stop.sh")], capture_output=True, check=False)
    if args.json:
        cli.write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
