"""Runtime fixes for every accelerator vendor (SPEC §14, issue 45 items 3 and 4): /dev/shm, the
image architecture and RDMA for every device family's containers and DRA claims; the config's
`resources`/`families` select among them; /dev/shm sizing (pod-level limits, the runtime's
64 MiB floor, the webhook's own volume resized); the architecture rule's defects. Each test looks
at the stored object (the patch applied) and the exact messages."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.helpers import apply, container, pod, workload
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.outcome.decision import Decision
from webhook.core.placement.inventory import NodeInventory
from webhook.core.policies.policyset import PolicySet
from webhook.core.workloads.claims import ClaimIndex

GATES_OFF: dict[str, Any] = {
    "cudaAffinity": False,
    "accelerators": {"rocm": {"enabled": False}, "cann": {"enabled": False}},
}
# The fixes alone: no CUDA, ROCm or CANN placement (their gates are test_vendor_gate.py's).
SHM_ON = load_config(GATES_OFF)
SHM_MOUNT = {"name": "dshm", "mountPath": "/dev/shm"}
SHM_MARK = "features.alauda.io/injected-shm"
ARCH_MARK = "features.alauda.io/injected-architecture"
ROCM = "rocm/pytorch:rocm6.4_ubuntu24.04_py3.12_pytorch_release_2.6.0"
CANN = "ascendai/cann:8.3.rc1-910b-ubuntu22.04-py3.11"


def run(
    obj: dict[str, Any],
    config: WebhookConfig = SHM_ON,
    inventory: NodeInventory | None = None,
    **kw: Any,
) -> Decision:
    # No CRL policies: the families catalog alone says which containers are accelerators.
    return evaluate(obj, PolicySet.empty(), config, inventory=inventory, **kw)


def shm_volume(size: str = "16Gi", name: str = "dshm") -> dict[str, Any]:
    return {"name": name, "emptyDir": {"medium": "Memory", "sizeLimit": size}}


def note(where: str = '"trainer"', size: str = "16Gi") -> str:
    return f"mounted a {size} memory-backed /dev/shm in container {where} (shm fix)"


# --- /dev/shm for every family --------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "image"),
    [
        ("amd.com/gpu", ROCM),  # ROCm PyTorch DDP: "Bus error" without it (issue 45)
        ("amd.com/cpx_nps4", ROCM),  # an AMD partition
        ("huawei.com/Ascend910", CANN),
        ("huawei.com/Ascend910-4c.16g", CANN),  # a vNPU template
        ("gpu.intel.com/xe", "intel/intel-extension-for-pytorch:2.5.10-xpu"),
        ("cambricon.com/vmlu", "registry.local/ml/mlu:1"),  # HAMi's Cambricon share
        ("aws.amazon.com/neuroncore", "registry.local/ml/neuron:1"),
    ],
)
def test_every_familys_accelerator_container_gets_dev_shm(resource: str, image: str) -> None:
    original = pod(container("trainer", image, limits={resource: 1}), container("sidecar"))
    decision = run(original)
    expected = copy.deepcopy(original)
    expected["spec"]["volumes"] = [shm_volume()]
    expected["spec"]["containers"][0]["volumeMounts"] = [SHM_MOUNT]
    expected["metadata"]["annotations"] = {SHM_MARK: "dshm"}  # the webhook's own volume
    assert apply(decision) == expected
    assert decision.notes == (note(),)
    assert decision.warnings == ()
    again = run(apply(decision))
    assert (again.patch, again.notes) == ([], ())


def test_a_dra_claim_on_another_vendors_class_gets_dev_shm() -> None:
    claims = ClaimIndex.from_objects(
        [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "amd", "namespace": "ml"},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [
                                {"name": "gpu", "exactly": {"deviceClassName": "gpu.amd.com"}}
                            ]
                        }
                    }
                },
            }
        ]
    )
    trainer = container("trainer", ROCM)
    trainer["resources"] = {"claims": [{"name": "dev"}]}
    original = pod(trainer, resourceClaims=[{"name": "dev", "resourceClaimTemplateName": "amd"}])
    decision = run(original, claims=claims, namespace="ml")
    spec = apply(decision)["spec"]
    assert spec["volumes"] == [shm_volume()]
    assert spec["containers"][0]["volumeMounts"] == [SHM_MOUNT]
    assert decision.notes == (note(),)


def test_the_rules_resources_and_families_select_among_the_vendors() -> None:
    amd = pod(container("trainer", ROCM, limits={"amd.com/gpu": 1}))
    nvidia = pod(container("trainer", "pytorch/pytorch:2.3.0", limits={"nvidia.com/gpu": 1}))
    npu = pod(container("trainer", CANN, limits={"huawei.com/Ascend910": 1}))
    by_resource = load_config(
        {**GATES_OFF, "runtimeFixes": {"shm": {"resources": ["amd.com/gpu"]}}}
    )
    assert run(amd, by_resource).notes == (note(),)
    assert run(nvidia, by_resource).patch == []
    assert run(npu, by_resource).patch == []
    by_family = load_config({**GATES_OFF, "runtimeFixes": {"shm": {"families": ["ascend", "amd"]}}})
    assert run(amd, by_family).notes == (note(),)
    assert run(npu, by_family).notes == (note(),)
    assert run(nvidia, by_family).patch == []


# --- /dev/shm sizing ------------------------------------------------------------------------


def test_shm_is_sized_from_the_pod_level_memory_limit() -> None:
    # PodLevelResources: spec.resources.limits.memory bounds the pod cgroup, and with it the
    # memory-backed emptyDir; the containers carry no memory limit at all.
    original = pod(
        container("trainer", ROCM, limits={"amd.com/gpu": 1}),
        container("sidecar"),
        resources={"limits": {"memory": "12Gi"}},
    )
    decision = run(original)
    assert apply(decision)["spec"]["volumes"] == [shm_volume("6Gi")]
    assert decision.notes == (note(size="6Gi"),)


@pytest.mark.parametrize(
    ("memory", "size"), [("100Mi", "64Mi"), ("64Mi", "64Mi"), ("200Mi", "100Mi")]
)
def test_shm_is_never_smaller_than_the_runtimes_64mi(memory: str, size: str) -> None:
    original = pod(container("trainer", ROCM, limits={"amd.com/gpu": 1, "memory": memory}))
    assert apply(run(original))["spec"]["volumes"] == [shm_volume(size)]


def test_a_size_limit_below_the_runtimes_shm_is_refused() -> None:
    with pytest.raises(Exception, match="sizeLimit must be at least 64Mi"):
        load_config({"runtimeFixes": {"shm": {"sizeLimit": "32Mi"}}})


def _template_config() -> WebhookConfig:
    return load_config({**GATES_OFF, "mutateTemplates": True})


def test_the_webhooks_own_dshm_follows_the_templates_memory_limit() -> None:
    config = _template_config()
    deployment = workload(
        "Deployment", pod(container("trainer", ROCM, limits={"amd.com/gpu": 1, "memory": "8Gi"}))
    )
    first = apply(run(deployment, config))
    template = first["spec"]["template"]
    assert template["spec"]["volumes"] == [shm_volume("4Gi")]
    assert template["metadata"]["annotations"] == {SHM_MARK: "dshm"}
    # The template's limit raised (an UPDATE): the webhook's own volume is sized again.
    raised = copy.deepcopy(first)
    raised["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = "20Gi"
    decision = evaluate(raised, PolicySet.empty(), config, operation="UPDATE", old_object=first)
    assert apply(decision)["spec"]["template"]["spec"]["volumes"] == [shm_volume("10Gi")]
    assert decision.notes == ("resized the webhook's /dev/shm (dshm) to 10Gi (shm fix)",)
    # A pod made from the template (it carries the mark) is left as it is.
    made = pod(*apply(decision)["spec"]["template"]["spec"]["containers"], name="p")
    made["metadata"]["annotations"] = {SHM_MARK: "dshm"}
    made["spec"]["volumes"] = [shm_volume("10Gi")]
    again = run(made, config)
    assert (again.patch, again.notes) == ([], ())
    # The same pod after another webhook lowered its limit (a reinvocation): resized.
    lowered = copy.deepcopy(made)
    lowered["spec"]["containers"][0]["resources"]["limits"]["memory"] = "2Gi"
    resized = run(lowered, config)
    assert apply(resized)["spec"]["volumes"] == [shm_volume("1Gi")]


def test_a_users_own_dshm_is_never_resized() -> None:
    # The same shape, without the webhook's mark: the user's volume, left alone.
    trainer = container(
        "trainer", ROCM, limits={"amd.com/gpu": 1, "memory": "2Gi"}, volumeMounts=[SHM_MOUNT]
    )
    original = pod(trainer, volumes=[shm_volume("16Gi")])
    decision = run(original, _template_config())
    assert (decision.patch, decision.notes, decision.warnings) == ([], (), ())
    # A mark naming a volume that is not a memory-backed emptyDir: not the webhook's either.
    marked = pod(
        trainer,
        volumes=[{"name": "dshm", "hostPath": {"path": "/dev/shm"}}],
        annotations={SHM_MARK: "dshm"},
    )
    decision = run(marked, _template_config())
    assert (decision.patch, decision.notes, decision.warnings) == ([], (), ())


def _raised(obj: dict[str, Any], memory: str) -> dict[str, Any]:
    """`obj` (a pod) after another mutating webhook set its container's memory limit."""
    changed = copy.deepcopy(obj)
    changed["spec"]["containers"][0]["resources"]["limits"]["memory"] = memory
    return changed


def test_a_plain_pods_own_dshm_follows_its_limit_on_reinvocation() -> None:
    # A plain pod (no template): the first pass mounts the volume and marks it on the pod.
    first = apply(run(pod(container("trainer", ROCM, limits={"amd.com/gpu": 1, "memory": "8Gi"}))))
    assert first["spec"]["volumes"] == [shm_volume("4Gi")]
    assert first["metadata"]["annotations"] == {SHM_MARK: "dshm"}
    assert first["spec"]["containers"][0]["volumeMounts"] == [SHM_MOUNT]
    # Another webhook raised the limit after the first pass; the API server calls this one
    # again (reinvocationPolicy IfNeeded) with the object as it now is: the volume follows.
    decision = run(_raised(first, "20Gi"))
    again = apply(decision)
    assert again["spec"]["volumes"] == [shm_volume("10Gi")]
    assert again["spec"]["containers"][0]["volumeMounts"] == [SHM_MOUNT]
    assert again["metadata"]["annotations"] == {SHM_MARK: "dshm"}
    assert decision.notes == ("resized the webhook's /dev/shm (dshm) to 10Gi (shm fix)",)
    # A pod-level limit set by another webhook decides too (PodLevelResources).
    pod_level = copy.deepcopy(again)
    pod_level["spec"]["resources"] = {"limits": {"memory": "6Gi"}}
    assert apply(run(pod_level))["spec"]["volumes"] == [shm_volume("3Gi")]
    # Unchanged limits: nothing to do, the second pass writes nothing.
    assert (run(again).patch, run(again).notes) == ([], ())


def test_a_users_own_dshm_stays_as_written_on_reinvocation() -> None:
    # The user's volume at /dev/shm, no mark: the limit raised later changes nothing.
    trainer = container(
        "trainer", ROCM, limits={"amd.com/gpu": 1, "memory": "2Gi"}, volumeMounts=[SHM_MOUNT]
    )
    first = run(pod(trainer, volumes=[shm_volume("512Mi")]))
    assert (first.patch, first.notes, first.warnings) == ([], (), ())
    again = run(_raised(apply(first), "64Gi"))
    assert (again.patch, again.notes, again.warnings) == ([], (), ())


def test_a_mark_the_user_wrote_changes_at_most_a_size() -> None:
    # The mark is an annotation: a user can write it on their own memory-backed volume at
    # /dev/shm. The worst it does: that volume's sizeLimit is worked out as the webhook's
    # would be. The volume, its mount and the annotation stay.
    trainer = container(
        "trainer", ROCM, limits={"amd.com/gpu": 1, "memory": "2Gi"}, volumeMounts=[SHM_MOUNT]
    )
    forged = pod(trainer, volumes=[shm_volume("16Gi")], annotations={SHM_MARK: "dshm"})
    decision = run(forged)
    result = apply(decision)
    assert result["spec"]["volumes"] == [shm_volume("1Gi")]
    assert result["spec"]["containers"] == forged["spec"]["containers"]
    assert result["metadata"] == forged["metadata"]
    assert decision.patch == [
        {"op": "replace", "path": "/spec/volumes/0/emptyDir/sizeLimit", "value": "1Gi"}
    ]
    # A mark naming a memory-backed volume mounted elsewhere (a cache): not the webhook's.
    cache = {"name": "cache", "mountPath": "/cache"}
    user_shm = {"name": "host-shm", "mountPath": "/dev/shm"}
    trainer = container(
        "trainer",
        ROCM,
        limits={"amd.com/gpu": 1, "memory": "2Gi"},
        volumeMounts=[cache, user_shm],
    )
    volumes = [shm_volume("8Gi", "cache"), {"name": "host-shm", "hostPath": {"path": "/dev/shm"}}]
    decision = run(pod(trainer, volumes=volumes, annotations={SHM_MARK: "cache"}))
    assert (decision.patch, decision.notes, decision.warnings) == ([], (), ())
    # The same volume also mounted at /dev/shm: still a cache, still the user's.
    both = container(
        "trainer",
        ROCM,
        limits={"amd.com/gpu": 1, "memory": "2Gi"},
        volumeMounts=[cache, {"name": "cache", "mountPath": "/dev/shm"}],
    )
    decision = run(pod(both, volumes=[shm_volume("8Gi", "cache")], annotations={SHM_MARK: "cache"}))
    assert (decision.patch, decision.notes, decision.warnings) == ([], (), ())
    # A mark naming the cache while nothing is at /dev/shm: the webhook mounts its own volume
    # and the mark names it; the cache is not touched.
    only_cache = container(
        "trainer", ROCM, limits={"amd.com/gpu": 1, "memory": "2Gi"}, volumeMounts=[cache]
    )
    original = pod(
        only_cache, volumes=[shm_volume("8Gi", "cache")], annotations={SHM_MARK: "cache"}
    )
    result = apply(run(original))
    assert result["spec"]["volumes"] == [shm_volume("8Gi", "cache"), shm_volume("1Gi")]
    assert result["spec"]["containers"][0]["volumeMounts"] == [cache, SHM_MOUNT]
    assert result["metadata"]["annotations"] == {SHM_MARK: "dshm"}


# --- RDMA -----------------------------------------------------------------------------------

RDMA = "rdma/hca_shared_devices_a"
NO_SHM = load_config({**GATES_OFF, "runtimeFixes": {"shm": {"enabled": False}}})


def rdma_run(obj: dict[str, Any]) -> Decision:
    return evaluate(
        obj, PolicySet.empty(), NO_SHM, namespace="ml", namespace_levels={"ml": "privileged"}
    )


def test_a_zero_rdma_request_gets_no_ipc_lock() -> None:
    for zero in ("0", 0):
        decision = rdma_run(pod(container("trainer", ROCM, limits={"amd.com/gpu": 1, RDMA: zero})))
        assert (decision.patch, decision.notes, decision.warnings) == ([], (), ())
    # Zero in limits, one in requests: it asks for one.
    asked = container("trainer", ROCM, limits={RDMA: "0"}, requests={RDMA: "1"})
    decision = rdma_run(pod(asked))
    assert decision.notes == (
        f'added capability IPC_LOCK to container "trainer" for {RDMA} (rdma fix)',
    )


@pytest.mark.parametrize("dropped", [["IPC_LOCK"], ["CAP_IPC_LOCK"], ["NET_RAW", "ipc_lock"]])
def test_a_container_that_drops_ipc_lock_is_left_with_a_warning(dropped: list[str]) -> None:
    context = {"capabilities": {"drop": dropped}}
    decision = rdma_run(pod(container("nic", ROCM, limits={RDMA: 1}, securityContext=context)))
    assert decision.patch == []
    assert decision.warnings == (
        f'container "nic": RDMA ({RDMA}) needs IPC_LOCK; not added: the container drops it',
    )


def test_drop_all_still_gets_ipc_lock_added() -> None:
    # The runtimes drop ALL first and add by name after (containerd WithCapabilities).
    context = {"capabilities": {"drop": ["ALL"]}}
    decision = rdma_run(pod(container("nic", ROCM, limits={RDMA: 1}, securityContext=context)))
    assert apply(decision)["spec"]["containers"][0]["securityContext"] == {
        "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    }


# --- image architecture ---------------------------------------------------------------------

ARCH = {
    "runtimeFixes": {
        "architecture": {
            "images": [
                {"image": "amd64-trainer", "architectures": ["amd64"]},
                {"image": "arm-trainer", "architectures": ["arm64"]},
            ]
        }
    },
}
ARCH_CONFIG = load_config({**ARCH, "cudaAffinity": False})
AMD64_ONLY = "registry.local/ml/amd64-trainer:1.0"
ARM64_ONLY = "registry.local/ml/arm-trainer:1.0"
CUDA = {"cuda-major-version": "12", "cuda-minor-version": "4"}
AMD_NODE = {"amd.com/gpu.driver-version": "6.14.14", "amd.com/gpu.device-id": "74a1"}


def nodes(*specs: tuple[str, dict[str, str]], config: WebhookConfig = ARCH_CONFIG) -> NodeInventory:
    return NodeInventory.build(
        {f"n{i}": {**labels, "kubernetes.io/arch": a} for i, (a, labels) in enumerate(specs)},
        config=config,
    )


MIXED_GPU = nodes(("amd64", CUDA), ("arm64", CUDA))
ARCH_IN = {"key": "kubernetes.io/arch", "operator": "In"}


def gpu(image: str, resource: str = "nvidia.com/gpu", **spec: Any) -> dict[str, Any]:
    return pod(container("trainer", image, limits={resource: 1}), **spec)


def required(obj: dict[str, Any]) -> Any:
    return obj["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]


def required_affinity(*exprs: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": list(exprs)}]
            }
        }
    }


def test_an_amd_pod_gets_the_architecture_of_its_image() -> None:
    inventory = nodes(("amd64", AMD_NODE), ("arm64", AMD_NODE))
    decision = run(gpu(AMD64_ONLY, "amd.com/gpu"), ARCH_CONFIG, inventory)
    assert {**ARCH_IN, "values": ["amd64"]} in required(apply(decision))[0]["matchExpressions"]
    assert (
        "required nodes of architecture amd64: registry.local/ml/amd64-trainer:1.0 has no "
        "linux/arm64 (architecture fix)"
    ) in decision.notes


def test_cpu_only_nodes_do_not_count_for_the_architecture() -> None:
    # arm64 CPU nodes beside amd64 GPU nodes: an amd64-only GPU image needs no affinity (every
    # GPU node runs it), and an arm64-only one has no GPU node to run on: warned, no affinity.
    inventory = nodes(("amd64", CUDA), ("amd64", CUDA), ("arm64", {}), ("arm64", {}))
    fine = run(gpu(AMD64_ONLY), ARCH_CONFIG, inventory)
    assert "affinity" not in apply(fine)["spec"]
    assert (fine.notes, fine.warnings) == ((note(),), ())
    arm = run(gpu(ARM64_ONLY), ARCH_CONFIG, inventory)
    assert "affinity" not in apply(arm)["spec"]
    assert arm.warnings == (
        "no node of architecture arm64 for registry.local/ml/arm-trainer:1.0 (NVIDIA GPU nodes "
        "are amd64)",
    )
    # Without any GPU label in the cluster every node counts, as before.
    unlabelled = nodes(("amd64", {}), ("arm64", {}))
    decision = run(gpu(AMD64_ONLY), ARCH_CONFIG, unlabelled)
    assert required(apply(decision)) == [{"matchExpressions": [{**ARCH_IN, "values": ["amd64"]}]}]


def test_the_users_required_arch_is_the_users_choice() -> None:
    # Not ANDed with the image's architectures (no node would match): kept, with a warning.
    mine = {**ARCH_IN, "values": ["arm64"]}
    original = gpu(AMD64_ONLY, affinity=required_affinity(mine))
    decision = run(original, ARCH_CONFIG, MIXED_GPU)
    assert required(apply(decision)) == [{"matchExpressions": [mine]}]
    assert decision.warnings == (
        "your node affinity allows arm64; registry.local/ml/amd64-trainer:1.0 has no linux/arm64",
    )
    deny = ARCH_CONFIG.model_copy(update={"no_compatible_node": "deny"})
    denied = run(original, deny, MIXED_GPU)
    assert [v.message for v in denied.violations] == [
        "Pod ml/train: your node affinity allows arm64; registry.local/ml/amd64-trainer:1.0 has "
        "no linux/arm64."
    ]
    # Allowing both: the pod may run where the image cannot; warned, not denied.
    both = gpu(AMD64_ONLY, affinity=required_affinity({**ARCH_IN, "values": ["amd64", "arm64"]}))
    decision = run(both, deny, MIXED_GPU)
    assert decision.violations == ()
    assert decision.warnings == (
        "your node affinity allows arm64; registry.local/ml/amd64-trainer:1.0 has no linux/arm64",
    )
    # Allowing only the image's: nothing to say, nothing added.
    ok = gpu(AMD64_ONLY, affinity=required_affinity({**ARCH_IN, "values": ["amd64"]}))
    decision = run(ok, ARCH_CONFIG, MIXED_GPU)
    assert (decision.warnings, decision.notes) == ((), (note(),))


def test_the_webhooks_own_term_in_a_template_is_recomputed() -> None:
    # mutateTemplates: an x86_64 build, then the template switched to an aarch64 build.
    config = load_config({**ARCH, "cudaAffinity": False, "mutateTemplates": True})
    inventory = nodes(("amd64", CUDA), ("arm64", CUDA), config=config)
    first = apply(run(workload("Deployment", gpu(AMD64_ONLY)), config, inventory))
    template = first["spec"]["template"]
    assert required({"spec": template["spec"]}) == [
        {"matchExpressions": [{**ARCH_IN, "values": ["amd64"]}]}
    ]
    assert template["metadata"]["annotations"][ARCH_MARK] == "amd64"
    switched = copy.deepcopy(first)
    switched["spec"]["template"]["spec"]["containers"][0]["image"] = ARM64_ONLY
    decision = run(switched, config, inventory, operation="UPDATE", old_object=first)
    template = apply(decision)["spec"]["template"]
    assert required({"spec": template["spec"]}) == [
        {"matchExpressions": [{**ARCH_IN, "values": ["arm64"]}]}
    ]
    assert template["metadata"]["annotations"][ARCH_MARK] == "arm64"
    assert decision.warnings == ()
    # Evaluated again: nothing more.
    again = run(apply(decision), config, inventory)
    assert (again.patch, again.notes) == ([], ())


def test_arch_deny_agrees_between_mutate_validate_and_the_cli() -> None:
    # /validate evaluates with violations_only: it must deny what the full evaluation denies.
    deny = ARCH_CONFIG.model_copy(update={"no_compatible_node": "deny"})
    amd64_gpus = nodes(("amd64", CUDA), ("arm64", {}))
    arm = gpu(ARM64_ONLY)
    full = run(arm, deny, amd64_gpus)
    validate = run(arm, deny, amd64_gpus, violations_only=True)
    message = (
        "Pod ml/train: no node of architecture arm64 for registry.local/ml/arm-trainer:1.0 "
        "(NVIDIA GPU nodes are amd64)."
    )
    assert [v.message for v in full.violations] == [message]
    assert [v.message for v in validate.violations] == [message]
    assert not validate.allowed
    # The per-pod opt-out and the rule switched off: no denial from either.
    opted = gpu(ARM64_ONLY)
    opted["metadata"]["annotations"] = {"features.alauda.io/runtime-fixes": "off"}
    assert run(opted, deny, amd64_gpus, violations_only=True).violations == ()
    off = load_config(
        {
            "noCompatibleNode": "deny",
            "cudaAffinity": False,
            "runtimeFixes": {"architecture": {"enabled": False}},
        }
    )
    assert run(arm, off, amd64_gpus, violations_only=True).violations == ()
