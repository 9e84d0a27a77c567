"""A Pod UPDATE and the pods/ephemeralcontainers subresource reach GPU access control (SPEC §12,
what reaches the webhook): which updates are evaluated at all (the chart sends every one), and
what a user sees for an image swap and `kubectl debug`. The rules themselves are
tests/unit/test_gpu_access_routes.py's."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.helpers import apply, container, pod, standard_policies
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.evaluation.evaluate import Decision, evaluate

CUDA_IMAGE = "nvidia/cuda:12.4.1-runtime-ubuntu22.04"
WHY = "GPUs reached without a request are counted by no quota, CRL or scheduler."
PRIVILEGED = {"privileged": True}
EPHEMERAL = "ephemeralcontainers"


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
    image_env: dict[str, dict[str, str]] | None = None,
) -> Decision:
    return evaluate(
        new,
        standard_policies(),
        config(mode),
        operation="UPDATE",
        sub_resource=sub_resource,
        old_object=old,
        violations_only=violations_only,
        image_env=image_env,
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


# --- Which updates are evaluated (the edge: every pod UPDATE reaches the access entry) ---------


def test_an_update_that_changes_nothing_access_reads_is_untouched() -> None:
    """A pod admitted under warn with a finding: a controller's label never wedges on it, and
    costs no evaluation."""
    old = pod(container("app", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]))
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"pod-template-hash": "abc"}
    new["spec"]["tolerations"] = [{"key": "k", "operator": "Exists"}]
    decision = update(new, old, "enforce")
    assert decision.allowed and decision.reason == "nothing GPU access control reads changed"
    assert decision.patch == [] and decision.warnings == ()


def test_an_image_swap_is_judged() -> None:
    old = busybox_pod()
    decision = update(with_image(old, CUDA_IMAGE), old, "enforce")
    assert decision.reason == ""
    assert decision.denial_message().startswith(
        'Pod ml/train, container "app" changes its image while its device variables are not void'
    )
    assert decision.patch == []  # ValidatePodUpdate would refuse any change of env


def test_a_finding_the_pod_already_had_does_not_deny_its_update() -> None:
    old = pod(container("app", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]))
    new = copy.deepcopy(old)
    new["metadata"]["annotations"] = {"note": "x"}
    decision = update(new, old, "enforce")
    assert decision.allowed
    assert decision.reason == ""  # judged: an annotation may be a route (CDI, NRI)


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


def test_other_pod_subresources_are_untouched() -> None:
    old = busybox_pod()
    for sub_resource in ("status", "resize", "binding"):
        decision = update(with_image(old, CUDA_IMAGE), old, "enforce", sub_resource=sub_resource)
        assert not decision.handled


# --- pods/ephemeralcontainers: kubectl debug ---------------------------------------------------


@pytest.mark.parametrize("violations_only", [False, True])
def test_a_sysadmin_debug_container_is_denied_under_enforce(violations_only: bool) -> None:
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
    assert violation.message.startswith(
        'Pod ml/train, ephemeral container "debugger" is privileged but requests no GPU'
    )
    assert violation.message.endswith(WHY)


def test_a_cuda_debug_container_gets_void_and_nothing_else_is_patched() -> None:
    """Only the new ephemeral container is patched: the API server drops every other change
    of a pods/ephemeralcontainers request (dropNonEphemeralContainerUpdates)."""
    old = pod(container("app", CUDA_IMAGE))  # admitted before enforce: no void in "app"
    decision = update(debugged(old, image=CUDA_IMAGE), old, "enforce", sub_resource=EPHEMERAL)
    assert decision.allowed
    assert [op["path"] for op in decision.patch] == ["/spec/ephemeralContainers/0/env"]
    stored = apply(decision)
    assert stored["spec"]["containers"] == old["spec"]["containers"]
    env = {e["name"]: e["value"] for e in stored["spec"]["ephemeralContainers"][0]["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_a_second_debug_container_leaves_the_first_alone() -> None:
    first = debugged(busybox_pod(), image=CUDA_IMAGE)  # added before enforce
    second = copy.deepcopy(first)
    second["spec"]["ephemeralContainers"].append({"name": "debugger-2", "image": CUDA_IMAGE})
    decision = update(second, first, "enforce", sub_resource=EPHEMERAL)
    assert decision.allowed
    assert [op["path"] for op in decision.patch] == ["/spec/ephemeralContainers/1/env"]


def test_an_unchanged_ephemeral_list_is_untouched() -> None:
    old = debugged(busybox_pod(), securityContext=PRIVILEGED)
    decision = update(copy.deepcopy(old), old, "enforce", sub_resource=EPHEMERAL)
    assert decision.allowed and decision.reason == "nothing GPU access control reads changed"
