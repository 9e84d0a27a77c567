"""DRA claims (SPEC §6): containers on a GPU device-class claim are GPU containers for §4 and §5."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import (
    REQUIRED_12_4_TERMS,
    apply,
    container,
    get,
    node_terms,
    pod,
    standard_policies,
    without_shm,
    workload,
)

# Tests of DRA claims: evaluated without the /dev/shm fix (on by default), whose volume and warning
# would be in every pod here (tests/helpers.py `without_shm`; the rule's own tests:
# test_runtime_fixes.py).
from tests.helpers import (
    load_without_shm as load_config,
)
from webhook.core.evaluation.evaluate import Decision, evaluate
from webhook.core.workloads.claims import ClaimIndex, device_classes


def claim_template(name: str, *requests: dict[str, Any], ns: str = "ml") -> dict[str, Any]:
    # resource.k8s.io/v1: ResourceClaimTemplate.spec (ResourceClaimTemplateSpec).spec
    # (ResourceClaimSpec).devices.requests[]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"spec": {"devices": {"requests": list(requests)}}},
    }


def exactly(name: str, device_class: str) -> dict[str, Any]:
    return {
        "name": name,
        "exactly": {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": 1},
    }


def first_available(name: str, *classes: str) -> dict[str, Any]:
    return {
        "name": name,
        "firstAvailable": [
            {"name": f"opt{i}", "deviceClassName": c} for i, c in enumerate(classes)
        ],
    }


SINGLE_GPU = claim_template("single-gpu", exactly("gpu", "gpu.nvidia.com"))
MIG_OR_GPU = claim_template(
    "mig-or-gpu", first_available("gpu", "mig.nvidia.com", "gpu.nvidia.com")
)
NIC = claim_template("rdma-nic", exactly("nic", "rdma.example.com"))
SHARED_GPU_CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "shared-gpu", "namespace": "ml"},
    "spec": {"devices": {"requests": [exactly("gpu", "gpu.nvidia.com")]}},
}
# One claim, two requests: a GPU and the NIC next to it (the DRA way to keep them aligned).
GPU_AND_NIC = claim_template(
    "gpu-and-nic", exactly("gpu", "gpu.nvidia.com"), exactly("nic", "rdma.example.com")
)
INDEX = ClaimIndex.from_objects([SINGLE_GPU, MIG_OR_GPU, NIC, SHARED_GPU_CLAIM, GPU_AND_NIC])
CUDA_12_4 = "nvidia/cuda:12.4.1-runtime-ubuntu22.04"


def uses(*claims: str) -> dict[str, Any]:
    return {"claims": [{"name": c} for c in claims]}


def dra_pod(*pod_claims: dict[str, Any], containers: list[dict[str, Any]]) -> dict[str, Any]:
    return pod(*containers, resourceClaims=list(pod_claims))


def evaluate_with(obj: dict[str, Any], claims: ClaimIndex | None = INDEX, **kw: Any) -> Decision:
    return evaluate(obj, standard_policies(), kw.pop("config", without_shm()), claims=claims, **kw)


@pytest.mark.parametrize(
    ("obj", "classes"),
    [
        (SINGLE_GPU, {"gpu.nvidia.com"}),
        (MIG_OR_GPU, {"mig.nvidia.com", "gpu.nvidia.com"}),
        (NIC, {"rdma.example.com"}),
        (SHARED_GPU_CLAIM, {"gpu.nvidia.com"}),
        # v1beta1 carried deviceClassName on the request itself
        (
            {
                "kind": "ResourceClaimTemplate",
                "spec": {
                    "spec": {"devices": {"requests": [{"deviceClassName": "gpu.nvidia.com"}]}}
                },
            },
            {"gpu.nvidia.com"},
        ),
        (
            {"kind": "ResourceClaimTemplate", "spec": {"spec": {"devices": {"requests": "x"}}}},
            set(),
        ),
        ({"kind": "ResourceClaim", "spec": []}, set()),
    ],
)
def test_device_classes(obj: dict[str, Any], classes: set[str]) -> None:
    assert device_classes(obj) == classes


def test_index_from_manifest_objects() -> None:
    no_ns = {**SINGLE_GPU, "metadata": {"name": "single-gpu"}}
    docs: list[Any] = [
        no_ns,
        SHARED_GPU_CLAIM,
        {"kind": "Pod"},
        {"apiVersion": "v1", "kind": "ResourceClaim"},
        "x",
    ]
    index = ClaimIndex.from_objects(docs)
    assert index.templates == {("default", "single-gpu"): frozenset({"gpu.nvidia.com"})}
    assert index.claims == {("ml", "shared-gpu"): frozenset({"gpu.nvidia.com"})}


def test_pod_with_a_gpu_claim_and_a_nic_claim() -> None:
    obj = dra_pod(
        {"name": "gpu", "resourceClaimTemplateName": "single-gpu"},
        {"name": "nic", "resourceClaimTemplateName": "rdma-nic"},
        containers=[
            container("train", CUDA_12_4, resources=uses("gpu", "nic")),
            # only the NIC claim: not a GPU container (else "CUDA version unknown for sidecar")
            container("sidecar", "busybox:1.36", resources=uses("nic")),
        ],
    )
    decision = evaluate_with(obj)
    assert decision.allowed
    assert decision.warnings == ()
    assert decision.notes == (
        f"required GPU nodes with CUDA ≥ 12.4 (image {CUDA_12_4}), preferably < 14.0",
    )
    mutated = apply(decision)
    assert node_terms(mutated) == REQUIRED_12_4_TERMS
    # CRL rules govern extended resources only: no defaults written next to the claims
    assert get(mutated, "spec", "containers", 0, "resources") == uses("gpu", "nic")


@pytest.mark.parametrize(
    "source",
    [
        {"resourceClaimTemplateName": "mig-or-gpu"},  # firstAvailable with a MIG first
        {"resourceClaimName": "shared-gpu"},  # a ResourceClaim shared by several pods
    ],
)
def test_other_gpu_claim_sources(source: dict[str, str]) -> None:
    obj = dra_pod(
        {"name": "g", **source}, containers=[container("c", CUDA_12_4, resources=uses("g"))]
    )
    decision = evaluate_with(obj)
    assert node_terms(apply(decision)) == REQUIRED_12_4_TERMS


def uses_request(claim: str, request: str) -> dict[str, Any]:
    return {"claims": [{"name": claim, "request": request}]}


def test_a_container_naming_one_request_gets_only_that_requests_devices() -> None:
    # Issue 18, defect 3 (core/v1 ResourceClaim.Request: "If empty, everything from the claim is
    # made available, otherwise only the result of this request"). The agent's image says
    # CUDA 10.2: were it a GPU container, its CUDA would change the pod's placement (and with a
    # hard major-skew bound no driver could run both: a valid pod denied).
    obj = dra_pod(
        {"name": "devices", "resourceClaimTemplateName": "gpu-and-nic"},
        containers=[
            container("train", CUDA_12_4, resources=uses_request("devices", "gpu")),
            container(
                "rdma-agent",
                "nvidia/cuda:10.2-base-ubuntu18.04",
                resources=uses_request("devices", "nic"),
            ),
        ],
    )
    decision = evaluate_with(obj)
    assert decision.violations == ()
    assert decision.warnings == ()
    assert decision.notes == (
        f"required GPU nodes with CUDA ≥ 12.4 (image {CUDA_12_4}), preferably < 14.0",
    )
    assert node_terms(apply(decision)) == REQUIRED_12_4_TERMS


@pytest.mark.parametrize(
    ("request_name", "gpu"),
    [
        (None, True),  # the whole claim: GPU and NIC
        ("gpu", True),
        ("nic", False),
        ("missing", False),  # a request the claim does not have gives the container nothing
    ],
)
def test_which_requests_make_a_gpu_container(request_name: str | None, gpu: bool) -> None:
    ref: dict[str, Any] = {"name": "devices"}
    if request_name is not None:
        ref["request"] = request_name
    obj = dra_pod(
        {"name": "devices", "resourceClaimTemplateName": "gpu-and-nic"},
        containers=[container("c", CUDA_12_4, resources={"claims": [ref]})],
    )
    decision = evaluate_with(obj)
    assert node_terms(apply(decision)) == (REQUIRED_12_4_TERMS if gpu else None)


def test_a_first_available_subrequest_by_name() -> None:
    template = claim_template(
        "gpu-or-nic", first_available("dev", "rdma.example.com", "gpu.nvidia.com")
    )
    index = ClaimIndex.from_objects([template])
    assert device_classes(template).requests == {
        "dev": frozenset({"rdma.example.com", "gpu.nvidia.com"}),
        "dev/opt0": frozenset({"rdma.example.com"}),
        "dev/opt1": frozenset({"gpu.nvidia.com"}),
    }
    for request, gpu in (("dev", True), ("dev/opt0", False), ("dev/opt1", True)):
        obj = dra_pod(
            {"name": "d", "resourceClaimTemplateName": "gpu-or-nic"},
            containers=[container("c", CUDA_12_4, resources=uses_request("d", request))],
        )
        decision = evaluate_with(obj, claims=index)
        assert node_terms(apply(decision)) == (REQUIRED_12_4_TERMS if gpu else None), request


def test_nic_only_pod_is_untouched() -> None:
    obj = dra_pod(
        {"name": "nic", "resourceClaimTemplateName": "rdma-nic"},
        containers=[container("c", CUDA_12_4, resources=uses("nic"))],
    )
    decision = evaluate_with(obj)
    assert (decision.patch, decision.notes, decision.warnings) == ([], (), ())


def test_gpu_device_classes_are_configurable() -> None:
    obj = dra_pod(
        {"name": "nic", "resourceClaimTemplateName": "rdma-nic"},
        containers=[container("c", CUDA_12_4, resources=uses("nic"))],
    )
    config = load_config({"gpuDeviceClasses": ["rdma.example.com"]})
    assert node_terms(apply(evaluate_with(obj, config=config))) == REQUIRED_12_4_TERMS


def test_container_that_does_not_reference_the_claim_is_not_a_gpu_container() -> None:
    obj = dra_pod(
        {"name": "gpu", "resourceClaimTemplateName": "single-gpu"},
        containers=[container("c", CUDA_12_4)],
    )
    decision = evaluate_with(obj)
    assert (decision.patch, decision.notes, decision.warnings) == ([], (), ())


def test_env_fixes_apply_to_dra_gpu_containers() -> None:
    config = load_config(
        {"envFixes": [{"name": "paddle-dra", "image": "paddle", "env": {"FLAGS_x": "1"}}]}
    )
    paddle = "paddlepaddle/paddle:2.6.1-gpu-cuda12.0-cudnn8.9-trt8.6"
    obj = dra_pod(
        {"name": "gpu", "resourceClaimTemplateName": "single-gpu"},
        containers=[
            container("p", paddle, resources=uses("gpu")),
            container("cpu", paddle),  # same image, no claim: no fix
        ],
    )
    mutated = apply(evaluate_with(obj, config=config))
    assert get(mutated, "spec", "containers", 0, "env") == [{"name": "FLAGS_x", "value": "1"}]
    assert get(mutated, "spec", "containers", 1, "env") is None


def test_template_not_in_the_cache_yet() -> None:
    obj = dra_pod(
        {"name": "gpu", "resourceClaimTemplateName": "brand-new"},
        containers=[container("c", CUDA_12_4, resources=uses("gpu"))],
    )
    decision = evaluate_with(obj)
    assert decision.patch == []
    assert decision.warnings == (
        "ResourceClaimTemplate brand-new: not in the DRA cache yet; evaluated without it "
        "(no GPU placement from it)",
    )
    assert all(len(w) <= 120 for w in decision.warnings)


def test_template_in_another_namespace_is_not_used() -> None:
    obj = dra_pod(
        {"name": "gpu", "resourceClaimTemplateName": "single-gpu"},
        containers=[container("c", CUDA_12_4, resources=uses("gpu"))],
    )
    obj["metadata"]["namespace"] = "other"
    assert evaluate_with(obj).warnings[0].startswith("ResourceClaimTemplate single-gpu: not in")


def test_no_claim_snapshot() -> None:
    with_claims = dra_pod(
        {"name": "gpu", "resourceClaimTemplateName": "single-gpu"},
        {"name": "c2", "resourceClaimName": "x"},
        containers=[container("c", CUDA_12_4, resources=uses("gpu"))],
    )
    decision = evaluate_with(with_claims, claims=None)
    assert decision.patch == []
    assert decision.warnings == (
        "ResourceClaimTemplate single-gpu (+1 more): no DRA claim data here; "
        "evaluated without it (no GPU placement from it)",
    )
    plain = pod(container("c", CUDA_12_4))
    assert evaluate_with(plain, claims=None).warnings == ()


def test_deployment_template_with_a_gpu_claim() -> None:
    the_pod = dra_pod(
        {"name": "gpu", "resourceClaimTemplateName": "single-gpu"},
        containers=[container("c", CUDA_12_4, resources=uses("gpu"))],
    )
    decision = evaluate_with(workload("Deployment", the_pod))
    assert decision.patch == []
    # Too long behind "will apply to": the shorter "for" keeps the preference and the image.
    assert decision.notes == (
        f"for pods: required GPU nodes with CUDA ≥ 12.4 (image {CUDA_12_4}), preferably < 14.0",
    )


@pytest.mark.parametrize(
    "resource_claims",
    [[{"name": 1}], ["x"], [{"name": "g"}], {"name": "g"}, [{"name": "g", "resourceClaimName": 3}]],
)
def test_odd_claim_shapes_are_ignored(resource_claims: Any) -> None:
    obj = pod(container("c", CUDA_12_4, resources={"claims": "x"}), resourceClaims=resource_claims)
    decision = evaluate_with(obj)
    assert decision.patch == [] and decision.warnings == ()
