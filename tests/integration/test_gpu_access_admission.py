"""GPU access control (SPEC §12) through the real server over TLS, under `enforce`: the patch
that voids a CUDA image's devices, the denial of a container that names devices without a
request, both on /mutate and /validate as the API server calls them; and a Pod UPDATE and the
pods/ephemeralcontainers subresource (`kubectl debug`), which reach access control too."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.helpers import RunningServer, ready_store, serve_in_thread
from tests.integration.test_admission import admission_review, apply_patch, container, pod
from webhook.admission.app import create_app
from webhook.core.config.model import load_config
from webhook.tls.certs import CertPaths, CertReloader

CUDA_IMAGE = "nvidia/cuda:12.4.1-runtime-ubuntu22.04"


@pytest.fixture(scope="module")
def enforcing(tls: CertPaths, policy_dir: Path) -> Iterator[RunningServer]:
    store = ready_store(policy_dir)
    reloader = CertReloader(tls.cert, tls.key)
    config = load_config(
        {"gpuAccess": {"mode": "enforce"}, "registryLookups": {"publicRegistries": False}}
    )
    app = create_app(config, store, cert_reloader=reloader, cert_reload_interval=0)
    with serve_in_thread(app, reloader.context, tls.ca_cert, store) as running:
        yield running


def test_a_cuda_image_without_a_gpu_request_gets_void(enforcing: RunningServer) -> None:
    obj = pod(container(CUDA_IMAGE))
    response = enforcing.review("/mutate", admission_review(obj))["response"]
    assert response["allowed"] is True
    after = apply_patch(obj, response)
    assert after["spec"]["containers"][0]["env"] == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
    ]
    assert response["warnings"] == [
        'set NVIDIA_VISIBLE_DEVICES=void in container "train": its CUDA image would give it '
        "every GPU"
    ]
    # The API server calls /validate with the mutated object: nothing left to deny.
    validated = enforcing.review("/validate", admission_review(after))["response"]
    assert validated["allowed"] is True


def test_a_container_naming_devices_without_a_request_is_denied(
    enforcing: RunningServer,
) -> None:
    obj = pod(container("busybox:1.36", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]))
    expected = (
        'Pod ml/train, container "train" sets NVIDIA_VISIBLE_DEVICES=all but requests no GPU: '
        "request nvidia.com/gpu or set it to void. GPUs reached without a request are counted "
        "by no quota, CRL or scheduler."
    )
    # The mutating call changes nothing (denials are the validating call's, as for CRLs).
    mutated = enforcing.review("/mutate", admission_review(obj))["response"]
    assert mutated["allowed"] is True and "patch" not in mutated
    response = enforcing.review("/validate", admission_review(obj))["response"]
    assert response["allowed"] is False
    assert response["status"]["message"] == expected


def test_an_exempt_namespace_passes(enforcing: RunningServer) -> None:
    obj = pod(
        container(CUDA_IMAGE, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]),
        namespace="gpu-operator",
    )
    response = enforcing.review("/mutate", admission_review(obj))["response"]
    assert response["allowed"] is True
    assert "patch" not in response


def update_review(
    obj: dict[str, Any], old: dict[str, Any], sub_resource: str = ""
) -> dict[str, Any]:
    """The AdmissionReview the API server sends for a Pod UPDATE or `kubectl debug`."""
    review = admission_review(obj, operation="UPDATE")
    review["request"]["oldObject"] = old
    if sub_resource:
        review["request"]["subResource"] = sub_resource
        review["request"]["resource"]["resource"] = "pods"
    return review


def test_a_pod_update_to_a_cuda_image_is_denied(enforcing: RunningServer) -> None:
    old = pod(container("busybox:1.36"))
    new = copy.deepcopy(old)
    new["spec"]["containers"][0]["image"] = CUDA_IMAGE
    mutated = enforcing.review("/mutate", update_review(new, old))["response"]
    assert mutated["allowed"] is True and "patch" not in mutated
    response = enforcing.review("/validate", update_review(new, old))["response"]
    assert response["allowed"] is False
    assert response["status"]["message"] == (
        'Pod ml/train, container "train": its new image may reach every GPU of the node and a '
        "pod update cannot set NVIDIA_VISIBLE_DEVICES=void (env is immutable): recreate the pod "
        "instead."
    )


def test_a_cuda_debug_container_gets_void_through_the_subresource(
    enforcing: RunningServer,
) -> None:
    old = pod(container("busybox:1.36"))
    new = copy.deepcopy(old)
    new["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": CUDA_IMAGE}]
    review = update_review(new, old, "ephemeralcontainers")
    response = enforcing.review("/mutate", review)["response"]
    after = apply_patch(new, response)
    assert after["spec"]["ephemeralContainers"][0]["env"] == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
    ]
    assert after["spec"]["containers"] == old["spec"]["containers"]
    validated = enforcing.review("/validate", update_review(after, old, "ephemeralcontainers"))
    assert validated["response"]["allowed"] is True


def test_a_privileged_debug_container_is_denied(enforcing: RunningServer) -> None:
    """`kubectl debug --profile=sysadmin`."""
    old = pod(container("busybox:1.36"))
    new = copy.deepcopy(old)
    new["spec"]["ephemeralContainers"] = [
        {"name": "debugger", "image": "busybox:1.36", "securityContext": {"privileged": True}}
    ]
    response = enforcing.review("/validate", update_review(new, old, "ephemeralcontainers"))
    assert response["response"]["allowed"] is False
    assert response["response"]["status"]["message"].startswith(
        'Pod ml/train, container "debugger" is privileged but requests no GPU'
    )
