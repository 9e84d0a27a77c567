"""GPU access control (SPEC §12) through the real server over TLS, under `enforce`: the patch
that voids every vendor's devices in a container without them, the denial of each way around
it that issue 36 names (device containers, other vendors, annotations, a Pod UPDATE and the
pods/ephemeralcontainers subresource), on /mutate and /validate as the API server calls them."""

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
WHY = "GPUs reached without a request are counted by no quota, CRL or scheduler."
VOIDS = [
    {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
    {"name": "AMD_VISIBLE_DEVICES", "value": "void"},
    {"name": "ASCEND_VISIBLE_DEVICES", "value": ""},
]


def update_review(
    obj: dict[str, Any], old: dict[str, Any], sub_resource: str = ""
) -> dict[str, Any]:
    """A Pod UPDATE review as the API server sends it: oldObject, and the subresource."""
    review = admission_review(obj, operation="UPDATE")
    review["request"]["oldObject"] = old
    if sub_resource:
        review["request"]["subResource"] = sub_resource
    return review


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
    assert after["spec"]["containers"][0]["env"] == VOIDS
    assert response["warnings"] == [
        'set NVIDIA, AMD and Ascend device variables to void in container "train": it requests '
        "no such device"
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
    # The mutating call only adds the other vendors' voids (denials are the validating call's,
    # as for CRLs).
    mutated = enforcing.review("/mutate", admission_review(obj))["response"]
    assert mutated["allowed"] is True
    assert apply_patch(obj, mutated)["spec"]["containers"][0]["env"] == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        *VOIDS[1:],
    ]
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


@pytest.mark.parametrize(
    ("obj", "text"),
    [
        (
            pod(
                container(
                    "busybox:1.36", {"nvidia.com/gpu": "1"}, securityContext={"privileged": True}
                )
            ),
            'container "train" is privileged: drop privileged: a privileged container sees every '
            "device of its node",
        ),
        (
            pod(
                container(
                    "busybox:1.36",
                    {"nvidia.com/gpu": "1"},
                    envFrom=[{"configMapRef": {"name": "all-gpus"}}],
                )
            ),
            'container "train" uses envFrom: list its variables in env: envFrom can choose its '
            "GPUs or raise its limits",
        ),
        (
            pod(
                container(
                    "busybox:1.36",
                    {"nvidia.com/gpumem": "1000"},
                    env=[{"name": "CUDA_DISABLE_CONTROL", "value": "true"}],
                )
            ),
            'container "train" sets CUDA_DISABLE_CONTROL=true: remove it: the device plugin sets '
            "the sharing limits",
        ),
        (
            pod(
                container("busybox:1.36", env=[{"name": "ASCEND_VISIBLE_DEVICES", "value": "0-7"}])
            ),
            'container "train" sets ASCEND_VISIBLE_DEVICES=0-7 but requests no NPU: request '
            "huawei.com/Ascend910 or set it empty",
        ),
        (
            pod(container("busybox:1.36", env=[{"name": "AMD_VISIBLE_DEVICES", "value": "all"}])),
            'container "train" sets AMD_VISIBLE_DEVICES=all but requests no AMD GPU: request '
            "amd.com/gpu or set it to void",
        ),
        (
            pod(container("busybox:1.36"), **{"devices.noderesource.dev/pod": "- path: /dev/kfd"}),
            "annotation devices.noderesource.dev/pod names devices: request nvidia.com/gpu or a "
            "DRA claim instead",
        ),
    ],
    ids=["privileged gpu", "gpu envFrom", "hami off", "ascend env", "amd env", "nri annotation"],
)
def test_each_route_is_denied(enforcing: RunningServer, obj: dict[str, Any], text: str) -> None:
    response = enforcing.review("/validate", admission_review(obj))["response"]
    assert response["allowed"] is False
    assert response["status"]["message"] == f"Pod ml/train, {text}. {WHY}"


def test_a_pod_update_that_swaps_in_a_cuda_image_is_denied(enforcing: RunningServer) -> None:
    old = pod(container("busybox:1.36"))
    new = copy.deepcopy(old)
    new["spec"]["containers"][0]["image"] = CUDA_IMAGE
    response = enforcing.review("/validate", update_review(new, old))["response"]
    assert response["allowed"] is False
    assert response["status"]["message"] == (
        'Pod ml/train, container "train" changes its image while its device variables are not '
        f"void: recreate the pod: env cannot change on update. {WHY}"
    )
    # /mutate never patches a Pod UPDATE (the API server forbids env changes).
    mutated = enforcing.review("/mutate", update_review(new, old))["response"]
    assert mutated["allowed"] is True and "patch" not in mutated
    # A pod created through the webhook carries its voids: the same swap is admitted.
    created = apply_patch(old, enforcing.review("/mutate", admission_review(old))["response"])
    swapped = copy.deepcopy(created)
    swapped["spec"]["containers"][0]["image"] = CUDA_IMAGE
    response = enforcing.review("/validate", update_review(swapped, created))["response"]
    assert response["allowed"] is True


def test_an_ephemeral_container_is_voided_or_denied(enforcing: RunningServer) -> None:
    created = apply_patch(
        pod(container("busybox:1.36")),
        enforcing.review("/mutate", admission_review(pod(container("busybox:1.36"))))["response"],
    )
    debug = copy.deepcopy(created)
    debug["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": CUDA_IMAGE}]
    review = update_review(debug, created, "ephemeralcontainers")
    response = enforcing.review("/mutate", review)["response"]
    assert response["allowed"] is True
    after = apply_patch(debug, response)
    assert after["spec"]["ephemeralContainers"][0]["env"] == VOIDS
    assert enforcing.review("/validate", update_review(after, created, "ephemeralcontainers"))[
        "response"
    ]["allowed"]
    # kubectl debug --profile=sysadmin: a privileged ephemeral container.
    sysadmin = copy.deepcopy(created)
    sysadmin["spec"]["ephemeralContainers"] = [
        {"name": "debugger", "image": "busybox", "securityContext": {"privileged": True}}
    ]
    review = update_review(sysadmin, created, "ephemeralcontainers")
    response = enforcing.review("/validate", review)["response"]
    assert response["allowed"] is False
    assert response["status"]["message"] == (
        'Pod ml/train, ephemeral container "debugger" is privileged but requests no GPU: drop '
        f"privileged or exempt its namespace in gpuAccess. {WHY}"
    )
