"""The real server over TLS: patches, denials, warnings, echo of uid and apiVersion."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.integration.helpers import RunningServer, crl_configmap

REPO = Path(__file__).resolve().parents[2]


def admission_review(
    obj: dict[str, Any],
    *,
    operation: str = "CREATE",
    api_version: str = "admission.k8s.io/v1",
    uid: str = "7f0c3b5e-1111-4a4a-9e9e-000000000001",
    dry_run: bool = False,
    group: str = "",
) -> dict[str, Any]:
    meta = obj.get("metadata", {})
    return {
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": "v1", "kind": obj["kind"]},
            "resource": {"group": group, "version": "v1", "resource": obj["kind"].lower() + "s"},
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "operation": operation,
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": obj,
            "oldObject": None,
            "dryRun": dry_run,
        },
    }


def pod(*containers: dict[str, Any], namespace: str = "ml", **annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "train", "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": list(containers)},
    }


def container(image: str, limits: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "train", "image": image}
    if limits is not None:
        c["resources"] = {"limits": limits}
    c.update(extra)
    return c


def apply_patch(obj: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    if "patch" not in response:
        return obj
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    patched: dict[str, Any] = jsonpatch.apply_patch(obj, ops)
    return patched


# What the /dev/shm fix (on by default) adds to a pod with an accelerator container "train".
SHM_NOTE = 'mounted a 16Gi memory-backed /dev/shm in container "train" (shm fix)'


def with_shm(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` (a pod, its one container) with the /dev/shm fix's volume, mount and mark."""
    obj["spec"]["containers"][0]["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    obj["spec"]["volumes"] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}
    ]
    annotations = obj["metadata"].setdefault("annotations", {})
    annotations["features.alauda.io/injected-shm"] = "dshm"
    return obj


def affinity(major: int, minor_gt: int) -> dict[str, Any]:
    """vGPU: the driver's major equals `major` (Gt/Lt compare integers, SPEC §4)."""
    exprs = [
        ("cuda-major-version", "Gt", major - 1),
        ("cuda-major-version", "Lt", major + 1),
        ("cuda-minor-version", "Gt", minor_gt),
    ]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": key, "operator": op, "values": [str(value)]}
                            for key, op, value in exprs
                        ]
                    }
                ]
            }
        }
    }


PADDLE = "paddlepaddle/paddle:2.6.1-gpu-cuda11.8-cudnn8.6-trt8.5"


def test_mutate_defaults_env_and_affinity_for_a_paddle_vgpu_pod(server: RunningServer) -> None:
    obj = pod(container(PADDLE, {"tencent.com/vcuda-core": "50"}))
    response = server.review("/mutate", admission_review(obj))["response"]

    expected = copy.deepcopy(obj)
    train = expected["spec"]["containers"][0]
    train["resources"]["limits"]["tencent.com/vcuda-memory"] = "8"
    train["env"] = [{"name": "FLAGS_allocator_strategy", "value": "naive_best_fit"}]
    expected["spec"]["affinity"] = affinity(11, 7)
    assert apply_patch(obj, response) == with_shm(expected)
    assert response["allowed"] is True
    assert response["warnings"] == [
        'defaulted tencent.com/vcuda-memory=8 in container "train"',
        'set FLAGS_allocator_strategy=naive_best_fit in container "train" '
        "(paddle-on-gpu-manager fix)",
        f"required vGPU nodes with CUDA ≥ 11.8 (image {PADDLE})",
        SHM_NOTE,
    ]


def test_mutate_is_idempotent(server: RunningServer) -> None:
    obj = pod(container(PADDLE, {"tencent.com/vcuda-core": "50"}))
    once = apply_patch(obj, server.review("/mutate", admission_review(obj))["response"])
    again = server.review("/mutate", admission_review(once))["response"]
    assert "patch" not in again
    assert "patchType" not in again
    assert again["allowed"] is True


def test_a_reinvocation_resizes_the_webhooks_own_dev_shm(server: RunningServer) -> None:
    # reinvocationPolicy IfNeeded: another mutating webhook sets the memory limit after this
    # one's first pass, and the API server sends the object as it now is through /mutate
    # again. The webhook's own /dev/shm (marked on the pod) follows the new limit.
    obj = pod(container(PADDLE, {"tencent.com/vcuda-core": "50", "memory": "4Gi"}))
    once = apply_patch(obj, server.review("/mutate", admission_review(obj))["response"])
    assert once["metadata"]["annotations"] == {"features.alauda.io/injected-shm": "dshm"}
    assert once["spec"]["volumes"] == [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}}
    ]
    raised = copy.deepcopy(once)
    raised["spec"]["containers"][0]["resources"]["limits"]["memory"] = "24Gi"
    response = server.review("/mutate", admission_review(raised))["response"]
    assert response["warnings"] == ["resized the webhook's /dev/shm (dshm) to 12Gi (shm fix)"]
    expected = copy.deepcopy(raised)
    expected["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] = "12Gi"
    assert apply_patch(raised, response) == expected
    # The same pod as the user wrote it (their own dshm at /dev/shm, no mark): left alone.
    users = copy.deepcopy(raised)
    del users["metadata"]["annotations"]
    again = server.review("/mutate", admission_review(users))["response"]
    assert (again["allowed"], "patch" in again, "warnings" in again) == (True, False, False)


def test_non_gpu_pod_is_untouched(server: RunningServer) -> None:
    obj = pod(container("nginx:1.27", {"cpu": "1", "memory": "1Gi"}))
    for endpoint in ("/mutate", "/validate"):
        assert server.review(endpoint, admission_review(obj))["response"] == {
            "uid": "7f0c3b5e-1111-4a4a-9e9e-000000000001",
            "allowed": True,
        }


def test_validate_denies_with_every_violation(server: RunningServer) -> None:
    c = container(
        "nvidia/cuda:12.2.0-base-ubuntu22.04",
        {"tencent.com/vcuda-core": "150", "nvidia.com/gpu": "1"},
    )
    c["resources"]["requests"] = {"nvidia.com/gpu": "2"}
    response = server.review("/validate", admission_review(pod(c)))["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert response["status"]["reason"] == "Forbidden"
    header, *lines = response["status"]["message"].split("\n")
    assert header == "Pod ml/train: 2 GPU policy violations:"
    # SPEC §7: the policy's description appears once, after the list.
    bullets, about = lines[:2], lines[2:]
    assert sorted(bullets) == [
        "- Pod ml/train, container \"train\": limits.tencent.com/vcuda-core='150' is above 100 "
        "but not a multiple of 100 (values up to 100 are fractional shares; above it only whole "
        "units 100, 200, 300… are allowed) (wholeUnit: 100 in ConfigMap "
        "kube-public/cf-crl-test-vcuda-core).",
        "- Pod ml/train, container \"train\": requests.nvidia.com/gpu='2' differs from limits "
        "(1): extended resources cannot be overcommitted, set requests equal to limits or omit "
        "them (requests = limits in ConfigMap kube-public/cf-crl-test-nvidia-gpu).",
    ]
    assert about == [
        "About these policies:",
        "- kube-public/cf-crl-test-vcuda-core: vGPU compute, 100 per card.",
    ]
    # Pod warnings were shown by the mutating call; /validate does not repeat them.
    assert "warnings" not in response


def test_mutate_never_denies_for_policy_violations(server: RunningServer) -> None:
    obj = pod(container("busybox", {"nvidia.com/gpu": "9"}))
    response = server.review("/mutate", admission_review(obj))["response"]
    assert response["allowed"] is True
    denial = server.review("/validate", admission_review(obj))["response"]
    assert denial["allowed"] is False
    assert "nvidia.com/gpu='9'" in denial["status"]["message"]


@pytest.mark.parametrize("api_version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
def test_uid_and_api_version_are_echoed(
    server: RunningServer, api_version: str, endpoint: str
) -> None:
    obj = pod(container(PADDLE, {"tencent.com/vcuda-core": "50"}))
    answer = server.review(endpoint, admission_review(obj, api_version=api_version, uid="abc-42"))
    assert answer["apiVersion"] == api_version
    assert answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == "abc-42"


def test_dry_run_is_answered_like_a_real_request(server: RunningServer) -> None:
    obj = pod(container(PADDLE, {"tencent.com/vcuda-core": "150"}))
    for endpoint in ("/mutate", "/validate"):
        real = server.review(endpoint, admission_review(obj))
        dry = server.review(endpoint, admission_review(obj, dry_run=True))
        assert dry == real


def deployment(c: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ml"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [c]}},
        },
    }


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_deployment_template_is_not_patched_but_warned(
    server: RunningServer, operation: str
) -> None:
    obj = deployment(container("nvidia/cuda:12.2.0-base", {"tencent.com/vcuda-core": "50"}))
    review = admission_review(obj, operation=operation, group="apps")
    response = server.review("/mutate", review)["response"]
    assert "patch" not in response
    assert response["warnings"] == [
        'will apply to pods: defaulted tencent.com/vcuda-memory=8 in container "train"',
        "will apply to pods: required vGPU nodes with CUDA ≥ 12.2 (image nvidia/cuda:12.2.0-base)",
        f"will apply to pods: {SHM_NOTE}",
    ]


def test_deployment_template_request_is_judged_as_its_pods(server: RunningServer) -> None:
    # requests = limits: every pod made from it is admitted (the API server defaults a pod's
    # requests from its limits), so the template is too; a request that differs is denied.
    c = container("busybox", {"tencent.com/vcuda-core": "50"})
    c["resources"]["requests"] = {"tencent.com/vcuda-core": "50"}
    response = server.review("/validate", admission_review(deployment(c), group="apps"))
    assert response["response"]["allowed"] is True
    c["resources"]["requests"] = {"tencent.com/vcuda-core": "25"}
    response = server.review("/validate", admission_review(deployment(c), group="apps"))
    assert response["response"]["status"]["message"] == (
        "Deployment ml/web: 2 GPU policy violations:\n"
        "- Deployment ml/web, container \"train\": requests.tencent.com/vcuda-core='25' is not "
        "allowed (requests: disabled in ConfigMap kube-public/cf-crl-test-vcuda-core).\n"
        "- Deployment ml/web, container \"train\": requests.tencent.com/vcuda-core='25' differs "
        "from limits (50): extended resources cannot be overcommitted, set requests equal to "
        "limits or omit them (requests = limits in ConfigMap kube-public/cf-crl-test-vcuda-core)."
        "\nAbout these policies:\n"
        "- kube-public/cf-crl-test-vcuda-core: vGPU compute, 100 per card."
    )


def test_pod_in_an_exempt_namespace_is_untouched(server: RunningServer) -> None:
    obj = pod(container("busybox", {"nvidia.com/gpu": "9"}), namespace="kube-system")
    for endpoint in ("/mutate", "/validate"):
        response = server.review(endpoint, admission_review(obj))["response"]
        assert response == {"uid": "7f0c3b5e-1111-4a4a-9e9e-000000000001", "allowed": True}


@pytest.mark.parametrize(
    ("obj", "operation"),
    [
        ({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}, "CREATE"),
        (pod(container("busybox", {"nvidia.com/gpu": "9"})), "DELETE"),
        (pod(container("busybox", {"nvidia.com/gpu": "9"})), "CONNECT"),
        # Pods are admitted on CREATE only: their resources cannot change afterwards.
        (pod(container("busybox", {"nvidia.com/gpu": "9"})), "UPDATE"),
    ],
)
def test_unhandled_kinds_and_operations_are_allowed(
    server: RunningServer, obj: dict[str, Any], operation: str
) -> None:
    for endpoint in ("/mutate", "/validate"):
        response = server.review(endpoint, admission_review(obj, operation=operation))["response"]
        assert response == {"uid": "7f0c3b5e-1111-4a4a-9e9e-000000000001", "allowed": True}


def test_invalid_crl_configmap_is_denied_with_its_lint_errors(server: RunningServer) -> None:
    data = {
        "key": "example.com/fpga",
        "dataType": "float",
        "group": "fpga",
        "limits": "optional",
        "requests": "disabled",
    }
    cm = crl_configmap("cf-crl-fpga-fpga", data)
    response = server.review("/validate", admission_review(cm))["response"]
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert message.startswith("ConfigMap kube-public/cf-crl-fpga-fpga: ")
    assert "dataType" in message and "float" in message


def test_duplicate_key_crl_is_denied(server: RunningServer) -> None:
    data = {
        "key": "nvidia.com/gpu",
        "dataType": "integer",
        "group": "other",
        "limits": "optional",
        "requests": "fromLimits",
    }
    cm = crl_configmap("cf-crl-other-gpu", data)
    response = server.review("/validate", admission_review(cm))["response"]
    assert response["status"]["message"] == (
        "ConfigMap kube-public/cf-crl-other-gpu: key nvidia.com/gpu is already defined by the "
        "enabled ConfigMap kube-public/cf-crl-test-nvidia-gpu; edit that one, disable it first, "
        'or set features.alauda.io/enabled: "false" here.'
    )


def test_unlabelled_crl_name_is_allowed_with_a_warning(server: RunningServer) -> None:
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cf-crl-x-gpu", "namespace": "kube-public"},
        "data": {},
    }
    response = server.review("/validate", admission_review(cm, operation="UPDATE"))["response"]
    assert response["allowed"] is True
    assert response["warnings"] == [
        "ConfigMap kube-public/cf-crl-x-gpu has no features.alauda.io/type label: "
        "it is not a CRL and is inactive"
    ]


def test_shipped_policies_default_vcuda_memory(server: RunningServer, tmp_path: Path) -> None:
    """The ConfigMaps in configmaps/ as shipped: the default comes from their defaultValue."""
    shipped = REPO / "configmaps"
    documents = [yaml.safe_load(p.read_text()) for p in sorted(shipped.glob("*.yaml"))]
    memory = next(d for d in documents if d["data"]["key"] == "tencent.com/vcuda-memory")
    from webhook.sources.files import load_policy_dir

    store_before = server.store.current
    server.store.replace(load_policy_dir(shipped))
    try:
        obj = pod(
            container("busybox", {"tencent.com/vcuda-core": "100"}),
            **{"features.alauda.io/cuda-affinity": "false"},
        )
        response = server.review("/mutate", admission_review(obj))["response"]
    finally:
        server.store.replace(store_before)
    # The CUDA affinity is opted out: the default (and /dev/shm) are the only changes.
    expected = copy.deepcopy(obj)
    expected["spec"]["containers"][0]["resources"]["limits"] = {
        "tencent.com/vcuda-core": "100",
        "tencent.com/vcuda-memory": memory["data"]["defaultValue"],
    }
    assert apply_patch(obj, response) == with_shm(expected)
