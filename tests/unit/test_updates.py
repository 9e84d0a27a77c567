"""Updates and the controllers that make them (SPEC §6): what is allowed untouched, and why."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.helpers import (
    GPU,
    VCORE,
    apply,
    container,
    crl,
    pod,
    policies,
    without_shm,
    workload,
)

# Tests of updates: evaluated without the /dev/shm fix (on by default), whose volume and warning
# would be in every pod here (tests/helpers.py `without_shm`; the rule's own tests:
# test_runtime_fixes.py).
from tests.helpers import (
    load_without_shm as load_config,
)
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import Decision, evaluate
from webhook.core.policies.policyset import PolicySet

# The policy as tightened after the workloads were created: at most 4 GPUs.
TIGHT: PolicySet = policies(
    crl(GPU, "nvidia", name="cf-crl-nvidia-gpu", requests="fromLimits", max="4"),
    crl(VCORE, "gpu-manager", defaultValue="10", wholeUnit="100"),
)
DEFAULT = without_shm()
MUTATING = load_config({"mutateTemplates": True})
TOO_MANY = (
    "limits.nvidia.com/gpu='8' is above the maximum 4 (max: 4 in ConfigMap "
    "kube-public/cf-crl-nvidia-gpu)."
)


def big(kind: str) -> dict[str, Any]:
    """A workload asking for 8 GPUs, created before the policy said at most 4."""
    return workload(kind, pod(container(image="nvidia/cuda:12.4.1-base", limits={GPU: "8"})))


def labelled(obj: dict[str, Any]) -> dict[str, Any]:
    """`kubectl label`: the same object with one more label."""
    new = copy.deepcopy(obj)
    new["metadata"].setdefault("labels", {})["team"] = "ml"
    return new


def owned(
    obj: dict[str, Any], api_version: str, kind: str, controller: bool = True
) -> dict[str, Any]:
    obj["metadata"]["ownerReferences"] = [
        {
            "apiVersion": api_version,
            "kind": kind,
            "name": "train",
            "uid": "u1",
            "controller": controller,
        }
    ]
    return obj


def review(
    obj: dict[str, Any],
    *,
    operation: str = "UPDATE",
    old: dict[str, Any] | None = None,
    sub_resource: str = "",
    config: WebhookConfig = DEFAULT,
    violations_only: bool = False,
) -> Decision:
    return evaluate(
        obj,
        TIGHT,
        config,
        operation=operation,
        old_object=old,
        sub_resource=sub_resource,
        violations_only=violations_only,
    )


def assert_untouched(decision: Decision, reason: str) -> None:
    assert decision.handled
    assert decision.allowed
    assert decision.patch == []
    assert (decision.notes, decision.warnings, decision.mutation_kinds) == ((), (), ())
    assert decision.reason == reason


# --- unchanged templates -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind", ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"]
)
@pytest.mark.parametrize("config", [DEFAULT, MUTATING])
@pytest.mark.parametrize("violations_only", [False, True])
def test_update_with_unchanged_template_is_allowed_untouched(
    kind: str, config: WebhookConfig, violations_only: bool
) -> None:
    old = big(kind)
    new = labelled(old)
    new.setdefault("spec", {})["replicas"] = 0  # scale-down: not part of the template
    decision = review(new, old=old, config=config, violations_only=violations_only)
    assert_untouched(decision, "the pod template is unchanged")


@pytest.mark.parametrize("kind", ["Deployment", "CronJob"])
def test_update_with_changed_template_is_evaluated(kind: str) -> None:
    old = workload(kind, pod(container(limits={GPU: "2"})))
    new = big(kind)
    decision = review(new, old=old)
    assert [v.message for v in decision.violations] == [f'{kind} ml/app, container "c": {TOO_MANY}']
    assert decision.reason == ""


def test_update_without_old_object_is_evaluated() -> None:
    # e.g. `gpu-webhook review --operation UPDATE` on a file: nothing to compare with.
    decision = review(labelled(big("Deployment")), old=None)
    assert not decision.allowed


def test_create_is_evaluated_even_with_an_old_object() -> None:
    obj = big("Deployment")
    decision = review(obj, operation="CREATE", old=obj)
    assert not decision.allowed


# --- Kueue and JobSet start a suspended Job: scheduling directives are no reason to re-judge ----


def kueue_start(old: dict[str, Any], template: dict[str, Any] | None = None) -> dict[str, Any]:
    """The one UPDATE Kueue makes to start an admitted Job (kueue pkg/podset/podset.go Merge):
    `suspend: false` plus its ResourceFlavor's nodeSelector and tolerations, a label, a
    scheduling gate, and an annotation of its own, in the pod template."""
    new = copy.deepcopy(old)
    spec = new["spec"]
    spec["suspend"] = False
    tpl = template if template is not None else spec["template"]
    tpl["metadata"].setdefault("labels", {})["kueue.x-k8s.io/podset"] = "main"
    tpl["metadata"].setdefault("annotations", {})["kueue.x-k8s.io/workload"] = "job-train-1"
    tpl["spec"]["nodeSelector"] = {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    tpl["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    tpl["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/topology"}]
    tpl["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    }
    return new


def suspended_job() -> dict[str, Any]:
    job = big("Job")
    job["spec"]["suspend"] = True
    return job


@pytest.mark.parametrize("config", [DEFAULT, MUTATING])
@pytest.mark.parametrize("violations_only", [False, True])
def test_kueue_start_of_a_queued_job_is_allowed_untouched(
    config: WebhookConfig, violations_only: bool
) -> None:
    # Issue 18, defect 1: the Job asks for 8 GPUs, created before the policy said at most 4.
    # Kueue's start (and its restore on eviction, the reverse UPDATE) must not be denied.
    old = suspended_job()
    started = kueue_start(old)
    for new, prev in ((started, old), (old, started)):
        decision = review(new, old=prev, config=config, violations_only=violations_only)
        assert_untouched(decision, "the pod template is unchanged")


def test_jobset_start_of_child_jobs_is_allowed_untouched() -> None:
    # The JobSet controller starts a suspended JobSet's replicated Jobs the same way.
    old: dict[str, Any] = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "suspend": True,
            "replicatedJobs": [{"name": "workers", "template": big("Job")}],
        },
    }
    new = copy.deepcopy(old)
    new["spec"]["suspend"] = False
    job = new["spec"]["replicatedJobs"][0]["template"]
    kueue_start({"spec": job["spec"]}, job["spec"]["template"])
    assert_untouched(review(new, old=old), "the pod template is unchanged")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("image", "nvidia/cuda:12.6.0-base"),
        ("env", [{"name": "CUDA_VERSION", "value": "12.6"}]),
        ("envFrom", [{"configMapRef": {"name": "cuda"}}]),
        ("args", ["--dtype", "bfloat16"]),
    ],
)
def test_a_change_the_evaluation_reads_is_judged(field: str, value: Any) -> None:
    # Each of these changes what the evaluation reads: judged again (here: still 8 > 4).
    old = big("Deployment")
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["containers"][0][field] = value
    decision = review(new, old=old)
    assert [v.message for v in decision.violations] == [
        f'Deployment ml/app, container "c": {TOO_MANY}'
    ]


def test_a_changed_cuda_annotation_is_judged_and_a_foreign_one_is_not() -> None:
    old = big("Deployment")
    ours = copy.deepcopy(old)
    ours["spec"]["template"]["metadata"]["annotations"] = {
        "features.alauda.io/cuda-version": "12.4"
    }
    assert not review(ours, old=old).allowed
    foreign = copy.deepcopy(old)
    foreign["spec"]["template"]["metadata"]["annotations"] = {"kubectl.kubernetes.io/x": "1"}
    assert_untouched(review(foreign, old=old), "the pod template is unchanged")


def test_raising_gpus_in_a_deployment_is_still_denied() -> None:
    old = workload("Deployment", pod(container(image="nvidia/cuda:12.4.1-base", limits={GPU: "2"})))
    new = kueue_start(old)  # scheduling changes too, but the resources changed as well
    new["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][GPU] = "8"
    decision = review(new, old=old)
    assert [v.message for v in decision.violations] == [
        f'Deployment ml/app, container "c": {TOO_MANY}'
    ]


# --- objects being deleted, subresources, owned objects ----------------------------------------


def test_object_being_deleted_is_allowed_untouched() -> None:
    # The garbage collector removes the foregroundDeletion finalizer with an UPDATE (PATCH).
    old = big("Deployment")
    old["metadata"]["deletionTimestamp"] = "2026-11-22T10:00:00Z"
    old["metadata"]["finalizers"] = ["foregroundDeletion"]
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = []
    new["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][GPU] = "16"
    assert_untouched(review(new, old=old), "the object is being deleted")


@pytest.mark.parametrize("sub_resource", ["status", "scale"])
@pytest.mark.parametrize("operation", ["UPDATE", "CREATE"])
def test_subresource_requests_are_allowed_untouched(sub_resource: str, operation: str) -> None:
    decision = review(big("Deployment"), operation=operation, sub_resource=sub_resource)
    assert_untouched(
        decision, f"a request for the {sub_resource} subresource changes no pod template"
    )


@pytest.mark.parametrize(
    ("kind", "api_version", "owner"),
    [("ReplicaSet", "apps/v1", "Deployment"), ("Job", "batch/v1", "CronJob")],
)
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
@pytest.mark.parametrize("config", [DEFAULT, MUTATING])
def test_controlled_objects_are_allowed_untouched(
    kind: str, api_version: str, owner: str, operation: str, config: WebhookConfig
) -> None:
    obj = owned(big(kind), api_version, owner)
    # Even a changed template: the owner's template is what was checked (Pods are the net).
    changed = copy.deepcopy(obj)
    changed["metadata"]["annotations"] = {"deployment.kubernetes.io/revision": "2"}
    template = changed["spec"].get("template") or changed["spec"]["jobTemplate"]["spec"]["template"]
    template["spec"]["containers"][0]["resources"]["limits"][GPU] = "16"
    old = obj if operation == "UPDATE" else None
    decision = review(changed, operation=operation, old=old, config=config)
    assert_untouched(decision, f"controlled by {owner} train, whose template is checked")


@pytest.mark.parametrize(
    ("kind", "api_version", "owner", "controller"),
    [
        ("ReplicaSet", "apps/v1", "Deployment", False),  # an owner, but not the controller
        ("ReplicaSet", "example.com/v1", "Deployment", True),  # someone else's Deployment
        ("ReplicaSet", "apps/v1", "StatefulSet", True),
        ("Job", "batch/v1", "Deployment", True),
        ("Deployment", "apps/v1", "Deployment", True),
    ],
)
def test_other_owners_do_not_exempt(
    kind: str, api_version: str, owner: str, controller: bool
) -> None:
    obj = owned(big(kind), api_version, owner, controller)
    decision = review(obj, operation="CREATE")
    assert not decision.allowed
    assert decision.reason == ""


# --- template mutation: CREATE, or UPDATE with a changed template, never a Job UPDATE -----------


def vgpu(kind: str, core: str = "50") -> dict[str, Any]:
    return workload(kind, pod(container(image="busybox:1", limits={VCORE: core})))


def test_template_mutated_on_update_with_changed_template() -> None:
    decision = review(vgpu("Deployment", "60"), old=vgpu("Deployment", "50"), config=MUTATING)
    limits = apply(decision)["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {VCORE: "60"}  # only governed key of its group here: nothing to default
    assert decision.allowed


def test_job_template_never_mutated_on_update() -> None:
    # A Job's template is immutable (kubernetes pkg/apis/batch/validation): a patch to it would
    # make the API server reject the whole update. The notes become warnings.
    cuda_old = workload("Job", pod(container(image="nvidia/cuda:12.4.1-base", limits={GPU: "1"})))
    cuda_new = workload("Job", pod(container(image="nvidia/cuda:12.4.1-base", limits={GPU: "2"})))
    decision = review(cuda_new, old=cuda_old, config=MUTATING)
    assert decision.allowed
    assert decision.patch == []
    assert decision.mutated is None
    assert decision.notes[0] == (
        'will apply to pods: set requests.nvidia.com/gpu=2 from limits in container "c"'
    )
    created = review(cuda_new, operation="CREATE", config=MUTATING)
    assert created.patch != []  # on CREATE the same Job's template is mutated


# --- what is never evaluated ---------------------------------------------------------------------


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
@pytest.mark.parametrize(
    "obj",
    [
        big("Deployment"),
        pod(container(limits={GPU: "8"})),
        crl("example.com/npu", "npu", name="cf-crl-npu-npu", limits="maybe"),
    ],
)
def test_delete_and_connect_are_never_denied(operation: str, obj: dict[str, Any]) -> None:
    decision = review(obj, operation=operation)
    assert decision.allowed
    assert not decision.handled
    assert decision.patch == []


def test_pod_update_is_judged_by_gpu_access_control_only() -> None:
    """A Pod's spec is all but immutable: its CRLs and placement were judged at create. GPU
    access control judges what an UPDATE introduces (SPEC §12); with it off nothing runs."""
    old = pod(container(limits={GPU: "8"}))
    decision = review(labelled(old), old=old)
    assert decision.allowed and decision.handled and decision.violations == ()
    off = WebhookConfig.model_validate({"gpuAccess": {"mode": "off"}})
    decision = evaluate(labelled(old), TIGHT, off, operation="UPDATE", old_object=old)
    assert decision.allowed and not decision.handled


# --- only what the evaluation reads (issue 28 item 5 c, d) -------------------------------------


def serving(**spec: Any) -> dict[str, Any]:
    """A Deployment asking for 8 GPUs (above TIGHT's max), with what controllers and tools
    change: env, cpu/memory, args; and what the evaluation reads."""
    c = container(
        "server",
        image="nvidia/cuda:12.4.1-base",
        limits={GPU: "8", "cpu": "4", "memory": "16Gi"},
        requests={"cpu": "2", "memory": "8Gi"},
        env=[
            {"name": "STAKATER_APP_CONFIG_CONFIGMAP", "value": "a1b2"},
            {"name": "LOG_LEVEL", "value": "info"},
        ],
        args=["--port", "8000"],
    )
    return workload("Deployment", pod(c, **spec))


def changed(obj: dict[str, Any], change: Any) -> dict[str, Any]:
    new = copy.deepcopy(obj)
    change(new["spec"]["template"]["spec"]["containers"][0], new["spec"]["template"]["spec"])
    return new


def _env(name: str, value: str) -> Any:
    def change(c: dict[str, Any], _: dict[str, Any]) -> None:
        c["env"] = [e for e in c["env"] if e["name"] != name] + [{"name": name, "value": value}]

    return change


def _set(field: str, value: Any) -> Any:
    def change(c: dict[str, Any], _: dict[str, Any]) -> None:
        c[field] = value

    return change


def _resources(limits: dict[str, str], requests: dict[str, str]) -> Any:
    def change(c: dict[str, Any], _: dict[str, Any]) -> None:
        c["resources"] = {"limits": limits, "requests": requests}

    return change


@pytest.mark.parametrize(
    "change",
    [
        # Stakater Reloader's default strategy: an env var whose value is the config's hash.
        pytest.param(_env("STAKATER_APP_CONFIG_CONFIGMAP", "c3d4"), id="Reloader env bump"),
        pytest.param(_env("LOG_LEVEL", "debug"), id="another env value"),
        pytest.param(_env("NEW_FLAG", "1"), id="a new unrelated env var"),
        pytest.param(
            _resources({GPU: "8", "cpu": "6", "memory": "24Gi"}, {"cpu": "3", "memory": "12Gi"}),
            id="cpu/memory rightsizing",
        ),
        pytest.param(_set("args", ["--port", "8001"]), id="an argument no rule reads"),
        pytest.param(
            lambda c, s: s.update(nodeSelector={"kubernetes.io/arch": "arm64"}),
            id="architecture of an image whose CUDA does not depend on it",
        ),
    ],
)
def test_a_change_the_evaluation_does_not_read_is_allowed_untouched(change: Any) -> None:
    old = serving()
    assert not review(old, operation="CREATE").allowed  # created before the policy said 4
    assert_untouched(review(changed(old, change), old=old), "the pod template is unchanged")


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(
            {"env": [{"name": "STAKATER_APP_CONFIG_CONFIGMAP", "value": "1"}]},
            id="the first env var, unrelated",
        ),
        pytest.param({"resources": {"limits": {"cpu": "2"}}}, id="the first limit, cpu"),
        pytest.param({"resources": {}}, id="empty resources"),
    ],
)
def test_adding_the_first_unread_field_is_no_change(change: dict[str, Any]) -> None:
    """No env and an env of unrelated names read the same, as do no limits and cpu-only ones
    (the native policy's copy of this comparison decides the same: tests/native)."""
    gpu = container("server", image="nvidia/cuda:12.4.1-base", limits={GPU: "8"})
    old = workload("Deployment", pod(gpu, container("sidecar", image="busybox")))
    assert not review(old, operation="CREATE").allowed  # created before the policy said 4
    new = copy.deepcopy(old)
    sidecar = new["spec"]["template"]["spec"]["containers"][1]
    assert "env" not in sidecar and "resources" not in sidecar
    sidecar.update(change)
    assert_untouched(review(new, old=old), "the pod template is unchanged")


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(_env("CUDA_VERSION", "12.8.0"), id="env CUDA_VERSION"),
        pytest.param(_env("NVIDIA_REQUIRE_CUDA", "cuda>=12.8"), id="env NVIDIA_REQUIRE_CUDA"),
        pytest.param(_env("FLAGS_allocator_strategy", "auto_growth"), id="an env fix's variable"),
        pytest.param(_set("envFrom", [{"configMapRef": {"name": "x"}}]), id="envFrom"),
        pytest.param(
            _set("args", ["--port", "8000", "--dtype", "bfloat16"]),
            id="an argument a compute-capability rule reads",
        ),
        pytest.param(_resources({GPU: "8", "example.com/fpga": "1"}, {}), id="extended resource"),
        pytest.param(_set("image", "nvidia/cuda:12.8.0-base"), id="image"),
    ],
)
def test_a_change_of_what_the_evaluation_reads_is_judged(change: Any) -> None:
    old = serving()
    decision = review(changed(old, change), old=old)
    assert decision.reason == ""
    assert [v.message for v in decision.violations] == [
        f'Deployment ml/app, container "server": {TOO_MANY}'
    ]


VLLM = "vllm/vllm-openai:v0.11.0"  # shipped knowledge: CUDA 12.8 on amd64, 12.9 on arm64


def vllm(**spec: Any) -> dict[str, Any]:
    return workload("Deployment", pod(container(image=VLLM, limits={GPU: "1"}), **spec))


def arch_term(arch: str) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/arch", "operator": "In", "values": [arch]}]}]}}}  # fmt: skip


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param({"nodeSelector": {"kubernetes.io/arch": "amd64"}},
                     {"nodeSelector": {"kubernetes.io/arch": "arm64"}}, id="nodeSelector"),
        pytest.param({"affinity": arch_term("amd64")}, {"affinity": arch_term("arm64")},
                     id="node affinity"),
        pytest.param({}, {"nodeSelector": {"kubernetes.io/arch": "arm64"}}, id="pinned"),
    ],
)  # fmt: skip
def test_moving_a_per_architecture_image_to_arm64_is_judged(
    before: dict[str, Any], after: dict[str, Any]
) -> None:

    old, new = vllm(**before), vllm(**after)
    decision = review(new, old=old)
    assert decision.reason == ""
    assert decision.notes == (
        'will apply to pods: set requests.nvidia.com/gpu=1 from limits in container "c"',
        "for pods: required GPU nodes with CUDA ≥ 12.9 (shipped knowledge: vLLM 0.11.0 for "
        "linux/arm64, vLLM release pipeline)",
    )


def test_a_template_with_requests_equal_to_limits_is_judged_as_its_pods() -> None:
    """The API server defaults a Pod's requests from its limits (SetDefaults_Pod), so every
    pod made from this template has requests = limits, and a `requests: disabled` policy
    admits them: the template is not denied either (SPEC §6)."""
    no_requests = policies(crl(VCORE, "gpu-manager", requests="disabled"))
    c = container(limits={VCORE: "100"}, requests={VCORE: "100"})
    for obj in (pod(c), workload("Deployment", pod(c))):
        decision = evaluate(obj, no_requests, DEFAULT)
        assert decision.violations == ()
    differing = container(limits={VCORE: "100"}, requests={VCORE: "50"})
    decision = evaluate(workload("Deployment", pod(differing)), no_requests, DEFAULT)
    assert [v.rule for v in decision.violations] == ["requests: disabled", "requests = limits"]
