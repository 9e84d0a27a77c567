"""What an AMD or Ascend container's image says (SPEC §13): the runtime version and the devices
its code is built for, from env, the admin's table, the tag and the shipped knowledge."""

from __future__ import annotations

import pytest

from webhook.core.config.model import load_config
from webhook.core.placement.vendors import (
    ImageFinding,
    Vendor,
    container_finding,
    shipped_vendors,
)

ROCM, CANN = shipped_vendors()
CONFIG = load_config(
    {
        "accelerators": {
            "rocm": {
                "imageTable": [
                    {"image": "registry.corp/llm/*", "version": "6.3", "devices": ["gfx90a"]}
                ]
            }
        }
    }
)


def finding(vendor: Vendor, image: str, **env: str) -> ImageFinding | None:
    gate = CONFIG.accelerators.rocm if vendor is ROCM else CONFIG.accelerators.cann
    container = {"image": image, "env": [{"name": k, "value": v} for k, v in env.items()]}
    return container_finding(vendor, container, env, gate)


@pytest.mark.parametrize(
    ("image", "version", "devices"),
    [
        ("rocm/pytorch:rocm6.4_ubuntu24.04_py3.12_pytorch_release_2.6.0", "6.4", ()),
        ("docker.io/rocm/vllm:rocm7.0.0_vllm_0.10.2_20251006", "7.0.0", ()),
        ("rocm/dev-ubuntu-24.04:6.4.1", "6.4.1", ()),
        ("rocm/dev-ubuntu-22.04:6.3-complete", "6.3", ()),
        ("rocm/vllm:rocm7.0.0_gfx94X", "7.0.0", ("gfx94X",)),
        ("rocm/pytorch:rocm7.0_ubuntu24.04_py3.12_pytorch_2.8.0-gfx950", "7.0", ("gfx950",)),
        ("registry.corp/llm/server:v2", "6.3", ("gfx90a",)),  # the admin's table
    ],
)
def test_rocm_images(image: str, version: str, devices: tuple[str, ...]) -> None:
    found = finding(ROCM, image)
    assert found is not None
    assert (found.version, found.devices) == (version, devices)


def test_rocm_env_wins_over_the_reference() -> None:
    found = finding(
        ROCM,
        "rocm/vllm:rocm7.0.0_gfx94X",
        ROCM_VERSION="6.4.1",
        PYTORCH_ROCM_ARCH="gfx90a;gfx942:xnack-",
    )
    assert found == ImageFinding("6.4.1", ("gfx90a", "gfx942"), "env ROCM_VERSION=6.4.1")


@pytest.mark.parametrize(
    "image", ["rocm/pytorch:latest", "busybox:1.36", "nvidia/cuda:12.4.1-base"]
)
def test_images_that_say_no_rocm_version(image: str) -> None:
    assert finding(ROCM, image) is None


@pytest.mark.parametrize(
    ("image", "version", "devices"),
    [
        ("ascendai/cann:8.3.rc1-910b-ubuntu22.04-py3.11", "8.3.rc1", ("910b",)),
        ("quay.io/ascend/cann:8.5.0-a3-openeuler24.03-py3.11", "8.5.0", ("a3",)),
        (
            "swr.cn-south-1.myhuaweicloud.com/ascendhub/cann:8.3.rc1-310p-ubuntu22.04-py3.11",
            "8.3.rc1",
            ("310p",),
        ),
        ("quay.io/ascend/vllm-ascend:v0.11.0rc1", "8.3.rc1", ("910b",)),
        ("quay.io/ascend/vllm-ascend:v0.11.0rc1-a3", "8.3.rc1", ("a3",)),
        ("quay.io/ascend/vllm-ascend:v0.9.1-310p", "8.2.rc1", ("310p",)),
    ],
)
def test_cann_images(image: str, version: str, devices: tuple[str, ...]) -> None:
    found = finding(CANN, image)
    assert found is not None
    assert (found.version, found.devices) == (version, devices)


def test_an_unlisted_vllm_ascend_release_is_unknown() -> None:
    assert finding(CANN, "quay.io/ascend/vllm-ascend:v0.99.0") is None
