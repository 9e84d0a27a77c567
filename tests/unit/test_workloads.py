"""Pod templates (SPEC §6): where each workload keeps its pod, template mutation on and off."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import (
    GPU,
    VCORE,
    VMEM,
    apply,
    container,
    expr,
    get,
    node_terms,
    pod,
    workload,
)

# Tests of workload kinds and their pod templates: evaluated without the /dev/shm fix (on by
# default), whose volume and warning would be in every pod here (tests/helpers.py `without_shm`; the
# rule's own tests: test_runtime_fixes.py).
from tests.helpers import (
    assert_idempotent_without_shm as assert_idempotent,
)
from tests.helpers import (
    load_without_shm as load_config,
)
from tests.helpers import (
    run_without_shm as run,
)
from webhook.core.base.errors import ObjectShapeError
from webhook.core.config.model import ANNOTATION_INJECTED_AFFINITY, WebhookConfig
from webhook.core.placement.terms import digest
from webhook.core.workloads.pods import find_pod_spec, handles_kind, object_ref

PATHS = {
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
# An unmutated DaemonSet template's pods are pinned and get no affinity:
# tests/unit/test_placement_daemonset.py.
AFFINE = {kind: path for kind, path in PATHS.items() if kind != "DaemonSet"}
MUTATE = load_config({"mutateTemplates": True})
PADDLE = "paddlepaddle/paddle:2.6.1-gpu-cuda12.0-cudnn8.9-trt8.6"
NOTES = (
    'defaulted tencent.com/vcuda-memory=4 in container "c"',
    'set FLAGS_allocator_strategy=naive_best_fit in container "c" (paddle-on-gpu-manager fix)',
    "required vGPU nodes with CUDA ≥ 12.0 (image "
    "paddlepaddle/paddle:2.6.1-gpu-cuda12.0-cudnn8.9-trt8.6)",
)


def gpu_workload(kind: str) -> dict[str, Any]:
    return workload(
        kind, pod(container(image=PADDLE, limits={VCORE: "50"}), annotations={"a": "b"})
    )


@pytest.mark.parametrize(("kind", "path"), PATHS.items())
def test_find_pod_spec_at_the_right_path(kind: str, path: tuple[str, ...]) -> None:
    obj = gpu_workload(kind)
    ref = find_pod_spec(kind, obj)
    assert ref is not None
    assert ref.template_path == path
    assert ref.spec_path == (*path, "spec")
    assert ref.is_template
    assert ref.annotations == {"a": "b"}
    assert [c.name for c in ref.containers] == ["c"]
    assert ref.spec is get(obj, *path, "spec")


def test_pod_itself() -> None:
    obj = pod(container("m"), init=[container("i")])
    ref = find_pod_spec("Pod", obj)
    assert ref is not None
    assert (ref.template_path, ref.is_template) == ((), False)
    assert [(c.list_name, c.index, c.name) for c in ref.containers] == [
        ("initContainers", 0, "i"),
        ("containers", 0, "m"),
    ]


@pytest.mark.parametrize("kind", ["Pod", *PATHS])
def test_handles_kind(kind: str) -> None:
    assert handles_kind(kind)


@pytest.mark.parametrize("kind", ["Service", "ConfigMap", "PyTorchJob", "PodTemplate", "pod", ""])
def test_other_kinds_not_handled(kind: str) -> None:
    # Without a group only core/apps/batch kinds are known: an operator kind needs its group.
    assert not handles_kind(kind)
    assert find_pod_spec(kind, {}) is None


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [
        ("v1", "Service"),
        ("apps.nvidia.com/v1alpha1", "NIMService"),
        ("kubeflow.org/v1", "PyTorchJobX"),
        # same kind, other group: the registry is keyed by (group, kind)
        ("example.com/v1", "PyTorchJob"),
        ("example.com/v1", "Job"),
    ],
)
def test_unhandled_kind_through_evaluate(api_version: str, kind: str) -> None:
    obj = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "x"},
        "spec": {"template": pod(container(limits={VCORE: "150"}))},
    }
    decision = run(obj)
    assert not decision.handled
    assert decision.allowed and decision.patch == []


@pytest.mark.parametrize("kind", list(PATHS))
def test_workload_without_template_or_spec(kind: str) -> None:
    assert find_pod_spec(kind, {"kind": kind}) is None
    decision = run({"kind": kind, "metadata": {"name": "x"}})
    assert decision.handled and decision.allowed and decision.patch == []


@pytest.mark.parametrize("kind", list(AFFINE))
def test_template_mutation_off_by_default(kind: str) -> None:
    decision = run(gpu_workload(kind))
    assert decision.patch == []
    assert decision.mutated is None
    assert decision.mutation_kinds == ()
    assert decision.notes == tuple(f"will apply to pods: {n}" for n in NOTES)
    assert decision.allowed


@pytest.mark.parametrize(("kind", "path"), PATHS.items())
def test_template_mutation_on(kind: str, path: tuple[str, ...]) -> None:
    obj = gpu_workload(kind)
    decision = run(obj, config=MUTATE)
    assert decision.notes == NOTES
    assert decision.mutation_kinds == ("resource-default", "env-fix", "cuda-affinity")
    mutated = apply(decision)
    c = get(mutated, *path, "spec", "containers", 0)
    assert c["resources"]["limits"] == {VCORE: "50", VMEM: "4"}
    assert c["env"] == [{"name": "FLAGS_allocator_strategy", "value": "naive_best_fit"}]
    assert node_terms(mutated, *path, "spec") == [
        {
            "matchExpressions": [
                expr("cuda-major-version", "Gt", 11),
                expr("cuda-major-version", "Lt", 13),
            ]
        }
    ]
    # The mark that tells these terms are the webhook's (SPEC §4 "The webhook's own terms are
    # its own"): the digest of exactly what was injected, in the template's annotations.
    assert get(mutated, *path, "metadata", "annotations", ANNOTATION_INJECTED_AFFINITY) == (
        digest([[expr("cuda-major-version", "Gt", 11), expr("cuda-major-version", "Lt", 13)]], [])
    )
    pointer = "/" + "/".join(path)
    assert all(
        op["path"].startswith(pointer + "/spec/")
        or op["path"].startswith(pointer + "/metadata/annotations")
        for op in decision.patch
    )
    # nothing outside the template changed
    assert {k: v for k, v in mutated.items() if k != "spec"} == {
        k: v for k, v in obj.items() if k != "spec"
    }
    assert_idempotent(decision, config=MUTATE)


def test_cronjob_patch_paths_exact() -> None:
    obj = workload("CronJob", pod(container(image="nvidia/cuda:12.0.0", limits={GPU: "1"})))
    decision = run(obj, config=MUTATE)
    assert [op["path"] for op in decision.patch] == [
        "/spec/jobTemplate/spec/template/spec/containers/0/resources/requests",
        "/spec/jobTemplate/spec/template/spec/affinity",
        "/spec/jobTemplate/spec/template/metadata/annotations",
    ]


def test_template_violations_reported_with_workload_ref() -> None:
    obj = workload("StatefulSet", pod(container(limits={VCORE: "150", VMEM: "4"})), name="db")
    decision = run(obj, config=WebhookConfig(cuda_affinity=False))
    assert decision.violations[0].message.startswith('StatefulSet ml/db, container "c": ')


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_templates_checked_on_create_and_update(operation: str) -> None:
    obj = workload("Deployment", pod(container(limits={VCORE: "150", VMEM: "4"})))
    decision = run(obj, operation=operation, config=WebhookConfig(cuda_affinity=False))
    assert decision.handled and not decision.allowed


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_other_operations_not_handled(operation: str) -> None:
    obj = workload("Deployment", pod(container(limits={VCORE: "150"})))
    assert not run(obj, operation=operation).handled


def test_long_notes_are_cut_to_120_characters() -> None:
    long_name = "x" * 150
    obj = workload(
        "Deployment", pod(container(long_name, image="nvidia/cuda:12.0.0", limits={GPU: "1"}))
    )
    decision = run(obj)
    assert decision.notes
    assert all(len(n) <= 120 for n in decision.notes)
    assert decision.notes[0].endswith("…")


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"kind": "Deployment", "spec": []}, "Deployment.spec must be an object, got list"),
        (
            {"kind": "Deployment", "spec": {"template": "x"}},
            "Deployment.spec.template must be an object, got str",
        ),
        ({"kind": "Pod", "metadata": [], "spec": {}}, "Pod.metadata must be an object, got list"),
        ({"kind": "Pod", "spec": {"containers": {}}}, "Pod.spec.containers must be a list"),
        (
            {"kind": "Pod", "spec": {"containers": ["c"]}},
            "Pod.spec.containers[0] must be an object",
        ),
        ({"kind": "Pod", "spec": {"initContainers": 1}}, "Pod.spec.initContainers must be a list"),
    ],
)
def test_malformed_shapes_raise_object_shape_error(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(ObjectShapeError) as info:
        find_pod_spec(obj["kind"], obj)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("obj", "namespace", "ref"),
    [
        ({"metadata": {"name": "a", "namespace": "ns"}}, None, "Pod ns/a"),
        ({"metadata": {"name": "a"}}, "req-ns", "Pod req-ns/a"),
        ({"metadata": {"name": "a"}}, None, "Pod a"),
        ({"metadata": {"generateName": "web-"}}, "ns", "Pod ns/web-*"),
        ({}, None, "Pod"),
        ({"metadata": "x"}, None, "Pod"),
    ],
)
def test_object_ref(obj: dict[str, Any], namespace: str | None, ref: str) -> None:
    assert object_ref("Pod", obj, namespace) == ref
