"""Benchmark of the audit (SPEC §6): 10,000 pods in 500 owners against the fake API server.

Run: .venv/bin/python bench/bench_audit.py [--owners 500] [--pods-per-owner 20] [--json]

The fake API server (tests/fakekube.py) runs in its own process, populated with 500 Deployments,
each with its ReplicaSet and 20 running pods shaped like real ones (status, managedFields, the
service-account volume, tolerations: ~6 KiB of JSON each); one owner in five asks for 8 GPUs,
the others for 1 or 2. The audit runs against a proposed folder capping nvidia.com/gpu at 4.

Figures:
- CLI: `gpu-webhook audit --policies DIR -o summary` as a subprocess: wall time, peak RSS
  (getrusage of the child), exit code, API requests the fake server received;
- server: the Auditor of `serve --audit-interval` in this process (imports and the client
  warmed up first): duration of one audit with the server's page pause and with none, RSS
  growth at its peak (sampled every 10 ms) and after it, the longest the event loop was kept
  from running a 5 ms ticker (what an admission review waiting on the same loop would wait),
  and the API requests, reports written included. As in `gpu-webhook serve`, the objects of
  start-up are frozen out of the garbage collector first (--no-gc-freeze: not).
"""

from __future__ import annotations

import asyncio
import gc
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import cli  # noqa: E402
from bench.harness.core import NodeInventory, PolicySet, WebhookConfig, evaluate  # noqa: E402
from bench.harness.proc import rss_kib  # noqa: E402
from bench.harness.servers import KubeProcess, kubeconfig  # noqa: E402
from tests.auditdata import proposed_policies, shipped_policies  # noqa: E402
from tests.fakekube import FakeKube, node  # noqa: E402
from webhook.sources.auditor import PAGE_PAUSE, PAGE_SIZE  # noqa: E402

IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"
MANUAL_12_4 = {"cuda-major-version": "12", "cuda-minor-version": "4"}


def _managed(manager: str, fields: list[str]) -> dict[str, Any]:
    return {
        "manager": manager,
        "operation": "Update",
        "apiVersion": "v1",
        "time": "2024-05-01T10:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {f"f:{name}": {} for name in fields},
    }


def real_pod(namespace: str, owner: str, index: int, gpus: str, rs_uid: str) -> dict[str, Any]:
    """A running pod as the API server returns it, the webhook's affinity included."""
    name = f"{owner}-7c9d5f-{index:05d}"
    env = [{"name": f"SETTING_{i}", "value": f"value-{i}"} for i in range(8)]
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "generateName": f"{owner}-7c9d5f-",
            "namespace": namespace,
            "uid": f"{namespace}-{name}-uid",
            "labels": {"app": owner, "pod-template-hash": "7c9d5f", "team": namespace},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2024-05-01T10:00:00Z"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{owner}-7c9d5f",
                    "uid": rs_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                _managed(
                    "kube-controller-manager", ["metadata", "spec"] + [f"x{i}" for i in range(20)]
                ),
                _managed("kubelet", ["status"] + [f"y{i}" for i in range(20)]),
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "train",
                    "image": IMAGE,
                    "command": ["torchrun", "--nproc_per_node", gpus, "train.py"],
                    "env": env,
                    "resources": {
                        "limits": {"nvidia.com/gpu": gpus, "cpu": "8", "memory": "64Gi"},
                        "requests": {"nvidia.com/gpu": gpus, "cpu": "8", "memory": "64Gi"},
                    },
                    "volumeMounts": [
                        {
                            "name": "kube-api-access",
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                            "readOnly": True,
                        }
                    ],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "nodeName": f"gpu-{index % 50:03d}",
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
                for k in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
            ],
            "volumes": [
                {
                    "name": "kube-api-access",
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                        ]
                    },
                }
            ],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": "2024-05-01T10:00:05Z"}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "hostIP": "10.0.0.12",
            "podIP": "10.244.3.17",
            "startTime": "2024-05-01T10:00:00Z",
            "qosClass": "Guaranteed",
            "containerStatuses": [
                {
                    "name": "train",
                    "ready": True,
                    "restartCount": 0,
                    "image": IMAGE,
                    "imageID": "nvcr.io/nvidia/pytorch@sha256:" + "0" * 64,
                    "containerID": "containerd://" + "1" * 64,
                    "started": True,
                    "state": {"running": {"startedAt": "2024-05-01T10:00:04Z"}},
                }
            ],
        },
    }
    return pod


def populate(kube: FakeKube, owners: int, per_owner: int) -> dict[str, int]:
    policies = PolicySet.from_configmaps(shipped_policies())
    config = WebhookConfig()
    nodes = [node(f"gpu-{i:03d}", MANUAL_12_4) for i in range(50)]
    inventory = NodeInventory.from_objects(nodes, config)
    for doc in [*shipped_policies(), *nodes]:
        kube.put(doc)
    over = 0
    for index in range(owners):
        namespace = f"team-{index % 25:02d}"
        owner = f"job-{index:04d}"
        gpus = "8" if index % 5 == 0 else str(1 + index % 2)
        over += gpus == "8"
        labels = {"app": owner}
        template = {
            "metadata": {"labels": labels},
            "spec": {
                "containers": [
                    {
                        "name": "train",
                        "image": IMAGE,
                        "resources": {"limits": {"nvidia.com/gpu": gpus}},
                    }
                ]
            },
        }
        deployment_uid = f"{namespace}-{owner}-d"
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": owner, "namespace": namespace, "uid": deployment_uid},
            "spec": {
                "replicas": per_owner,
                "selector": {"matchLabels": labels},
                "template": template,
            },
        }
        rs_uid = f"{namespace}-{owner}-rs"
        replicaset = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"{owner}-7c9d5f",
                "namespace": namespace,
                "uid": rs_uid,
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "name": owner,
                        "uid": deployment_uid,
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "replicas": per_owner,
                "selector": {"matchLabels": labels},
                "template": template,
            },
        }
        kube.put(deployment)
        kube.put(replicaset)
        first = None
        for member in range(per_owner):
            pod = real_pod(namespace, owner, member, gpus, rs_uid)
            if first is None:
                # The webhook's patch at creation (CUDA affinity), computed once per owner.
                decision = evaluate(
                    pod, policies, config, kind="Pod", group="", inventory=inventory
                )
                first = decision.mutated["spec"]["affinity"] if decision.mutated else None
            if first is not None:
                pod["spec"]["affinity"] = first
            kube.put(pod)
    size = len(json.dumps(real_pod("x", "y", 0, "1", "z")))
    return {
        "owners": owners,
        "pods": owners * per_owner,
        "over_limit_owners": over,
        "pod_json_bytes": size,
    }


def run_cli(kubeconfig: Path, folder: Path) -> dict[str, Any]:
    script = "import sys; from webhook.cli import main; sys.exit(main(sys.argv[1:]))"
    command = [sys.executable, "-c", script, "audit", "--kubeconfig", str(kubeconfig)]
    command += ["--policies", str(folder), "-o", "summary"]
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    before, cpu_before = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak, cpu = usage.ru_maxrss, usage.ru_utime + usage.ru_stime - cpu_before
    denied = sum(line.startswith("DENIED") for line in done.stdout.splitlines())
    return {
        "exit_code": done.returncode,
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu, 2),
        "peak_rss_mib": round(max(peak, before) / 1024, 1),
        "denied_owners": denied,
        "stderr_tail": done.stderr.strip().splitlines()[-1:] if done.returncode == 2 else [],
    }


async def run_server_audit(
    kubeconfig: Path, folder: Path, page_size: int, page_pause: float
) -> dict[str, Any]:
    from webhook.sources.auditor import Auditor
    from webhook.sources.files import policy_files, read_documents
    from webhook.sources.store import PolicyStore

    store = PolicyStore()
    store.replace(
        PolicySet.from_configmaps(
            doc for file in policy_files(folder) for doc in read_documents(file)
        )
    )
    auditor = Auditor(
        store,
        WebhookConfig(),
        interval=3600,
        kubeconfig=str(kubeconfig),
        page_size=page_size,
        page_pause=page_pause,
    )
    gc.collect()
    before = rss_kib()
    peak = before
    lag = stretch = 0.0
    done = asyncio.Event()

    async def watch() -> None:
        # Wall-clock lag counts time the OS gave other processes too; the loop thread's CPU
        # time between two turns of this ticker is what the audit itself held the loop for.
        nonlocal peak, lag, stretch
        loop = asyncio.get_running_loop()
        while not done.is_set():
            expected = loop.time() + 0.005
            cpu = time.thread_time()
            await asyncio.sleep(0.005)
            lag = max(lag, loop.time() - expected)
            stretch = max(stretch, time.thread_time() - cpu)
            peak = max(peak, rss_kib())

    watcher = asyncio.create_task(watch())
    started, cpu_started = time.perf_counter(), time.process_time()
    ok = await auditor.run_once()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    await auditor.close()
    done.set()
    await watcher
    gc.collect()
    after = rss_kib()
    status = store.audit
    assert status is not None
    return {
        "ok": ok,
        "page_size": page_size,
        "page_pause_s": page_pause,
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu, 2),
        "rss_before_mib": round(before / 1024, 1),
        "rss_peak_growth_mib": round((peak - before) / 1024, 1),
        "rss_after_growth_mib": round((after - before) / 1024, 1),
        "max_event_loop_lag_ms": round(lag * 1000, 1),
        "max_loop_cpu_stretch_ms": round(stretch * 1000, 1),
        "denied_owners": status.denied,
        "list_requests": status.requests,
        "reports_written": status.reports_written,
    }


async def warm_up(kubeconfig: Path, folder: Path) -> None:
    """Import and exercise the client once, and load the shipped image knowledge (as `gpu-webhook
    serve` does at start), so the figures are the audit's, not one-time loads'."""
    from webhook.sources.audit import AuditOptions, audit_cluster

    _ = WebhookConfig().image_rules
    await audit_cluster(
        str(kubeconfig),
        WebhookConfig(),
        policies=PolicySet.from_configmaps(shipped_policies()),
        options=AuditOptions(namespace="absent"),
    )


def main() -> int:
    parser = cli.parser(__doc__)
    parser.add_argument("--owners", type=int, default=500)
    parser.add_argument("--pods-per-owner", type=int, default=20)
    cli.add_json(parser, help="print one JSON object")
    parser.add_argument(
        "--no-gc-freeze",
        action="store_true",
        help="skip the gc.freeze() that `gpu-webhook serve` does after start-up, to see what "
        "the collector's full passes add to the event-loop figure",
    )
    args = parser.parse_args()
    with (
        KubeProcess(populate, args.owners, args.pods_per_owner) as kube,
        tempfile.TemporaryDirectory() as scratch,
    ):
        facts = kube.facts
        directory = Path(scratch)
        path = kubeconfig(directory, kube.port)
        folder = proposed_policies(directory / "proposed")
        cli_run = run_cli(path, folder)
        cli_run["api_requests"] = kube.counts()
        asyncio.run(warm_up(path, folder))
        if not args.no_gc_freeze:  # as `gpu-webhook serve` does once started
            gc.collect()
            gc.freeze()
        kube.counts()
        server_runs = []
        # The server's defaults (pages of 100, 0.1 s apart), then pages of 500 back to back.
        for size, pause in ((PAGE_SIZE, PAGE_PAUSE), (500, 0.0)):
            result = asyncio.run(run_server_audit(path, folder, size, pause))
            result["api_requests"] = kube.counts()
            server_runs.append(result)
    report = {"cluster": facts, "cli": cli_run, "server": server_runs}
    if args.json:
        print(json.dumps(report))
        return 0
    print(
        f"cluster: {facts['pods']} pods in {facts['owners']} Deployments (+ ReplicaSets), "
        f"{facts['over_limit_owners']} over the proposed max; ~{facts['pod_json_bytes']} B per pod"
    )
    print(
        f"CLI: exit {cli_run['exit_code']}, {cli_run['seconds']} s "
        f"({cli_run['cpu_seconds']} s CPU), peak RSS {cli_run['peak_rss_mib']} MiB, "
        f"{cli_run['denied_owners']} owners denied, API requests {cli_run['api_requests']}"
    )
    for run in server_runs:
        print(
            f"server (pages of {run['page_size']}, {run['page_pause_s']} s apart): "
            f"{run['seconds']} s ({run['cpu_seconds']} s CPU), RSS growth peak "
            f"{run['rss_peak_growth_mib']} MiB / after {run['rss_after_growth_mib']} MiB "
            f"(from {run['rss_before_mib']} MiB), event loop held at most "
            f"{run['max_loop_cpu_stretch_ms']} ms of CPU ({run['max_event_loop_lag_ms']} ms "
            f"wall), {run['denied_owners']} owners denied, "
            f"{run['reports_written']} reports written, API requests {run['api_requests']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
