"""Updates and the controllers that make them (SPEC §6): what is allowed untouched, and why."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.helpers import GPU, VCORE, apply, container, crl, pod, policies, workload
from webhook.core.config import WebhookConfig, load_config
from webhook.core.evaluate import Decision, evaluate
from webhook.core.policyset import PolicySet

# The policy as tightened after the workloads were created: at most 4 GPUs.
TIGHT: PolicySet = policies(
    crl(GPU, "nvidia", name="cf-crl-nvidia-gpu", requests="fromLimits", max="4"),
    crl(VCORE, "gpu-manager", defaultValue="10", wholeUnit="100"),
)
DEFAULT = WebhookConfig()
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


def test_pod_update_is_not_evaluated() -> None:
    old = pod(container(limits={GPU: "8"}))
    decision = review(labelled(old), old=old)
    assert decision.allowed and not decision.handled
