"""GPU access control against an attacker (issue 36, SPEC §12): each way around it that the
issue names, for every vendor's devices and every kind of container, through the core.

Each case asserts what a user sees: the warning under `warn`, the denial under `enforce`, the
pod after the patch.
"""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

# Tests of GPU access control's device routes: evaluated without the /dev/shm fix (on by default),
# whose volume and warning would be in every pod here (tests/helpers.py `without_shm`; the rule's
# own tests: test_runtime_fixes.py).
from tests.helpers import (
    CONFIGMAPS,
    GPU,
    GPUCORES,
    GPUMEM,
    apply,
    container,
    get,
    pod,
    standard_policies,
)
from tests.helpers import (
    load_without_shm as load_config,
)
from tests.helpers import (
    run_without_shm as run,
)
from webhook.cli import main
from webhook.core.audit.audit import Audit, audit_config, evaluate_object
from webhook.core.base.errors import ConfigError
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import Decision, evaluate
from webhook.core.families import FAMILIES, family_named, family_of

WHY = "GPUs reached without a request are counted by no quota, CRL or scheduler."
CUDA_IMAGE = "nvidia/cuda:12.4.1-runtime-ubuntu22.04"
NVIDIA_VOID = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
AMD_VOID = {"name": "AMD_VISIBLE_DEVICES", "value": "void"}
ASCEND_VOID = {"name": "ASCEND_VISIBLE_DEVICES", "value": ""}
ALL_VOIDS = [NVIDIA_VOID, AMD_VOID, ASCEND_VOID]


def config(mode: str, **access: Any) -> WebhookConfig:
    return load_config({"gpuAccess": {"mode": mode, **access}})


def env(*pairs: tuple[str, str]) -> list[dict[str, Any]]:
    return [{"name": name, "value": value} for name, value in pairs]


def says(obj: dict[str, Any], *texts: str, cfg: WebhookConfig | None = None) -> None:
    """Under `warn` each text is a warning and the pod is admitted unchanged by access control;
    under `enforce` the pod is denied with exactly these findings."""
    warn = run(obj, config=cfg or config("warn"))
    assert warn.allowed
    for text in texts:
        assert text in warn.warnings
        assert len(text) <= 120, text
    enforce_cfg = config("enforce") if cfg is None else _enforcing(cfg)
    denied = run(obj, config=enforce_cfg)
    assert [v.rule for v in denied.violations] == ["gpu access"] * len(texts)
    if len(texts) == 1:
        assert denied.denial_message() == f"Pod ml/train, {texts[0]}. {WHY}"
    else:
        for text in texts:
            assert f"- Pod ml/train, {text}." in denied.denial_message()
    # /validate (violations only) denies the same.
    assert run(obj, config=enforce_cfg, violations_only=True).violations == denied.violations


def _enforcing(cfg: WebhookConfig) -> WebhookConfig:
    access = cfg.gpu_access.model_copy(update={"mode": "enforce"})
    return cfg.model_copy(update={"gpu_access": access})


# --- device containers: no user-chosen devices, no privilege, no device-list mount, no limits --


def test_a_privileged_gpu_container() -> None:
    says(
        pod(container("t", limits={GPU: 1}, securityContext={"privileged": True})),
        'container "t" is privileged: drop privileged: a privileged container sees every device '
        "of its node",
    )


def test_a_one_percent_hami_share_that_is_privileged() -> None:
    says(
        pod(
            container("t", limits={GPUCORES: 1, GPUMEM: 1000}, securityContext={"privileged": True})
        ),
        'container "t" is privileged: drop privileged: a privileged container sees every device '
        "of its node",
    )


@pytest.mark.parametrize(
    "path", ["/var/run/nvidia-container-devices/all", "/var/run/nvidia-container-devicesall"]
)
def test_a_gpu_container_with_a_device_list_mount(path: str) -> None:
    """The toolkit tests the mount destination with strings.HasPrefix and no trailing "/"."""
    obj = pod(
        container("t", limits={GPU: 1}, volumeMounts=[{"name": "x", "mountPath": path}]),
        volumes=[{"name": "x", "hostPath": {"path": "/dev/null"}}],
    )
    says(
        obj,
        f'container "t" mounts {path}: remove it: the device plugin gives the devices',
    )


def test_a_device_list_mount_without_the_slash_in_a_plain_container() -> None:
    obj = pod(
        container(
            "app", volumeMounts=[{"name": "x", "mountPath": "/var/run/nvidia-container-devicesall"}]
        ),
        volumes=[{"name": "x", "emptyDir": {}}],
    )
    says(
        obj,
        'container "app" mounts /var/run/nvidia-container-devicesall but requests no GPU: '
        "request nvidia.com/gpu instead",
    )


def test_every_device_variable_entry_counts_not_only_the_first() -> None:
    """Issue 36: NVIDIA_IMEX_CHANNELS before NVIDIA_VISIBLE_DEVICES=all hid the second."""
    obj = pod(
        container(
            "t",
            limits={GPU: 1},
            env=env(("NVIDIA_IMEX_CHANNELS", "0"), ("NVIDIA_VISIBLE_DEVICES", "all")),
        )
    )
    says(
        obj,
        'container "t" sets NVIDIA_IMEX_CHANNELS=0: remove it: the device plugin sets the GPUs a '
        "container gets",
        'container "t" sets NVIDIA_VISIBLE_DEVICES=all: remove it: the device plugin sets the '
        "GPUs a container gets",
    )


def test_an_earlier_entry_naming_devices_is_a_finding_though_the_last_is_void() -> None:
    obj = pod(
        container(
            "app", env=env(("NVIDIA_VISIBLE_DEVICES", "all"), ("NVIDIA_VISIBLE_DEVICES", "void"))
        )
    )
    says(
        obj,
        'container "app" sets NVIDIA_VISIBLE_DEVICES=all but requests no GPU: '
        "request nvidia.com/gpu or set it to void",
    )


def test_a_gpu_container_with_env_from() -> None:
    """A ConfigMap's NVIDIA_VISIBLE_DEVICES=all through envFrom replaces the plugin's choice."""
    obj = pod(container("t", limits={GPU: 1}, envFrom=[{"configMapRef": {"name": "all-gpus"}}]))
    says(
        obj,
        'container "t" uses envFrom: list its variables in env: envFrom can choose its GPUs or '
        "raise its limits",
    )


def test_env_from_in_a_gpu_container_is_moot_where_the_admin_declares_the_nodes_ignore_env() -> (
    None
):
    obj = pod(container("t", limits={GPU: 1}, envFrom=[{"configMapRef": {"name": "all-gpus"}}]))
    cfg = config("enforce", nodeSettings={"envIgnored": ["nvidia"]})
    assert run(obj, config=cfg).allowed
    # Only for the vendors listed: an AMD container's envFrom is still one.
    amd = pod(container("t", limits={"amd.com/gpu": 1}, envFrom=[{"secretRef": {"name": "s"}}]))
    assert run(amd, config=cfg).denial_message() == (
        'Pod ml/train, container "t" uses envFrom: list its variables in env: envFrom can '
        f"choose its AMD GPUs or raise its limits. {WHY}"
    )
    with pytest.raises(ConfigError, match="not a device family"):
        config("enforce", nodeSettings={"envIgnored": ["nvida"]})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CUDA_DISABLE_CONTROL", "true"),
        ("CUDA_DEVICE_MEMORY_LIMIT_0", "80g"),
        ("CUDA_DEVICE_MEMORY_LIMIT", "80g"),
        ("CUDA_DEVICE_SM_LIMIT", "100"),
        ("GPU_CORE_UTILIZATION_POLICY", "disable"),
    ],
)
def test_a_hami_share_that_raises_or_switches_off_its_limits(name: str, value: str) -> None:
    obj = pod(container("t", limits={GPUCORES: 1, GPUMEM: 1000}, env=env((name, value))))
    says(
        obj,
        f'container "t" sets {name}={value}: remove it: the device plugin sets the sharing limits',
    )


def test_limiter_controls_in_a_container_without_a_device_are_not_findings() -> None:
    obj = pod(container("app", env=env(("CUDA_DEVICE_MEMORY_LIMIT", "1g"))))
    assert run(obj, config=config("enforce")).allowed


def test_an_unknown_resource_claim_makes_no_exempt_container() -> None:
    c = container("app", env=env(("NVIDIA_VISIBLE_DEVICES", "all")))
    c["resources"] = {"claims": [{"name": "gpu"}]}
    obj = pod(c, resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "not-seen"}])
    says(
        obj,
        'container "app" sets NVIDIA_VISIBLE_DEVICES=all but requests no GPU: '
        "request nvidia.com/gpu or set it to void",
    )


# --- what the webhook cannot see: the image config and envFrom -------------------------------


@pytest.mark.parametrize(
    "image",
    [
        "ollama/ollama",
        "nvidia/cuda@sha256:" + "a" * 64,
        "tensorflow/tensorflow:2.16.1-gpu",
        "registry.example.com/team/my-own-cuda-build:1",
    ],
)
def test_an_image_the_webhook_does_not_know_is_voided_under_enforce(image: str) -> None:
    decision = run(pod(container("app", image)), config=config("enforce"))
    assert decision.allowed
    assert get(apply(decision), "spec", "containers", 0, "env") == ALL_VOIDS
    # Under warn nothing changes and nothing is said (every CPU pod would be told).
    warn = run(pod(container("app", image)), config=config("warn"))
    assert warn.patch == [] and warn.warnings == ()


def test_env_from_on_a_plain_container_is_closed_by_an_explicit_env_entry() -> None:
    """The kubelet puts envFrom first and env after it (pkg/kubelet/kubelet_pods.go
    makeEnvironmentVariables): the explicit void wins over a ConfigMap's value."""
    obj = pod(
        container("app", envFrom=[{"prefix": "NVIDIA_", "configMapRef": {"name": "x"}}]),
    )
    decision = run(obj, config=config("enforce"))
    assert decision.allowed
    assert get(apply(decision), "spec", "containers", 0, "env") == ALL_VOIDS
    warn = run(obj, config=config("warn"))
    assert warn.warnings == (
        'container "app" uses envFrom with prefix NVIDIA_ but requests no GPU: list the '
        "variables in env instead",
    )
    # An envFrom without a device prefix is no warning under warn.
    plain = pod(container("app", envFrom=[{"configMapRef": {"name": "x"}}]))
    assert run(plain, config=config("warn")).warnings == ()


def test_env_from_cannot_be_closed_where_void_is_not_written() -> None:
    obj = pod(container("app", envFrom=[{"configMapRef": {"name": "x"}}]))
    for mode in ("known", "off"):
        decision = run(obj, config=config("enforce", voidImageDevices=mode))
        assert decision.denial_message() == (
            'Pod ml/train, container "app" uses envFrom but requests no GPU: list the variables '
            f"in env or set gpuAccess.voidImageDevices: all. {WHY}"
        )


def test_a_padded_pod_is_judged_like_any() -> None:
    """A pod padded with env entries (issue 36: past the CEL cost budget of a matchCondition)
    is still judged and voided by the core."""
    padding = [{"name": f"PAD_{i}", "value": "x"} for i in range(20000)]
    obj = pod(
        container(
            "app", CUDA_IMAGE, env=[*padding, {"name": "AMD_VISIBLE_DEVICES", "value": "all"}]
        )
    )
    decision = run(obj, config=config("enforce"))
    assert decision.denial_message() == (
        'Pod ml/train, container "app" sets AMD_VISIBLE_DEVICES=all but requests no AMD GPU: '
        f"request amd.com/gpu or set it to void. {WHY}"
    )
    clean = pod(container("app", CUDA_IMAGE, env=padding))
    after = apply(run(clean, config=config("enforce")))
    assert get(after, "spec", "containers", 0, "env")[-3:] == ALL_VOIDS


# --- annotations, runtime classes ---------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "what"),
    [
        ("cdi.k8s.io/gpu", "devices"),
        ("nvidia.cdi.k8s.io/pod", "devices"),
        ("devices.noderesource.dev/container.app", "devices"),
        ("devices.noderesource.dev", "devices"),
        ("cdi-devices.noderesource.dev/pod", "devices"),
        ("mounts.noderesource.dev/container.app", "mounts"),
        ("devices.nri.io", "devices"),
        ("cdi-devices.nri.io/container.app", "devices"),
        ("mounts.nri.io/pod", "mounts"),
        ("io.kubernetes.cri-o.Devices", "devices"),
    ],
)
def test_device_annotations(key: str, what: str) -> None:
    obj = pod(container("app"), annotations={key: "- path: /dev/nvidia0"})
    if what == "mounts":
        says(obj, f"annotation {key} names host mounts: remove it")
    else:
        says(obj, f"annotation {key} names devices: request nvidia.com/gpu or a DRA claim instead")


def test_a_configured_runtime_class_of_any_name_and_vendor() -> None:
    """Issue 36: a configured runtime class without "nvidia" in its name."""
    cfg = config("warn", runtimeClasses=["gpu-runtime"], vendorRuntimeClasses={"ascend": ["npu"]})
    says(
        pod(container("app"), runtimeClassName="gpu-runtime"),
        "runtimeClassName gpu-runtime runs NVIDIA's runtime but the pod requests no GPU: request "
        "nvidia.com/gpu or drop it",
        cfg=cfg,
    )
    says(
        pod(container("app"), runtimeClassName="npu"),
        "runtimeClassName npu runs Ascend's runtime but the pod requests no NPU: "
        "request huawei.com/Ascend910 or drop it",
        cfg=cfg,
    )
    ascend = pod(container("app", limits={"huawei.com/Ascend910": 1}), runtimeClassName="npu")
    assert run(ascend, config=_enforcing(cfg)).allowed
    assert cfg.gpu_access.runtime_class_names == frozenset({"gpu-runtime", "npu"})


# --- every vendor, every kind of container ----------------------------------------------------

# (variable, value, the finding's tail in a container requesting none of the vendor's devices)
VENDOR_ENV = [
    (
        "NVIDIA_VISIBLE_DEVICES",
        "all",
        "but requests no GPU: request nvidia.com/gpu or set it to void",
    ),
    (
        "AMD_VISIBLE_DEVICES",
        "all",
        "but requests no AMD GPU: request amd.com/gpu or set it to void",
    ),
    (
        "ASCEND_VISIBLE_DEVICES",
        "0-7",
        "but requests no NPU: request huawei.com/Ascend910 or set it empty",
    ),
]


def _in(kind: str, c: dict[str, Any]) -> dict[str, Any]:
    if kind == "container":
        return pod(c)
    if kind == "init container":
        return pod(container("main"), init=[c])
    # A sidecar: an init container with restartPolicy Always.
    return pod(container("main"), init=[{**c, "restartPolicy": "Always"}])


@pytest.mark.parametrize("kind", ["container", "init container", "sidecar"])
@pytest.mark.parametrize(("name", "value", "tail"), VENDOR_ENV, ids=[v[0] for v in VENDOR_ENV])
def test_each_vendors_variable_in_each_container(
    kind: str, name: str, value: str, tail: str
) -> None:
    label = "container" if kind == "container" else "init container"
    says(
        _in(kind, container("x", env=env((name, value)))), f'{label} "x" sets {name}={value} {tail}'
    )


@pytest.mark.parametrize(
    ("resource", "name", "value", "noun"),
    [
        (GPU, "NVIDIA_VISIBLE_DEVICES", "0,1,2,3", "GPUs"),
        ("amd.com/gpu", "AMD_VISIBLE_DEVICES", "all", "AMD GPUs"),
        ("amd.com/cpx_nps4", "AMD_VISIBLE_DEVICES", "0-7", "AMD GPUs"),
        ("huawei.com/Ascend910", "ASCEND_VISIBLE_DEVICES", "0-7", "NPUs"),
        ("huawei.com/Ascend910-2c.8g", "ASCEND_VISIBLE_DEVICES", "0", "NPUs"),
    ],
)
def test_a_device_container_that_chooses_its_own_devices(
    resource: str, name: str, value: str, noun: str
) -> None:
    obj = pod(container("t", limits={resource: 1}, env=env((name, value))))
    says(
        obj,
        f'container "t" sets {name}={value}: remove it: the device plugin sets the {noun} a '
        "container gets",
    )


@pytest.mark.parametrize(
    ("path", "tail"),
    [
        ("/dev/kfd", "but requests no GPU: request the device's resource instead"),
        ("/dev/davinci0", "but requests no NPU: request huawei.com/Ascend910 instead"),
        (
            "/dev/davinci_manager",
            "but requests no NPU: request huawei.com/Ascend910 instead",
        ),
        ("/dev/devmm_svm", "but requests no NPU: request huawei.com/Ascend910 instead"),
        ("/dev/hisi_hdc", "but requests no NPU: request huawei.com/Ascend910 instead"),
        ("/dev/nvidia0", "but requests no GPU: request nvidia.com/gpu instead"),
        ("/dev/neuron0", "but requests no Neuron device: request aws.amazon.com/neuron instead"),
        ("/dev/accel/accel0", "but requests no GPU: request the device's resource instead"),
        ("//dev", "but requests no GPU: request the device's resource instead"),
        (
            "/dev/../dev/davinci1/",
            "but requests no NPU: request huawei.com/Ascend910 instead",
        ),
    ],
)
def test_host_paths_of_any_vendors_device_nodes(path: str, tail: str) -> None:
    obj = pod(
        container("app", volumeMounts=[{"name": "d", "mountPath": "/host"}]),
        volumes=[{"name": "d", "hostPath": {"path": path}}],
    )
    says(obj, f'container "app" mounts host path {path} {tail}')


def test_a_device_container_mounting_device_nodes() -> None:
    obj = pod(
        container(
            "t", limits={"huawei.com/Ascend910": 1}, volumeMounts=[{"name": "d", "mountPath": "/d"}]
        ),
        volumes=[{"name": "d", "hostPath": {"path": "/dev"}}],
    )
    says(
        obj,
        'container "t" mounts host path /dev: remove it: the device plugin gives the devices',
    )


def test_each_vendors_device_container_keeps_its_own_variable_and_voids_the_others() -> None:
    obj = pod(
        container("n", limits={GPU: 1}),
        container("a", limits={"amd.com/gpu": 1}),
        container("h", limits={"huawei.com/Ascend910": 1}),
        container("i", limits={"gpu.intel.com/i915": 1}),
    )
    after = apply(run(obj, config=config("enforce")))
    envs = [get(after, "spec", "containers", i, "env") for i in range(4)]
    # AMD's device container gets AMD's void too (issue 46): no AMD plugin or DRA driver sets
    # AMD_VISIBLE_DEVICES, the GPUs come as device nodes, and the image's `all` would stand.
    assert envs == [
        [AMD_VOID, ASCEND_VOID],
        [NVIDIA_VOID, ASCEND_VOID, AMD_VOID],
        [NVIDIA_VOID, AMD_VOID],
        ALL_VOIDS,
    ]


def test_a_zero_request_is_no_device() -> None:
    obj = pod(container("a", limits={"amd.com/gpu": 0}, env=env(("AMD_VISIBLE_DEVICES", "all"))))
    says(
        obj,
        'container "a" sets AMD_VISIBLE_DEVICES=all but requests no AMD GPU: request amd.com/gpu '
        "or set it to void",
    )


# --- Pod UPDATE and ephemeral containers ------------------------------------------------------


def _update(new: dict[str, Any], old: dict[str, Any], mode: str, sub: str = "") -> Decision:
    return evaluate(
        new, standard_policies(), config(mode), operation="UPDATE", sub_resource=sub, old_object=old
    )


def test_a_pod_update_that_swaps_in_a_cuda_image() -> None:
    old = pod(container("app", "busybox:1.36"))
    new = copy.deepcopy(old)
    new["spec"]["containers"][0]["image"] = CUDA_IMAGE
    denied = _update(new, old, "enforce")
    assert denied.denial_message() == (
        'Pod ml/train, container "app" changes its image while its device variables are not '
        f"void: recreate the pod: env cannot change on update. {WHY}"
    )
    assert denied.patch == []  # the API server forbids env changes on a Pod UPDATE
    # A pod created under enforce carries its voids: the swap is harmless.
    created = apply(run(old, config=config("enforce")))
    swapped = copy.deepcopy(created)
    swapped["spec"]["containers"][0]["image"] = CUDA_IMAGE
    decision = _update(swapped, created, "enforce")
    assert decision.handled and decision.allowed and decision.patch == []


def test_a_pod_update_under_warn_is_a_plain_allow_on_validate() -> None:
    # An annotation naming devices, added by UPDATE: `warn` warns on /mutate; the validating
    # call (violations only) returns nothing of it, so it does not run access control at all.
    old = pod(container("app"))
    annotated = copy.deepcopy(old)
    annotated["metadata"]["annotations"] = {"cdi.k8s.io/x": "nvidia.com/gpu=all"}
    text = "annotation cdi.k8s.io/x names devices: request nvidia.com/gpu or a DRA claim instead"
    assert text in _update(annotated, old, "warn").warnings
    validate = evaluate(
        annotated,
        standard_policies(),
        config("warn"),
        operation="UPDATE",
        old_object=old,
        violations_only=True,
    )
    assert validate.allowed and not validate.warnings and validate.access == ()
    assert (
        evaluate(
            annotated,
            standard_policies(),
            config("enforce"),
            operation="UPDATE",
            old_object=old,
            violations_only=True,
        ).denial_message()
        == f"Pod ml/train, {text}. {WHY}"
    )


def test_a_pod_update_judges_only_what_it_introduces() -> None:
    """A label change on a pod admitted before enforce must not be refused (controllers patch
    pods' labels and annotations)."""
    old = pod(container("app", securityContext={"privileged": True}))
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"pod-deletion-cost": "1"}
    assert _update(new, old, "enforce").allowed
    annotated = copy.deepcopy(old)
    annotated["metadata"]["annotations"] = {"cdi.k8s.io/x": "nvidia.com/gpu=all"}
    assert _update(annotated, old, "enforce").denial_message() == (
        "Pod ml/train, annotation cdi.k8s.io/x names devices: request "
        f"nvidia.com/gpu or a DRA claim instead. {WHY}"
    )


@pytest.mark.parametrize(
    ("debugger", "text"),
    [
        (
            # kubectl debug --profile=sysadmin
            {"name": "debugger", "image": "busybox", "securityContext": {"privileged": True}},
            'ephemeral container "debugger" is privileged but requests no GPU: drop privileged '
            "or exempt its namespace in gpuAccess",
        ),
        (
            {"name": "d", "image": "busybox", "env": env(("ASCEND_VISIBLE_DEVICES", "0"))},
            'ephemeral container "d" sets ASCEND_VISIBLE_DEVICES=0 but requests no NPU: '
            "request huawei.com/Ascend910 or set it empty",
        ),
    ],
)
def test_an_ephemeral_container_is_judged(debugger: dict[str, Any], text: str) -> None:
    old = apply(run(pod(container("app")), config=config("enforce")))
    new = copy.deepcopy(old)
    new["spec"]["ephemeralContainers"] = [debugger]
    warn = _update(new, old, "warn", "ephemeralcontainers")
    assert warn.allowed and text in warn.warnings
    denied = _update(new, old, "enforce", "ephemeralcontainers")
    assert denied.denial_message() == f"Pod ml/train, {text}. {WHY}"


def test_a_new_ephemeral_container_is_voided() -> None:
    """ValidatePodEphemeralContainersUpdate lets a new ephemeral container be anything valid:
    the webhook writes its voids; the existing ones stay as they were."""
    old = apply(run(pod(container("app")), config=config("enforce")))
    old["spec"]["ephemeralContainers"] = [{"name": "first", "image": "busybox"}]
    new = copy.deepcopy(old)
    new["spec"]["ephemeralContainers"].append({"name": "debugger", "image": CUDA_IMAGE})
    decision = _update(new, old, "enforce", "ephemeralcontainers")
    assert decision.allowed
    after = apply(decision)
    assert get(after, "spec", "ephemeralContainers", 0) == {"name": "first", "image": "busybox"}
    assert get(after, "spec", "ephemeralContainers", 1, "env") == ALL_VOIDS
    assert decision.notes == (
        'set NVIDIA, AMD and Ascend device variables to void in ephemeral container "debugger": '
        "it requests no such device",
    )


def test_pod_updates_pass_untouched_when_access_control_is_off_or_exempt() -> None:
    old = pod(container("app"))
    new = copy.deepcopy(old)
    new["spec"]["containers"][0]["image"] = CUDA_IMAGE
    assert not _update(new, old, "off").handled
    exempt = copy.deepcopy(new)
    exempt["metadata"]["namespace"] = "gpu-operator"
    old_exempt = copy.deepcopy(old)
    old_exempt["metadata"]["namespace"] = "gpu-operator"
    assert not _update(exempt, old_exempt, "enforce").handled
    # The status subresource changes no container.
    assert not _update(new, old, "enforce", "status").handled


# --- the audit and policy reports list every finding ----------------------------------------


def test_the_audit_lists_every_finding_of_a_pod() -> None:
    obj = pod(
        container(
            "t",
            limits={GPU: 1},
            securityContext={"privileged": True},
            env=env(("NVIDIA_VISIBLE_DEVICES", "all"), ("CUDA_DISABLE_CONTROL", "true")),
        ),
        name="sneaky",
    )
    audit = Audit()
    cfg = audit_config(config("off"))
    audit.add(obj, "v1", "Pod", evaluate_object(obj, "v1", "Pod", standard_policies(), cfg))
    (finding,) = audit.result().findings
    assert sorted(p.message for p in finding.access.values()) == sorted(
        [
            'container "t" sets NVIDIA_VISIBLE_DEVICES=all: remove it: the device plugin sets '
            "the GPUs a container gets",
            'container "t" sets CUDA_DISABLE_CONTROL=true: remove it: the device plugin sets the '
            "sharing limits",
            'container "t" is privileged: drop privileged: a privileged container sees every '
            "device of its node",
        ]
    )


# --- the families -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "family"),
    [
        ("nvidia.com/gpu", "nvidia"),
        ("nvidia.com/mig-1g.10gb", "nvidia"),
        ("nvidia.com/gpumem-percentage", "nvidia"),
        ("amd.com/gpu", "amd"),
        ("amd.com/cpx_nps4", "amd"),
        ("amd.com/spx_nps1", "amd"),
        ("huawei.com/Ascend910", "ascend"),
        ("huawei.com/Ascend910B3", "ascend"),
        ("huawei.com/Ascend310P", "ascend"),
        ("huawei.com/Ascend310", "ascend"),
        ("huawei.com/npu", "ascend"),
        ("huawei.com/Ascend910-4c.16g", "ascend"),
        ("gpu.intel.com/i915", "intel"),
        ("gpu.intel.com/xe", "intel"),
        ("cambricon.com/vmlu", "cambricon"),
        ("hygon.com/dcunum", "hygon"),
        ("iluvatar.ai/BI-V150-vgpu", "iluvatar"),
        ("metax-tech.com/sgpu", "metax"),
        ("enflame.com/vgcu", "enflame"),
        ("kunlunxin.com/vxpu", "kunlunxin"),
        ("mthreads.com/vgpu", "mthreads"),
        ("aws.amazon.com/neuroncore", "neuron"),
        ("example.com/gpu", None),
        ("cpu", None),
    ],
)
def test_family_of(resource: str, family: str | None) -> None:
    found = family_of(resource)
    assert (found.name if found is not None else None) == family


def test_the_families_are_the_twelve_of_spec_13_with_their_rules() -> None:
    assert [f.name for f in FAMILIES] == [
        "nvidia", "amd", "ascend", "intel", "cambricon", "hygon",
        "iluvatar", "metax", "enflame", "kunlunxin", "mthreads", "neuron",
    ]  # fmt: skip
    placement = {f.name: f.placement for f in FAMILIES if f.placement != "none"}
    assert placement == {"nvidia": "cuda", "amd": "rocm", "ascend": "cann"}
    nvidia, amd, ascend = (family_named(n) for n in ("nvidia", "amd", "ascend"))
    assert nvidia is not None and amd is not None and ascend is not None
    assert (nvidia.void, amd.void, ascend.void) == ("void", "void", "")
    assert nvidia.is_limiter_env("CUDA_DEVICE_MEMORY_LIMIT_3")


def test_review_shows_every_finding(tmp_path: Path) -> None:
    """`gpu-webhook review` (the offline evaluation) lists each finding as a violation under
    enforce, with its exit code."""
    obj = pod(
        container(
            "t",
            limits={GPU: 1},
            securityContext={"privileged": True},
            env=env(("NVIDIA_IMEX_CHANNELS", "0"), ("NVIDIA_VISIBLE_DEVICES", "all")),
        ),
        container("side", env=env(("AMD_VISIBLE_DEVICES", "all"))),
    )
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(obj), encoding="utf-8")
    config_file = tmp_path / "config.yaml"
    config_file.write_text("gpuAccess: {mode: enforce}\n", encoding="utf-8")
    out = io.StringIO()
    code = main(
        ["review", "-f", str(manifest), "--policies", str(CONFIGMAPS), "--config",
         str(config_file), "-o", "json"],
        out=out,
    )  # fmt: skip
    assert code == 1
    (result,) = json.loads(out.getvalue())
    assert result["violations"] == [
        f"Pod ml/train, {text}. {WHY}"
        for text in (
            'container "t" sets NVIDIA_IMEX_CHANNELS=0: remove it: the device plugin sets the '
            "GPUs a container gets",
            'container "t" sets NVIDIA_VISIBLE_DEVICES=all: remove it: the device plugin sets the '
            "GPUs a container gets",
            'container "t" is privileged: drop privileged: a privileged container sees every '
            "device of its node",
            'container "side" sets AMD_VISIBLE_DEVICES=all but requests no AMD GPU: request '
            "amd.com/gpu or set it to void",
        )
    ]


def test_one_note_per_set_of_voids_not_one_per_container() -> None:
    """Every container of every pod gets its voids under `all`: each note is a warning the user
    reads, so containers with the same voids share one."""
    obj = pod(
        *[container(f"c{i}", "python:3.12") for i in range(5)],
        container("gpu", limits={GPU: 1}),
        init=[container("setup")],
    )
    decision = run(obj, config=config("enforce"))
    assert decision.notes == (
        'set requests.nvidia.com/gpu=1 from limits in container "gpu"',
        "set NVIDIA, AMD and Ascend device variables to void in 6 containers: they request no "
        "such device",
        'set AMD and Ascend device variables to void in container "gpu": it requests no such '
        "device",
    )
    after = apply(decision)
    assert [get(after, "spec", "containers", i, "env") for i in range(6)] == [
        *[ALL_VOIDS] * 5,
        [AMD_VOID, ASCEND_VOID],
    ]
    assert get(after, "spec", "initContainers", 0, "env") == ALL_VOIDS
