"""Where the real kube-scheduler binds GPU pods the webhook placed (issue 28, SPEC §4): the
architecture floor, `cudaCompatibility: backward | minorVersion` and forward compatibility,
through Deployments and Jobs created by the real controllers.

Needs `start.sh --controllers` (the scheduler and controller-manager) and the webhook
registered by URL: scripts/e2e-kapi.sh with KAPI_CONTROLLERS=1 sets E2E_SCHEDULER=1 and the
rest. Nodes are made with the kapi tools' node.sh (schedulable, with GPU capacity, no kubelet:
a bound pod stays Pending with spec.nodeName set). Each mode runs its own `gpu-webhook serve`
with that mode's config, registered in place of the session's webhook and restored afterwards.

Every pod selects this run's nodes with a nodeSelector on `gaw-sched` (and, to pin it to one
node, `gaw-sched-node`), labels the webhook does not read, so other nodes never take part.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.core.config import WebhookConfig, load_config
from webhook.core.policyset import PolicySet

from .conftest import ROOT, Cluster, cluster_inventory
from .test_e2e_admission import admitted_pod, call, expected_for

pytestmark = pytest.mark.e2e

DATA = ROOT / "tests" / "data" / "cuda"
REQUIRE_12_8 = (DATA / "nvidia-cuda-12.8.1.require").read_text().strip()
REQUIRE_13_0 = (DATA / "nvidia-cuda-13.0.3.require").read_text().strip()
RUN = uuid.uuid4().hex[:6]
GMAJ, GMIN = "nvidia.com/cuda.runtime-version.major", "nvidia.com/cuda.runtime-version.minor"
CMAJ, CMIN = "nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor"
DRIVER, PRODUCT = "nvidia.com/cuda.driver-version.major", "nvidia.com/gpu.product"


def _gfd(cuda: str, compute: str, driver: str, product: str) -> dict[str, str]:
    major, minor = cuda.split(".")
    cmajor, cminor = compute.split(".")
    return {
        GMAJ: major,
        GMIN: minor,
        CMAJ: cmajor,
        CMIN: cminor,
        DRIVER: driver,
        PRODUCT: product,
    }


# The mixed inventory (issue 28): GFD and manual label schemes, a V100-class node on a CUDA 13.0
# (R580) driver, data-center nodes on R535 and R580, and a node without GPU labels.
NODES: dict[str, dict[str, str]] = {
    "v100": _gfd("13.0", "7.0", "580", "Tesla-V100-SXM2-32GB"),
    "h100": _gfd("13.0", "9.0", "580", "NVIDIA-H100-80GB-HBM3"),
    "l4": _gfd("12.8", "8.9", "570", "NVIDIA-L4"),
    "a100": _gfd("12.2", "8.0", "535", "NVIDIA-A100-SXM4-80GB"),
    "manual": {"cuda-major-version": "12", "cuda-minor-version": "4"},
    "plain": {},
}

BACKWARD: dict[str, Any] = {}
MINOR_VERSION: dict[str, Any] = {"cudaCompatibility": "minorVersion"}
FORWARD: dict[str, Any] = {
    "forwardCompatibleNodes": {
        "matchExpressions": [
            {
                "key": PRODUCT,
                "operator": "In",
                "values": ["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"],
            }
        ]
    }
}
BIND_SECONDS = 60.0


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.skip(f"scheduling e2e needs {name} (scripts/e2e-kapi.sh with KAPI_CONTROLLERS=1)")
    return value


@pytest.fixture(scope="module")
def scheduler(cluster: Cluster) -> dict[str, str]:
    if os.environ.get("E2E_SCHEDULER") != "1" or cluster.mode != "url":
        pytest.skip(
            "scheduling e2e needs the real scheduler and a webhook registered by URL: "
            "KAPI_CONTROLLERS=1 scripts/e2e-kapi.sh"
        )
    return {
        "tools": _env("E2E_KAPI_TOOLS"),
        "bin": _env("E2E_KAPI_BIN"),
        "url": _env("E2E_WEBHOOK_URL"),
        "ca": _env("E2E_WEBHOOK_CA"),
        "port": _env("E2E_WEBHOOK_PORT"),
    }


@pytest.fixture(scope="module")
def gpu_nodes(
    core: Any, cluster: Cluster, scheduler: dict[str, str], namespace: str
) -> Iterator[dict[str, str]]:
    """short name -> Node name, made by node.sh with 8 GPUs each."""
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "PATH": f"{scheduler['bin']}:{os.environ.get('PATH', '')}",
    }
    names: dict[str, str] = {}
    try:
        for short, labels in NODES.items():
            name = f"gaw-sched-{RUN}-{short}"
            args = [f"{k}={v}" for k, v in labels.items()]
            args += [f"gaw-sched={RUN}", f"gaw-sched-node={short}"]
            subprocess.run(
                ["bash", str(Path(scheduler["tools"]) / "node.sh"), name, *args,
                 "--capacity", "nvidia.com/gpu=8"],
                check=True, env=env, capture_output=True, timeout=60,
            )  # fmt: skip
            names[short] = name
        yield names
    finally:
        for name in names.values():
            core.delete_node(name)


def _ready(url: str, ca: Path) -> bool:
    import ssl

    try:
        context = ssl.create_default_context(cafile=str(ca))  # written when the server starts
        with urllib.request.urlopen(f"{url}/readyz", context=context, timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def _register(cluster: Cluster, url: str, ca: str) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "register-webhook-url.py"), "--url", url,
         "--ca-file", ca, "--kubeconfig", str(cluster.kubeconfig)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip


PROBE_ENV = [
    {"name": "CUDA_VERSION", "value": "12.8.1"},
    {"name": "NVIDIA_REQUIRE_CUDA", "value": REQUIRE_12_8},
]


def _probe() -> dict[str, Any]:
    """A pod whose affinity differs in each mode (backward, minorVersion, forward)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"probe-{uuid.uuid4().hex[:6]}"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "nvidia/cuda:12.8.1-base-ubuntu22.04",
                    "env": PROBE_ENV,
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ]
        },
    }


def _affinity(obj: Mapping[str, Any]) -> Any:
    return (obj.get("spec") or {}).get("affinity")


@contextmanager
def serving(
    settings: dict[str, Any],
    *,
    cluster: Cluster,
    core: Any,
    scheduler: dict[str, str],
    namespace: str,
    policies: PolicySet,
    tmp_path: Path,
) -> Iterator[WebhookConfig]:
    """A webhook with `settings` (public registry lookups off) serving the cluster, in place of
    the session's one; yields its config once the API server calls it."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({**settings, "registryLookups": {"publicRegistries": False}}))
    config = load_config(path)
    port = str(int(scheduler["port"]) + 7)
    url = f"https://127.0.0.1:{port}"
    gpu_webhook = Path(sys.executable).parent / "gpu-webhook"
    log = (tmp_path / "webhook.log").open("w")
    server = subprocess.Popen(
        [str(gpu_webhook), "serve", "--self-signed", "--cert-dir", str(tmp_path), "--host",
         "127.0.0.1", "--port", port, "--kubeconfig", str(cluster.kubeconfig), "--config",
         str(path), "--log-level", "warning"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not _ready(url, tmp_path / "ca.crt"):
            assert server.poll() is None, (tmp_path / "webhook.log").read_text()
            assert time.monotonic() < deadline, "the mode's webhook never turned ready"
            time.sleep(0.5)
        _register(cluster, url, str(tmp_path / "ca.crt"))
        # The API server picks the new registration up through its own watch: wait until the
        # probe's answer is this config's.
        inventory = cluster_inventory(core, config)
        want = _affinity(
            expected_for(_probe(), namespace, policies, config, inventory).mutated or {}
        )
        deadline = time.monotonic() + 30
        while True:
            returned, _ = call(core.create_namespaced_pod, namespace, _probe(), dry_run="All")
            if _affinity(returned) == want:
                break
            assert time.monotonic() < deadline, f"{_affinity(returned)} != {want}"
            time.sleep(0.5)
        yield config
    finally:
        _register(cluster, scheduler["url"], scheduler["ca"])
        server.terminate()
        server.wait(timeout=30)
        log.close()


def _container(image: str, env: list[dict[str, str]] | None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": image,
        "command": ["sleep", "3600"],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    if env:
        container["env"] = env
    return container


def _template(
    app: str, image: str, node: str | None, env: list[dict[str, str]] | None,
    annotations: dict[str, str] | None,
) -> dict[str, Any]:  # fmt: skip
    selector = {"gaw-sched": RUN, **({"gaw-sched-node": node} if node else {})}
    meta: dict[str, Any] = {"labels": {"app": app}}
    if annotations:
        meta["annotations"] = annotations
    return {
        "metadata": meta,
        "spec": {"nodeSelector": selector, "containers": [_container(image, env)]},
    }


def run_workload(
    kind: str,
    *,
    apps: Any,
    batch: Any,
    core: Any,
    namespace: str,
    image: str,
    node: str | None = None,
    env: list[dict[str, str]] | None = None,
    annotations: dict[str, str] | None = None,
) -> str | None:
    """Create a Deployment or Job whose pod needs one GPU on this run's nodes (pinned to
    `node` when given); returns the node the scheduler bound its pod to, or None when the
    scheduler found it unschedulable."""
    app = f"{kind.lower()}-{uuid.uuid4().hex[:6]}"
    template = _template(app, image, node, env, annotations)
    if kind == "Deployment":
        apps.create_namespaced_deployment(
            namespace,
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": app},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": app}},
                         "template": template},
            },
        )  # fmt: skip
    else:
        template["spec"]["restartPolicy"] = "Never"
        batch.create_namespaced_job(
            namespace,
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": app},
                "spec": {"backoffLimit": 0, "template": template},
            },
        )
    deadline = time.monotonic() + BIND_SECONDS
    while time.monotonic() < deadline:
        for pod in core.list_namespaced_pod(namespace, label_selector=f"app={app}").items:
            if pod.spec.node_name:
                return str(pod.spec.node_name)
            for condition in pod.status.conditions or []:
                if condition.type == "PodScheduled" and condition.reason == "Unschedulable":
                    return None
        time.sleep(0.5)
    raise AssertionError(f"{kind} {app}: no pod bound or found unschedulable in {BIND_SECONDS}s")


@pytest.fixture
def batch(cluster: Cluster) -> Any:
    from kubernetes import client

    return client.BatchV1Api(cluster.api)


CUDA13 = "nvidia/cuda:13.0.0-base-ubuntu24.04"
CUDA129 = "nvidia/cuda:12.9.1-base-ubuntu22.04"
CUDA124 = "nvidia/cuda:12.4.1-base-ubuntu22.04"
CUDA128 = "nvidia/cuda:12.8.1-base-ubuntu22.04"
ENV_12_8 = PROBE_ENV
ENV_13_0 = [
    {"name": "CUDA_VERSION", "value": "13.0.0"},
    {"name": "NVIDIA_REQUIRE_CUDA", "value": REQUIRE_13_0},
]


@pytest.fixture
def workloads(
    cluster: Cluster, core: Any, apps: Any, batch: Any, scheduler: dict[str, str],
    namespace: str, policies: PolicySet, gpu_nodes: dict[str, str], tmp_path: Path,
) -> Any:  # fmt: skip
    """(serving, run): start a mode's webhook; run a workload and map the bound node back to
    its short name."""
    names = {v: k for k, v in gpu_nodes.items()}

    def serve(settings: dict[str, Any]) -> Any:
        return serving(
            settings, cluster=cluster, core=core, scheduler=scheduler, namespace=namespace,
            policies=policies, tmp_path=tmp_path,
        )  # fmt: skip

    def run(kind: str, image: str, **kw: Any) -> str | None:
        bound = run_workload(kind, apps=apps, batch=batch, core=core, namespace=namespace,
                             image=image, **kw)  # fmt: skip
        return None if bound is None else names.get(bound, bound)

    return serve, run


def test_backward_rule_and_the_architecture_floor(workloads: Any) -> None:
    serve, run = workloads
    with serve(BACKWARD):
        # CUDA ≥ 13.0: v100 and h100 by driver; the floor 7.5 leaves h100 only
        assert run("Deployment", CUDA13) == "h100"
        assert run("Job", CUDA13, node="v100") is None
        # 12.9 on a 12.8 driver: not under the backward rule
        assert run("Deployment", CUDA129, node="l4") is None
        # the manual label scheme beside GFD's
        assert run("Deployment", CUDA124, node="manual") == "manual"
        # a node without GPU labels is never a CUDA node
        assert run("Job", CUDA124, node="plain") is None
        # an image declaring R535 forward compatibility, but forwardCompatibleNodes unset
        assert run("Job", CUDA128, node="a100", env=ENV_12_8) is None


def test_minor_version_rule(workloads: Any) -> None:
    serve, run = workloads
    with serve(MINOR_VERSION):
        # same major family: required; the 12.8 driver takes a 12.9 image
        assert run("Deployment", CUDA129, node="l4") == "l4"
        assert run("Job", CUDA128, node="a100", env=ENV_12_8) == "a100"
        # unpinned: D ≥ 12.9 is preferred with weight 100, so a 13.0 node wins
        assert run("Deployment", CUDA129) in ("v100", "h100")
        # the pod asks for backward: the 12.8 node is no longer compatible
        assert (
            run(
                "Deployment",
                CUDA129,
                node="l4",
                annotations={"features.alauda.io/cuda-compatibility": "backward"},
            )
            is None
        )
        # the floor still holds: no 13.x image on the V100
        assert run("Job", CUDA13, node="v100") is None


def test_forward_compatibility_on_the_named_nodes(workloads: Any) -> None:
    serve, run = workloads
    with serve(FORWARD):
        # NVIDIA's 12.8.1 image lists R535: the A100 on R535 runs it
        assert run("Job", CUDA128, node="a100", env=ENV_12_8) == "a100"
        # the same CUDA without the image's declaration: no forward compatibility
        assert run("Deployment", CUDA128, node="a100") is None
        # 13.0.3 lists R535 too; compute 8.0 meets the 7.5 floor
        assert run("Job", CUDA13, node="a100", env=ENV_13_0) == "a100"
        # the V100 has the driver but not the architecture
        assert run("Job", CUDA13, node="v100", env=ENV_13_0) is None


def test_admitted_pod_is_what_the_core_predicts(
    core: Any, namespace: str, policies: PolicySet, gpu_nodes: dict[str, str]
) -> None:
    """Guard for the helpers above: the probe's expected answer is a real mutation."""
    config = load_config({"registryLookups": {"publicRegistries": False}})
    decision = expected_for(_probe(), namespace, policies, config, cluster_inventory(core, config))
    assert decision.allowed
    assert _affinity(decision.mutated or admitted_pod(_probe(), namespace)) is not None
