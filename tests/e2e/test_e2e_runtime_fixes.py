"""Runtime fixes on the real API server and scheduler (issue 39, SPEC §14): an amd64-only image in
a cluster of amd64 and arm64 GPU nodes is bound to amd64, a multi-arch one to either; /dev/shm
and IPC_LOCK are in the stored pod; Pod Security `restricted` and `baseline` namespaces admit
every pod the webhook mutated (the API server runs PodSecurity admission: checked here); a
PyTorch DDP Job or Deployment gets its /dev/shm from the shipped config (the rule is on by
default) in the pods the controllers create.

Needs KAPI_CONTROLLERS=1 scripts/e2e-kapi.sh (the real scheduler; a webhook registered by URL).
A webhook with this module's config runs in place of the session's one (test_e2e_scheduling's
`serving`): the shipped defaults plus an `architecture.images` table (the images here are in no
registry); its Nodes are tainted so no other module's pods take them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from webhook.core.policies.policyset import PolicySet

from .conftest import Cluster, api_error, kapi_nodes, real_scheduler
from .test_e2e_admission import call
from .test_e2e_scheduling import create, scheduled, serving, workload

pytestmark = pytest.mark.e2e

RUN = uuid.uuid4().hex[:6]
TAINT = "gaw-rf-only"
RDMA = "rdma/hca_shared_devices_a"
AMD_GPU, ASCEND = "amd.com/gpu", "huawei.com/Ascend910"
AMD64_ONLY, MULTI = "registry.local/ml/amd64-only-trainer:1.0", "registry.local/ml/multi-arch:1.0"
# /dev/shm and RDMA as shipped (WebhookConfig's defaults, the chart's values): not set here.
SETTINGS: dict[str, Any] = {
    "runtimeFixes": {
        "architecture": {
            "images": [
                {"image": "amd64-only", "architectures": ["amd64"]},
                {"image": "multi-arch", "architectures": ["amd64", "arm64"]},
            ]
        },
    }
}
LEVEL = "pod-security.kubernetes.io/enforce"
BIND_SECONDS = 60.0


@pytest.fixture(scope="module")
def scheduler(cluster: Cluster) -> dict[str, str]:
    return real_scheduler(cluster, "the runtime fixes e2e", webhook=True)


@pytest.fixture(scope="module")
def nodes(core: Any, cluster: Cluster, scheduler: dict[str, str]) -> Iterator[dict[str, str]]:
    """arch -> Node name: one amd64 and one arm64 GPU node (CUDA 12.4, 16 GPUs, RDMA, 8 AMD
    GPUs and 8 Ascend 910 NPUs)."""
    labels = {"cuda-major-version": "12", "cuda-minor-version": "4", "gaw-rf": RUN}
    # AMD GPUs and Ascend NPUs too: every vendor's pod gets /dev/shm (issue 45 item 3).
    capacity = f"nvidia.com/gpu=16,{RDMA}=16,{AMD_GPU}=8,{ASCEND}=8"
    specs = dict.fromkeys(("amd64", "arm64"), (labels, capacity))
    with kapi_nodes(
        core, cluster, scheduler, specs, prefix=f"gaw-rf-{RUN}", taint=f"{TAINT}={RUN}:NoSchedule"
    ) as made:
        for arch, name in made.items():
            # node.sh labels every node amd64 (a kubelet sets it from GOARCH).
            core.patch_node(name, {"metadata": {"labels": {"kubernetes.io/arch": arch}}})
        yield made


@pytest.fixture(scope="module")
def namespaces(core: Any, shipped_policies_installed: None) -> Iterator[dict[str, str]]:
    """Pod Security level -> a namespace enforcing it."""
    from kubernetes import client

    made: dict[str, str] = {}
    try:
        for level in ("privileged", "baseline", "restricted"):
            name = f"gaw-rf-{RUN}-{level}"
            labels = {LEVEL: level}
            core.create_namespace(
                client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels))
            )
            made[level] = name
        yield made
    finally:
        for name in made.values():
            core.delete_namespace(name)


@pytest.fixture(scope="module")
def fixing(
    nodes: dict[str, str],
    namespaces: dict[str, str],
    cluster: Cluster,
    core: Any,
    scheduler: dict[str, str],
    namespace: str,
    policies: PolicySet,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, Path]]:
    """This module's webhook (its URL and CA), once it knows the new namespaces' levels."""
    directory = tmp_path_factory.mktemp("runtime-fixes")
    with serving(
        SETTINGS,
        cluster=cluster,
        core=core,
        scheduler=scheduler,
        namespace=namespace,
        policies=policies,
        tmp_path=directory,
    ):
        deadline = time.monotonic() + 30
        while "IPC_LOCK" not in str(
            call(core.create_namespaced_pod, namespaces["privileged"], _pod(), dry_run="All")[0]
        ):
            assert time.monotonic() < deadline, "the webhook never saw the namespaces' levels"
            time.sleep(0.5)
        yield f"https://127.0.0.1:{int(scheduler['port']) + 7}", directory / "ca.crt"


def _spec(container: dict[str, Any], *, restricted: bool) -> dict[str, Any]:
    """A pod spec on this module's nodes running `container`; `restricted`: one that Pod Security
    `restricted` admits (k8s.io/pod-security-admission policy: runAsNonRoot, seccompProfile
    RuntimeDefault, capabilities drop ALL, allowPrivilegeEscalation false)."""
    spec: dict[str, Any] = {
        "nodeSelector": {"gaw-rf": RUN},
        "tolerations": [{"key": TAINT, "operator": "Equal", "value": RUN, "effect": "NoSchedule"}],
        "containers": [container],
    }
    if restricted:
        container["securityContext"] = {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        }
        spec["securityContext"] = {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
    return spec


def _pod(image: str = AMD64_ONLY, *, rdma: bool = True, restricted: bool = False) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", **({RDMA: "1"} if rdma else {})}
    container: dict[str, Any] = {
        "name": "trainer",
        "image": image,
        "command": ["sleep", "3600"],
        "env": [{"name": "CUDA_VERSION", "value": "12.4.1"}],
        "resources": {"limits": limits},
    }
    name = f"rf-{uuid.uuid4().hex[:6]}"
    spec = _spec(container, restricted=restricted)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _bound(core: Any, name: str, namespace: str) -> str:
    deadline = time.monotonic() + BIND_SECONDS
    while True:
        node = core.read_namespaced_pod(name, namespace).spec.node_name
        if node:
            return str(node)
        assert time.monotonic() < deadline, f"pod {namespace}/{name} was never bound"
        time.sleep(0.5)


def _caps(pod: dict[str, Any]) -> Any:
    context = pod["spec"]["containers"][0].get("securityContext") or {}
    return (context.get("capabilities") or {}).get("add")


def _shm(pod: dict[str, Any]) -> tuple[Any, Any]:
    spec = pod["spec"]
    volumes = [v for v in spec.get("volumes") or [] if v["name"] == "dshm"]
    mounts = [m for m in spec["containers"][0].get("volumeMounts") or [] if m["name"] == "dshm"]
    return volumes, mounts


SHM = (
    [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}],
    [{"name": "dshm", "mountPath": "/dev/shm"}],
)


def test_amd64_only_image_lands_on_amd64_and_multi_arch_on_either(
    fixing: tuple[str, Path], core: Any, namespaces: dict[str, str], nodes: dict[str, str]
) -> None:
    ns = namespaces["privileged"]
    amd = [call(core.create_namespaced_pod, ns, _pod(AMD64_ONLY))[0] for _ in range(4)]
    multi = [call(core.create_namespaced_pod, ns, _pod(MULTI))[0] for _ in range(4)]
    for pod in amd:
        terms = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert all(
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
            in t["matchExpressions"]
            for t in terms
        )
        assert _bound(core, pod["metadata"]["name"], ns) == nodes["amd64"]
    for pod in multi:
        assert "kubernetes.io/arch" not in str(pod["spec"].get("affinity"))
        assert _bound(core, pod["metadata"]["name"], ns) in nodes.values()


def test_shm_and_ipc_lock_are_in_the_stored_pod(
    fixing: tuple[str, Path], core: Any, namespaces: dict[str, str]
) -> None:
    ns = namespaces["privileged"]
    created, warnings = call(core.create_namespaced_pod, ns, _pod())
    stored = core.api_client.sanitize_for_serialization(
        core.read_namespaced_pod(created["metadata"]["name"], ns)
    )
    assert _shm(stored) == SHM
    assert _caps(stored) == ["IPC_LOCK"]
    assert f'added capability IPC_LOCK to container "trainer" for {RDMA} (rdma fix)' in warnings
    assert 'mounted a 16Gi memory-backed /dev/shm in container "trainer" (shm fix)' in warnings


@pytest.mark.parametrize("level", ["baseline", "restricted"])
def test_pod_security_admits_every_pod_the_webhook_mutated(
    fixing: tuple[str, Path], core: Any, namespaces: dict[str, str], level: str
) -> None:
    from kubernetes.client.exceptions import ApiException

    ns = namespaces[level]
    # PodSecurity admission runs on this API server: a pod adding IPC_LOCK itself is denied.
    forbidden = _pod(rdma=False, restricted=True)
    forbidden["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] = ["IPC_LOCK"]
    with pytest.raises(ApiException) as excinfo:
        core.create_namespaced_pod(ns, forbidden)
    assert "violates PodSecurity" in str(api_error(excinfo.value).get("message"))
    # The webhook's pods: created (mutated: /dev/shm, placement), IPC_LOCK warned about.
    for image in (AMD64_ONLY, MULTI):
        created, warnings = call(core.create_namespaced_pod, ns, _pod(image, restricted=True))
        stored = core.api_client.sanitize_for_serialization(
            core.read_namespaced_pod(created["metadata"]["name"], ns)
        )
        assert _shm(stored) == SHM
        assert "IPC_LOCK" not in (_caps(stored) or [])
        # The longest wording that fits in 120 characters (this run's namespace names are long).
        assert (
            f'container "trainer": RDMA needs IPC_LOCK; not added: namespace {ns} is '
            f"Pod Security {level}"
        ) in warnings


def test_inventory_shows_the_namespace_levels(fixing: tuple[str, Path]) -> None:
    import json
    import ssl
    import urllib.request

    url, ca = fixing
    context = ssl.create_default_context(cafile=str(ca))
    with urllib.request.urlopen(f"{url}/inventory", context=context, timeout=5) as reply:
        document = json.load(reply)
    levels = document["namespaceLevels"]
    assert levels["available"] is True
    counts = levels["podSecurityEnforce"]
    assert all(counts.get(level, 0) >= 1 for level in ("privileged", "baseline", "restricted"))
    assert counts.get("unlabelled", 0) >= 1  # default, kube-system, the session's namespace
    assert document["sources"]["Namespace"]["synced"] is True


# PyTorch's published runtime image (Docker Hub pytorch/pytorch, tag
# <torch>-cuda<major.minor>-cudnn<N>-runtime): CUDA 12.4 from its tag, as on these nodes.
PYTORCH = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"


@pytest.mark.parametrize(
    ("kind", "level", "memory", "size"),
    [
        # No memory limit: the sizeLimit (16Gi); a 24Gi limit: memoryFraction 0.5 of it.
        ("Job", "privileged", None, "16Gi"),
        ("Deployment", "baseline", "24Gi", "12Gi"),
        ("Job", "restricted", "24Gi", "12Gi"),
    ],
)
def test_pytorch_ddp_pod_gets_dev_shm_from_the_shipped_config(
    fixing: tuple[str, Path], core: Any, apps: Any, namespaces: dict[str, str],
    nodes: dict[str, str], kind: str, level: str, memory: str | None, size: str,
) -> None:  # fmt: skip
    """Issue 39's done condition: a PyTorch DDP pod (torchrun, two GPUs) created through a Job or
    Deployment has a memory-backed /dev/shm in the STORED pod, with the size the docs promise,
    is admitted by Pod Security at the namespace's level, and is bound to a GPU node."""
    from kubernetes import client

    batch, ns = client.BatchV1Api(core.api_client), namespaces[level]
    limits = {"nvidia.com/gpu": "2", **({"memory": memory} if memory else {})}
    container: dict[str, Any] = {
        "name": "trainer",
        "image": PYTORCH,
        "command": ["torchrun", "--nproc_per_node=2", "train.py"],
        "resources": {"limits": limits},
    }
    app = f"ddp-{kind.lower()}-{uuid.uuid4().hex[:6]}"
    template = {
        "metadata": {"labels": {"app": app}},
        "spec": _spec(container, restricted=level != "privileged"),
    }
    created, warnings = create(
        kind, workload(kind, app, template), apps=apps, batch=batch, namespace=ns
    )
    # The workload itself is not changed (mutateTemplates is off by default); its warnings say
    # what its pods will get.
    assert "volumes" not in created["spec"]["template"]["spec"]
    assert (
        f'will apply to pods: mounted a {size} memory-backed /dev/shm in container "trainer" '
        "(shm fix)"
    ) in warnings
    # The pod the controller made: admitted by Pod Security after the webhook's patch, stored
    # with the volume, bound to one of the GPU nodes.
    ((name, node),) = scheduled(core, ns, app).items()
    assert node in nodes.values()
    stored = core.api_client.sanitize_for_serialization(core.read_namespaced_pod(name, ns))
    assert _shm(stored) == (
        [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": size}}],
        [{"name": "dshm", "mountPath": "/dev/shm"}],
    )


# ROCm's and CANN's published PyTorch images (Docker Hub rocm/pytorch, ascendai/cann): the
# vendors' DDP jobs die with "Bus error" without /dev/shm as NVIDIA's do.
VENDOR_IMAGES = {
    AMD_GPU: "rocm/pytorch:rocm6.4_ubuntu24.04_py3.12_pytorch_release_2.6.0",
    ASCEND: "ascendai/cann:8.3.rc1-910b-ubuntu22.04-py3.11",
}


@pytest.mark.parametrize("resource", [AMD_GPU, ASCEND])
def test_amd_and_ascend_deployments_get_dev_shm_through_the_webhook(
    fixing: tuple[str, Path], core: Any, apps: Any, namespaces: dict[str, str],
    nodes: dict[str, str], resource: str,
) -> None:  # fmt: skip
    """Issue 45 item 3: the pods a Deployment of AMD GPUs or Ascend NPUs makes are stored with
    the webhook's memory-backed /dev/shm (sized from the pod's memory limit) and bound."""
    from kubernetes import client

    ns = namespaces["privileged"]
    container: dict[str, Any] = {
        "name": "trainer",
        "image": VENDOR_IMAGES[resource],
        "command": ["torchrun", "--nproc_per_node=2", "train.py"],
        "resources": {"limits": {resource: "2", "memory": "24Gi"}},
    }
    app = f"vendor-{resource.split('.', maxsplit=1)[0]}-{uuid.uuid4().hex[:6]}"
    template = {"metadata": {"labels": {"app": app}}, "spec": _spec(container, restricted=False)}
    batch = client.BatchV1Api(core.api_client)
    created, warnings = create(
        "Deployment", workload("Deployment", app, template), apps=apps, batch=batch, namespace=ns
    )
    assert "volumes" not in created["spec"]["template"]["spec"]
    assert (
        'will apply to pods: mounted a 12Gi memory-backed /dev/shm in container "trainer" (shm fix)'
    ) in warnings
    ((name, node),) = scheduled(core, ns, app).items()
    assert node in nodes.values()
    stored = core.api_client.sanitize_for_serialization(core.read_namespaced_pod(name, ns))
    assert _shm(stored) == (
        [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "12Gi"}}],
        [{"name": "dshm", "mountPath": "/dev/shm"}],
    )
