"""Operator workloads (SPEC §6): validated like templates, never mutated, roles in every message."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.helpers import (
    GPU,
    VCORE,
    VMEM,
    container,
    standard_policies,
)

# Tests of operators' kinds: evaluated without the /dev/shm fix (on by default), whose volume and
# warning would be in every pod here (tests/helpers.py `without_shm`; the rule's own tests:
# test_runtime_fixes.py).
from tests.helpers import (
    load_without_shm as load_config,
)
from tests.helpers import (
    run_without_shm as run,
)
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import Decision, evaluate

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
        # Too long behind "will apply to": the shorter "for" and "required CUDA" keep role,
        # image and the skew preference whole.
        "for replica Master pods: required CUDA ≥ 12.1 "
        "(image pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime), preferably < 14.0",
        "will apply to replica Worker pods: set requests.nvidia.com/gpu=2 from limits in "
        'container "pytorch"',
        "for replica Worker pods: required CUDA ≥ 12.1 "
        "(image pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime), preferably < 14.0",
    )
    assert all(len(n) <= 120 for n in decision.notes)
    assert decision.warnings == ()


def test_warnings_keep_the_role_and_shorten_the_fixed_words() -> None:
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
        # Issue 17 item 6: the role stays; the fixed words shrink, the recommended value stays.
        "replica Worker: container \"paddle\": FLAGS_allocator_strategy='auto_growth' kept; "
        "recommended: naive_best_fit",
    )


# As long as a real Vertex AI serving image (the TGI one, 119 characters, whose CUDA the shipped
# knowledge now reads from its repository name), but one nothing knows.
LONG = (
    "us-docker.pkg.dev/example-ml-platform/serving-images/"
    "text-generation-server-nightly-2025.11.20.ubuntu2204.py311-slim"
)


def test_a_warning_keeps_both_the_role_and_the_image_whole() -> None:
    # Issue 17 item 6: the fixed words get shorter; the role and the image never do.
    worker = container("tgi", LONG, limits={GPU: "1"}, requests={GPU: "1"})
    master = container("app", "library/busybox:1.36", limits={GPU: "1"}, requests={GPU: "1"})
    decision = run(pytorchjob(worker, master))
    assert decision.warnings == (
        # 128 characters in the longest wording: the next one fits.
        "replica Master: CUDA version of library/busybox:1.36 unknown: set "
        "features.alauda.io/cuda-version or imageCudaTable",
        # The image alone is 116 characters: the shortest wording, whole (185 characters).
        f"replica Worker: CUDA of {LONG} unknown: set features.alauda.io/cuda-version",
    )
    assert len(decision.warnings[1]) == 185


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
        "for predictor pods: required GPU nodes with CUDA ≥ 12.2 "
        "(annotation features.alauda.io/cuda-version), preferably < 14.0",
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
