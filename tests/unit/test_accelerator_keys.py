"""Extended resources of other accelerator vendors (SPEC §13): every name a device family knows
is neither an unknown GPU nor a CUDA container, also under the shipped CRL ConfigMaps; a name
that looks like an accelerator no family knows gets one warning."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import CONFIGMAPS, apply, container, node_terms, pod, run
from webhook.core.families import FAMILIES
from webhook.core.placement.inventory import NodeInventory
from webhook.sources.files import load_policy_dir

SHIPPED = load_policy_dir(CONFIGMAPS)
INVENTORY = NodeInventory.build({"gpu": {"cuda-major-version": "12", "cuda-minor-version": "4"}})


def _names() -> list[str]:
    """One resource name per name or pattern of every family that is not NVIDIA's."""
    found = []
    for family in FAMILIES:
        if family.placement == "cuda":
            continue
        for resource in family.resources:
            found.append(resource[:-1] + "x" if resource.endswith("*") else resource)
    return found


def accelerator_pod(resource: str, value: str = "1", image: str = "busybox:1.36") -> Any:
    return pod(container(image=image, limits={resource: value}))


@pytest.mark.parametrize("resource", _names())
def test_no_family_resource_is_an_unknown_gpu_or_a_cuda_container(resource: str) -> None:
    decision = run(accelerator_pod(resource), SHIPPED, inventory=INVENTORY)
    # Neither unknown nor CUDA: what is said (if anything) is the vendor's own gate's.
    assert not [
        w for w in decision.warnings if "CUDA" in w or "not a known" in w or "no device family" in w
    ], decision.warnings
    # Not a CUDA container: no CUDA affinity (the inventory has no node of another vendor).
    assert node_terms(apply(decision)) is None


def test_a_rocm_pod_under_the_shipped_amd_crls_gets_their_rules_and_no_cuda_placement() -> None:
    obj = pod(
        container(
            image="rocm/pytorch:rocm6.4_ubuntu24.04_py3.12_pytorch_release_2.6.0",
            limits={"amd.com/gpu": "1", "amd.com/gpucores": "50"},
        )
    )
    decision = run(obj, SHIPPED, inventory=INVENTORY)
    assert decision.allowed
    assert not [
        w for w in decision.warnings if "CUDA" in w or "not a known" in w or "no device family" in w
    ], decision.warnings
    resources = apply(decision)["spec"]["containers"][0]["resources"]
    # The CRLs' fromLimits rule ran; CUDA placement did not (no CUDA version, no warning).
    assert resources["requests"] == {"amd.com/gpu": "1", "amd.com/gpucores": "50"}
    assert node_terms(apply(decision)) is None
    over = run(pod(container(limits={"amd.com/gpu": "1", "amd.com/gpucores": "150"})), SHIPPED)
    assert not over.allowed
    assert "ConfigMap kube-public/cf-crl-hami-amd-gpucores" in over.violations[0].message


def test_an_ascend_vnpu_pod_is_limited_to_one_vnpu_and_gets_no_cuda_placement() -> None:
    one = run(accelerator_pod("huawei.com/Ascend910-2c"), SHIPPED, inventory=INVENTORY)
    assert one.allowed
    assert not [
        w for w in one.warnings if "CUDA" in w or "not a known" in w or "no device family" in w
    ], one.warnings
    assert node_terms(apply(one)) is None
    two = run(accelerator_pod("huawei.com/Ascend310P-2c.1cpu", "2"), SHIPPED)
    assert not two.allowed
    assert (
        "limits.huawei.com/Ascend310P-2c.1cpu='2' is above the maximum 1"
        in two.violations[0].message
    )


@pytest.mark.parametrize(
    ("resource", "warning"),
    [
        (
            "example.com/npu",
            "example.com/npu is an accelerator resource no device family knows: it is not checked",
        ),
        (
            "vendor.example/xpu-slice",
            "vendor.example/xpu-slice is an accelerator resource no device family knows: "
            "it is not checked",
        ),
        (
            "example.com/gpu-foo",
            "resource example.com/gpu-foo is not a known GPU resource: add it to "
            "gpuResourceNames to check it",
        ),
    ],
)
def test_an_accelerator_name_no_family_knows_gets_one_warning(resource: str, warning: str) -> None:
    decision = run(pod(container(limits={resource: "1"}), container("d", limits={resource: "2"})))
    assert decision.warnings == (warning,)


@pytest.mark.parametrize(
    "resource", ["example.com/fpga-slot", "example.com/output-slots", "example.com/multipurpose"]
)
def test_names_that_say_no_accelerator_get_no_warning(resource: str) -> None:
    # The short words count at the start of a word only: "output" holds no TPU.
    decision = run(accelerator_pod(resource))
    assert decision.warnings == ()
