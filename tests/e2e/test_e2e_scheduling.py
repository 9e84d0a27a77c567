"""Where the real kube-scheduler binds GPU pods the webhook placed (issue 28, SPEC §4): the
architecture floor, `cudaCompatibility: backward | minorVersion` and forward compatibility,
through Deployments, StatefulSets, DaemonSets, Jobs (one started the way Kueue starts it) and
CronJobs whose pods the real controllers create.

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

from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.policies.policyset import PolicySet

from .conftest import ROOT, Cluster, cluster_inventory, kapi_nodes, real_scheduler
from .test_e2e_admission import admitted_pod, call, denial, expected_for

pytestmark = pytest.mark.e2e

DATA = ROOT / "tests" / "data" / "cuda"
REQUIRE_12_8 = (DATA / "nvidia-cuda-12.8.1.require").read_text().strip()
REQUIRE_13_0 = (DATA / "nvidia-cuda-13.0.3.require").read_text().strip()
RUN = uuid.uuid4().hex[:6]
# The taint on this run's nodes (see gpu_nodes).
TAINT_KEY = "gaw-sched-only"
GMAJ, GMIN = "nvidia.com/cuda.runtime-version.major", "nvidia.com/cuda.runtime-version.minor"
CMAJ, CMIN = "nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor"
DRIVER, PRODUCT = "nvidia.com/cuda.driver-version.major", "nvidia.com/gpu.product"
DRIVER_MINOR, DRIVER_REVISION = (
    "nvidia.com/cuda.driver-version.minor",
    "nvidia.com/cuda.driver-version.revision",
)


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
    # CUDA 11.0 nodes (issue 37 defect 5): an 11.0 GA driver, and 450.80.02, the first driver
    # with 11.x minor-version compatibility; both report CUDA 11.0.
    "r450ga": _gfd("11.0", "7.0", "450", "Tesla-V100-SXM2-32GB")
    | {DRIVER_MINOR: "51", DRIVER_REVISION: "06"},
    "r450": _gfd("11.0", "7.0", "450", "Tesla-V100-SXM2-32GB")
    | {DRIVER_MINOR: "80", DRIVER_REVISION: "02"},
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


@pytest.fixture(scope="module")
def scheduler(cluster: Cluster) -> dict[str, str]:
    return real_scheduler(cluster, "the scheduling e2e", webhook=True)


@pytest.fixture(scope="module")
def gpu_nodes(
    core: Any, cluster: Cluster, scheduler: dict[str, str], namespace: str
) -> Iterator[dict[str, str]]:
    """short name -> Node name, made by node.sh with 8 GPUs each."""
    # Pods other modules left Pending (no node could take them) would be bound to these nodes
    # the moment they appear, before node.sh's taint is set, and take their GPUs: they are
    # done with, so they go first.
    for pod in core.list_namespaced_pod(namespace).items:
        if not pod.spec.node_name:
            core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
    # Tainted: pods other e2e modules left Pending (unschedulable until now) must not take these
    # nodes' GPUs; this module's pods tolerate the taint.
    specs = {
        short: ({**labels, "gaw-sched": RUN, "gaw-sched-node": short}, "nvidia.com/gpu=8")
        for short, labels in NODES.items()
    }
    with kapi_nodes(
        core, cluster, scheduler, specs, prefix=f"gaw-sched-{RUN}",
        taint=f"{TAINT_KEY}={RUN}:NoSchedule",
    ) as names:  # fmt: skip
        yield names


def _ready(url: str, ca: Path) -> bool:
    import ssl

    try:
        context = ssl.create_default_context(cafile=str(ca))  # written when the server starts
        with urllib.request.urlopen(f"{url}/readyz", context=context, timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def _register(cluster: Cluster, url: str, ca: str, config: str | None) -> None:
    """Register the webhook at `url` with the chart's entries for its config file (the GPU
    access entry depends on it)."""
    extra = ["--config", config] if config else []
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "register-webhook-url.py"), "--url", url,
         "--ca-file", ca, "--kubeconfig", str(cluster.kubeconfig), *extra],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip


ENV_12_8 = [
    {"name": "CUDA_VERSION", "value": "12.8.1"},
    {"name": "NVIDIA_REQUIRE_CUDA", "value": REQUIRE_12_8},
]
# NVIDIA's 12.8.1 declaration with `cuda>=12.0` in place of `cuda>=12.8`: minorVersion never
# places below what an image declares (issue 37 defect 5), so with the real declaration its
# affinity would be backward's and the modes could not be told apart by the probe.
PROBE_ENV = [
    ENV_12_8[0],
    {"name": "NVIDIA_REQUIRE_CUDA", "value": REQUIRE_12_8.replace("cuda>=12.8", "cuda>=12.0", 1)},
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
        _register(cluster, url, str(tmp_path / "ca.crt"), str(path))
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
        _register(cluster, scheduler["url"], scheduler["ca"], os.environ.get("E2E_WEBHOOK_CONFIG"))
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
    toleration = {"key": TAINT_KEY, "operator": "Equal", "value": RUN, "effect": "NoSchedule"}
    return {
        "metadata": meta,
        "spec": {
            "nodeSelector": selector,
            "tolerations": [toleration],
            "containers": [_container(image, env)],
        },
    }


# The create method of each kind on the typed clients (apps/v1 or batch/v1).
CREATE = {
    "Deployment": "create_namespaced_deployment",
    "StatefulSet": "create_namespaced_stateful_set",
    "DaemonSet": "create_namespaced_daemon_set",
    "Job": "create_namespaced_job",
    "CronJob": "create_namespaced_cron_job",
}


def workload(kind: str, app: str, template: dict[str, Any], *, suspend: bool = False) -> Any:
    """A `kind` running `template` (one pod; a DaemonSet: one per selected node)."""
    spec: dict[str, Any] = {"template": template}
    if kind in ("Job", "CronJob"):
        template["spec"]["restartPolicy"] = "Never"
        spec = {"backoffLimit": 0, "template": template, **({"suspend": True} if suspend else {})}
        if kind == "CronJob":
            # Suspended: its schedule never fires; a Job is triggered from it (run_workload).
            spec = {"schedule": "* * * * *", "suspend": True, "jobTemplate": {"spec": spec}}
    else:
        spec["selector"] = {"matchLabels": {"app": app}}
        if kind != "DaemonSet":
            spec["replicas"] = 1
        if kind == "StatefulSet":
            spec["serviceName"] = app  # no Service needed for the pods to be made and bound
    group = "batch/v1" if kind in ("Job", "CronJob") else "apps/v1"
    return {"apiVersion": group, "kind": kind, "metadata": {"name": app}, "spec": spec}


def create(kind: str, obj: dict[str, Any], *, apps: Any, batch: Any, namespace: str,
           dry_run: str | None = None) -> tuple[dict[str, Any], list[str]]:  # fmt: skip
    """Create `obj` through the webhook; the object as created and the warnings shown."""
    api = batch if kind in ("Job", "CronJob") else apps
    extra = {"dry_run": dry_run} if dry_run else {}
    return call(getattr(api, CREATE[kind]), namespace, obj, **extra)


def job_from_cronjob(cronjob: Mapping[str, Any]) -> dict[str, Any]:
    """What `kubectl create job NAME --from=cronjob/CRON` creates: a Job with the CronJob's
    jobTemplate, the `cronjob.kubernetes.io/instantiate: manual` annotation and a controller
    reference to the CronJob (kubectl staging/src/k8s.io/kubectl/pkg/cmd/create/create_job.go,
    createJobFromCronJob)."""
    template = cronjob["spec"]["jobTemplate"]
    meta = template.get("metadata") or {}
    name = cronjob["metadata"]["name"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{name}-manual",
            "annotations": {"cronjob.kubernetes.io/instantiate": "manual",
                            **(meta.get("annotations") or {})},
            "labels": meta.get("labels") or {},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": name,
                                 "uid": cronjob["metadata"]["uid"], "controller": True}],
        },
        "spec": template["spec"],
    }  # fmt: skip


def scheduled(core: Any, namespace: str, app: str, pods: int = 1) -> dict[str, str | None]:
    """pod name -> the node the scheduler bound it to (None: found Unschedulable), once
    `pods` pods of `app` are decided."""
    deadline = time.monotonic() + BIND_SECONDS
    decided: dict[str, str | None] = {}
    while time.monotonic() < deadline:
        for pod in core.list_namespaced_pod(namespace, label_selector=f"app={app}").items:
            if pod.spec.node_name:
                decided[pod.metadata.name] = str(pod.spec.node_name)
            for condition in pod.status.conditions or []:
                if condition.type == "PodScheduled" and condition.reason == "Unschedulable":
                    decided[pod.metadata.name] = None
        if len(decided) >= pods:
            return decided
        time.sleep(0.5)
    raise AssertionError(f"{app}: {len(decided)} of {pods} pods bound or unschedulable")


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
    kueue: bool = False,
) -> str | None:
    """Create a `kind` (Deployment, StatefulSet, Job or CronJob) whose pod needs one GPU on this
    run's nodes (pinned to `node` when given); returns the node the scheduler bound its pod to,
    or None when the scheduler found it unschedulable.

    A CronJob is triggered as `kubectl create job --from=cronjob/…` does. `kueue` (a Job):
    created suspended on all of this run's nodes, then started the way Kueue starts an admitted
    Job: one UPDATE setting `suspend: false` and its ResourceFlavor's nodeSelector (here the pin
    to `node`) in the template (kueue pkg/controller/jobs/job/job_controller.go
    RunWithPodSetsInfo: Suspend = false, then pkg/podset/podset.go Merge)."""
    app = f"{kind.lower()}-{uuid.uuid4().hex[:6]}"
    template = _template(app, image, None if kueue else node, env, annotations)
    kw = {"apps": apps, "batch": batch, "namespace": namespace}
    created, _ = create(kind, workload(kind, app, template, suspend=kueue), **kw)
    if kind == "CronJob":
        create("Job", job_from_cronjob(created), **kw)
    if kueue:
        assert node, "Kueue's flavor pins the Job to a node here"
        start = {
            "spec": {
                "suspend": False,
                "template": {"spec": {"nodeSelector": {"gaw-sched-node": node}}},
            }
        }
        # Not denied (an ApiException otherwise), and the API server took both changes.
        started, _ = call(batch.patch_namespaced_job, app, namespace, start)
        assert started["spec"]["suspend"] is False
        assert started["spec"]["template"]["spec"]["nodeSelector"]["gaw-sched-node"] == node
    (bound,) = scheduled(core, namespace, app).values()
    return bound


@pytest.fixture
def batch(cluster: Cluster) -> Any:
    from kubernetes import client

    return client.BatchV1Api(cluster.api)


CUDA13 = "nvidia/cuda:13.0.0-base-ubuntu24.04"
CUDA129 = "nvidia/cuda:12.9.1-base-ubuntu22.04"
CUDA124 = "nvidia/cuda:12.4.1-base-ubuntu22.04"
CUDA128 = "nvidia/cuda:12.8.1-base-ubuntu22.04"
CUDA118 = "nvidia/cuda:11.8.0-base-ubuntu22.04"
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
        # the kinds whose pods other controllers make: the same rule
        assert run("StatefulSet", CUDA13) == "h100"
        assert run("StatefulSet", CUDA124, node="a100") is None
        assert run("CronJob", CUDA13) == "h100"
        assert run("CronJob", CUDA129, node="l4") is None
        # Kueue starts the Job on the V100 flavor: the pod made then still needs compute 7.5
        assert run("Job", CUDA13, node="v100", kueue=True) is None
        assert run("Job", CUDA124, node="l4", kueue=True) == "l4"


def test_minor_version_rule(workloads: Any) -> None:
    serve, run = workloads
    with serve(MINOR_VERSION):
        # same major family: required; the 12.8 driver takes a 12.9 image
        assert run("Deployment", CUDA129, node="l4") == "l4"
        # ... but never below what the image declares: NVIDIA_REQUIRE_CUDA cuda>=12.8, which
        # the toolkit's legacy mode checks, keeps it off the 12.2 driver (issue 37 defect 5)
        assert run("Job", CUDA128, node="a100", env=ENV_12_8) is None
        disabled = [*ENV_12_8, {"name": "NVIDIA_DISABLE_REQUIRE", "value": "true"}]
        assert run("Job", CUDA128, node="a100", env=disabled) == "a100"
        # CUDA 11.x: an 11.0 node only with driver ≥ 450.80.02, by GFD's driver labels
        assert run("Job", CUDA118, node="r450") == "r450"
        assert run("Job", CUDA118, node="r450ga") is None
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
        assert run("StatefulSet", CUDA129, node="l4") == "l4"
        assert run("CronJob", CUDA128, node="a100", env=ENV_12_8) is None
        assert run("Job", CUDA129, node="l4", kueue=True) == "l4"
    with serve(BACKWARD):
        assert run("Job", CUDA118, node="r450") is None  # 11.8 needs an 11.8 driver


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
        # a queued Job started by Kueue on the A100 flavor: the pod gets the forward terms
        assert run("Job", CUDA128, node="a100", env=ENV_12_8, kueue=True) == "a100"
        assert run("CronJob", CUDA13, node="a100", env=ENV_13_0) == "a100"
        assert run("StatefulSet", CUDA128, node="a100") is None


def _pinned_pod(node: str, env: list[dict[str, str]] | None) -> dict[str, Any]:
    """A pod bound with spec.nodeName (it skips the scheduler)."""
    toleration = {"key": TAINT_KEY, "operator": "Equal", "value": RUN, "effect": "NoSchedule"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pinned-{uuid.uuid4().hex[:6]}"},
        "spec": {
            "nodeName": node,
            "tolerations": [toleration],
            "containers": [_container(CUDA128, env)],
        },
    }


def test_pinned_pods_under_forward_compatibility_and_deny(
    workloads: Any, apps: Any, batch: Any, core: Any, namespace: str, gpu_nodes: dict[str, str],
) -> None:  # fmt: skip
    """Issue 37 defect 4: a pod pinned to a forward-compatible node (the R535 A100 for NVIDIA's
    12.8.1 image) is checked with forward compatibility, as the scheduler would place an
    unpinned one there: the DaemonSet controller's pod is admitted and bound (it was denied
    with `noCompatibleNode: deny`, the CUDA rule alone), and so is a spec.nodeName pod."""
    serve, _ = workloads
    app = f"daemonset-{uuid.uuid4().hex[:6]}"
    daemonset = workload("DaemonSet", app, _template(app, CUDA128, "a100", ENV_12_8, None))
    kw = {"apps": apps, "batch": batch, "namespace": namespace}
    with serve({**FORWARD, "noCompatibleNode": "deny"}):
        create("DaemonSet", daemonset, **kw)
        try:
            assert list(scheduled(core, namespace, app).values()) == [gpu_nodes["a100"]]
        finally:
            apps.delete_namespaced_daemon_set(app, namespace)
        create_pod = core.create_namespaced_pod
        created, shown = call(create_pod, namespace, _pinned_pod(gpu_nodes["a100"], ENV_12_8))
        assert created["spec"]["nodeName"] == gpu_nodes["a100"]
        # No CUDA warning; the /dev/shm fix (on by default) says what it mounted.
        assert shown == ['mounted a 16Gi memory-backed /dev/shm in container "main" (shm fix)']
        core.delete_namespaced_pod(created["metadata"]["name"], namespace, grace_period_seconds=0)
        # Without the image's declaration: the CUDA rule alone, and the 12.2 driver is denied.
        message = denial(create_pod, namespace, _pinned_pod(gpu_nodes["a100"], None), dry_run="All")
        assert message.endswith(
            f"node {gpu_nodes['a100']} supports CUDA 12.2; this pod needs CUDA ≥ 12.8."
        )


def test_an_image_change_replaces_the_forward_compatibility_term(
    workloads: Any, apps: Any, core: Any, namespace: str, gpu_nodes: dict[str, str],
) -> None:  # fmt: skip
    """Issue 37 defect 2: with `mutateTemplates`, a Deployment's template changed from a CUDA
    12.4 image to a 12.8 one gets the 12.8 terms, forward-compatibility term included. It kept
    the 12.4 terms ("kept as is"), and its new pod was bound to the 12.4 driver, which cannot
    run 12.8."""
    serve, _ = workloads
    require = "cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=tesla,driver>=535,driver<536"
    env_12_4 = [
        {"name": "CUDA_VERSION", "value": "12.4.1"},
        {"name": "NVIDIA_REQUIRE_CUDA", "value": require},
    ]
    app = f"deployment-{uuid.uuid4().hex[:6]}"
    template = _template(app, CUDA124, "manual", env_12_4, None)
    with serve({**FORWARD, "mutateTemplates": True}):
        call(apps.create_namespaced_deployment, namespace, workload("Deployment", app, template))
        try:
            (first,) = scheduled(core, namespace, app).items()
            assert first[1] == gpu_nodes["manual"]  # 12.4 on the 12.4 node
            change = {"spec": {"template": {"spec": {"containers": [
                {"name": "main", "image": CUDA128, "env": ENV_12_8}]}}}}  # fmt: skip
            updated, shown = call(apps.patch_namespaced_deployment, app, namespace, change)
            assert not any("kept as is" in w for w in shown), shown
            terms = updated["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]  # fmt: skip
            drivers = [
                e["values"] for t in terms for e in t["matchExpressions"] if e["key"] == DRIVER
            ]
            assert drivers == [["470", "535", "550", "560", "565"]]
            # The new ReplicaSet's pod needs 12.8: not on the 12.4 node.
            deadline = time.monotonic() + BIND_SECONDS
            new: str | None = None
            while new is None:
                assert time.monotonic() < deadline, "the rollout's new pod never appeared"
                pods = core.list_namespaced_pod(namespace, label_selector=f"app={app}").items
                new = next((p.metadata.name for p in pods if p.metadata.name != first[0]), None)
                time.sleep(0.5)
            decided = scheduled(core, namespace, app, pods=2)
            assert decided[new] is None
        finally:
            apps.delete_namespaced_deployment(app, namespace)


def test_daemonset_pods_are_pinned_and_warned_about(
    workloads: Any, apps: Any, batch: Any, core: Any, namespace: str, policies: PolicySet,
    gpu_nodes: dict[str, str],
) -> None:  # fmt: skip
    """SPEC §4 "DaemonSet pods": a pod on every node the DaemonSet selects, even one that
    cannot run the image (the V100 for CUDA 13: compute 7.0 < 7.5), with no CUDA affinity, and
    the webhook's warnings on the DaemonSet and on each unfit pod."""
    serve, _ = workloads
    app = f"daemonset-{uuid.uuid4().hex[:6]}"
    daemonset = workload("DaemonSet", app, _template(app, CUDA13, None, None, None))
    kw = {"apps": apps, "batch": batch, "namespace": namespace}
    with serve(BACKWARD) as config:
        inventory = cluster_inventory(core, config)
        admitted = {**daemonset, "metadata": {**daemonset["metadata"], "namespace": namespace}}
        expected = evaluate(admitted, policies, config, kind="DaemonSet", namespace=namespace,
                            inventory=inventory)  # fmt: skip
        assert expected.allowed
        assert any("compute capability ≥ 7.5" in w for w in expected.warnings)
        _, shown = create("DaemonSet", daemonset, **kw)
        assert {*expected.notes, *expected.warnings} <= set(shown)
        try:
            bound = scheduled(core, namespace, app, pods=len(gpu_nodes))
            assert sorted(n or "" for n in bound.values()) == sorted(gpu_nodes.values())
            listed = core.list_namespaced_pod(namespace, label_selector=f"app={app}").items
            pods = {p.spec.node_name: p for p in listed}
            for name, pod in pods.items():
                # only the DaemonSet controller's pin (pkg/controller/daemon/util
                # ReplaceDaemonSetPodNodeNameNodeAffinity): no CUDA or compute term
                affinity = pod.spec.affinity.node_affinity
                terms = affinity.required_during_scheduling_ignored_during_execution
                assert [t.match_fields[0].values for t in terms.node_selector_terms] == [[name]]
                assert all(not t.match_expressions for t in terms.node_selector_terms)
            # The V100's pod as the controller created it: the webhook warns that its node
            # cannot run it (the controller sees that warning; a dry run shows it here).
            v100 = core.api_client.sanitize_for_serialization(pods[gpu_nodes["v100"]])
            spec = {k: v for k, v in v100["spec"].items() if k not in ("nodeName", "priority")}
            copy = {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"generateName": f"{app}-", "labels": v100["metadata"]["labels"],
                                 "ownerReferences": v100["metadata"]["ownerReferences"]},
                    "spec": spec}  # fmt: skip
            want = expected_for(copy, namespace, policies, config, inventory)
            problem = f"node {gpu_nodes['v100']} has compute capability 7.0; this DaemonSet pod"
            assert any(w.startswith(problem) for w in want.warnings), want.warnings
            _, shown = call(core.create_namespaced_pod, namespace, copy, dry_run="All")
            assert set(want.warnings) <= set(shown)
        finally:
            apps.delete_namespaced_daemon_set(app, namespace)


def test_admitted_pod_is_what_the_core_predicts(
    core: Any, namespace: str, policies: PolicySet, gpu_nodes: dict[str, str]
) -> None:
    """Guard for the helpers above: the probe's expected answer is a real mutation."""
    config = load_config({"registryLookups": {"publicRegistries": False}})
    decision = expected_for(_probe(), namespace, policies, config, cluster_inventory(core, config))
    assert decision.allowed
    assert _affinity(decision.mutated or admitted_pod(_probe(), namespace)) is not None
