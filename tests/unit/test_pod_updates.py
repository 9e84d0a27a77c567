"""A Pod UPDATE and the pods/ephemeralcontainers subresource reach GPU access control (SPEC §12,
what reaches the webhook): judged on what the update adds, patched only where the API server
takes a patch (new ephemeral containers), denied under `enforce` where it cannot."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.helpers import GPU, apply, container, pod, standard_policies
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.evaluation.evaluate import Decision, evaluate

CUDA_IMAGE = "nvidia/cuda:12.4.1-runtime-ubuntu22.04"
WHY = "GPUs reached without a request are counted by no quota, CRL or scheduler."
PRIVILEGED = {"privileged": True}


def config(mode: str, **access: Any) -> WebhookConfig:
    return load_config(
        {"gpuAccess": {"mode": mode, **access}, "registryLookups": {"publicRegistries": False}}
    )


def update(
    new: dict[str, Any],
    old: dict[str, Any],
    mode: str,
    *,
    sub_resource: str = "",
    violations_only: bool = False,
) -> Decision:
    return evaluate(
        new,
        standard_policies(),
        config(mode),
        operation="UPDATE",
        sub_resource=sub_resource,
        old_object=old,
        violations_only=violations_only,
    )


def busybox_pod() -> dict[str, Any]:
    return pod(container("app", "busybox:1.36"))


def with_image(obj: dict[str, Any], image: str) -> dict[str, Any]:
    new = copy.deepcopy(obj)
    new["spec"]["containers"][0]["image"] = image
    return new


def debugged(obj: dict[str, Any], **ephemeral: Any) -> dict[str, Any]:
    """`kubectl debug` of the pod: one ephemeral container added."""
    new = copy.deepcopy(obj)
    debugger = {"name": "debugger", "image": "busybox:1.36", "targetContainerName": "app"}
    new["spec"]["ephemeralContainers"] = [{**debugger, **ephemeral}]
    return new


# --- Pod UPDATE: an image swapped --------------------------------------------------------------


@pytest.mark.parametrize("violations_only", [False, True])
def test_swapping_busybox_for_a_cuda_image_is_denied_under_enforce(violations_only: bool) -> None:
    old = busybox_pod()
    decision = update(with_image(old, CUDA_IMAGE), old, "enforce", violations_only=violations_only)
    assert decision.denial_message() == (
        'Pod ml/train, container "app": its new image may reach every GPU of the node and a pod '
        "update cannot set NVIDIA_VISIBLE_DEVICES=void (env is immutable): recreate the pod "
        "instead."
    )
    # No patch: ValidatePodUpdate would refuse any change of env.
    assert decision.patch == []


def test_a_cuda_image_swap_is_allowed_where_the_pod_already_has_void() -> None:
    old = pod(
        container("app", "busybox:1.36", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}])
    )
    decision = update(with_image(old, CUDA_IMAGE), old, "enforce")
    assert decision.allowed and decision.patch == []
    assert decision.warnings == () and decision.notes == ()


def test_an_image_swap_under_warn_is_allowed_without_a_patch() -> None:
    old = busybox_pod()
    decision = update(with_image(old, CUDA_IMAGE), old, "warn")
    assert decision.allowed and decision.patch == []


def test_an_update_that_changes_nothing_access_reads_is_untouched() -> None:
    """A pod admitted under warn with a finding: a controller's label never wedges on it."""
    old = pod(container("app", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]))
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"pod-template-hash": "abc"}
    decision = update(new, old, "enforce")
    assert decision.allowed and decision.reason == "nothing GPU access control reads changed"


def test_a_finding_the_pod_already_had_does_not_deny_its_update() -> None:
    old = pod(container("app", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]))
    new = copy.deepcopy(old)
    new["metadata"]["annotations"] = {"note": "x"}
    decision = update(new, old, "enforce")
    assert decision.allowed
    assert decision.reason == ""  # judged, and nothing new found


def test_a_cdi_annotation_added_by_an_update_is_denied_under_enforce() -> None:
    old = busybox_pod()
    new = copy.deepcopy(old)
    new["metadata"]["annotations"] = {"cdi.k8s.io/gpu": "nvidia.com/gpu=all"}
    decision = update(new, old, "enforce")
    assert not decision.allowed
    (violation,) = decision.violations
    assert violation.message.startswith("Pod ml/train, ")
    assert "cdi.k8s.io/gpu" in violation.message


def test_an_update_in_an_exempt_namespace_or_with_access_off_is_not_handled() -> None:
    old = pod(container("app"), namespace="gpu-operator")
    assert not update(with_image(old, CUDA_IMAGE), old, "enforce").handled
    old = busybox_pod()
    assert not update(with_image(old, CUDA_IMAGE), old, "off").handled


def test_a_gpu_pods_update_is_judged_on_access_only() -> None:
    """A GPU container keeps its device; a CRL it breaks today is not judged again."""
    old = pod(container("train", "busybox:1.36", limits={GPU: "64"}))
    decision = update(with_image(old, CUDA_IMAGE), old, "enforce")
    assert decision.allowed and decision.patch == []


def test_other_pod_subresources_are_untouched() -> None:
    old = busybox_pod()
    decision = update(with_image(old, CUDA_IMAGE), old, "enforce", sub_resource="status")
    assert not decision.handled


# --- pods/ephemeralcontainers: kubectl debug ---------------------------------------------------


@pytest.mark.parametrize("violations_only", [False, True])
def test_a_privileged_ephemeral_container_is_denied_under_enforce(violations_only: bool) -> None:
    """`kubectl debug --profile=sysadmin` makes the debug container privileged."""
    old = busybox_pod()
    decision = update(
        debugged(old, securityContext=PRIVILEGED),
        old,
        "enforce",
        sub_resource="ephemeralcontainers",
        violations_only=violations_only,
    )
    (violation,) = decision.violations
    assert violation.message.startswith('Pod ml/train, container "debugger" is privileged')
    assert violation.message.endswith(WHY)


def test_a_privileged_ephemeral_container_is_warned_about_under_warn() -> None:
    old = busybox_pod()
    decision = update(
        debugged(old, securityContext=PRIVILEGED), old, "warn", sub_resource="ephemeralcontainers"
    )
    assert decision.allowed
    assert decision.warnings == (
        'container "debugger" is privileged but requests no GPU: drop privileged or run it in a '
        "namespace exempt from gpuAccess",
    )


def test_a_cuda_ephemeral_container_gets_void_and_nothing_else_is_patched() -> None:
    """Only the new ephemeral container is patched: the API server drops every other change
    of a pods/ephemeralcontainers request (dropNonEphemeralContainerUpdates)."""
    old = pod(container("app", CUDA_IMAGE))  # admitted before enforce: no void in "app"
    new = debugged(old, image=CUDA_IMAGE)
    decision = update(new, old, "enforce", sub_resource="ephemeralcontainers")
    assert decision.allowed
    assert decision.patch == [
        {
            "op": "add",
            "path": "/spec/ephemeralContainers/0/env",
            "value": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}],
        }
    ]
    stored = apply(decision)
    assert stored["spec"]["containers"] == old["spec"]["containers"]
    assert decision.notes == (
        'set NVIDIA_VISIBLE_DEVICES=void in ephemeral container "debugger": its CUDA image '
        "would give it every GPU",
    )


def test_a_second_debug_container_leaves_the_first_alone() -> None:
    first = debugged(busybox_pod(), image=CUDA_IMAGE)  # added before enforce
    second = copy.deepcopy(first)
    second["spec"]["ephemeralContainers"].append({"name": "debugger-2", "image": CUDA_IMAGE})
    decision = update(second, first, "enforce", sub_resource="ephemeralcontainers")
    assert decision.allowed
    assert [op["path"] for op in decision.patch] == ["/spec/ephemeralContainers/1/env"]


def test_an_unchanged_ephemeral_list_is_untouched() -> None:
    old = debugged(busybox_pod(), securityContext=PRIVILEGED)
    decision = update(copy.deepcopy(old), old, "enforce", sub_resource="ephemeralcontainers")
    assert decision.allowed and decision.reason == "nothing GPU access control reads changed"
