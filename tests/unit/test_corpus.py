"""Real upstream manifests (the external corpus): no crash, idempotent, exact outcomes for some.

Skipped when the corpus is absent; tests/unit/test_data_manifests.py covers the repository's own.
"""

from __future__ import annotations

import copy
import io
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    CONFIGMAPS,
    CORPUS,
    CORPUS_MISSING,
    apply,
    assert_stable,
    expr,
    get,
    node_terms,
    preferred,
    preferred_terms,
    without_shm,
)
from webhook.cli import main
from webhook.core.base.errors import ManifestError, WebhookError
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.evaluation.evaluate import Decision, evaluate
from webhook.core.policies.policyset import PolicySet
from webhook.core.workloads.claims import ClaimIndex
from webhook.sources.files import load_policy_dir, read_documents

MANIFESTS = CORPUS / "manifests"
REJECTED = CORPUS / "rejected_unparseable"

pytestmark = pytest.mark.skipif(not MANIFESTS.is_dir(), reason=CORPUS_MISSING)


def unknown(image: str) -> str:
    return (
        f"CUDA version of {image} unknown, no affinity: set features.alauda.io/cuda-version "
        "or imageCudaTable"
    )


# The same warning where the longest wording does not fit: the fixed words get shorter, the
# image (as written in the manifest) and the role stay whole (issue 17 item 6).
def shorter(image: str) -> str:
    return f"CUDA version of {image} unknown: set features.alauda.io/cuda-version or imageCudaTable"


def shortest(image: str) -> str:
    return f"CUDA of {image} unknown: set features.alauda.io/cuda-version"


# The shipped config: every document below is evaluated with it for idempotence, and with and
# without the /dev/shm fix (on by default) to show that fix adds nothing but its volume, its
# mounts and its lines.
SHIPPED = WebhookConfig()
SHIPPED_MUTATE = load_config({"mutateTemplates": True})
# The exact outcomes below are the other rules' (CUDA placement, resources, env fixes, claims):
# evaluated without the /dev/shm fix, whose additions test_shm_adds_only_its_volume_mounts_and_lines
# checks on every document (its own tests: test_runtime_fixes.py).
DEFAULT = without_shm(SHIPPED)
MUTATE = without_shm(SHIPPED_MUTATE)


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def shipped() -> PolicySet:
    return load_policy_dir(CONFIGMAPS)


def documents(name: str) -> list[Mapping[str, Any]]:
    return [d for d in read_documents(MANIFESTS / name) if isinstance(d, Mapping)]


def evaluate_doc(name: str, index: int = 0, config: WebhookConfig = DEFAULT) -> Decision:
    return evaluate(documents(name)[index], shipped(), config)


# Corpus documents that evaluate() refuses, with the exact reason: any other document raising
# WebhookError fails the test below. None today; one that starts raising must be listed here.
EXPECTED_INVALID: dict[tuple[str, int], str] = {}


@pytest.mark.parametrize("config", [SHIPPED, SHIPPED_MUTATE], ids=["templates-off", "templates-on"])
@pytest.mark.parametrize("name", _files(MANIFESTS))
def test_every_document_evaluates_and_is_idempotent(name: str, config: WebhookConfig) -> None:
    policy_set = shipped()
    docs = read_documents(MANIFESTS / name)
    for index, doc in enumerate(docs):
        if not isinstance(doc, Mapping):
            continue
        reason = EXPECTED_INVALID.get((name, index))
        if reason is None:
            assert_stable(doc, policy_set, config)
        else:
            with pytest.raises(WebhookError) as refused:
                evaluate(doc, policy_set, config)
            assert str(refused.value) == reason
    assert all(i < len(docs) for n, i in EXPECTED_INVALID if n == name)


_SHM_LINE = re.compile(
    r"(will apply to [^:]+: )?mounted a \S+ memory-backed /dev/shm in .* \(shm fix\)"
)


_SHM_MARK = "features.alauda.io/injected-shm"


def _without_dshm(obj: Any) -> Any:
    """`obj` without the volumes and mounts named dshm* (a list they alone made is dropped), so
    that what the shm fix added compares away."""
    if isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            if key == "annotations" and isinstance(value, Mapping) and _SHM_MARK in value:
                # The mark the fix writes beside its volume in a mutated template.
                rest = {k: v for k, v in value.items() if k != _SHM_MARK}
                if rest:
                    out[key] = rest
                continue
            if key in ("volumes", "volumeMounts") and isinstance(value, list):
                kept = [
                    _without_dshm(v)
                    for v in value
                    if not (isinstance(v, Mapping) and str(v.get("name", "")).startswith("dshm"))
                ]
                if kept or not value:
                    out[key] = kept
                continue
            out[key] = _without_dshm(value)
        return out
    if isinstance(obj, list):
        return [_without_dshm(v) for v in obj]
    return obj


@pytest.mark.parametrize("config", [SHIPPED, SHIPPED_MUTATE], ids=["templates-off", "templates-on"])
@pytest.mark.parametrize("name", _files(MANIFESTS))
def test_shm_adds_only_its_volume_mounts_and_lines(name: str, config: WebhookConfig) -> None:
    """Issue 39: on every upstream manifest, the shipped config (the /dev/shm fix on) gives the
    same outcome as without the fix except its `dshm` volume, its /dev/shm mounts and its lines."""
    policy_set = shipped()
    for index, doc in enumerate(read_documents(MANIFESTS / name)):
        if not isinstance(doc, Mapping) or (name, index) in EXPECTED_INVALID:
            continue
        shipped_decision = evaluate(doc, policy_set, config)
        other = evaluate(doc, policy_set, without_shm(config))
        assert [n for n in shipped_decision.notes if not _SHM_LINE.fullmatch(n)] == list(
            other.notes
        )
        assert shipped_decision.warnings == other.warnings
        assert shipped_decision.violations == other.violations
        # The stored objects (each patch applied): the same but for dshm.
        if shipped_decision.original is not None and other.original is not None:
            assert _without_dshm(apply(shipped_decision)) == _without_dshm(apply(other))
        else:  # not handled (a Service, a ConfigMap): nothing to patch either way
            assert shipped_decision.patch == other.patch == []


# --- exact outcomes for a chosen subset ----------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "tkestack-gpu-manager_README_vcuda_2cards_pod.yaml",
        "tkestack-gpu-manager_README_vcuda_fractional_pod.yaml",
    ],
)
def test_tkestack_vcuda_pods(name: str) -> None:
    # requests equal to limits on a Pod (the API server's own defaulting) is accepted, 200 is two
    # whole cards and 50 a share; "<test-image>" carries no CUDA version.
    decision = evaluate_doc(name)
    assert decision.allowed
    assert decision.patch == []
    assert decision.notes == ()
    assert decision.warnings == (unknown("<test-image>"),)


def test_tkestack_vcuda_pod_with_declared_cuda_version() -> None:
    doc = dict(documents("tkestack-gpu-manager_README_vcuda_2cards_pod.yaml")[0])
    doc["metadata"] = {
        **doc["metadata"],
        "annotations": {"features.alauda.io/cuda-version": "11.8"},
    }
    decision = evaluate(doc, shipped(), DEFAULT)
    # vcuda-core 200 is GPU-Manager's whole-card mode (a multiple of wholeUnit 100): native CUDA
    # compatibility, so the physical-GPU rule applies (SPEC §4), with integer operators.
    assert decision.notes == (
        "required GPU nodes with CUDA ≥ 11.8 "
        "(annotation features.alauda.io/cuda-version), preferably < 13.0",
    )
    assert node_terms(apply(decision)) == [
        {
            "matchExpressions": [
                expr("cuda-major-version", "Gt", 10),
                expr("cuda-major-version", "Lt", 12),
                expr("cuda-minor-version", "Gt", 7),
            ]
        },
        {"matchExpressions": [expr("cuda-major-version", "Gt", 11)]},
    ]
    assert preferred_terms(apply(decision)) == preferred(12)


def test_hami_gpumem_gpucores_pod() -> None:
    # The HAMi keys use requests: fromLimits, like HAMi's own examples (requests = limits).
    decision = evaluate_doc("hami_nvidia_default_use_gpumem_gpucores.yaml")
    assert decision.allowed
    assert decision.patch == [
        {
            "op": "add",
            "path": "/spec/containers/0/resources/requests",
            "value": {"nvidia.com/gpucores": 30, "nvidia.com/gpumem": 3000, "nvidia.com/gpu": 2},
        }
    ]
    assert decision.notes == (
        'set requests.nvidia.com/gpucores=30 from limits in container "ubuntu-container"',
        'set requests.nvidia.com/gpumem=3000 from limits in container "ubuntu-container"',
        'set requests.nvidia.com/gpu=2 from limits in container "ubuntu-container"',
    )
    assert decision.warnings == (unknown("ubuntu:22.04"),)


def test_hami_deployment_with_requests_equal_to_limits_is_allowed() -> None:
    decision = evaluate_doc("hami_nvidia_vllm_cross_vgpu_pvc+deployment.yaml", 1)
    assert decision.allowed
    assert decision.notes == ()
    assert decision.warnings == (unknown("vllm/vllm-openai:latest"),)


def test_hami_deployment_with_a_request_below_its_limit_is_denied() -> None:
    doc = copy.deepcopy(dict(documents("hami_nvidia_vllm_cross_vgpu_pvc+deployment.yaml")[1]))
    resources = doc["spec"]["template"]["spec"]["containers"][0]["resources"]
    resources["requests"]["nvidia.com/gpucores"] = 20
    decision = evaluate(doc, shipped(), DEFAULT)
    assert [v.message for v in decision.violations] == [
        "Deployment vllm-cross-vgpu, container \"vllm\": requests.nvidia.com/gpucores='20' "
        "differs from limits (30): extended resources cannot be overcommitted, set requests "
        "equal to limits or omit them (requests = limits in ConfigMap "
        "kube-public/cf-crl-hami-gpucores). HAMi vGPU compute per GPU in percent (0-100)."
    ]


def test_gpu_operator_test_pod() -> None:
    decision = evaluate_doc("nvidia-gpu-operator_tests_gpu-pod.yaml")
    assert decision.allowed
    assert get(apply(decision), "spec", "containers", 0, "resources") == {
        "limits": {"nvidia.com/gpu": 1},
        "requests": {"nvidia.com/gpu": 1},
    }
    # no CUDA version in the tag; the image as written, whole, in the next shorter wording
    assert decision.warnings == (shorter("k8s.gcr.io/cuda-vector-add:v0.1"),)


def test_hami_kueue_job_template() -> None:
    name = "hami_kueue_sample_job.yaml"
    off = evaluate_doc(name)
    assert off.patch == []
    assert off.notes == (
        "will apply to pods: set requests.nvidia.com/gpucores=10 "
        'from limits in container "training-container"',
        "will apply to pods: set requests.nvidia.com/gpumem=4000 "
        'from limits in container "training-container"',
        "will apply to pods: set requests.nvidia.com/gpu=1 "
        'from limits in container "training-container"',
        # HAMi's gpumem/gpucores are vGPU (SPEC §4): the driver's major must equal 11.
        "will apply to pods: required vGPU nodes with CUDA "
        "≥ 11.8 (image nvidia/cuda:11.8.0-base-ubuntu22.04)",
    )
    on = evaluate_doc(name, config=MUTATE)
    assert node_terms(apply(on), "spec", "template", "spec") == [
        {
            "matchExpressions": [
                expr("cuda-major-version", "Gt", 10),
                expr("cuda-major-version", "Lt", 12),
                expr("cuda-minor-version", "Gt", 7),
            ]
        },
    ]


def test_verify_gpu_access_deployment_keeps_its_node_selector() -> None:
    name = "ai-on-eks_verify-gpu-access_deployment.yaml"
    on = evaluate_doc(name, config=MUTATE)
    mutated = apply(on)
    assert get(mutated, "spec", "template", "spec", "nodeSelector") == get(
        documents(name)[0], "spec", "template", "spec", "nodeSelector"
    )
    assert on.notes[-1] == (
        "required GPU nodes with CUDA ≥ 11.6 "
        "(image nvidia/cuda:11.6.2-cudnn8-runtime-ubuntu20.04), preferably < 13.0"
    )


@pytest.mark.parametrize(
    "name",
    [
        "gke-samples_gcsfuse_pod-a_nongpu_deployment.yaml",
        "ai-on-gke_parallelstore-backup_cronjob_nongpu.yaml",
        "triton-tutorials_trtllm-client_nongpu_deployment.yaml",
        "kai-scheduler_gpu-memory_annotation_pod.yaml",
    ],
)
def test_non_gpu_workloads_untouched(name: str) -> None:
    for config in (DEFAULT, MUTATE):
        decision = evaluate_doc(name, config=config)
        assert decision.handled
        assert decision.allowed
        assert (decision.patch, decision.notes, decision.warnings) == ([], (), ())


def test_dcgm_exporter_with_sys_admin_is_named_by_gpu_access() -> None:
    """ai-on-eks' dcgm-exporter asks for no GPU resource and adds SYS_ADMIN, which NVIDIA's
    toolkit counts as privileged (issue 46): GPU access control names it (a warning under the
    default `warn`) until its namespace is exempt; nothing else changes."""
    name = "ai-on-eks_dcgm-exporter_daemonset.yaml"
    for config in (DEFAULT, MUTATE):
        decision = evaluate_doc(name, config=config)
        assert decision.handled and decision.allowed
        assert (decision.patch, decision.notes) == ([], ())
        assert decision.warnings == (
            'container "dcgm-exporter" adds capability SYS_ADMIN but requests no GPU: drop it or '
            "exempt its namespace in gpuAccess",
        )


def test_hami_amd_pod_gets_the_amd_crls_and_the_rocm_gate() -> None:
    """amd.com/gpu is AMD's device family (SPEC §13), no CUDA device: the shipped AMD CRLs copy
    its limits to requests (HAMi's amd.com/gpumem too), and the ROCm gate, with no node
    inventory, says it cannot place the pod; no CUDA check."""
    name = "hami_amd_use_memory.yaml"
    for config in (DEFAULT, MUTATE):
        decision = evaluate_doc(name, config=config)
        assert decision.allowed
        container = apply(decision)["spec"]["containers"][0]
        assert container["resources"]["requests"] == {"amd.com/gpu": 1, "amd.com/gpumem": 4096}
        assert decision.notes == (
            'set requests.amd.com/gpu=1 from limits in container "rocm"',
            'set requests.amd.com/gpumem=4096 from limits in container "rocm"',
        )
        assert decision.warnings == ("ROCm placement is not enforced without the node inventory",)


@pytest.mark.parametrize(
    "name",
    [
        "aws-adt_hyperpod-pytorchjob_llama3-1-8b_affinity_envsubst.yaml",  # SageMaker HyperPod
        "ai-on-eks_nimservice_llama3-8b.yaml",
    ],
)
def test_unregistered_custom_resources_are_not_handled(name: str) -> None:
    decision = evaluate_doc(name)
    assert not decision.handled
    assert decision.allowed and decision.patch == []


# --- operator workloads (SPEC §6): roles in every message, never mutated -------------------------

OPERATOR_PREFIXES = (
    "kubeflow_", "kubeflow-trainer_", "kuberay_", "lws_", "volcano_", "kserve_", "aws-adt_",
    "paddle-",
)  # fmt: skip
NOT_REGISTERED = {"HyperPodPyTorchJob"}


def _operator_documents() -> list[tuple[str, int]]:
    found = []
    for name in _files(MANIFESTS):
        if name.startswith(OPERATOR_PREFIXES) or "raycluster" in name:
            for index, doc in enumerate(documents(name)):
                if doc.get("apiVersion", "").count(".") and doc.get("kind") not in NOT_REGISTERED:
                    found.append((name, index))
    return found


@pytest.mark.parametrize(("name", "index"), _operator_documents())
def test_every_operator_manifest_is_handled_and_never_mutated(name: str, index: int) -> None:
    for config in (DEFAULT, MUTATE):
        decision = evaluate_doc(name, index, config=config)
        assert decision.handled
        assert decision.patch == [] and decision.mutated is None
        assert all(n.startswith(("will apply to ", "for ")) for n in decision.notes)
        # Within 120 characters, unless the image it names (whole) makes it longer: then the
        # rest of it, its fixed words and the role, stays short (issue 17 item 6).
        images = _images(documents(name)[index])
        for text in (*decision.notes, *decision.warnings):
            assert len(text) <= 120 or any(i in text and len(text) - len(i) <= 80 for i in images)


def _images(node: Any) -> set[str]:
    if isinstance(node, list):
        return {image for item in node for image in _images(item)}
    if not isinstance(node, dict):
        return set()
    found = {node["image"]} if isinstance(node.get("image"), str) else set()
    return found | {image for value in node.values() for image in _images(value)}


def test_the_corpus_has_operator_manifests() -> None:
    kinds = {documents(name)[index]["kind"] for name, index in _operator_documents()}
    assert kinds >= {
        "PyTorchJob", "MPIJob", "PaddleJob", "MXJob", "RayCluster", "RayJob", "RayService",
        "LeaderWorkerSet", "Job", "InferenceService", "LLMInferenceService",
        "ClusterTrainingRuntime",
    }  # fmt: skip


OPERATOR_RESULTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "kubeflow_pytorchjob_deepspeed-demo.yaml": (
        (
            "will apply to replica Master pods: set requests.nvidia.com/gpu=1 from limits in "
            'container "pytorch"',
            "will apply to replica Worker pods: set requests.nvidia.com/gpu=1 from limits in "
            'container "pytorch"',
        ),
        # One per role: the role is never left out (issue 17 item 6), the wording is shorter.
        (
            "replica Master: " + shortest("kubeflow/pytorch-deepspeed-demo:latest"),
            "replica Worker: " + shortest("kubeflow/pytorch-deepspeed-demo:latest"),
        ),
    ),
    "kubeflow_paddlejob_simple-gpu.yaml": (
        (
            "will apply to replica Worker pods: set requests.nvidia.com/gpu=2 from limits in "
            'container "paddle"',
            # The image whole: the shortest prefix and wording.
            "for replica Worker pods: CUDA ≥ 11.2 (image registry.baidubce.com/paddlepaddle/"
            "paddle:2.4.0rc0-gpu-cuda11.2-cudnn8.1-trt8.0)",
        ),
        (),
    ),
    "kuberay_raycluster_verl.yaml": (
        (
            "will apply to head pods: required CUDA ≥ 12.6 "
            "(image hiyouga/verl:ngc-th2.6.0-cu126-vllm0.8.4-flashinfer0.2.2-cxx11abi0)",
        ),
        (),
    ),
    # v0.8.5 from the shipped knowledge (vLLM's release pipeline built it with CUDA 12.4.0).
    "lws_vllm_gpu_leaderworkerset.yaml": (
        (
            "will apply to leader pods: set requests.nvidia.com/gpu=8 from limits in "
            'container "vllm-leader"',
            "for leader pods: required CUDA ≥ 12.4 (shipped knowledge: vLLM 0.8.5, vLLM release "
            "pipeline), preferably < 14.0",
            "will apply to worker pods: set requests.nvidia.com/gpu=8 from limits in "
            'container "vllm-worker"',
            "for worker pods: required CUDA ≥ 12.4 (shipped knowledge: vLLM 0.8.5, vLLM release "
            "pipeline), preferably < 14.0",
        ),
        (),
    ),
    "volcano_mindspore-gpu_vcjob.yaml": (
        (
            "will apply to task mpiworker pods: set requests.nvidia.com/gpu=1 from limits in "
            'container "mpiworker"',
        ),
        ("task mpiworker: " + shortest("lyd911/mindspore-gpu-example:0.2.0"),),
    ),
    # The predictor names no image (the ServingRuntime gives it): no CUDA advice.
    "kserve_isvc_torchserve-gpu.yaml": (
        (
            "will apply to predictor pods: set requests.nvidia.com/gpu=1 from limits in "
            'container "pytorch"',
        ),
        (),
    ),
    "kserve_isvc_huggingface-llama2.yaml": ((), ()),
    # `main` names no image (the LLMInferenceServiceConfig gives it); requests = limits.
    "kserve_llminferenceservice_qwen2-7b_no-scheduler.yaml": ((), ()),
    # GPUs come from the TrainJob's resourcesPerNode, not from the runtime.
    "kubeflow-trainer_clustertrainingruntime_torch-distributed.yaml": ((), ()),
    "kubeflow-trainer_clustertrainingruntime_torchtune-llama3.2-1b.yaml": (
        (
            "will apply to replicated job node pods: set requests.nvidia.com/gpu=2 from limits "
            'in container "node"',
        ),
        ("replicated job node: " + shortest("ghcr.io/kubeflow/trainer/torchtune-trainer"),),
    ),
    "paddle-operator_paddlejob_heter_collective.yaml": (
        (
            "will apply to task gpu-1 pods: set requests.nvidia.com/gpu=1 from limits in "
            'container "paddle"',
            "will apply to task xpu-22 pods: set requests.nvidia.com/gpu=1 from limits in "
            'container "paddle"',
        ),
        (
            "task gpu-1: " + shortest("registry.baidubce.com/paddle-operator/demo-resnet:v1"),
            "task xpu-22: " + shortest("registry.baidubce.com/paddle-operator/demo-resnet:v1"),
        ),
    ),
    # requests = limits already, and images without a CUDA version
    "aws-adt_nccl-tests_mpijob.yaml": (
        (),
        ("replica Worker: " + shortest("<account>.dkr.ecr.<region>.amazonaws.com/<image>:<tag>"),),
    ),
    "kuberay_rayservice_vllm.yaml": (
        (),
        ("worker group gpu-group: " + shortest("rayproject/ray-ml:2.33.0.914af0-py311"),),
    ),
    "gke-samples_raycluster_stable-diffusion.yaml": (
        (),
        ("worker group gpu-group: " + shortest("rayproject/ray:2.37.0-gpu"),),
    ),
    # no GPU anywhere
    "volcano_paddlepaddle-ctr_vcjob_cpu.yaml": ((), ()),
    "paddle-operator_paddlejob_simple_cpu.yaml": ((), ()),
    "kserve_isvc_triton_torch-transformer.yaml": ((), ()),
}


@pytest.mark.parametrize("name", sorted(OPERATOR_RESULTS))
def test_operator_manifest_results(name: str) -> None:
    notes, warnings = OPERATOR_RESULTS[name]
    decision = evaluate_doc(name)
    assert decision.allowed
    assert decision.notes == notes
    assert decision.warnings == warnings


def test_envsubst_pytorchjob_is_denied_naming_the_replica() -> None:
    decision = evaluate_doc("aws-adt_fsdp_llama3-1-8b_pytorchjob_envsubst.yaml")
    prefix = 'PyTorchJob llama3-1-8b-fsdp, replica Worker, container "pytorch": '
    rule = (
        "='$GPU_PER_NODE' is not a valid quantity (dataType: integer in ConfigMap "
        "kube-public/cf-crl-nvidia-gpu). Physical NVIDIA GPUs (whole cards)."
    )
    # The request equals the limit: the problem is reported once, on the limit (SPEC §3).
    assert [v.message for v in decision.violations] == [f"{prefix}limits.nvidia.com/gpu{rule}"]


def test_review_cli_gives_the_same_result_for_operator_manifests() -> None:
    path = MANIFESTS / "aws-adt_fsdp_llama3-1-8b_pytorchjob_envsubst.yaml"
    out = io.StringIO()
    assert main(["review", "-f", str(path), "--policies", str(CONFIGMAPS)], out=out) == 1
    decision = evaluate_doc(path.name)
    text = out.getvalue()
    assert text.startswith(f"--- PyTorchJob llama3-1-8b-fsdp ({path}, document 1): DENIED\n")
    for violation in decision.violations:
        assert f"  - {violation.message}\n" in text
    good = MANIFESTS / "kubeflow_pytorchjob_deepspeed-demo.yaml"
    out = io.StringIO()
    assert main(["review", "-f", str(good), "--policies", str(CONFIGMAPS)], out=out) == 0
    for note in evaluate_doc(good.name).notes:
        assert f"  - {note}\n" in out.getvalue()


def test_dra_pod_with_the_template_from_the_same_manifest() -> None:
    # The NVIDIA DRA driver's own example: a v1beta1 ResourceClaimTemplate on gpu.nvidia.com,
    # a pod whose container references the claim made from it; ubuntu:22.04 has no CUDA tag.
    docs = documents("nvidia-dra-driver_gpu-test-count_multidoc.yaml")
    index = ClaimIndex.from_objects(docs)
    assert index.templates == {("gpu-test1", "double-gpu"): frozenset({"gpu.nvidia.com"})}
    the_pod = copy.deepcopy(dict(docs[2]))
    without = evaluate(the_pod, shipped(), DEFAULT)
    assert without.warnings == (
        "ResourceClaimTemplate double-gpu: no DRA claim data here; evaluated without it "
        "(no GPU placement from it)",
    )
    assert evaluate(the_pod, shipped(), DEFAULT, claims=index).warnings == (
        unknown("ubuntu:22.04"),
    )
    the_pod["metadata"]["annotations"] = {"features.alauda.io/cuda-version": "12.2"}
    placed = evaluate(the_pod, shipped(), DEFAULT, claims=index)
    assert placed.notes == (
        "required GPU nodes with CUDA ≥ 12.2 "
        "(annotation features.alauda.io/cuda-version), preferably < 14.0",
    )
    # Integer operators for the major too (padded label values match): D ≥ 12.2, and a driver
    # major below 14 preferred.
    assert node_terms(apply(placed)) == [
        {
            "matchExpressions": [
                expr("cuda-major-version", "Gt", 11),
                expr("cuda-major-version", "Lt", 13),
                expr("cuda-minor-version", "Gt", 1),
            ]
        },
        {"matchExpressions": [expr("cuda-major-version", "Gt", 12)]},
    ]
    assert preferred_terms(apply(placed)) == preferred(13)


# --- unparseable files ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", _files(REJECTED))
def test_rejected_files_give_a_manifest_error(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = REJECTED / name
    with pytest.raises(ManifestError, match=r"is not valid YAML: .* at line \d+, column \d+$"):
        read_documents(path)
    out = io.StringIO()
    assert main(["review", "-f", str(path), "--policies", str(CONFIGMAPS)], out=out) == 2
    assert out.getvalue() == ""
    err = capsys.readouterr().err
    assert err.startswith(f"gpu-webhook review: {path} is not valid YAML: ")
    assert err.count("\n") == 1


def test_the_corpus_has_the_expected_files() -> None:
    assert len(_files(MANIFESTS)) >= 50
    assert len(_files(REJECTED)) == 2
