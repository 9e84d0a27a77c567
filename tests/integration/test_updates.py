"""UPDATE rules through the real server over TLS, with real-shaped AdmissionReviews (SPEC §6)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.helpers import DATA
from tests.integration.helpers import RunningServer, crl_configmap
from tests.integration.test_admission import admission_review, apply_patch
from tests.vendor_examples import mindcluster_pod

RS_UPDATE = DATA / "admissionreviews" / "replicaset-scaled-by-deployment-controller.json"
GPU = "nvidia.com/gpu"
# The test policies allow at most 8 nvidia.com/gpu: 16 is what a tightened policy now denies.
TOO_MANY = "16"


def scale_review() -> dict[str, Any]:
    """The deployment controller scaling a ReplicaSet of a GPU Deployment from 1 to 2."""
    review: dict[str, Any] = json.loads(RS_UPDATE.read_text())
    return review


def ask_for_gpus(obj: dict[str, Any], count: str = TOO_MANY) -> None:
    container = obj["spec"]["template"]["spec"]["containers"][0]
    container["resources"] = {"limits": {GPU: count}}


def answer(server: RunningServer, endpoint: str, review: dict[str, Any]) -> dict[str, Any]:
    response: dict[str, Any] = server.review(endpoint, review)["response"]
    assert response["uid"] == review["request"]["uid"]
    return response


def assert_untouched(response: dict[str, Any]) -> None:
    assert response["allowed"] is True
    assert "patch" not in response
    assert "warnings" not in response


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
def test_deployment_controller_scaling_its_replicaset_is_allowed(
    server: RunningServer, endpoint: str
) -> None:
    review = scale_review()
    request = review["request"]
    assert request["userInfo"]["username"].endswith(":deployment-controller")
    for obj in (request["object"], request["oldObject"]):
        ask_for_gpus(obj)
    assert request["object"]["spec"]["replicas"] != request["oldObject"]["spec"]["replicas"]
    assert_untouched(answer(server, endpoint, review))


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
def test_unowned_replicaset_with_unchanged_template_is_allowed(
    server: RunningServer, endpoint: str
) -> None:
    review = scale_review()
    request = review["request"]
    for obj in (request["object"], request["oldObject"]):
        obj["metadata"].pop("ownerReferences")
        ask_for_gpus(obj)
    assert_untouched(answer(server, endpoint, review))


def test_unowned_replicaset_with_changed_template_is_denied(server: RunningServer) -> None:
    review = scale_review()
    request = review["request"]
    request["object"]["metadata"].pop("ownerReferences")
    request["oldObject"]["metadata"].pop("ownerReferences")
    ask_for_gpus(request["oldObject"], "1")
    ask_for_gpus(request["object"])
    response = answer(server, "/validate", review)
    assert response["allowed"] is False
    assert response["status"]["message"] == (
        "ReplicaSet ml/train-7c9f8d6b5c, container \"train\": limits.nvidia.com/gpu='16' "
        "is above the maximum 8 (max: 8 in ConfigMap kube-public/cf-crl-test-nvidia-gpu)."
    )


def deployment_review(
    *, old_gpus: str, new_gpus: str, sub_resource: str = "", deleting: bool = False
) -> dict[str, Any]:
    """A `kubectl label`-shaped UPDATE of a Deployment (or its status/scale subresource)."""
    old: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "train", "namespace": "ml", "uid": "d-1", "generation": 1},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "train"}},
            "template": {
                "metadata": {"labels": {"app": "train"}},
                "spec": {
                    "containers": [
                        {
                            "name": "train",
                            "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
                            "resources": {"limits": {GPU: old_gpus}, "requests": {GPU: old_gpus}},
                        }
                    ]
                },
            },
        },
    }
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"team": "ml"}
    new["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {GPU: new_gpus},
        "requests": {GPU: new_gpus},
    }
    if deleting:
        for obj in (old, new):
            obj["metadata"]["deletionTimestamp"] = "2026-11-22T10:00:00Z"
        old["metadata"]["finalizers"] = ["foregroundDeletion"]
    resource = {"group": "apps", "version": "v1", "resource": "deployments"}
    request: dict[str, Any] = {
        "uid": "0d5c2a57-2222-4b4b-8c8c-000000000002",
        "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "resource": resource,
        "requestKind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "requestResource": resource,
        "name": "train",
        "namespace": "ml",
        "operation": "UPDATE",
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": new,
        "oldObject": old,
        "dryRun": False,
        "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"},
    }
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
@pytest.mark.parametrize(
    "case",
    [
        {"old_gpus": TOO_MANY, "new_gpus": TOO_MANY},  # kubectl label
        {"old_gpus": "1", "new_gpus": TOO_MANY, "sub_resource": "status"},
        {"old_gpus": "1", "new_gpus": TOO_MANY, "sub_resource": "scale"},
        {"old_gpus": TOO_MANY, "new_gpus": "32", "deleting": True},  # GC drops a finalizer
    ],
)
def test_deployment_updates_that_must_never_be_denied(
    server: RunningServer, endpoint: str, case: dict[str, Any]
) -> None:
    assert_untouched(answer(server, endpoint, deployment_review(**case)))


def test_deployment_update_changing_the_template_is_checked(server: RunningServer) -> None:
    review = deployment_review(old_gpus="1", new_gpus=TOO_MANY)
    response = answer(server, "/validate", review)
    assert response["allowed"] is False
    assert response["status"]["message"] == (
        "Deployment ml/train, container \"train\": limits.nvidia.com/gpu='16' is above the "
        "maximum 8 (max: 8 in ConfigMap kube-public/cf-crl-test-nvidia-gpu)."
    )
    mutated = answer(server, "/mutate", review)
    assert mutated["allowed"] is True
    assert apply_patch(review["request"]["object"], mutated) == review["request"]["object"]


def test_disabling_a_broken_crl_is_allowed_with_warnings(server: RunningServer) -> None:
    data = {
        "key": "example.com/fpga",
        "dataType": "integer",
        "defaultValue": "４",  # a full-width digit: no number for Kubernetes
        "group": "fpga",
        "limits": "optional",
        "requests": "disabled",
    }
    enabled = crl_configmap("cf-crl-fpga-fpga", data)
    denied = answer(server, "/validate", admission_review(enabled))
    assert denied["allowed"] is False
    assert denied["status"]["message"] == (
        "ConfigMap kube-public/cf-crl-fpga-fpga: data.defaultValue: '４' is not a Kubernetes "
        "quantity (expected a number with an optional suffix such as 1, 100, 1k, 500m, 1e3 or "
        "2Gi)."
    )
    disabled = crl_configmap("cf-crl-fpga-fpga", data, enabled="false")
    review = admission_review(disabled, operation="UPDATE")
    review["request"]["oldObject"] = enabled
    response = answer(server, "/validate", review)
    assert response["allowed"] is True
    assert response["warnings"] == [
        "label features.alauda.io/enabled is 'false', not \"true\": this policy is inactive",
        "data.defaultValue: '４' is not a Kubernetes quantity (expected a number with an optional "
        "suffix such as 1, 100, 1k, 500m…",
    ]


def annotate_review(username: str, groups: list[str]) -> dict[str, Any]:
    """`kubectl annotate --overwrite` of MindCluster's pod's NPU annotation, as `username`."""
    old = mindcluster_pod(nodeName="npu-node-1")
    old["metadata"]["annotations"] = {"huawei.com/Ascend910": "Ascend910-0,Ascend910-1"}
    new = copy.deepcopy(old)
    new["metadata"]["annotations"]["huawei.com/Ascend910"] = "Ascend910-0,Ascend910-1,Ascend910-2"
    resource = {"group": "", "version": "v1", "resource": "pods"}
    request: dict[str, Any] = {
        "uid": "0d5c2a57-2222-4b4b-8c8c-000000000046",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": resource,
        "name": "train",
        "namespace": "ml",
        "operation": "UPDATE",
        "userInfo": {"username": username, "groups": groups},
        "object": new,
        "oldObject": old,
        "dryRun": False,
        "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"},
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def test_the_reviews_user_decides_a_device_annotation_update(server: RunningServer) -> None:
    """The AdmissionReview's userInfo reaches GPU access control (default config: warn): a
    tenant rewriting MindCluster's NPU annotation is warned, Volcano's scheduler is not."""
    tenant = answer(server, "/mutate", annotate_review("alice", ["system:authenticated"]))
    assert tenant["allowed"] is True
    assert tenant["warnings"] == [
        'container "ascend" reads huawei.com/Ascend910 as ASCEND_VISIBLE_DEVICES: '
        "only gpuAccess.annotationWriters may change it"
    ]
    volcano = answer(
        server,
        "/mutate",
        annotate_review(
            "system:serviceaccount:volcano-system:volcano-scheduler",
            ["system:serviceaccounts", "system:serviceaccounts:volcano-system"],
        ),
    )
    assert_untouched(volcano)
