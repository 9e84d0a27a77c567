"""GPU access control (SPEC §12): devices only through the resources and claims that count them.

Table tests of what a user sees in each mode: the warning, the denial message, the object after
the patch.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.helpers import GPU, apply, container, get, pod, run, standard_policies, workload
from tests.unit.test_gpu_access_vendor_claims import claim_template
from webhook.core.access.control import device_host_path
from webhook.core.audit.audit import Audit, audit_config, evaluate_object
from webhook.core.audit.reports import WGPOLICY, build_reports
from webhook.core.base.errors import ConfigError
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.workloads.claims import ClaimIndex

CUDA_IMAGE = "nvidia/cuda:12.4.1-runtime-ubuntu22.04"
WHY = "GPUs reached without a request are counted by no quota, CRL or scheduler."


def config(mode: str, **access: Any) -> WebhookConfig:
    return load_config({"gpuAccess": {"mode": mode, **access}})


def env(name: str, value: str) -> list[dict[str, Any]]:
    return [{"name": name, "value": value}]


VISIBLE_ALL = env("NVIDIA_VISIBLE_DEVICES", "all")

# (case, pod, the warning under `warn` = the denial's line under `enforce`)
FINDINGS: list[tuple[str, dict[str, Any], str]] = [
    (
        "env all",
        pod(container("app", env=VISIBLE_ALL)),
        'container "app" sets NVIDIA_VISIBLE_DEVICES=all but requests no GPU: '
        "request nvidia.com/gpu or set it to void",
    ),
    (
        "env index list",
        pod(container("app", env=env("NVIDIA_VISIBLE_DEVICES", "0,1"))),
        'container "app" sets NVIDIA_VISIBLE_DEVICES=0,1 but requests no GPU: '
        "request nvidia.com/gpu or set it to void",
    ),
    (
        "env from a ConfigMap",
        pod(
            container(
                "app",
                env=[
                    {
                        "name": "NVIDIA_VISIBLE_DEVICES",
                        "valueFrom": {"configMapKeyRef": {"name": "x", "key": "y"}},
                    }
                ],
            )
        ),
        'container "app" sets NVIDIA_VISIBLE_DEVICES from valueFrom but requests no GPU: '
        "request nvidia.com/gpu instead",
    ),
    (
        "MIG monitor devices",
        pod(container("mon", env=env("NVIDIA_MIG_MONITOR_DEVICES", "all"))),
        'container "mon" sets NVIDIA_MIG_MONITOR_DEVICES=all but requests no GPU: '
        "request nvidia.com/gpu or set it to void",
    ),
    (
        "init container",
        pod(container("app"), init=[container("setup", env=VISIBLE_ALL)]),
        'init container "setup" sets NVIDIA_VISIBLE_DEVICES=all but requests no GPU: '
        "request nvidia.com/gpu or set it to void",
    ),
    (
        "privileged",
        pod(container("app", securityContext={"privileged": True})),
        'container "app" is privileged but requests no GPU: '
        "drop privileged or exempt its namespace in gpuAccess",
    ),
    (
        "hostPath /dev/dri",
        pod(
            container("app", volumeMounts=[{"name": "dri", "mountPath": "/host-dri"}]),
            volumes=[{"name": "dri", "hostPath": {"path": "/dev/dri"}}],
        ),
        'container "app" mounts host path /dev/dri but requests no GPU: '
        "request the device's resource instead",
    ),
    (
        "device-list mount path",
        pod(
            container(
                "app",
                volumeMounts=[{"name": "x", "mountPath": "/var/run/nvidia-container-devices/all"}],
            ),
            volumes=[{"name": "x", "emptyDir": {}}],
        ),
        'container "app" mounts /var/run/nvidia-container-devices/all but requests no GPU: '
        "request nvidia.com/gpu instead",
    ),
    (
        "CDI annotation",
        pod(container("app"), annotations={"cdi.k8s.io/gpu": "nvidia.com/gpu=all"}),
        "annotation cdi.k8s.io/gpu names devices: request nvidia.com/gpu or a DRA claim instead",
    ),
]


@pytest.mark.parametrize(("case", "obj", "text"), FINDINGS, ids=[f[0] for f in FINDINGS])
def test_warn_mode_warns_and_allows(case: str, obj: dict[str, Any], text: str) -> None:
    decision = run(obj, config=config("warn"))
    assert decision.allowed
    assert text in decision.warnings
    assert decision.mutated is None


@pytest.mark.parametrize(("case", "obj", "text"), FINDINGS, ids=[f[0] for f in FINDINGS])
def test_enforce_mode_denies_with_the_finding(case: str, obj: dict[str, Any], text: str) -> None:
    decision = run(obj, config=config("enforce"))
    assert decision.denial_message() == f"Pod ml/train, {text}. {WHY}"
    assert [v.rule for v in decision.violations] == ["gpu access"]
    # /validate (violations only) denies the same.
    assert run(obj, config=config("enforce"), violations_only=True).violations == (
        decision.violations
    )


@pytest.mark.parametrize(("case", "obj", "text"), FINDINGS, ids=[f[0] for f in FINDINGS])
def test_warn_mode_validate_skips_access_control_and_the_audit_still_lists(
    case: str, obj: dict[str, Any], text: str
) -> None:
    # /validate (violations only) under `warn`: the finding is a warning the mutating call
    # returned, so the validating call's answer is a plain allow, and access control is not
    # run for it (issue 49: the validating call cheap); under `enforce` it denies (above).
    validate = run(obj, config=config("warn"), violations_only=True)
    assert validate.allowed and not validate.violations and not validate.warnings
    assert validate.access == () and validate.unresolved_images == ()
    # The audit (violations only for workloads, audit=True) still lists what `warn` found.
    audited = evaluate(obj, standard_policies(), config("warn"), violations_only=True, audit=True)
    assert audited.allowed and f"Pod ml/train, {text}." in [v.detail for v in audited.access]


@pytest.mark.parametrize(("case", "obj", "text"), FINDINGS, ids=[f[0] for f in FINDINGS])
def test_off_mode_says_nothing(case: str, obj: dict[str, Any], text: str) -> None:
    decision = run(obj, config=config("off"))
    assert decision.allowed and not decision.warnings and not decision.access


# NVIDIA's toolkit reads "void"/"none" case-sensitively (issue 46: "VOID" names a device and
# `all` stands beside it): core/families/visible.py and test_visible_devices.py.
@pytest.mark.parametrize("value", ["void", "none", "", " void ", "0,void", "all,none"])
def test_values_that_name_no_device_are_allowed(value: str) -> None:
    decision = run(
        pod(container("app", env=env("NVIDIA_VISIBLE_DEVICES", value))), config=config("enforce")
    )
    assert decision.allowed and not decision.warnings
    # The user's value is never overridden: only the other vendors' variables are added.
    assert get(apply(decision), "spec", "containers", 0, "env") == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": value},
        {"name": "AMD_VISIBLE_DEVICES", "value": "void"},
        {"name": "ASCEND_VISIBLE_DEVICES", "value": ""},
    ]


def test_gpu_containers_keep_their_gpus_and_get_the_other_vendors_void() -> None:
    """A container that requests a GPU keeps what the device plugin gives it: NVIDIA's
    variable is never written; under `enforce` the other vendors' are voided."""
    obj = pod(
        container("train", CUDA_IMAGE, limits={GPU: 1}),
        volumes=[{"name": "dev", "hostPath": {"path": "/dev"}}],
    )
    off = run(obj, config=config("off"))
    warn = run(obj, config=config("warn"))
    assert warn.allowed and warn.warnings == off.warnings and warn.patch == off.patch
    enforce = run(obj, config=config("enforce"))
    assert enforce.allowed and enforce.warnings == off.warnings
    assert get(apply(enforce), "spec", "containers", 0, "env") == [
        {"name": "AMD_VISIBLE_DEVICES", "value": "void"},
        {"name": "ASCEND_VISIBLE_DEVICES", "value": ""},
    ]


def test_a_privileged_gpu_container_is_a_finding() -> None:
    """Issue 36: a privileged container sees every device of its node, whatever it requests."""
    obj = pod(container("train", limits={GPU: 1}, securityContext={"privileged": True}))
    text = (
        'container "train" is privileged: drop privileged: a privileged container sees every '
        "device of its node"
    )
    assert text in run(obj, config=config("warn")).warnings
    assert run(obj, config=config("enforce")).denial_message() == f"Pod ml/train, {text}. {WHY}"


@pytest.mark.parametrize("value", ["all", "0,1,2,3", "GPU-0b5a"])
def test_a_gpu_container_that_chooses_its_own_devices(value: str) -> None:
    """Under the device plugin's default envvar strategy a GPU container's own value replaces
    the GPUs it was given (the runtime keeps the last value)."""
    obj = pod(container("train", limits={GPU: 1}, env=env("NVIDIA_VISIBLE_DEVICES", value)))
    text = (
        f'container "train" sets NVIDIA_VISIBLE_DEVICES={value}: '
        "remove it: the device plugin sets the GPUs a container gets"
    )
    assert text in run(obj, config=config("warn")).warnings
    assert run(obj, config=config("enforce")).denial_message() == (f"Pod ml/train, {text}. {WHY}")
    void = pod(container("train", limits={GPU: 1}, env=env("NVIDIA_VISIBLE_DEVICES", "void")))
    assert run(void, config=config("enforce")).allowed


def test_runtime_class_of_nvidia_without_a_gpu_request() -> None:
    obj = pod(container("app"), runtimeClassName="nvidia")
    assert run(obj, config=config("enforce")).denial_message() == (
        "Pod ml/train, runtimeClassName nvidia runs NVIDIA's runtime but the pod requests no "
        f"GPU: request nvidia.com/gpu or drop it. {WHY}"
    )
    with_gpu = pod(container("app", limits={GPU: 1}), runtimeClassName="nvidia")
    assert run(with_gpu, config=config("enforce")).allowed
    other = pod(container("app"), runtimeClassName="gvisor")
    assert run(other, config=config("enforce")).allowed


def test_nri_plugin_annotations_are_cdi_annotations() -> None:
    obj = pod(container("app"), annotations={"nvidia.cdi.k8s.io/pod": "nvidia.com/gpu=all"})
    assert run(obj, config=config("enforce")).denial_message() == (
        "Pod ml/train, annotation nvidia.cdi.k8s.io/pod names devices: "
        f"request nvidia.com/gpu or a DRA claim instead. {WHY}"
    )


def test_a_legacy_cuda_env_is_voided() -> None:
    """CUDA_VERSION without NVIDIA_REQUIRE_CUDA makes the toolkit default to every GPU."""
    obj = pod(container("cpu", "python:3.12", env=env("CUDA_VERSION", "12.4.1")))
    after = apply(run(obj, config=config("enforce", voidImageDevices="known")))
    assert get(after, "spec", "containers", 0, "env") == [
        {"name": "CUDA_VERSION", "value": "12.4.1"},
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
    ]


def test_a_zero_gpu_request_is_no_request() -> None:
    obj = pod(container("app", limits={GPU: 0}, env=VISIBLE_ALL))
    assert not run(obj, config=config("enforce")).allowed


def test_a_gpu_dra_claim_counts_and_an_unknown_claim_makes_no_device_container() -> None:
    """Issue 36: a claim the cache has not seen made its container exempt from every check."""

    def claim_pod(template: str) -> dict[str, Any]:
        c = container("app", securityContext={"privileged": True})
        c["resources"] = {"claims": [{"name": "gpu"}]}
        return pod(c, resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": template}])

    claims = ClaimIndex.from_objects(
        [claim_template("one-gpu", r="gpu.nvidia.com"), claim_template("nic", r="rdma.x")]
    )
    cfg = config("enforce")
    policies = standard_policies()

    def decide(template: str) -> bool:
        return evaluate(claim_pod(template), policies, cfg, claims=claims).allowed

    # A privileged container is a finding whatever it requests (device containers included).
    assert not decide("one-gpu")
    assert not decide("nic")  # a claim on another device class gives no GPU
    assert not decide("not-cached-yet")
    message = evaluate(claim_pod("not-cached-yet"), policies, cfg, claims=claims).denial_message()
    assert 'container "app" is privileged but requests no GPU' in message


def test_exempt_namespaces() -> None:
    obj = pod(container("dcgm", env=VISIBLE_ALL), namespace="gpu-operator")
    assert run(obj, config=config("enforce")).allowed
    obj = pod(container("dcgm", env=VISIBLE_ALL), namespace="monitoring")
    assert not run(obj, config=config("enforce")).allowed
    cfg = config("enforce", exemptNamespaces=["monitoring"])
    assert run(obj, config=cfg).allowed
    # The list the admin writes is the whole list: [] exempts nothing (issue 36).
    none = config("enforce", exemptNamespaces=[])
    assert none.gpu_access.exempt_namespaces == ()
    operator = pod(container("dcgm", env=VISIBLE_ALL), namespace="gpu-operator")
    assert not run(operator, config=none).allowed


def test_enforce_voids_a_cuda_image_without_a_gpu_request() -> None:
    obj = pod(container("cpu", CUDA_IMAGE), container("gpu", CUDA_IMAGE, limits={GPU: 1}))
    known = config("enforce", voidImageDevices="known")
    decision = run(obj, config=known)
    assert decision.allowed
    after = apply(decision)
    assert get(after, "spec", "containers", 0, "env") == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
    ]
    assert get(after, "spec", "containers", 1, "env") is None
    assert (
        'set NVIDIA_VISIBLE_DEVICES=void in container "cpu": its CUDA image would give it every GPU'
        in decision.notes
    )
    # Idempotent: the patched pod needs nothing more (reinvocationPolicy: IfNeeded).
    assert run(after, config=known).patch == []
    # The default (all): every vendor's variable in each container without its device.
    decision = run(obj, config=config("enforce"))
    after = apply(decision)
    assert get(after, "spec", "containers", 0, "env") == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
        {"name": "AMD_VISIBLE_DEVICES", "value": "void"},
        {"name": "ASCEND_VISIBLE_DEVICES", "value": ""},
    ]
    assert get(after, "spec", "containers", 1, "env") == [
        {"name": "AMD_VISIBLE_DEVICES", "value": "void"},
        {"name": "ASCEND_VISIBLE_DEVICES", "value": ""},
    ]
    assert run(after, config=config("enforce")).patch == []


def test_void_keeps_the_users_other_env_and_never_overrides_a_value() -> None:
    obj = pod(container("cpu", CUDA_IMAGE, env=[{"name": "A", "value": "1"}]))
    after = apply(run(obj, config=config("enforce", voidImageDevices="known")))
    assert get(after, "spec", "containers", 0, "env") == [
        {"name": "A", "value": "1"},
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
    ]
    obj = pod(
        container(
            "cpu",
            CUDA_IMAGE,
            env=[
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"},
                {"name": "AMD_VISIBLE_DEVICES", "value": ""},
                {"name": "ASCEND_VISIBLE_DEVICES", "value": "void"},
            ],
        )
    )
    assert run(obj, config=config("enforce")).patch == []


def test_void_modes() -> None:
    unknown = pod(container("cpu", "python:3.12"))
    cuda = pod(container("cpu", CUDA_IMAGE))
    assert run(unknown, config=config("enforce", voidImageDevices="known")).patch == []
    assert config("enforce").gpu_access.void_image_devices == "all"  # the default
    everything = run(unknown, config=config("enforce"))
    assert get(apply(everything), "spec", "containers", 0, "env") == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
        {"name": "AMD_VISIBLE_DEVICES", "value": "void"},
        {"name": "ASCEND_VISIBLE_DEVICES", "value": ""},
    ]
    assert everything.notes == (
        'set NVIDIA, AMD and Ascend device variables to void in container "cpu": it requests no '
        "such device",
    )
    assert run(cuda, config=config("enforce", voidImageDevices="off")).patch == []


def test_warn_mode_does_not_warn_about_a_cuda_image_but_the_audit_lists_it() -> None:
    """Every CPU pod on a CUDA image would get that warning: the audit says it instead."""
    obj = pod(container("cpu", CUDA_IMAGE), name="cpu-job")
    decision = run(obj, config=config("warn"))
    assert decision.allowed and decision.patch == [] and decision.warnings == ()
    assert decision.access == ()
    audit = Audit()
    audit.add(
        obj,
        "v1",
        "Pod",
        evaluate_object(obj, "v1", "Pod", standard_policies(), audit_config(config("off"))),
    )
    (finding,) = audit.result().findings
    assert [p.message for p in finding.access.values()] == [
        'container "cpu" runs a CUDA image, which gives it every GPU of its node, but requests '
        "no GPU: gpuAccess enforce sets NVIDIA_VISIBLE_DEVICES=void"
    ]


def test_templates_are_judged_as_their_pods_and_never_mutated() -> None:
    bad = workload("Deployment", pod(container("app", env=VISIBLE_ALL)))
    decision = run(bad, config=config("enforce"))
    assert decision.denial_message() == (
        'Deployment ml/app, container "app" sets NVIDIA_VISIBLE_DEVICES=all but requests no GPU: '
        f"request nvidia.com/gpu or set it to void. {WHY}"
    )
    cuda = workload("Deployment", pod(container("cpu", CUDA_IMAGE)))
    decision = run(cuda, config=config("enforce", voidImageDevices="known"))
    assert decision.allowed and decision.mutated is None
    assert decision.notes == (
        'will apply to pods: set NVIDIA_VISIBLE_DEVICES=void in container "cpu": its CUDA image '
        "would give it every GPU",
    )


@pytest.mark.parametrize(
    ("path", "reaches"),
    [
        ("/dev", True),
        ("/dev/", True),
        ("/", True),
        ("/dev/nvidia0", True),
        ("/dev/nvidiactl", True),
        ("/dev/nvidia-caps", True),
        ("/dev/dri/renderD128", True),
        ("/dev/char", True),
        ("//dev//dri", True),
        ("/tmp/../dev", True),
        ("/dev/kfd", True),
        ("/dev/davinci0", True),
        ("/dev/davinci_manager", True),
        ("/dev/devmm_svm", True),
        ("/dev/hisi_hdc", True),
        ("/dev/accel/accel0", True),
        ("/dev/neuron0", True),
        ("/dev/vfio/12", True),
        ("/dev/../dev/davinci3/", True),
        ("/dev/shm", False),
        ("/dev/fuse", False),
        ("/var/lib/data", False),
        ("", False),
    ],
)
def test_device_host_paths(path: str, reaches: bool) -> None:
    assert device_host_path(path) is reaches


def test_config_refuses_bad_values() -> None:
    with pytest.raises(ConfigError, match=r"gpuAccess\.mode"):
        load_config({"gpuAccess": {"mode": "block"}})
    with pytest.raises(ConfigError, match="not a namespace name"):
        load_config({"gpuAccess": {"exemptNamespaces": ["Not_A_Namespace"]}})


def test_default_mode_is_warn() -> None:
    assert WebhookConfig().gpu_access.mode == "warn"


def test_audit_lists_findings_in_every_mode_and_reports_them() -> None:
    policies = standard_policies()
    obj = pod(container("app", env=VISIBLE_ALL), name="sneaky")
    for mode, result in (("off", "warn"), ("warn", "warn"), ("enforce", "fail")):
        cfg = audit_config(config(mode))
        audit = Audit()
        audit.add(obj, "v1", "Pod", evaluate(obj, policies, cfg, audit=True))
        found = audit.result()
        assert len(found.findings) == 1, mode
        reports = build_reports(found, WGPOLICY, 0)
        results = reports["ml"]["results"]
        assert [(r["policy"], r["rule"], r["result"]) for r in results] == [
            ("gpu-access", "gpu access", result)
        ]
        why = f". {WHY}" if mode == "enforce" else ""  # a denial says why, as CRLs' do
        assert results[0]["message"] == (
            'container "app" sets NVIDIA_VISIBLE_DEVICES=all but requests no GPU: '
            f"request nvidia.com/gpu or set it to void{why} (in 1 pod(s))"
        ), mode
        assert found.to_json()["summary"]["gpuAccess"] == (0 if mode == "enforce" else 1)


def test_an_update_that_opens_a_bypass_is_judged_and_an_unrelated_one_is_not() -> None:
    """Updates compare only what the evaluation reads (SPEC §6): with access control on, that
    includes what its rules read, so `privileged: true` added to a template is re-judged."""
    old = workload("Deployment", pod(container("app", env=[{"name": "A", "value": "1"}])))
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    cfg = config("enforce")
    policies = standard_policies()
    decision = evaluate(new, policies, cfg, operation="UPDATE", old_object=old)
    assert not decision.allowed
    assert "is privileged but requests no GPU" in decision.denial_message()
    # A runtime class, a device hostPath and a CDI annotation are changes too.
    changes: list[tuple[str, dict[str, Any]]] = [
        ("spec", {"runtimeClassName": "nvidia"}),
        ("spec", {"volumes": [{"name": "d", "hostPath": {"path": "/dev"}}]}),
        ("metadata", {"annotations": {"cdi.k8s.io/x": "nvidia.com/gpu=0"}}),
    ]
    for part, fields in changes:
        changed = copy.deepcopy(old)
        changed["spec"]["template"][part].update(fields)
        decision = evaluate(changed, policies, cfg, operation="UPDATE", old_object=old)
        assert decision.reason != "the pod template is unchanged"
    # Another env var (Stakater Reloader's bump) is not.
    bumped = copy.deepcopy(old)
    bumped["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] = "2"
    decision = evaluate(bumped, policies, cfg, operation="UPDATE", old_object=old)
    assert decision.reason == "the pod template is unchanged"
