"""Runtime fixes (SPEC §14) through the core: /dev/shm, IPC_LOCK for RDMA, image architecture.
Each test looks at the pod the API server would store (the patch applied) and the exact
messages."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from tests.helpers import GPU, ROOT, apply, container, pod, without_shm, workload
from tests.helpers import run as run_with
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.outcome.decision import Decision
from webhook.core.placement.inventory import NodeInventory
from webhook.core.policies.policyset import PolicySet


def run(
    obj: dict[str, Any], config: WebhookConfig, inventory: NodeInventory | None = None
) -> Decision:
    """Without CRL policies: nvidia.com/gpu is a GPU resource by the config alone, so the only
    changes are the fixes' (and CUDA placement's, where it is on)."""
    return run_with(obj, PolicySet.empty(), config, inventory=inventory)


# The /dev/shm fix is on by default (issue 39): the shipped config, CUDA placement aside.
SHM_ON = WebhookConfig(cuda_affinity=False)
IMAGE = "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime"
SHM_MOUNT = {"name": "dshm", "mountPath": "/dev/shm"}


def shm_volume(size: str = "16Gi", name: str = "dshm") -> dict[str, Any]:
    return {"name": name, "emptyDir": {"medium": "Memory", "sizeLimit": size}}


def gpu_pod(*extra: dict[str, Any], memory: str | None = None, **spec: Any) -> dict[str, Any]:
    limits: dict[str, Any] = {GPU: 1}
    if memory is not None:
        limits["memory"] = memory
    return pod(container("trainer", IMAGE, limits=limits), *extra, **spec)


# --- /dev/shm ----------------------------------------------------------------------------


def test_shm_is_mounted_in_the_accelerator_container() -> None:
    original = gpu_pod(container("sidecar"))
    decision = run(original, config=SHM_ON)
    expected = copy.deepcopy(original)
    expected["spec"]["volumes"] = [shm_volume()]
    expected["spec"]["containers"][0]["volumeMounts"] = [SHM_MOUNT]
    # The mark: the volume is the webhook's own (a reinvocation resizes it, runtimefix/shm.py).
    expected["metadata"]["annotations"] = {"features.alauda.io/injected-shm": "dshm"}
    assert apply(decision) == expected
    assert decision.notes == (
        'mounted a 16Gi memory-backed /dev/shm in container "trainer" (shm fix)',
    )
    assert decision.warnings == ()
    assert decision.mutation_kinds == ("shm",)
    # Reinvocation (or the stored pod evaluated again): nothing more.
    again = run(apply(decision), config=SHM_ON)
    assert (again.patch, again.notes) == ([], ())


def test_shm_size_is_half_the_memory_limit_when_that_is_smaller() -> None:
    decision = run(gpu_pod(memory="8Gi"), config=SHM_ON)
    assert apply(decision)["spec"]["volumes"] == [shm_volume("4Gi")]
    # A container without a memory limit: the pod's memory is not bounded, sizeLimit applies.
    decision = run(gpu_pod(container("sidecar"), memory="8Gi"), config=SHM_ON)
    assert apply(decision)["spec"]["volumes"] == [shm_volume("16Gi")]
    # Half of a limit larger than twice sizeLimit: sizeLimit.
    decision = run(gpu_pod(memory="100Gi"), config=SHM_ON)
    assert apply(decision)["spec"]["volumes"] == [shm_volume("16Gi")]


@pytest.mark.parametrize(
    "mount_in",
    ["containers", "initContainers"],
)
@pytest.mark.parametrize("path", ["/dev/shm", "/dev/shm/"])
@pytest.mark.parametrize(
    "volume",
    [
        {"name": "mine", "emptyDir": {"medium": "Memory"}},
        {"name": "mine", "hostPath": {"path": "/dev/shm"}},
        {"name": "mine", "persistentVolumeClaim": {"claimName": "x"}},
    ],
)
def test_shm_is_never_added_over_what_the_user_mounted(
    mount_in: str, path: str, volume: dict[str, Any]
) -> None:
    other = container("other", volumeMounts=[{"name": "mine", "mountPath": path}])
    original = gpu_pod(volumes=[volume])
    original["spec"].setdefault(mount_in, []).append(other)
    decision = run(original, config=SHM_ON)
    assert (decision.patch, decision.notes, decision.warnings) == ([], (), ())


def test_shm_is_on_in_the_shipped_config_and_the_charts_values() -> None:
    """Issue 39: with the shipped config a PyTorch DDP pod (two GPUs, torchrun) gets /dev/shm."""
    values = yaml.safe_load((ROOT / "charts" / "gpu-admission-webhook" / "values.yaml").read_text())
    ddp = pod(
        container(
            "trainer", IMAGE, limits={GPU: 2}, command=["torchrun", "--nproc_per_node=2", "t.py"]
        )
    )
    for config in (WebhookConfig(), load_config(values["config"])):
        decision = run_with(ddp, PolicySet.empty(), config)
        spec = apply(decision)["spec"]
        assert spec["volumes"] == [shm_volume()]
        assert spec["containers"][0]["volumeMounts"] == [SHM_MOUNT]
        assert 'mounted a 16Gi memory-backed /dev/shm in container "trainer" (shm fix)' in (
            decision.notes
        )


def test_shm_is_not_added_with_host_ipc_or_when_opted_out_or_off() -> None:
    for original, config in (
        (gpu_pod(hostIPC=True), SHM_ON),
        (
            pod(
                container("trainer", IMAGE, limits={GPU: 1}),
                annotations={"features.alauda.io/runtime-fixes": "off"},
            ),
            SHM_ON,
        ),
        (
            gpu_pod(),
            load_config({"cudaAffinity": False, "runtimeFixes": {"shm": {"enabled": False}}}),
        ),
        (pod(container("cpu-only", IMAGE)), SHM_ON),  # no accelerator
    ):
        decision = run(original, config=config)
        assert (decision.patch, decision.notes, decision.warnings) == ([], (), ())


def test_shm_takes_a_free_volume_name() -> None:
    original = gpu_pod(volumes=[{"name": "dshm", "configMap": {"name": "x"}}])
    spec = apply(run(original, config=SHM_ON))["spec"]
    assert spec["volumes"][1] == shm_volume(name="dshm-2")
    assert spec["containers"][0]["volumeMounts"] == [{"name": "dshm-2", "mountPath": "/dev/shm"}]


def test_shm_rule_conditions_and_unknown_opt_out_value() -> None:
    config = load_config(
        {"cudaAffinity": False, "runtimeFixes": {"shm": {"enabled": True, "image": "vllm"}}}
    )
    assert run(gpu_pod(), config=config).patch == []
    decision = run(
        pod(
            container("trainer", IMAGE, limits={GPU: 1}),
            annotations={"features.alauda.io/runtime-fixes": "nope"},
        ),
        config=SHM_ON,
    )
    assert decision.warnings == (
        "annotation features.alauda.io/runtime-fixes='nope' not understood: use "
        "false/no/0/off to opt out",
    )
    assert len(decision.patch) > 0


def test_template_shows_what_will_apply_to_pods() -> None:
    decision = run(workload("Deployment", gpu_pod()), config=SHM_ON)
    assert decision.patch == []
    assert decision.notes == (
        'will apply to pods: mounted a 16Gi memory-backed /dev/shm in container "trainer" '
        "(shm fix)",
    )


# --- RDMA --------------------------------------------------------------------------------

RDMA = "rdma/hca_shared_devices_a"
# The RDMA tests look at the capability alone: these pods have a GPU, whose /dev/shm (on by
# default) the tests above show.
NO_CUDA = without_shm(WebhookConfig(cuda_affinity=False))


def rdma_pod(**kw: Any) -> dict[str, Any]:
    return pod(container("trainer", IMAGE, limits={GPU: 1, RDMA: 1}, **kw))


def evaluate_in(obj: dict[str, Any], levels: dict[str, str] | None) -> Any:
    return evaluate(obj, PolicySet.empty(), NO_CUDA, namespace="ml", namespace_levels=levels)


def test_rdma_gets_ipc_lock_in_a_privileged_namespace() -> None:
    original = rdma_pod(securityContext={"runAsUser": 1000})
    decision = evaluate_in(original, {"ml": "privileged"})
    expected = copy.deepcopy(original)
    expected["spec"]["containers"][0]["securityContext"] = {
        "runAsUser": 1000,
        "capabilities": {"add": ["IPC_LOCK"]},
    }
    assert apply(decision) == expected
    assert decision.notes == (
        f'added capability IPC_LOCK to container "trainer" for {RDMA} (rdma fix)',
    )
    again = evaluate_in(apply(decision), {"ml": "privileged"})
    assert (again.patch, again.notes) == ([], ())


@pytest.mark.parametrize("level", ["baseline", "restricted", "bogus"])
def test_rdma_is_warned_about_where_pod_security_forbids_it(level: str) -> None:
    decision = evaluate_in(rdma_pod(), {"ml": level})
    assert decision.patch == []
    assert decision.warnings == (
        f'container "trainer": RDMA ({RDMA}) needs IPC_LOCK; not added: '
        f"namespace ml is Pod Security {level}",
    )


def test_rdma_unlabelled_namespace_and_unknown_level() -> None:
    # Unlabelled: the API server's default level is not visible; baseline is assumed.
    decision = evaluate_in(rdma_pod(), {"ml": ""})
    assert decision.patch == []
    assert decision.warnings == (
        f'container "trainer": RDMA ({RDMA}) needs IPC_LOCK; not added: namespace ml has no '
        "Pod Security label",
    )
    # No snapshot (offline CLI, namespaces not readable): warn only.
    decision = evaluate_in(rdma_pod(), None)
    assert decision.patch == []
    assert decision.warnings == (
        'container "trainer": RDMA needs IPC_LOCK; not added: the namespace\'s Pod Security '
        "level is not known",
    )
    # The cluster's default is privileged, said in the config.
    config = load_config(
        {
            "cudaAffinity": False,
            "runtimeFixes": {"rdma": {"unlabelledNamespaceLevel": "privileged"}},
        }
    )
    decision = evaluate(
        rdma_pod(), PolicySet.empty(), config, namespace="ml", namespace_levels={"ml": ""}
    )
    assert apply(decision)["spec"]["containers"][0]["securityContext"] == {
        "capabilities": {"add": ["IPC_LOCK"]}
    }


@pytest.mark.parametrize(
    "context",
    [
        {"privileged": True},
        {"capabilities": {"add": ["IPC_LOCK"]}},
        {"capabilities": {"add": ["CAP_IPC_LOCK"]}},
        {"capabilities": {"add": ["ALL"]}},
    ],
)
def test_rdma_container_that_has_the_capability_is_left_alone(context: dict[str, Any]) -> None:
    for levels in ({"ml": "privileged"}, {"ml": "restricted"}):
        decision = evaluate_in(rdma_pod(securityContext=context), levels)
        # A privileged device container is GPU access control's finding (SPEC §12), not the
        # RDMA fix's: the fix adds nothing and says nothing.
        access: tuple[str, ...] = ()
        if context.get("privileged"):
            access = (
                'container "trainer" is privileged: drop privileged: a privileged container sees '
                "every device of its node",
            )
        elif context["capabilities"]["add"] == ["ALL"]:
            # ALL adds CAP_SYS_ADMIN, which NVIDIA's toolkit counts as privileged (issue 46).
            access = (
                'container "trainer" adds capability ALL: drop it: NVIDIA\'s toolkit treats it '
                "as privileged",
            )
        assert (decision.patch, decision.notes, decision.warnings) == ([], (), access)


def test_rdma_appends_to_the_users_capabilities_and_needs_no_gpu() -> None:
    original = pod(
        container(
            "nic", IMAGE, limits={RDMA: 1}, securityContext={"capabilities": {"add": ["NET_RAW"]}}
        )
    )
    decision = evaluate_in(original, {"ml": "privileged"})
    assert apply(decision)["spec"]["containers"][0]["securityContext"] == {
        "capabilities": {"add": ["NET_RAW", "IPC_LOCK"]}
    }


# --- image architecture ------------------------------------------------------------------

AMD64_ONLY = "registry.local/ml/amd64-trainer:1.0"
MULTI = "registry.local/ml/multi-trainer:1.0"
ARCH_CONFIG = load_config(
    {
        "runtimeFixes": {
            "architecture": {
                "images": [
                    {"image": "amd64-trainer", "architectures": ["amd64"]},
                    {"image": "multi-trainer", "architectures": ["arm64", "amd64"]},
                    {"image": "arm-only", "architectures": ["arm64"]},
                ]
            }
        }
    }
)
CUDA_LABELS = {"cuda-major-version": "12", "cuda-minor-version": "4"}


def inventory(*archs: str) -> NodeInventory:
    return NodeInventory.build(
        {f"n{i}": {**CUDA_LABELS, "kubernetes.io/arch": a} for i, a in enumerate(archs)},
        config=ARCH_CONFIG,
    )


MIXED = inventory("amd64", "arm64")
ARCH_EXPR = {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
CUDA_TERMS = [
    [
        {"key": "cuda-major-version", "operator": "Gt", "values": ["11"]},
        {"key": "cuda-major-version", "operator": "Lt", "values": ["13"]},
        {"key": "cuda-minor-version", "operator": "Gt", "values": ["0"]},
    ],
    [{"key": "cuda-major-version", "operator": "Gt", "values": ["12"]}],
]


def arch_pod(image: str, **spec: Any) -> dict[str, Any]:
    return pod(
        container(
            "trainer", image, limits={GPU: 1}, env=[{"name": "CUDA_VERSION", "value": "12.1"}]
        ),
        **spec,
    )


def required(obj: dict[str, Any]) -> Any:
    return obj["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]


def test_amd64_only_image_in_a_mixed_cluster_joins_the_cuda_terms() -> None:
    decision = run(arch_pod(AMD64_ONLY), config=ARCH_CONFIG, inventory=MIXED)
    assert required(apply(decision)) == [
        {"matchExpressions": [*term, ARCH_EXPR]} for term in CUDA_TERMS
    ]
    assert decision.notes[-1] == (
        "required nodes of architecture amd64: registry.local/ml/amd64-trainer:1.0 has no "
        "linux/arm64 (architecture fix)"
    )
    # Reinvocation and the stored pod: no further change, for the CUDA terms either.
    again = run(apply(decision), config=ARCH_CONFIG, inventory=MIXED)
    assert (again.patch, again.notes) == ([], ())


def test_architecture_crosses_the_users_terms_and_keeps_empty_ones() -> None:
    zone = {"key": "zone", "operator": "In", "values": ["a"]}
    original = arch_pod(
        AMD64_ONLY,
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [zone]}, {}]
                }
            }
        },
    )
    config = ARCH_CONFIG.model_copy(update={"cuda_affinity": False})
    decision = run(original, config=config, inventory=MIXED)
    assert required(apply(decision)) == [{"matchExpressions": [zone, ARCH_EXPR]}, {}]


def test_nothing_for_multi_arch_unknown_or_single_arch_clusters() -> None:
    for image, inv in (
        (MULTI, MIXED),
        ("registry.local/ml/unknown:1", MIXED),
        (AMD64_ONLY, inventory("amd64", "amd64")),
    ):
        decision = run(arch_pod(image), config=ARCH_CONFIG, inventory=inv)
        terms = required(apply(decision))
        assert all("kubernetes.io/arch" not in str(t) for t in terms)
        assert not any("architecture" in n for n in decision.notes)
    # Without an inventory nothing says which architectures the nodes have.
    decision = run(arch_pod(AMD64_ONLY), config=ARCH_CONFIG)
    assert "kubernetes.io/arch" not in str(apply(decision))


def test_no_node_of_the_images_architecture_warns_or_denies() -> None:
    amd_only_cluster = inventory("amd64", "amd64")
    arm_only = arch_pod("example.com/arm-only:1")
    decision = run(arm_only, config=ARCH_CONFIG, inventory=amd_only_cluster)
    assert (
        "no node of architecture arm64 for example.com/arm-only:1 (NVIDIA GPU nodes are amd64)"
        in (decision.warnings)
    )
    deny = ARCH_CONFIG.model_copy(update={"no_compatible_node": "deny"})
    decision = run(arm_only, config=deny, inventory=amd_only_cluster)
    assert [v.message for v in decision.violations] == [
        "Pod ml/train: no node of architecture arm64 for example.com/arm-only:1 (NVIDIA GPU "
        "nodes are amd64)."
    ]


def test_node_selector_on_the_arch_is_respected() -> None:
    ok = run(
        arch_pod(AMD64_ONLY, nodeSelector={"kubernetes.io/arch": "amd64"}),
        config=ARCH_CONFIG,
        inventory=MIXED,
    )
    assert 'kubernetes.io/arch", "operator' not in str(ok.patch)
    assert not any("architecture" in n for n in ok.notes)
    bad = run(
        arch_pod(AMD64_ONLY, nodeSelector={"kubernetes.io/arch": "arm64"}),
        config=ARCH_CONFIG,
        inventory=MIXED,
    )
    assert (
        "nodeSelector asks for arm64; registry.local/ml/amd64-trainer:1.0 has no linux/arm64"
        in bad.warnings
    )


VLLM = "vllm/vllm-openai:v0.11.0"


def test_shipped_single_architecture_tags_say_the_images_architecture() -> None:
    # vLLM pushes v0.11.0-x86_64 and v0.11.0-aarch64, the single-architecture images its plain
    # tag's index is made of (webhook/data/images.yaml, vllm family `arches`).
    config = WebhookConfig()
    decision = run(arch_pod(f"{VLLM}-x86_64"), config=config, inventory=MIXED)
    assert required(apply(decision)) == [
        {"matchExpressions": [*term, ARCH_EXPR]} for term in CUDA_TERMS
    ]
    assert decision.notes[-1] == (
        "required nodes of architecture amd64: vllm/vllm-openai:v0.11.0-x86_64 has no "
        "linux/arm64 (architecture fix)"
    )
    arm = run(arch_pod(f"{VLLM}-aarch64"), config=config, inventory=MIXED)
    assert {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]} in (
        required(apply(arm))[0]["matchExpressions"]
    )
    # The plain tag names a multi-platform index: its platforms are not known, nothing added.
    plain = run(arch_pod(VLLM), config=config, inventory=MIXED)
    assert "kubernetes.io/arch" not in str(apply(plain))
    # Knowledge off: nothing known.
    off = run(
        arch_pod(f"{VLLM}-x86_64"),
        config=WebhookConfig(shipped_image_knowledge=False),
        inventory=MIXED,
    )
    assert "kubernetes.io/arch" not in str(apply(off))


def test_an_update_that_changes_the_opt_out_is_judged_again() -> None:
    # A Deployment's UPDATE whose template changed nowhere the evaluation reads is allowed
    # untouched (SPEC §6); the runtime-fixes annotation is read, so changing it is a change.
    old = workload("Deployment", gpu_pod())
    new = copy.deepcopy(old)
    new["spec"]["template"]["metadata"]["annotations"] = {"features.alauda.io/runtime-fixes": "on"}
    changed = evaluate(new, PolicySet.empty(), SHM_ON, operation="UPDATE", old_object=old)
    assert changed.notes == (
        'will apply to pods: mounted a 16Gi memory-backed /dev/shm in container "trainer" '
        "(shm fix)",
    )
    same = evaluate(
        copy.deepcopy(old), PolicySet.empty(), SHM_ON, operation="UPDATE", old_object=old
    )
    assert same.notes == ()


def test_mutated_template_and_its_pods_keep_the_architecture_once() -> None:
    # mutateTemplates: the template gets the CUDA terms (marked as the webhook's) and the
    # architecture; a pod made from it, and the template evaluated again, change nothing.
    config = ARCH_CONFIG.model_copy(update={"mutate_templates": True})
    deployment = workload("Deployment", arch_pod(AMD64_ONLY))
    decision = run(deployment, config=config, inventory=MIXED)
    template = apply(decision)["spec"]["template"]
    assert required({"spec": template["spec"]}) == [
        {"matchExpressions": [*term, ARCH_EXPR]} for term in CUDA_TERMS
    ]
    again = run(apply(decision), config=config, inventory=MIXED)
    assert (again.patch, again.notes) == ([], ())
    made = {"apiVersion": "v1", "kind": "Pod", "metadata": {**template["metadata"], "name": "p",
            "namespace": "ml"}, "spec": template["spec"]}  # fmt: skip
    from_template = run(made, config=config, inventory=MIXED)
    assert (from_template.patch, from_template.notes) == ([], ())


def test_pods_bound_to_a_node_get_no_architecture_affinity() -> None:
    bound = arch_pod(AMD64_ONLY, nodeName="n1")
    decision = run(
        bound, config=ARCH_CONFIG.model_copy(update={"cuda_affinity": False}), inventory=MIXED
    )
    # No affinity; the /dev/shm fix (on by default) still mounts its volume.
    assert "affinity" not in apply(decision)["spec"]
    assert decision.notes == (
        'mounted a 16Gi memory-backed /dev/shm in container "trainer" (shm fix)',
    )
