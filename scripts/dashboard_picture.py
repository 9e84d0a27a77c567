"""Plot the Grafana dashboard's panels from real data: a real Prometheus scraping a real
`gpu-webhook serve` under load, each panel's own queries run against Prometheus's HTTP API.

Grafana is not packaged here (no Debian package, no PyPI package), so the panels are drawn with
matplotlib from the same queries Grafana would run, variables set to "All".

Everything is on loopback: the fake API server of tests/fakekube.py (the audit's cluster, with
tests/auditdata.py's workloads and nodes), the webhook, Prometheus, and a closed loopback port
standing in for an unreachable registry.

    .venv/bin/pip install -e '.[dashboard]'   # matplotlib
    apt-get install prometheus                 # Debian's Prometheus (the binary only is used)
    .venv/bin/python scripts/dashboard_picture.py [--seconds 180] [--out docs/images/dashboard.png]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scripts.dashboard_json import OUT as DASHBOARD  # noqa: E402
from tests.auditdata import GPU, IMAGE, populate  # noqa: E402
from tests.fakekube import FakeKube  # noqa: E402
from tests.integration.helpers import free_port  # noqa: E402

NAMESPACE = "gpu-webhook-system"
POD = "gaw-gpu-admission-webhook-0"
SCRAPE = "5s"
RATE_INTERVAL = "30s"


@contextmanager
def fake_cluster(directory: Path) -> Iterator[Path]:
    kube = FakeKube()
    populate(kube)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(kube.start(), loop).result(timeout=30)
        yield kube.write_kubeconfig(directory)
    finally:
        asyncio.run_coroutine_threadsafe(kube.stop(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)


@contextmanager
def process(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)


def wait_http(url: str, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not start: {url}")
        time.sleep(0.2)


def pod(name: str, image: str, limits: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": "ml", "generateName": f"{name}-"},
        "spec": {"containers": [{"name": "main", "image": image, "resources": {"limits": limits}}]},
    }


def load(port: int, ca: Path, closed_port: int, seconds: float, stop: threading.Event) -> None:
    """A few clients in a loop: GPU pods (identical replicas: decision cache hits), pods
    denied by the CRL limit, pods of an image whose CUDA only an unreachable registry could
    tell, and the docs' vGPU example; each to /mutate, then /validate."""
    example = json.loads((ROOT / "examples" / "admissionreview-pod.json").read_text())
    objects = [
        pod("train", IMAGE, {GPU: "1"}),
        # Above the shipped vcuda-core policy's maximum of 100: denied.
        pod("share", IMAGE, {"tencent.com/vcuda-core": "150", "tencent.com/vcuda-memory": "4"}),
        pod("serve", f"127.0.0.1:{closed_port}/team/app:{{n}}", {GPU: "1"}),
        example["request"]["object"],
    ]
    weights = [6, 1, 1, 2]
    mix = [obj for obj, weight in zip(objects, weights, strict=True) for _ in range(weight)]
    context = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + seconds

    def client(worker: int) -> None:
        conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=10)
        n = 0
        while time.monotonic() < deadline and not stop.is_set():
            obj = json.loads(json.dumps(mix[n % len(mix)]).replace("{n}", str(n // 200)))
            for endpoint in ("mutate", "validate"):
                body = {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "request": {
                        "uid": f"{worker}-{n}-{endpoint}",
                        "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "namespace": "ml",
                        "operation": "CREATE",
                        "object": obj,
                    },
                }
                # Compact, in the API server's field order (the decision cache finds the uid
                # where the API server puts it).
                payload = json.dumps(body, separators=(",", ":"))
                conn.request("POST", f"/{endpoint}", payload, {"Content-Type": "application/json"})
                conn.getresponse().read()
            n += 1
            # A steady rate that leaves this 2-core machine's other users some CPU.
            time.sleep(0.01)

    threads = [threading.Thread(target=client, args=(w,)) for w in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def query_range(prometheus: str, expr: str, start: float, end: float) -> list[dict[str, Any]]:
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": "5"})
    with urllib.request.urlopen(f"{prometheus}/api/v1/query_range?{params}") as reply:
        answer = json.loads(reply.read())
    assert answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def legend(template: str, labels: dict[str, str]) -> str:
    text = template
    for key, value in labels.items():
        text = text.replace("{{" + key + "}}", value)
    return text


def plot(
    board: dict[str, Any], series: list[list[tuple[str, Any]]], start: float, out: Path
) -> None:
    import matplotlib  # noqa: PLC0415 (the docs extra: only this function needs it)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    panels = board["panels"]
    rows = (len(panels) + 1) // 2
    fig, axes = plt.subplots(rows, 2, figsize=(16, 3.1 * rows), constrained_layout=True)
    for ax, panel, results in zip(axes.flat, panels, series, strict=False):
        ax.set_title(panel["title"], fontsize=10, loc="left")
        unit = panel["fieldConfig"]["defaults"]["unit"]
        drawn = 0
        for name, result in results:
            for line in result:
                points = [(float(t) - start, float(v)) for t, v in line["values"]]
                xs = [p[0] / 60 for p in points]
                ys = [p[1] * (100 if unit == "percentunit" else 1) for p in points]
                ax.plot(xs, ys, label=legend(name, line["metric"]), linewidth=1.2)
                drawn += 1
        if drawn == 0:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("minutes", fontsize=8)
        ax.set_ylabel(
            {"percentunit": "%", "reqps": "req/s", "ops": "/s"}.get(unit, unit), fontsize=8
        )
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if drawn:
            ax.legend(fontsize=6, loc="upper left", ncols=2)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.suptitle(
        f"{board['title']}: each panel's queries, from a real Prometheus scraping gpu-webhook "
        "serve under load (namespace=All, replica=All)",
        fontsize=11,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=180.0, help="load duration")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "dashboard.png")
    args = parser.parse_args(argv)
    binary = shutil.which("prometheus")
    if binary is None:
        print("prometheus not found (Debian: apt-get install prometheus)", file=sys.stderr)
        return 2
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="dashboard-") as tmp:
        work = Path(tmp)
        port, metrics_port, prom_port, closed_port = (free_port() for _ in range(4))
        config = work / "config.yaml"
        config.write_text(
            json.dumps(
                {
                    "registryLookups": {
                        "publicRegistries": False,
                        "allowedRegistries": [f"127.0.0.1:{closed_port}"],
                        "budgetSeconds": 0.2,
                    }
                }
            )
        )
        prom_config = work / "prometheus.yml"
        prom_config.write_text(
            json.dumps(
                {
                    "global": {"scrape_interval": SCRAPE, "evaluation_interval": SCRAPE},
                    "scrape_configs": [
                        {
                            # The labels a ServiceMonitor's target would have.
                            "job_name": "gaw-gpu-admission-webhook",
                            "static_configs": [
                                {
                                    "targets": [f"127.0.0.1:{metrics_port}"],
                                    "labels": {"namespace": NAMESPACE, "pod": POD},
                                }
                            ],
                        }
                    ],
                }
            )
        )
        with fake_cluster(work) as kubeconfig:
            serve = [
                sys.executable,
                "-c",
                "import sys; from webhook.cli import main; sys.exit(main())",
                "serve",
                *("--self-signed", "--cert-dir", str(work / "certs")),
                *("--host", "127.0.0.1", "--port", str(port)),
                *("--metrics-port", str(metrics_port), "--kubeconfig", str(kubeconfig)),
                *("--audit-interval", "60", "--audit-reports", "none"),
                *("--config", str(config), "--log-level", "warning"),
            ]
            prom = [
                binary,
                f"--config.file={prom_config}",
                f"--storage.tsdb.path={work / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ]
            with process(serve, work / "serve.log"), process(prom, work / "prometheus.log"):
                wait_http(f"http://127.0.0.1:{metrics_port}/readyz", "gpu-webhook serve")
                prometheus = f"http://127.0.0.1:{prom_port}"
                wait_http(f"{prometheus}/-/ready", "prometheus")
                start = time.time()
                stop = threading.Event()
                load(port, work / "certs" / "ca.crt", closed_port, args.seconds, stop)
                time.sleep(15)  # the last scrapes
                end = time.time()
                series = [
                    [
                        (
                            target["legendFormat"],
                            query_range(
                                prometheus,
                                target["expr"]
                                .replace("$namespace", ".*")
                                .replace("$replica", ".*")
                                .replace("$__rate_interval", RATE_INTERVAL),
                                start,
                                end,
                            ),
                        )
                        for target in panel["targets"]
                    ]
                    for panel in board["panels"]
                ]
    plot(board, series, start, args.out)
    empty = [
        p["title"] for p, s in zip(board["panels"], series, strict=True) if not any(r for _, r in s)
    ]
    print(f"wrote {args.out}; panels without data: {empty or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
