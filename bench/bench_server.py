"""Benchmark of the real admission server over TLS, side by side with a no-op aiohttp TLS server.

Every server and the load generator run in their own processes (the client never shares an
event loop or a GIL with the server it measures). Figures:

1. closed loop, keep-alive, `--concurrency` in flight: reviews/s, p50/p99 for the webhook and
   for a no-op aiohttp TLS server answering a fixed allowed review; the ratio is the headline;
2. the webhook with uvloop and/or orjson disabled (GPU_WEBHOOK_DISABLE_UVLOOP/_ORJSON);
3. open loop at half the webhook's own max throughput: p50/p99 measured from each request's
   scheduled send time (no coordinated omission);
4. RSS of the webhook after `--rss-reviews` reviews with `--rss-policies` CRL policies loaded,
   sampled from /proc/<pid>/status, and its growth over the second half, for both policy
   sources: the file source (`--policies DIR`) and the cluster watch (`--kubeconfig FILE`, the
   in-cluster path that imports the `kubernetes` client), the latter served the same
   ConfigMaps by the fake API server of tests/fakekube.py in a thread of this process.

The mix sends each object to /mutate and its mutated form to /validate, as the API server does.
The load generator runs with its own GC disabled while it measures (see `_load`).

    python bench/bench_server.py            # full run, < 5 minutes on 2 cores
    python bench/bench_server.py --quick    # smoke run, ~30 s
    python bench/bench_server.py --only-rss # just the RSS runs (--rss-source to pick one)
    python bench/bench_server.py --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve()

TARGETS = {
    "throughput_ratio": 0.5,
    "p99_ms_at_half_load": 10.0,
    "rss_mib": 100.0,
    # "No growth": ≤ 1 MiB over the second half (50,000 reviews by default: ~21 bytes each).
    "rss_growth_second_half_kib": 1024,
}
RSS_SOURCES = {"file": "file (--policies)", "cluster": "cluster watch (--kubeconfig)"}


# ---------------------------------------------------------------------------- workload


def _review(obj: dict[str, Any], uid: str, group: str = "") -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": "v1", "kind": obj["kind"]},
            "resource": {"group": group, "version": "v1", "resource": obj["kind"].lower() + "s"},
            "namespace": meta["namespace"],
            "name": meta["name"],
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:kube-system:replicaset-controller",
                "groups": ["system:serviceaccounts", "system:authenticated"],
            },
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def _pod(name: str, containers: list[dict[str, Any]]) -> dict[str, Any]:
    # Shaped like what the API server sends: defaulted fields, labels, a service account volume.
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml-team",
            "labels": {"app": name, "pod-template-hash": "7d9f8b6c5"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{name}-7d9f8b6c5"}
            ],
        },
        "spec": {
            "containers": containers,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
            ],
            "volumes": [{"name": "kube-api-access", "projected": {"sources": []}}],
        },
    }


def _container(name: str, image: str, limits: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "resources": {"limits": limits, "requests": {"cpu": "1", "memory": "2Gi"}},
        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
        "terminationMessagePath": "/dev/termination-log",
        "imagePullPolicy": "IfNotPresent",
        **extra,
    }


def workload_mix() -> list[tuple[str, bytes]]:
    """(endpoint, body) pairs in the proportions a GPU cluster's webhook sees."""
    paddle = _pod(
        "paddle-train",
        [
            _container(
                "train",
                "paddlepaddle/paddle:2.6.1-gpu-cuda11.8-cudnn8.6-trt8.5",
                {"tencent.com/vcuda-core": "50", "cpu": "4", "memory": "16Gi"},
            )
        ],
    )
    torch = _pod(
        "torch-infer",
        [
            _container(
                "infer",
                "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime",
                {"nvidia.com/gpu": "1", "cpu": "4", "memory": "16Gi"},
            ),
            _container("sidecar", "envoyproxy/envoy:v1.30.1", {"cpu": "500m", "memory": "256Mi"}),
        ],
    )
    web = _pod("web", [_container("nginx", "nginx:1.27", {"cpu": "1", "memory": "512Mi"})])
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vllm", "namespace": "ml-team"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "vllm"}},
            "template": {
                "metadata": {"labels": {"app": "vllm"}},
                "spec": {
                    "containers": [
                        _container(
                            "vllm",
                            "vllm/vllm-openai:v0.8.5",
                            {"nvidia.com/gpu": "1"},
                            env=[{"name": "CUDA_VERSION", "value": "12.4.1"}],
                        )
                    ]
                },
            },
        },
    }
    objects = [(paddle, "", 4), (torch, "", 3), (web, "", 2), (deployment, "apps", 1)]
    from webhook.core.config import WebhookConfig
    from webhook.core.evaluate import evaluate
    from webhook.sources.files import load_policy_dir

    shipped = load_policy_dir(REPO / "configmaps")
    mix: list[tuple[str, bytes]] = []
    for index, (obj, group, weight) in enumerate(objects):
        # The API server calls the mutating webhook, applies its patch, then calls the
        # validating webhook with the result: /validate sees the mutated object.
        mutated = evaluate(obj, shipped, WebhookConfig()).mutated or obj
        for copy in range(weight):
            for endpoint, sent in (("/mutate", obj), ("/validate", mutated)):
                body = json.dumps(_review(dict(sent), f"bench-{index}-{copy}", group)).encode()
                mix.append((endpoint, body))
    return mix


def generate_policies(directory: Path, total: int) -> Path:
    """The shipped configmaps/ plus synthetic CRLs up to `total` policies."""
    from webhook.core.crl import crl_configmap

    directory.mkdir(parents=True, exist_ok=True)
    shipped = sorted((REPO / "configmaps").glob("*.yaml"))
    for path in shipped:
        shutil.copy(path, directory / path.name)
    for i in range(max(0, total - len(shipped))):
        group = f"bench-{i // 4}"
        name = f"cf-crl-{group}-res{i}"
        cm = crl_configmap(
            name,
            {
                "key": f"bench{i // 4}.example.com/res{i}",
                "dataType": "integer",
                "defaultValue": "1",
                "descriptionEn": f"synthetic benchmark resource {i}",
                "group": group,
                "limits": "optional",
                "requests": "fromLimits",
                "max": "64",
            },
        )
        (directory / f"{name}.yaml").write_text(yaml.safe_dump(cm))
    return directory


# ---------------------------------------------------------------------------- no-op server


def noop_main(args: argparse.Namespace) -> int:
    """An aiohttp TLS server doing the least an admission webhook can: read, answer allowed."""
    from aiohttp import web

    answer = json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": "fixed", "allowed": True},
        }
    ).encode()

    async def review(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=answer, content_type="application/json")

    async def ready(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=7 * 1024 * 1024)
    app.router.add_post("/mutate", review)
    app.router.add_post("/validate", review)
    app.router.add_get("/readyz", ready)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(args.cert, args.key)
    loop_factory = None
    if not os.environ.get("GPU_WEBHOOK_DISABLE_UVLOOP"):
        try:
            import uvloop

            loop_factory = uvloop.new_event_loop
        except ImportError:
            pass

    async def serve() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", args.port, ssl_context=context).start()
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await runner.cleanup()

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(serve())
    return 0


# ---------------------------------------------------------------------------- client


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))
    return ordered[index]


async def _load(args: argparse.Namespace) -> dict[str, Any]:
    import aiohttp

    mix = workload_mix()
    context = ssl.create_default_context(cafile=args.ca)
    connector = aiohttp.TCPConnector(limit=args.concurrency, ssl=context, keepalive_timeout=60)
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    errors = 0
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(index: int, scheduled: float | None) -> None:
            nonlocal errors
            endpoint, body = mix[index % len(mix)]
            start = time.perf_counter() if scheduled is None else scheduled
            try:
                async with session.post(args.url + endpoint, data=body, headers=headers) as resp:
                    await resp.read()
                    statuses[resp.status] = statuses.get(resp.status, 0) + 1
            except (aiohttp.ClientError, OSError):
                errors += 1
                return
            latencies.append(time.perf_counter() - start)

        # Warm-up: open the keep-alive connections and let the server's caches settle.
        await asyncio.gather(*(one(i, None) for i in range(args.concurrency * 4)))
        latencies.clear()
        statuses.clear()
        # The load generator's own cyclic GC paused it for up to ~20 ms, and in the open loop
        # every request due during such a pause was charged to the server as latency (p99
        # 14-20 ms instead of 2-4 ms at the same rate). No collection runs while measuring.
        gc.collect()
        gc.freeze()
        gc.disable()
        began = time.perf_counter()
        if args.rate:
            # Open loop: request i is due at began + i/rate whether or not earlier ones finished.
            # Only the requests in flight are kept: gathering all of them at the end blocked the
            # loop for ~10 ms while the last ones were answered, and that counted as latency.
            pending: set[asyncio.Task[None]] = set()
            for i in range(args.requests):
                due = began + i / args.rate
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                task = asyncio.create_task(one(i, due))
                pending.add(task)
                task.add_done_callback(pending.discard)
            await asyncio.gather(*pending)
        else:
            counter = iter(range(args.requests))

            async def worker() -> None:
                for i in counter:
                    await one(i, None)

            await asyncio.gather(*(worker() for _ in range(args.concurrency)))
        elapsed = time.perf_counter() - began
        gc.enable()
        gc.unfreeze()
    return {
        "requests": len(latencies),
        "errors": errors,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "seconds": round(elapsed, 3),
        "rps": round(len(latencies) / elapsed, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 3) if latencies else None,
        "p99_ms": round(_percentile(latencies, 99) * 1000, 3),
        "max_ms": round(max(latencies) * 1000, 3) if latencies else None,
    }


def client_main(args: argparse.Namespace) -> int:
    loop_factory = None
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:
        pass
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        result = runner.run(_load(args))
    print(json.dumps(result))
    return 0


# ---------------------------------------------------------------------------- orchestration


@dataclass
class Measurement:
    name: str
    rps: float
    p50_ms: float | None
    p99_ms: float
    requests: int
    errors: int
    statuses: dict[str, int]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _env(disable_uvloop: bool = False, disable_orjson: bool = False) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.pop("GPU_WEBHOOK_DISABLE_UVLOOP", None)
    env.pop("GPU_WEBHOOK_DISABLE_ORJSON", None)
    if disable_uvloop:
        env["GPU_WEBHOOK_DISABLE_UVLOOP"] = "1"
    if disable_orjson:
        env["GPU_WEBHOOK_DISABLE_ORJSON"] = "1"
    return env


def _wait_ready(port: int, ca: Path, process: subprocess.Popen[bytes]) -> None:
    import http.client

    context = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before becoming ready")
        try:
            conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=2)
            conn.request("GET", "/readyz")
            if conn.getresponse().status == 200:
                conn.close()
                return
            conn.close()
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("server did not become ready within 60 s")


@contextmanager
def _server(
    kind: str,
    tls: Any,
    policies: Path,
    *,
    kubeconfig: Path | None = None,
    no_uvloop: bool = False,
    no_orjson: bool = False,
    log_level: str = "info",
) -> Iterator[tuple[int, int]]:
    """Start the webhook (`kind="webhook"`) or the no-op server; yields (port, pid).

    With `kubeconfig` the webhook watches that cluster's CRL ConfigMaps instead of loading
    `policies`, and is ready after its first list.
    """
    port = _free_port()
    if kind == "webhook":
        code = "import sys; from webhook.cli import main; sys.exit(main())"
        argv = [sys.executable, "-c", code, "serve", "--host", "127.0.0.1", "--port", str(port)]
        argv += ["--tls-cert", str(tls.cert), "--tls-key", str(tls.key)]
        if kubeconfig is None:
            argv += ["--policies", str(policies)]
        else:
            argv += ["--kubeconfig", str(kubeconfig)]
        argv += ["--log-format", "json", "--log-level", log_level]
    else:
        argv = [sys.executable, str(HERE), "noop", "--port", str(port)]
        argv += ["--cert", str(tls.cert), "--key", str(tls.key)]
    process = subprocess.Popen(
        argv,
        env=_env(no_uvloop, no_orjson),
        stdout=subprocess.DEVNULL,
        # The webhook logs one line per review, as in production; the pipe is drained to null.
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_ready(port, tls.ca_cert, process)
        yield port, process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _drive(
    port: int, ca: Path, requests: int, concurrency: int, rate: float | None = None
) -> dict[str, Any]:
    argv = [sys.executable, str(HERE), "client", "--url", f"https://localhost:{port}"]
    argv += ["--ca", str(ca), "--requests", str(requests), "--concurrency", str(concurrency)]
    if rate:
        argv += ["--rate", str(rate)]
    done = subprocess.run(argv, env=_env(), capture_output=True, text=True, check=True, timeout=900)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _measure(name: str, result: dict[str, Any]) -> Measurement:
    return Measurement(
        name,
        result["rps"],
        result["p50_ms"],
        result["p99_ms"],
        result["requests"],
        result["errors"],
        result["statuses"],
    )


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _get(port: int, ca: Path, path: str) -> str:
    import http.client

    context = ssl.create_default_context(cafile=str(ca))
    conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=30)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read().decode()
        if response.status != 200:
            raise RuntimeError(f"GET {path}: HTTP {response.status}: {body[:200]}")
        return body
    finally:
        conn.close()


def _gauge(metrics: str, name: str) -> int:
    for line in metrics.splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    raise RuntimeError(f"no {name} in /metrics")


def _policy_configmaps(policies: Path) -> list[dict[str, Any]]:
    """The ConfigMaps of a policy directory, read as the file source reads them."""
    from webhook.sources.files import policy_files, read_documents

    return [
        doc
        for file in policy_files(policies)
        for doc in read_documents(file)
        if isinstance(doc, dict) and doc.get("kind") == "ConfigMap"
    ]


@contextmanager
def _fake_cluster(configmaps: list[dict[str, Any]], directory: Path) -> Iterator[Path]:
    """The fake API server of tests/fakekube.py serving `configmaps`; yields a kubeconfig.

    It runs on its own event loop in a thread of this (orchestrating) process, which is idle
    while the load generator, a separate process, drives the webhook.
    """
    # tests/ is a namespace package at the repository root, which `python bench/...` does not
    # put on sys.path (the webhook and client processes get it through PYTHONPATH, see _env).
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.fakekube import FakeKube

    kube = FakeKube()
    for cm in configmaps:
        kube.put(cm)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fake-kube", daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(kube.start(), loop).result(timeout=30)
        directory.mkdir(parents=True, exist_ok=True)
        yield kube.write_kubeconfig(directory)
    finally:
        asyncio.run_coroutine_threadsafe(kube.stop(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()


def _rss_run(
    tls: Any, policies: Path, reviews: int, concurrency: int, kubeconfig: Path | None = None
) -> dict[str, Any]:
    """Drive `reviews` reviews through a fresh webhook; RSS at start, half-way and the end."""
    rss: dict[str, Any] = {}
    with _server("webhook", tls, policies, kubeconfig=kubeconfig) as (port, pid):
        rss["start_kib"] = _rss_kib(pid)
        half_reviews = reviews // 2
        first = _drive(port, tls.ca_cert, half_reviews, concurrency)
        rss["half_kib"] = _rss_kib(pid)
        second = _drive(port, tls.ca_cert, reviews - half_reviews, concurrency)
        rss["end_kib"] = _rss_kib(pid)
        # Read after the last sample, so the scrape does not count in the figure.
        metrics = _get(port, tls.ca_cert, "/metrics")
    rss["policies_loaded"] = _gauge(metrics, "gpu_webhook_policies_loaded")
    rss["invalid_configmaps"] = _gauge(metrics, "gpu_webhook_invalid_configmaps")
    rss["reviews"] = reviews
    rss["errors"] = first["errors"] + second["errors"]
    statuses = {**first["statuses"]}
    for status, count in second["statuses"].items():
        statuses[status] = statuses.get(status, 0) + count
    rss["statuses"] = statuses
    rss["second_half_rps"] = second["rps"]
    rss["second_half_p99_ms"] = second["p99_ms"]
    rss["growth_second_half_kib"] = rss["end_kib"] - rss["half_kib"]
    rss["meets_rss_target"] = rss["end_kib"] / 1024 <= TARGETS["rss_mib"]
    rss["no_growth"] = rss["growth_second_half_kib"] <= TARGETS["rss_growth_second_half_kib"]
    return rss


def run_main(args: argparse.Namespace) -> int:
    from webhook.tls.certs import write_certificates

    if args.quick:
        args.requests, args.rss_reviews, args.open_requests = 3000, 10000, 2000
        args.variant_requests = 2000
    work = Path(tempfile.mkdtemp(prefix="gpu-webhook-bench-"))
    report: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "concurrency": args.concurrency,
        "targets": TARGETS,
    }
    try:
        tls = write_certificates(work / "tls", ["localhost"], ["127.0.0.1"])
        policies = Path(args.policies)
        shipped_count = len(list(policies.glob("*.y*ml")))
        measurements: list[Measurement] = []

        if not args.only_rss:
            print(
                f"closed loop: {args.requests} reviews, concurrency {args.concurrency}", flush=True
            )
            with _server("webhook", tls, policies) as (port, _):
                webhook = _measure(
                    "webhook (uvloop+orjson)",
                    _drive(port, tls.ca_cert, args.requests, args.concurrency),
                )
            measurements.append(webhook)
            with _server("noop", tls, policies) as (port, _):
                noop = _measure(
                    "no-op aiohttp TLS", _drive(port, tls.ca_cert, args.requests, args.concurrency)
                )
            measurements.append(noop)
            report["throughput_ratio"] = round(webhook.rps / noop.rps, 3)
            report["policies"] = shipped_count

        if not args.only_rss and not args.no_variants:
            variants = [
                ("webhook (uvloop, stdlib json)", False, True, "info"),
                ("webhook (asyncio, orjson)", True, False, "info"),
                ("webhook (asyncio, stdlib json)", True, True, "info"),
                # The one-line-per-review log is part of the per-review cost: show how much.
                ("webhook (uvloop+orjson, no review log)", False, False, "warning"),
            ]
            for name, no_uvloop, no_orjson, level in variants:
                print(f"variant: {name}", flush=True)
                with _server(
                    "webhook",
                    tls,
                    policies,
                    no_uvloop=no_uvloop,
                    no_orjson=no_orjson,
                    log_level=level,
                ) as (port, _):
                    result = _drive(port, tls.ca_cert, args.variant_requests, args.concurrency)
                measurements.append(_measure(name, result))

        if not args.only_rss:
            half = round(measurements[0].rps / 2, 1)
            print(f"open loop at {half} reviews/s (half of the webhook's max)", flush=True)
            with _server("webhook", tls, policies) as (port, _):
                open_loop = _drive(
                    port, tls.ca_cert, args.open_requests, args.concurrency * 8, half
                )
            report["open_loop"] = {"rate": half, **open_loop}

        rss: list[dict[str, Any]] = []
        if not args.no_rss:
            big = generate_policies(work / "policies", args.rss_policies)
            configmaps = _policy_configmaps(big)
            sources = list(RSS_SOURCES) if args.rss_source == "both" else [args.rss_source]
            for source in sources:
                print(
                    f"RSS, {RSS_SOURCES[source]}: {args.rss_reviews} reviews with "
                    f"{len(configmaps)} CRL ConfigMaps",
                    flush=True,
                )
                if source == "file":
                    row = _rss_run(tls, big, args.rss_reviews, args.concurrency)
                else:
                    with _fake_cluster(configmaps, work / "kube") as kubeconfig:
                        row = _rss_run(
                            tls, big, args.rss_reviews, args.concurrency, kubeconfig=kubeconfig
                        )
                rss.append({"source": source, "configmaps": len(configmaps), **row})
        report["rss"] = rss
        report["measurements"] = [asdict(m) for m in measurements]
        _print_report(report, measurements)
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
            print(f"JSON written to {args.json}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _print_report(report: dict[str, Any], measurements: list[Measurement]) -> None:
    print()
    if measurements:
        print(f"{'server':<40} {'reviews/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}")
        for m in measurements:
            p50 = f"{m.p50_ms:.2f}" if m.p50_ms is not None else "-"
            print(f"{m.name:<40} {m.rps:>10.0f} {p50:>8} {m.p99_ms:>8.2f} {m.errors:>7}")
        print()
    if "throughput_ratio" in report:
        ratio = report["throughput_ratio"]
        verdict = "meets" if ratio >= TARGETS["throughput_ratio"] else "MISSES"
        print(f"throughput ratio webhook/no-op: {ratio:.2f} ({verdict} target ≥ 0.50)")
    if "open_loop" in report:
        open_loop = report["open_loop"]
        verdict = "meets" if open_loop["p99_ms"] <= TARGETS["p99_ms_at_half_load"] else "MISSES"
        print(
            f"open loop at {open_loop['rate']:.0f}/s: achieved {open_loop['rps']:.0f}/s, "
            f"p50 {open_loop['p50_ms']:.2f} ms, p99 {open_loop['p99_ms']:.2f} ms "
            f"({verdict} target ≤ 10 ms)"
        )
    rows = report["rss"]
    if rows:
        reviews = rows[0]["reviews"]
        growth_target = TARGETS["rss_growth_second_half_kib"]
        print()
        print(
            f"RSS after {reviews} reviews (half-way: {reviews // 2}); targets: end ≤ "
            f"{TARGETS['rss_mib']:.0f} MiB, growth over the second half ≤ {growth_target} KiB"
        )
        print(
            f"{'policy source':<30} {'loaded':>6} {'invalid':>7} {'start MiB':>9} "
            f"{'half MiB':>8} {'end MiB':>8} {'growth KiB':>10} {'≤ 100 MiB':>9} "
            f"{'no growth':>9} {'errors':>6}"
        )
        for row in rows:
            print(
                f"{RSS_SOURCES[row['source']]:<30} {row['policies_loaded']:>6} "
                f"{row['invalid_configmaps']:>7} {row['start_kib'] / 1024:>9.1f} "
                f"{row['half_kib'] / 1024:>8.1f} {row['end_kib'] / 1024:>8.1f} "
                f"{row['growth_second_half_kib']:>10} "
                f"{'meets' if row['meets_rss_target'] else 'MISSES':>9} "
                f"{'meets' if row['no_growth'] else 'MISSES':>9} {row['errors']:>6}"
            )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="mode")
    noop = sub.add_parser("noop", help="(internal) run the no-op TLS server")
    noop.add_argument("--port", type=int, required=True)
    noop.add_argument("--cert", required=True)
    noop.add_argument("--key", required=True)
    client = sub.add_parser("client", help="(internal) run the load generator")
    client.add_argument("--url", required=True)
    client.add_argument("--ca", required=True)
    client.add_argument("--requests", type=int, required=True)
    client.add_argument("--concurrency", type=int, default=32)
    client.add_argument("--rate", type=float, default=0.0)
    parser.add_argument("--requests", type=int, default=20000, help="per closed-loop run")
    parser.add_argument("--variant-requests", type=int, default=10000, help="per variant run")
    parser.add_argument("--open-requests", type=int, default=10000, help="open-loop run")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--policies", default=str(REPO / "configmaps"))
    parser.add_argument("--rss-reviews", type=int, default=100_000)
    parser.add_argument("--rss-policies", type=int, default=1000)
    parser.add_argument("--no-rss", action="store_true", help="skip the RSS runs")
    parser.add_argument(
        "--rss-source",
        choices=("both", *RSS_SOURCES),
        default="both",
        help="policy source(s) of the RSS runs: file (--policies), cluster (--kubeconfig "
        "against the fake API server) or both (default)",
    )
    parser.add_argument(
        "--only-rss", action="store_true", help="skip the throughput and latency runs"
    )
    parser.add_argument("--no-variants", action="store_true", help="skip uvloop/orjson variants")
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    args = parser.parse_args(argv)
    if args.only_rss and args.no_rss:
        parser.error("--only-rss and --no-rss leave nothing to run")
    if args.mode == "noop":
        return noop_main(args)
    if args.mode == "client":
        return client_main(args)
    return run_main(args)


if __name__ == "__main__":
    sys.exit(main())
