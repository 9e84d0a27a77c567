"""Issue 46 items 2-4 through the webhook, as an attacker would try them and as the vendors
publish their stacks: every vendor's routes as data (the new variables, Ascend's device nodes,
CRI-O's current annotation, SYS_ADMIN/ALL), the voids that must be the effective value (AMD
device containers, HAMi's core policy in shares), and the vendors' documented patterns
(MindCluster + Volcano, KAI's GPU fractions) admitted under `enforce` only where the scheduler
counts the device. Each case asserts what a user sees."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.helpers import GPU, GPUCORES, GPUMEM, apply, container, get, pod, standard_policies
from tests.helpers import load_without_shm as load_config
from tests.helpers import run_without_shm as run
from tests.vendor_examples import KAI_PREFIX, kai_pod, mindcluster_pod
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.outcome.decision import Decision

WHY = "GPUs reached without a request are counted by no quota, CRL or scheduler."
NVIDIA_VOID = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
AMD_VOID = {"name": "AMD_VISIBLE_DEVICES", "value": "void"}
ASCEND_VOID = {"name": "ASCEND_VISIBLE_DEVICES", "value": ""}
POLICY_DEFAULT = {"name": "GPU_CORE_UTILIZATION_POLICY", "value": "default"}


def config(mode: str) -> Any:
    return load_config({"gpuAccess": {"mode": mode}})


def says(obj: dict[str, Any], text: str) -> None:
    """`warn` admits with the finding as its warning; `enforce` denies with exactly it."""
    warned = run(obj, config=config("warn"))
    # The finding is a warning, its end cut to a warning's 120 characters where longer.
    assert warned.allowed
    assert any(
        w == text or (len(w) == 120 and text.startswith(w.removesuffix("…").rstrip()))
        for w in warned.warnings
    ), warned.warnings
    denied = run(obj, config=config("enforce"))
    assert denied.denial_message() == f"Pod ml/train, {text}. {WHY}"


def env_of(decision: Decision, index: int = 0, kind: str = "containers") -> Any:
    return get(apply(decision), "spec", kind, index, "env")


# --- every vendor's routes as data ------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/dev/vdavinci0", "/dev/dvpp_cmdlist", "/dev/uburma/uburma0", "/dev/ummu/tid"]
)
def test_ascends_other_device_nodes(path: str) -> None:
    """MindCluster's runtime adds vNPU, DVPP and UB device nodes (process.go getMountPath,
    addManagerDevice, addUBDevice): a hostPath of any of them is a route."""
    obj = pod(
        container("app", volumeMounts=[{"name": "d", "mountPath": "/host"}]),
        volumes=[{"name": "d", "hostPath": {"path": path}}],
    )
    says(
        obj,
        f'container "app" mounts host path {path} but requests no NPU: request '
        "huawei.com/Ascend910 instead",
    )


@pytest.mark.parametrize("key", ["devices.crio.io", "devices.crio.io/app"])
def test_cri_os_current_device_annotation(key: str) -> None:
    """CRI-O pkg/annotations/v2: devices.crio.io (preferred over io.kubernetes.cri-o.Devices),
    also per container."""
    obj = pod(container("app"), annotations={key: "/dev/nvidia0:/dev/nvidia0:rwm"})
    says(obj, f"annotation {key} names devices: request nvidia.com/gpu or a DRA claim instead")


@pytest.mark.parametrize(
    ("cap", "shown"),
    [("SYS_ADMIN", "SYS_ADMIN"), ("sys_admin", "sys_admin"), ("CAP_SYS_ADMIN", "CAP_SYS_ADMIN"),
     ("ALL", "ALL"), ("all", "all")],
)  # fmt: skip
def test_sys_admin_or_all_counts_as_privileged(cap: str, shown: str) -> None:
    """NVIDIA's toolkit takes CAP_SYS_ADMIN in the bounding set as privileged (privileged.go);
    containerd and CRI-O upper-case the name and add CAP_."""
    plain = pod(container("app", securityContext={"capabilities": {"add": ["NET_RAW", cap]}}))
    says(
        plain,
        f'container "app" adds capability {shown} but requests no GPU: drop it or exempt its '
        "namespace in gpuAccess",
    )
    gpu = pod(container("t", limits={GPU: 1}, securityContext={"capabilities": {"add": [cap]}}))
    says(
        gpu,
        f'container "t" adds capability {shown}: drop it: NVIDIA\'s toolkit treats it as '
        "privileged",
    )


def test_other_capabilities_are_no_route() -> None:
    obj = pod(
        container("app", securityContext={"capabilities": {"add": ["NET_ADMIN", "SYS_PTRACE"]}})
    )
    assert run(obj, config=config("enforce")).allowed


# --- a written void is the effective value ------------------------------------------------------


def test_an_amd_device_container_gets_amds_void_after_the_others() -> None:
    """ROCm/k8s-device-plugin Allocate gives device nodes only: without the void, a ROCm
    image's AMD_VISIBLE_DEVICES=all would hand the container every GPU of the node."""
    decision = run(
        pod(container("a", "rocm/pytorch:latest", limits={"amd.com/gpu": 1})),
        config=config("enforce"),
    )
    assert decision.allowed
    assert env_of(decision) == [NVIDIA_VOID, ASCEND_VOID, AMD_VOID]
    assert decision.notes == (
        'set AMD_VISIBLE_DEVICES=void in container "a": its AMD GPUs come as device nodes, not '
        "from its image",
        'set NVIDIA and Ascend device variables to void in container "a": it requests no such '
        "device",
        # A Service's DOCKER_RESOURCE_* variables come after the void (issue 46).
        "set enableServiceLinks to false: a Service's DOCKER_RESOURCE_* variables could choose "
        "its AMD GPUs",
    )


def test_an_amd_device_container_choosing_its_gpus_is_still_denied() -> None:
    obj = pod(
        container(
            "a",
            limits={"amd.com/gpu": 1},
            env=[{"name": "AMD_VISIBLE_DEVICES", "value": "0-7,void"}],
        )
    )
    says(
        obj,
        'container "a" sets AMD_VISIBLE_DEVICES=0-7,void: remove it: the device plugin sets the '
        "AMD GPUs a container gets",
    )


def test_a_hami_share_gets_the_default_core_policy() -> None:
    """An image's GPU_CORE_UTILIZATION_POLICY=disable switches HAMi-core's core limiter off
    (set_env_utilization_switch); the container's own env entry overrides the image's."""
    decision = run(
        pod(container("t", limits={GPUCORES: 30, GPUMEM: 4000})), config=config("enforce")
    )
    assert decision.allowed
    assert env_of(decision) == [AMD_VOID, ASCEND_VOID, POLICY_DEFAULT]
    assert (
        'set GPU_CORE_UTILIZATION_POLICY=default in container "t": the image must not switch off '
        "its share's limits" in decision.notes
    )


def test_a_whole_gpu_gets_no_core_policy() -> None:
    decision = run(pod(container("t", limits={GPU: 1})), config=config("enforce"))
    assert env_of(decision) == [AMD_VOID, ASCEND_VOID]


@pytest.mark.parametrize("value", ["force", "FORCE", "default"])
def test_a_share_keeping_its_limit_on_passes_with_its_value(value: str) -> None:
    """HAMi's own webhook writes its configured policy (`force`) into the container's env."""
    entry = {"name": "GPU_CORE_UTILIZATION_POLICY", "value": value}
    decision = run(
        pod(container("t", limits={GPUCORES: 30}, env=[entry])), config=config("enforce")
    )
    assert decision.allowed
    assert env_of(decision) == [entry, AMD_VOID, ASCEND_VOID]


def test_a_share_switching_its_limit_off_is_denied() -> None:
    obj = pod(
        container(
            "t",
            limits={GPUCORES: 30},
            env=[{"name": "GPU_CORE_UTILIZATION_POLICY", "value": "DISABLE"}],
        )
    )
    says(
        obj,
        'container "t" sets GPU_CORE_UTILIZATION_POLICY=DISABLE: remove it: the device plugin '
        "sets the sharing limits",
    )


def test_no_void_is_written_outside_enforce_or_under_known() -> None:
    obj = pod(container("a", limits={"amd.com/gpu": 1}))
    assert run(obj, config=config("warn")).patch == []
    known = load_config({"gpuAccess": {"mode": "enforce", "voidImageDevices": "known"}})
    assert env_of(run(obj, config=known)) is None


# --- MindCluster + Volcano (Ascend/mind-cluster docs/zh/scheduling/api/ascend_job.md) ----------


def test_mindclusters_published_job_passes_under_enforce() -> None:
    decision = run(mindcluster_pod(), config=config("enforce"))
    assert decision.allowed and not decision.violations
    # Its own variable is the scheduler's; the other vendors' are voided.
    assert env_of(decision)[2:] == [NVIDIA_VOID, AMD_VOID]


def test_mindclusters_variable_without_the_npu_is_denied() -> None:
    obj = mindcluster_pod(container={"resources": {}})
    says(
        obj,
        'container "ascend" sets ASCEND_VISIBLE_DEVICES from valueFrom but requests no NPU: '
        "request huawei.com/Ascend910 instead",
    )


@pytest.mark.parametrize(
    ("spec", "resources"),
    [
        ({"schedulerName": "default-scheduler"}, None),  # nobody writes the annotation
        ({}, {"limits": {"huawei.com/Ascend310P": 1}}),  # another type than the annotation's
    ],
)
def test_mindclusters_variable_where_volcano_does_not_count_it_is_denied(
    spec: dict[str, Any], resources: dict[str, Any] | None
) -> None:
    obj = mindcluster_pod(**spec)
    if resources is not None:
        obj["spec"]["containers"][0]["resources"] = resources
    says(
        obj,
        'container "ascend" sets ASCEND_VISIBLE_DEVICES from valueFrom: remove it: the device '
        "plugin sets the NPUs a container gets",
    )


def test_a_sidecar_reading_the_npu_annotation_is_denied() -> None:
    obj = mindcluster_pod()
    obj["spec"]["containers"].append(
        container(
            "side",
            env=[copy.deepcopy(obj["spec"]["containers"][0]["env"][1])],
        )
    )
    says(
        obj,
        'container "side" sets ASCEND_VISIBLE_DEVICES from valueFrom but requests no NPU: '
        "request huawei.com/Ascend910 instead",
    )


# --- KAI's GPU fractions (NVIDIA/KAI-Scheduler docs/gpu-sharing, at 72de64f) -------------------

PREFIX = KAI_PREFIX


def test_kais_fraction_pod_passes_under_enforce() -> None:
    decision = run(
        kai_pod(fraction_container=1, runtimeClassName="nvidia"), config=config("enforce")
    )
    assert decision.allowed and not decision.violations
    env = env_of(decision, 1)
    assert env[0]["valueFrom"]["configMapKeyRef"]["name"] == f"{PREFIX}-1"
    assert env[3:] == [AMD_VOID, ASCEND_VOID]  # NVIDIA's is KAI's; the others voided
    # The sidecars get every vendor's void.
    assert env_of(decision, 0) == [NVIDIA_VOID, AMD_VOID, ASCEND_VOID]


KAI_DENIED = (
    'container "gpu-workload" sets NVIDIA_VISIBLE_DEVICES from valueFrom but requests no GPU: '
    "request nvidia.com/gpu instead"
)


@pytest.mark.parametrize(
    "changes",
    [
        {"schedulerName": "default-scheduler"},  # KAI's scheduler does not account it
        {"annotations": {"gpu-fraction": ""}},  # no fraction asked
        {"annotations": {"gpu-fraction-container-name": "sidecar"}},  # not the fraction's
        {"annotations": {"runai/shared-gpu-configmap": "someone-elses"}},  # not its ConfigMap
    ],
)
def test_kais_variable_where_kai_does_not_account_it_is_denied(changes: dict[str, Any]) -> None:
    says(kai_pod(fraction_container=1, **changes), KAI_DENIED)


def test_kais_gpu_memory_fraction_in_the_default_container_passes() -> None:
    """docs/gpu-sharing/gpu-memory.yaml's form: `gpu-memory`, no container named: the first
    container is the fraction's."""
    obj = kai_pod(
        fraction_container=0,
        annotations={"gpu-fraction": "", "gpu-memory": "2000", "gpu-fraction-container-name": ""},
    )
    decision = run(obj, config=config("enforce"))
    assert decision.allowed
    assert env_of(decision, 0)[3:] == [AMD_VOID, ASCEND_VOID]


def test_an_amd_device_containers_image_swap_without_its_void_is_denied() -> None:
    """A pod admitted before AMD device containers got AMD's void (the other vendors' voids
    only) whose AMD device container's image is swapped by UPDATE: env cannot change on update,
    so the swap is denied."""
    old = pod(
        container("a", "busybox:1.36", limits={"amd.com/gpu": 1}, env=[NVIDIA_VOID, ASCEND_VOID])
    )
    new = copy.deepcopy(old)
    new["spec"]["containers"][0]["image"] = "rocm/pytorch:latest"
    decision = evaluate(
        new, standard_policies(), config("enforce"), operation="UPDATE", old_object=old
    )
    assert decision.denial_message() == (
        'Pod ml/train, container "a" changes its image while its device variables are not void: '
        f"recreate the pod: env cannot change on update. {WHY}"
    )


@pytest.mark.parametrize("prefix", ["AWS_NEURON_", "MTHREADS_", "DOCKER_", "DOCKER_RESOURCE_GPU_"])
def test_an_env_from_prefix_no_void_closes_is_a_finding_under_enforce(prefix: str) -> None:
    """A family without a void (Neuron, Moore Threads, Enflame) and AMD's DOCKER_RESOURCE_*
    cannot be closed by a written value: an envFrom prefix that makes such names is a finding
    under `enforce` too, never silence."""
    obj = pod(container("app", envFrom=[{"prefix": prefix, "configMapRef": {"name": "cm"}}]))
    says(
        obj,
        f'container "app" uses envFrom with prefix {prefix} but requests no GPU: list the '
        "variables in env instead",
    )


def test_an_env_from_prefix_a_void_closes_passes_under_enforce() -> None:
    obj = pod(container("app", envFrom=[{"prefix": "NVIDIA_", "configMapRef": {"name": "cm"}}]))
    decision = run(obj, config=config("enforce"))
    assert decision.allowed
    assert env_of(decision) == [NVIDIA_VOID, AMD_VOID, ASCEND_VOID]
