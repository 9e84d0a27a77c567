"""Kubeflow Trainer, KServe LLMInferenceService and Knative kinds (SPEC §6), on upstream manifests.

tests/data/README.md cites each manifest's repository, path and commit. The corpus manifests of
these kinds (../shared/corpus) are checked in test_corpus.py.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import (
    GPU,
    crl,
    policies,
)

# Tests of operators' workload kinds: evaluated without the /dev/shm fix (on by default), whose
# volume and warning would be in every pod here (tests/helpers.py `without_shm`; the rule's own
# tests: test_runtime_fixes.py).
from tests.helpers import (
    load_without_shm as load_config,
)
from tests.helpers import (
    run_without_shm as run,
)
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import Decision, evaluate
from webhook.core.policies.policyset import PolicySet

DATA = Path(__file__).resolve().parents[1] / "data" / "operators"
TORCH = "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime"
MUTATE = load_config({"mutateTemplates": True})
# A cluster allowing one whole GPU per container.
ONE_GPU = policies(
    crl(
        GPU,
        "nvidia",
        name="cf-crl-nvidia-gpu",
        requests="fromLimits",
        max="1",
        descriptionEn="One GPU per container",
    )
)
ABOVE = "is above the maximum 1 (max: 1 in ConfigMap kube-public/cf-crl-nvidia-gpu). "


def docs(name: str) -> list[dict[str, Any]]:
    text = (DATA / name).read_text(encoding="utf-8")
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


def doc(name: str) -> dict[str, Any]:
    (only,) = docs(name)
    return only


# (file, document index) -> (notes, warnings) with the standard test policies: what the user
# sees on `kubectl apply`. No document here is mutated, and none is denied.
EXPECTED: dict[tuple[str, int], tuple[tuple[str, ...], tuple[str, ...]]] = {
    ("trainer_trainjob_lammps-train-gpus.yaml", 0): (
        (),
        # the image is the TrainJob's own, but no TrainJob annotation reaches the pods; the
        # image whole, the role kept: the shorter wording (issue 17 item 6)
        (
            "trainer: CUDA of ghcr.io/flux-framework/tutorials:gpu-lammps-hwloc unknown: "
            "add it to imageCudaTable",
        ),
    ),
    ("trainer_trainjob_kai-gpu_EXTRACTED.yaml", 0): (
        (
            "will apply to trainer pods: set requests.nvidia.com/gpu=1 from limits in "
            'container "node"',
        ),
        (),  # the image comes from the runtime: nothing to advise
    ),
    ("trainer_trainingruntime+trainjob_multi-step.yaml", 0): ((), ()),  # no GPU in the runtime
    ("trainer_trainingruntime+trainjob_multi-step.yaml", 1): ((), ()),  # cpu/memory per node
    ("trainer_clustertrainingruntime_torchtune-qwen2.5-1.5b.yaml", 0): (
        (
            "will apply to replicated job node pods: set requests.nvidia.com/gpu=2 from limits "
            'in container "node"',
        ),
        (
            "replicated job node: CUDA of ghcr.io/kubeflow/trainer/torchtune-trainer unknown: "
            "set features.alauda.io/cuda-version",
        ),
    ),
    # Its containers request rdma/roce_gdr without IPC_LOCK (runtime fixes, SPEC §14); offline,
    # no namespace's Pod Security level is known: the capability is warned about, not added.
    ("kserve_llmisvc_pd-qwen2-7b-gpu.yaml", 0): (
        (),
        (
            'main: container "main": RDMA (rdma/roce_gdr) needs IPC_LOCK; not added: the '
            "namespace's Pod Security level is not known",
            'prefill: container "main": RDMA needs IPC_LOCK; not added: the namespace\'s Pod '
            "Security level is not known",
        ),
    ),
    ("kserve_llmisvc_dp-ep-deepseek-naive.yaml", 0): ((), ()),
    ("kserve_isvc_model-format-gpu.yaml", 0): ((), ()),
    ("kserve_isvc_pytorch-bert-gpu.yaml", 0): (
        (
            "will apply to predictor pods: set requests.nvidia.com/gpu=1 from limits in "
            'container "pytorch"',
        ),
        (),
    ),
    ("knative_service_vllm.yaml", 0): (
        (),
        (
            "CUDA version of rtalaricw/vllm:0.1 unknown, no affinity: set "
            "features.alauda.io/cuda-version or imageCudaTable",
        ),
    ),
}


def test_every_data_file_has_expectations() -> None:
    found = {(p.name, i) for p in DATA.glob("*.yaml") for i, _ in enumerate(docs(p.name))}
    assert found == set(EXPECTED)


@pytest.mark.parametrize(("name", "index"), sorted(EXPECTED))
@pytest.mark.parametrize("config", [None, MUTATE], ids=["default", "mutateTemplates"])
def test_upstream_manifests_say_what_pods_will_get_and_are_never_mutated(
    name: str, index: int, config: WebhookConfig | None
) -> None:
    decision = run(docs(name)[index], config=config)
    assert decision.handled and decision.allowed
    assert (decision.notes, decision.warnings) == EXPECTED[(name, index)]
    assert decision.patch == [] and decision.mutated is None and decision.mutation_kinds == ()
    assert all(len(w) <= 120 for w in (*decision.notes, *decision.warnings))


@pytest.mark.parametrize(
    ("name", "messages"),
    [
        (
            "trainer_clustertrainingruntime_torchtune-qwen2.5-1.5b.yaml",
            [
                "ClusterTrainingRuntime torchtune-qwen2.5-1.5b, replicated job node, "
                f"container \"node\": limits.nvidia.com/gpu='2' {ABOVE}One GPU per container."
            ],
        ),
        (
            "kserve_llmisvc_dp-ep-deepseek-naive.yaml",
            [
                'LLMInferenceService deepseek-coder-v2, main, container "main": '
                f"limits.nvidia.com/gpu='8' {ABOVE}One GPU per container.",
                'LLMInferenceService deepseek-coder-v2, worker, container "main": '
                f"limits.nvidia.com/gpu='8' {ABOVE}One GPU per container.",
            ],
        ),
    ],
)
@pytest.mark.parametrize("violations_only", [False, True])
def test_violations_name_the_role(name: str, messages: list[str], violations_only: bool) -> None:
    decision = run(doc(name), ONE_GPU, violations_only=violations_only)
    assert [v.message for v in decision.violations] == messages


def gpus(obj: dict[str, Any], path: tuple[str, ...], count: str) -> dict[str, Any]:
    """`obj` with limits and requests of nvidia.com/gpu at `path` (a resources object)."""
    obj = copy.deepcopy(obj)
    node = obj
    for key in path:
        node = node.setdefault(key, {})
    node.update({"limits": {GPU: count}, "requests": {GPU: count}})
    return obj


def test_prefill_pool_and_trainjob_violations_name_their_role() -> None:
    llm = doc("kserve_llmisvc_pd-qwen2-7b-gpu.yaml")
    prefill = llm["spec"]["prefill"]["template"]["containers"][0]
    prefill["resources"]["limits"][GPU] = prefill["resources"]["requests"][GPU] = "2"
    assert [v.message.split(": ")[0] for v in run(llm, ONE_GPU).violations] == [
        'LLMInferenceService qwen2-7b-instruct-pd, prefill, container "main"'
    ]
    job = gpus(
        doc("trainer_trainjob_lammps-train-gpus.yaml"), ("spec", "trainer", "resourcesPerNode"), "4"
    )
    assert [v.message for v in run(job, ONE_GPU).violations] == [
        f"TrainJob lammps-flux, trainer, container \"node\": limits.nvidia.com/gpu='4' {ABOVE}"
        "One GPU per container."
    ]


# Tightened since these objects were created: no GPU at all.
NO_GPU = policies(
    crl(GPU, "nvidia", name="cf-crl-nvidia-gpu", limits="disabled", requests="disabled")
)


def update(new: dict[str, Any], old: dict[str, Any], policy_set: PolicySet = ONE_GPU) -> Decision:
    return evaluate(new, policy_set, WebhookConfig(), operation="UPDATE", old_object=old)


@pytest.mark.parametrize(
    ("name", "path", "value"),
    [
        # scaling and scheduling changes: not what the evaluation reads
        ("trainer_clustertrainingruntime_torchtune-qwen2.5-1.5b.yaml", ("mlPolicy", "numNodes"), 4),
        ("trainer_trainjob_kai-gpu_EXTRACTED.yaml", ("trainer", "numNodes"), 8),
        ("trainer_trainjob_lammps-train-gpus.yaml", ("suspend",), True),
        ("kserve_llmisvc_dp-ep-deepseek-naive.yaml", ("replicas",), 2),
        ("kserve_llmisvc_pd-qwen2-7b-gpu.yaml", ("prefill", "replicas"), 4),
        ("kserve_isvc_model-format-gpu.yaml", ("predictor", "minReplicas"), 1),
        ("knative_service_vllm.yaml", ("traffic",), [{"latestRevision": True, "percent": 100}]),
    ],
)
def test_update_with_unchanged_templates_is_allowed_untouched_under_a_tightened_policy(
    name: str, path: tuple[str, ...], value: Any
) -> None:

    old = doc(name)
    assert not run(old, NO_GPU).allowed  # a CREATE would be denied now
    new = copy.deepcopy(old)
    node = new["spec"]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    decision = update(new, old, NO_GPU)
    assert decision.handled and decision.allowed
    assert decision.reason == "the pod template is unchanged"
    assert (decision.notes, decision.warnings, decision.patch) == ((), (), [])


def test_trainjob_update_changing_resources_per_node_is_checked() -> None:
    old = doc("trainer_trainjob_kai-gpu_EXTRACTED.yaml")
    new = gpus(old, ("spec", "trainer", "resourcesPerNode"), "2")
    assert [v.message.split(": ")[0] for v in update(new, old).violations] == [
        'TrainJob pytorch-kai-job, trainer, container "node"'
    ]


def trainjob(**trainer: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "bert", "namespace": "ml"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": trainer},
    }


def test_trainjob_image_gives_the_trainer_pods_their_placement() -> None:
    decision = run(trainjob(image=TORCH, numNodes=2, resourcesPerNode={"limits": {GPU: 1}}))
    assert decision.allowed and decision.patch == []
    assert decision.notes == (
        'will apply to trainer pods: set requests.nvidia.com/gpu=1 from limits in container "node"',
        "for trainer pods: required CUDA ≥ 12.1 "
        "(image pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime), preferably < 14.0",
    )
    assert decision.warnings == ()


def test_trainjob_env_is_the_trainer_containers_env() -> None:
    env = [{"name": "CUDA_VERSION", "value": "12.4.1"}]
    decision = run(trainjob(env=env, resourcesPerNode={"limits": {GPU: 1}, "requests": {GPU: 1}}))
    assert decision.notes == (
        "will apply to trainer pods: required GPU nodes with CUDA ≥ 12.4 (env CUDA_VERSION=12.4.1)"
        ", preferably < 14.0",
    )
    assert decision.warnings == ()


def test_trainjob_without_gpus_or_trainer_is_untouched() -> None:
    for obj in (trainjob(image=TORCH), trainjob(), {**trainjob(), "spec": {}}):
        decision = run(obj, ONE_GPU)
        assert decision.handled and decision.allowed
        assert (decision.notes, decision.warnings, decision.patch) == ((), (), [])


def isvc(model: dict[str, Any], **annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "llm", "namespace": "ml"}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": meta,
        "spec": {"predictor": {"model": model}},
    }


def test_kserve_predictor_without_an_image_gets_no_cuda_advice() -> None:
    model = {"modelFormat": {"name": "huggingface"}, "resources": {"limits": {GPU: "1"}}}
    decision = run(isvc(model))
    assert decision.allowed and decision.patch == []
    assert decision.notes == (
        "will apply to predictor pods: set requests.nvidia.com/gpu=1 from limits in "
        'container "model"',
    )
    assert decision.warnings == ()
    # The same predictor naming its own image: that image is the user's to describe.
    decision = run(isvc({**model, "image": "example.com/llm-server:7"}))
    assert decision.warnings == (
        "predictor: CUDA version of example.com/llm-server:7 unknown: set "
        "features.alauda.io/cuda-version or imageCudaTable",
    )
    # The annotation still reaches the pods (KServe propagates it): placement is said.
    decision = run(isvc(model, **{"features.alauda.io/cuda-version": "12.4"}))
    assert decision.notes[1:] == (
        "for predictor pods: required GPU nodes with CUDA ≥ 12.4 "
        "(annotation features.alauda.io/cuda-version), preferably < 14.0",
    )


def test_llm_inference_service_placement_from_its_workload_annotations() -> None:
    llm = doc("kserve_llmisvc_pd-qwen2-7b-gpu.yaml")
    llm["metadata"]["annotations"]["features.alauda.io/cuda-version"] = "12.8"  # not the pods'
    llm["spec"]["prefill"]["annotations"] = {"features.alauda.io/cuda-version": "12.4"}
    decision = run(llm)
    assert decision.notes == (
        "for prefill pods: required GPU nodes with CUDA ≥ 12.4 "
        "(annotation features.alauda.io/cuda-version), preferably < 14.0",
    )
    assert decision.patch == []
    # Only the RDMA runtime fix's (the level of no namespace is known offline).
    assert [w for w in decision.warnings if "IPC_LOCK" not in w] == []


def test_knative_service_template_gets_placement_and_a_violation_names_no_role() -> None:
    ksvc = doc("knative_service_vllm.yaml")
    container = ksvc["spec"]["template"]["spec"]["containers"][0]
    container["image"] = "vllm/vllm-openai:v0.8.5-cu124"
    container["env"].append({"name": "CUDA_VERSION", "value": "12.4.1"})
    decision = run(ksvc)
    assert decision.notes == (
        "will apply to pods: required GPU nodes with CUDA ≥ 12.4 "
        "(env CUDA_VERSION=12.4.1), preferably < 14.0",
    )
    assert (decision.warnings, decision.patch) == ((), [])
    container["resources"]["limits"][GPU] = container["resources"]["requests"][GPU] = 2
    assert [v.message.split(": ")[0] for v in run(ksvc, ONE_GPU).violations] == [
        'Service vllm-inference-service, container "kfserving-container"'
    ]


# Knative runs a revision's pods by digest, not by the tag the Service names (issue 28 item 5
# f): knative/serving pkg/reconciler/revision/resources/deploy.go BuildUserContainers sets
# `container.Image = rev.Status.ContainerStatuses[i].ImageDigest`, which resolve.go makes
# `repository@digest` (the tag dropped). What the tag alone told is not what the pods get.
KSVC_TAG = "vllm/vllm-openai:v0.8.5-cu124"


def knative(image: str = KSVC_TAG, **annotations: str) -> dict[str, Any]:
    ksvc = doc("knative_service_vllm.yaml")
    ksvc["spec"]["template"]["spec"]["containers"][0]["image"] = image
    if annotations:
        ksvc["spec"]["template"]["metadata"]["annotations"].update(annotations)
    return ksvc


def test_a_knative_cuda_known_from_the_tag_only_promises_no_placement() -> None:
    looked_up = run(knative())
    assert looked_up.notes == ()
    assert looked_up.warnings == (
        "Knative runs vllm/vllm-openai:v0.8.5-cu124 by digest: its pods get CUDA ≥ 12.4 only if "
        "its registry says so",
    )
    # (a shorter image leaves room for the advice)
    short = run(knative("org/llm:cu124"))
    assert short.warnings == (
        "Knative runs org/llm:cu124 by digest: CUDA ≥ 12.4 only if its registry says so; "
        "set features.alauda.io/cuda-version",
    )
    offline = run(knative(), config=load_config({"registryLookups": {"enabled": False}}))
    assert offline.notes == ()
    assert offline.warnings == (
        "Knative runs vllm/vllm-openai:v0.8.5-cu124 by digest: its pods get no CUDA affinity; "
        "set features.alauda.io/cuda-version",
    )
    assert all(len(w) <= 120 for w in (*looked_up.warnings, *offline.warnings))


def test_a_knative_cuda_the_digest_tells_as_well_keeps_its_note() -> None:
    annotated = run(knative(**{"features.alauda.io/cuda-version": "12.4"}))
    assert annotated.notes == (
        "will apply to pods: required GPU nodes with CUDA ≥ 12.4 "
        "(annotation features.alauda.io/cuda-version), preferably < 14.0",
    )
    assert annotated.warnings == ()
    table = load_config({"imageCudaTable": [{"image": "vllm/vllm-openai*", "cudaVersion": "12.4"}]})
    by_name = run(knative(), config=table)
    assert by_name.warnings == ()
    assert by_name.notes == (
        "for pods: required GPU nodes with CUDA ≥ 12.4 "
        "(image table entry for vllm/vllm-openai:v0.8.5-cu124), preferably < 14.0",
    )
