"""Operator workloads and DRA pods through the real server: /mutate, /validate, dry-run alike."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from tests.integration.helpers import RunningServer
from tests.integration.test_admission import admission_review, apply_patch
from webhook.core.workloads.claims import ClaimClasses, ClaimIndex

TORCH = "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime"
UID = "7f0c3b5e-1111-4a4a-9e9e-000000000001"


def pytorchjob(worker_limits: dict[str, str]) -> dict[str, Any]:
    worker = {"name": "pytorch", "image": TORCH, "resources": {"limits": worker_limits}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "bert", "namespace": "ml"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Worker": {"replicas": 2, "template": {"spec": {"containers": [worker]}}}
            }
        },
    }


def job_review(obj: dict[str, Any], **kw: Any) -> dict[str, Any]:
    review = admission_review(obj, group="kubeflow.org", **kw)
    review["request"]["resource"]["resource"] = "pytorchjobs"
    return review


def test_bad_pytorchjob_is_denied_naming_the_replica_on_validate_and_dry_run(
    server: RunningServer,
) -> None:
    obj = pytorchjob({"tencent.com/vcuda-core": "150"})
    real = server.review("/validate", job_review(obj))
    assert server.review("/validate", job_review(obj, dry_run=True)) == real
    response = real["response"]
    assert response["allowed"] is False
    assert response["status"]["message"] == (
        'PyTorchJob ml/bert, replica Worker, container "pytorch": '
        "limits.tencent.com/vcuda-core='150' is above 100 but not a multiple of 100 (values up to "
        "100 are fractional shares; above it only whole units 100, 200, 300… are allowed) "
        "(wholeUnit: 100 in ConfigMap kube-public/cf-crl-test-vcuda-core). "
        "vGPU compute, 100 per card."
    )


def test_good_pytorchjob_is_not_patched_but_warned(server: RunningServer) -> None:
    obj = pytorchjob({"tencent.com/vcuda-core": "50"})
    response = server.review("/mutate", job_review(obj))["response"]
    assert "patch" not in response
    assert response["warnings"] == [
        "will apply to replica Worker pods: defaulted tencent.com/vcuda-memory=8 in container "
        '"pytorch"',
        # The shorter prefix keeps the image whole (issue 17 item 6).
        "for replica Worker pods: required vGPU nodes with CUDA ≥ 12.1 "
        "(image pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime)",
        "will apply to replica Worker pods: mounted a 16Gi memory-backed /dev/shm in container "
        '"pytorch" (shm fix)',
    ]
    validate = server.review("/validate", job_review(obj))["response"]
    assert validate == {"uid": UID, "allowed": True}


def test_update_with_the_same_templates_is_allowed_untouched(server: RunningServer) -> None:
    old = pytorchjob({"tencent.com/vcuda-core": "150"})  # tightened policy since creation
    new = copy.deepcopy(old)
    new["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 4
    review = job_review(new, operation="UPDATE")
    review["request"]["oldObject"] = old
    for endpoint in ("/mutate", "/validate"):
        assert server.review(endpoint, review)["response"] == {"uid": UID, "allowed": True}


def test_operator_kinds_are_metric_labels(server: RunningServer) -> None:
    server.review("/validate", job_review(pytorchjob({"nvidia.com/gpu": "1"})))
    text = server.request("GET", "/metrics").text
    assert 'kind="PyTorchJob"' in text


def dra_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "dra",
            "namespace": "ml",
            "annotations": {"features.alauda.io/cuda-version": "12.4"},
        },
        "spec": {
            "containers": [
                {"name": "c", "image": "ubuntu:22.04", "resources": {"claims": [{"name": "g"}]}}
            ],
            "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "one-gpu"}],
        },
    }


def test_dra_pod_placement_follows_the_claim_snapshot(server: RunningServer) -> None:
    store = server.app_state().store
    assert store.claims is None
    response = server.review("/mutate", admission_review(dra_pod()))["response"]
    assert "patch" not in response
    assert response["warnings"] == [
        "ResourceClaimTemplate one-gpu: no DRA claim data here; evaluated without it "
        "(no GPU placement from it)"
    ]
    store.claims = ClaimIndex(
        templates={("ml", "one-gpu"): ClaimClasses.of({"gpu": frozenset({"gpu.nvidia.com"})})}
    )
    try:
        response = server.review("/mutate", admission_review(dra_pod()))["response"]
    finally:
        store.claims = None
    assert response["warnings"] == [
        "required GPU nodes with CUDA ≥ 12.4 "
        "(annotation features.alauda.io/cuda-version), preferably < 14.0",
        # A GPU container by its claim: the /dev/shm fix (on by default) applies too.
        'mounted a 16Gi memory-backed /dev/shm in container "c" (shm fix)',
    ]
    mutated = apply_patch(dra_pod(), response)
    terms = mutated["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][:2] == [
        {"key": "cuda-major-version", "operator": "Gt", "values": ["11"]},
        {"key": "cuda-major-version", "operator": "Lt", "values": ["13"]},
    ]


# --- Kubeflow Trainer, KServe LLMInferenceService, Knative (upstream manifests, tests/data) ----

DATA = Path(__file__).resolve().parents[1] / "data" / "operators"


def data(name: str) -> dict[str, Any]:
    (obj,) = [d for d in yaml.safe_load_all((DATA / name).read_text(encoding="utf-8")) if d]
    assert isinstance(obj, dict)
    obj["metadata"]["namespace"] = "ml"
    return obj


def review_of(obj: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return admission_review(obj, group=obj["apiVersion"].rpartition("/")[0], **kw)


def test_trainjob_above_the_policy_is_denied_naming_the_trainer(server: RunningServer) -> None:
    obj = data("trainer_trainjob_lammps-train-gpus.yaml")
    obj["spec"]["trainer"]["resourcesPerNode"] = {"limits": {"nvidia.com/gpu": "16"}}
    real = server.review("/validate", review_of(obj))
    assert server.review("/validate", review_of(obj, dry_run=True)) == real
    assert real["response"]["allowed"] is False
    assert real["response"]["status"]["message"] == (
        "TrainJob ml/lammps-flux, trainer, container \"node\": limits.nvidia.com/gpu='16' is "
        "above the maximum 8 (max: 8 in ConfigMap kube-public/cf-crl-test-nvidia-gpu)."
    )


def test_trainjob_without_image_is_warned_what_its_pods_get_and_not_patched(
    server: RunningServer,
) -> None:
    obj = data("trainer_trainjob_kai-gpu_EXTRACTED.yaml")
    response = server.review("/mutate", review_of(obj))["response"]
    assert "patch" not in response
    # no "CUDA version unknown" advice: the image comes from the runtime
    assert response["warnings"] == [
        'will apply to trainer pods: set requests.nvidia.com/gpu=1 from limits in container "node"',
        'will apply to trainer pods: mounted a 16Gi memory-backed /dev/shm in container "node" '
        "(shm fix)",
    ]
    assert server.review("/validate", review_of(obj))["response"] == {"uid": UID, "allowed": True}
    old = copy.deepcopy(obj)
    obj["spec"]["trainer"]["numNodes"] = 8
    obj["spec"]["suspend"] = True
    review = review_of(obj, operation="UPDATE")
    review["request"]["oldObject"] = old
    for endpoint in ("/mutate", "/validate"):
        assert server.review(endpoint, review)["response"] == {"uid": UID, "allowed": True}


def test_cluster_training_runtime_is_checked_without_a_namespace(server: RunningServer) -> None:
    obj = data("trainer_clustertrainingruntime_torchtune-qwen2.5-1.5b.yaml")
    del obj["metadata"]["namespace"]  # cluster-scoped: the request names no namespace
    response = server.review("/mutate", review_of(obj))["response"]
    assert "patch" not in response
    assert response["warnings"] == [
        "will apply to replicated job node pods: set requests.nvidia.com/gpu=2 from limits in "
        'container "node"',
        "will apply to replicated job node pods: mounted a 16Gi memory-backed /dev/shm in "
        'container "node" (shm fix)',
        "replicated job node: CUDA of ghcr.io/kubeflow/trainer/torchtune-trainer unknown: "
        "set features.alauda.io/cuda-version",
    ]
    obj["spec"]["template"]["spec"]["replicatedJobs"][2]["template"]["spec"]["template"]["spec"][
        "containers"
    ][0]["resources"]["limits"]["nvidia.com/gpu"] = 9
    response = server.review("/validate", review_of(obj))["response"]
    assert response["status"]["message"].startswith(
        'ClusterTrainingRuntime torchtune-qwen2.5-1.5b, replicated job node, container "node": '
        "limits.nvidia.com/gpu='9' is above the maximum 8"
    )


def test_llm_inference_service_and_knative_service(server: RunningServer) -> None:
    llm = data("kserve_llmisvc_pd-qwen2-7b-gpu.yaml")
    # requests = limits already, and `main` takes its image from the LLMInferenceServiceConfig
    response = server.review("/mutate", review_of(llm))["response"]
    # Only the runtime fixes speak: /dev/shm (on by default) for its two templates' GPU
    # containers, and RDMA: they request rdma/roce_gdr without IPC_LOCK, and this server knows
    # no namespace's Pod Security level (SPEC §14).
    warnings = response.pop("warnings")
    assert response == {"uid": UID, "allowed": True}
    assert warnings[:2] == [
        f'will apply to {role} pods: mounted a 16Gi memory-backed /dev/shm in container "main" '
        "(shm fix)"
        for role in ("main", "prefill")
    ]
    assert warnings[2:] and all("needs IPC_LOCK; not added" in w for w in warnings[2:])
    ksvc = data("knative_service_vllm.yaml")
    response = server.review("/mutate", review_of(ksvc))["response"]
    assert "patch" not in response
    assert response["warnings"] == [
        # Half of the container's memory limit (16Gi): the /dev/shm fix, on by default.
        "will apply to pods: mounted a 8Gi memory-backed /dev/shm in container "
        '"kfserving-container" (shm fix)',
        "CUDA version of rtalaricw/vllm:0.1 unknown, no affinity: set "
        "features.alauda.io/cuda-version or imageCudaTable",
    ]
    text = server.request("GET", "/metrics").text
    assert 'kind="LLMInferenceService"' in text and 'kind="Service"' in text
