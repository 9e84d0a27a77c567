"""Operator workloads (SPEC §6): validated like templates, never mutated, roles in every message."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.helpers import GPU, VCORE, VMEM, container, run, standard_policies
from webhook.core.config import WebhookConfig, load_config
from webhook.core.evaluate import Decision, evaluate

TORCH = "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime"
MUTATE = load_config({"mutateTemplates": True})


def pytorchjob(worker: dict[str, Any], master: dict[str, Any] | None = None) -> dict[str, Any]:
    specs: dict[str, Any] = {}
    if master is not None:
        specs["Master"] = {"replicas": 1, "template": {"spec": {"containers": [master]}}}
    specs["Worker"] = {"replicas": 2, "template": {"spec": {"containers": [worker]}}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "bert", "namespace": "ml"},
        "spec": {"pytorchReplicaSpecs": specs},
    }


BAD_WORKER = container("pytorch", TORCH, limits={VCORE: "150", VMEM: "4"})
GOOD_MASTER = container("pytorch", TORCH, limits={GPU: "1"})
WHOLE_UNIT = (
    "limits.tencent.com/vcuda-core='150' is above 100 but not a multiple of 100 (values up to "
    "100 are fractional shares; above it only whole units 100, 200, 300… are allowed) "
    "(wholeUnit: 100 in ConfigMap kube-public/cf-crl-gpu-manager-vcuda-core). "
    "vGPU compute, 100 per card."
)


@pytest.mark.parametrize("violations_only", [False, True])
def test_violation_names_the_role(violations_only: bool) -> None:
    decision = run(pytorchjob(BAD_WORKER, GOOD_MASTER), violations_only=violations_only)
    assert [v.message for v in decision.violations] == [
        f'PyTorchJob ml/bert, replica Worker, container "pytorch": {WHOLE_UNIT}'
    ]
    assert decision.denial_message() == decision.violations[0].message


@pytest.mark.parametrize("config", [None, MUTATE], ids=["default", "mutateTemplates"])
def test_allowed_job_is_never_mutated_and_says_what_pods_get(config: Any) -> None:
    decision = run(
        pytorchjob(container("pytorch", TORCH, limits={GPU: "2"}), GOOD_MASTER), config=config
    )
    assert decision.allowed
    assert decision.patch == [] and decision.mutated is None and decision.mutation_kinds == ()
    assert decision.notes == (
        "will apply to replica Master pods: set requests.nvidia.com/gpu=1 from limits in "
        'container "pytorch"',
        "will apply to replica Master pods: required GPU nodes with CUDA ≥ 12.1 "
        "(image pytorch/pytorch:2.3.0-cuda12.1-cudnn8-run…",
        "will apply to replica Worker pods: set requests.nvidia.com/gpu=2 from limits in "
        'container "pytorch"',
        "will apply to replica Worker pods: required GPU nodes with CUDA ≥ 12.1 "
        "(image pytorch/pytorch:2.3.0-cuda12.1-cudnn8-run…",
    )
    assert all(len(n) <= 120 for n in decision.notes)
    assert decision.warnings == ()


def test_warnings_name_the_role_when_they_fit() -> None:
    paddle = container(
        "paddle",
        "paddlepaddle/paddle:2.6.1-gpu-cuda12.0-cudnn8.9-trt8.6",
        limits={VCORE: "50"},
        env=[{"name": "FLAGS_allocator_strategy", "value": "auto_growth"}],
    )
    master = container("pytorch", "nvidia/cuda:12.4.1-runtime-ubuntu22.04", limits={VCORE: "50"})
    decision = run(pytorchjob(paddle, master))
    assert decision.warnings == (
        'replica Master: container "pytorch" needs CUDA 12.4: '
        "GPU-Manager vGPU supports CUDA < 12.4",
        # with the role this one would pass 120 characters and lose the recommended value
        "container \"paddle\": FLAGS_allocator_strategy='auto_growth' kept; "
        "the paddle-on-gpu-manager fix recommends naive_best_fit",
    )


def test_update_with_unchanged_templates_is_allowed_untouched() -> None:
    old = pytorchjob(BAD_WORKER, GOOD_MASTER)
    new = copy.deepcopy(old)
    new["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 8  # scaling changes no template
    new["metadata"]["labels"] = {"team": "nlp"}
    decision = run_update(new, old)
    assert decision.handled and decision.allowed
    assert (decision.notes, decision.warnings, decision.patch) == ((), (), [])


def test_update_that_changes_a_template_is_checked() -> None:
    old = pytorchjob(container("pytorch", TORCH, limits={VCORE: "50"}), GOOD_MASTER)
    new = pytorchjob(BAD_WORKER, GOOD_MASTER)
    decision = run_update(new, old)
    assert [v.message for v in decision.violations] == [
        f'PyTorchJob ml/bert, replica Worker, container "pytorch": {WHOLE_UNIT}'
    ]


def run_update(new: dict[str, Any], old: dict[str, Any]) -> Decision:
    return evaluate(new, standard_policies(), WebhookConfig(), operation="UPDATE", old_object=old)


def test_volcano_job_is_not_a_batch_job() -> None:
    task = {"name": "trainer", "template": {"spec": {"containers": [BAD_WORKER]}}}
    obj = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "vc", "namespace": "ml"},
        "spec": {"tasks": [task]},
    }
    decision = run(obj)
    assert [v.message for v in decision.violations] == [
        f'Job ml/vc, task trainer, container "pytorch": {WHOLE_UNIT}'
    ]


def test_kserve_model_form_resources_are_checked() -> None:
    obj = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "llm", "namespace": "ml"},
        "spec": {
            "predictor": {
                "model": {
                    "modelFormat": {"name": "huggingface"},
                    "resources": {"limits": {VCORE: "150", VMEM: "4"}},
                }
            }
        },
    }
    decision = run(obj)
    assert [v.message for v in decision.violations] == [
        f'InferenceService ml/llm, predictor, container "model": {WHOLE_UNIT}'
    ]


def test_kserve_framework_form_gets_placement_from_the_isvc_annotation() -> None:
    obj = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": "tp",
            "namespace": "ml",
            "annotations": {"features.alauda.io/cuda-version": "12.2"},
        },
        "spec": {"predictor": {"pytorch": {"resources": {"limits": {GPU: "1"}}}}},
    }
    decision = run(obj)
    assert decision.allowed and decision.patch == []
    assert decision.notes == (
        "will apply to predictor pods: set requests.nvidia.com/gpu=1 from limits in "
        'container "pytorch"',
        "will apply to predictor pods: required GPU nodes with CUDA ≥ 12.2 "
        "(annotation features.alauda.io/cuda-version)",
    )


def test_non_gpu_operator_workload_is_untouched() -> None:
    obj = pytorchjob(container("pytorch", "busybox:1.36", limits={"cpu": "1"}))
    decision = run(obj)
    assert decision.handled and decision.allowed
    assert (decision.notes, decision.warnings, decision.patch) == ((), (), [])


def test_exempt_namespace_and_delete() -> None:
    obj = pytorchjob(BAD_WORKER)
    obj["metadata"]["namespace"] = "kube-system"
    assert run(obj).allowed
    assert not run(pytorchjob(BAD_WORKER), operation="DELETE").handled
