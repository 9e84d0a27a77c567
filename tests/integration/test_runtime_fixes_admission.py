"""The architecture rule under `noCompatibleNode: deny` through the app (issue 45 item 4): /mutate
admits with the warning, /validate denies with the same words (the CLI says DENIED: the full
evaluation's violation, tests/unit/test_runtime_fixes_vendors.py). The node inventory is read
from a fake API server, as `gpu-webhook serve --kubeconfig` reads it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.fakekube import FakeKube, node
from tests.integration.test_placement_inventory import (  # noqa: F401 (fixtures)
    Webhook,
    gfd,
    gpu_pod,
    kube,
    start,
)
from webhook.core.config.model import load_config

ARM_ONLY = "registry.local/ml/arm-trainer:1.0"
NO_ARM_GPU = f"no node of architecture arm64 for {ARM_ONLY} (NVIDIA GPU nodes are amd64)"


def arm_pod() -> dict[str, Any]:
    pod = gpu_pod()
    pod["spec"]["containers"][0]["image"] = ARM_ONLY
    return pod


async def test_mutate_and_validate_agree_on_the_architecture_deny(
    kube: FakeKube,  # noqa: F811
    start: Callable[..., Any],  # noqa: F811
) -> None:
    # An amd64 GPU node beside an arm64 CPU node: no GPU node runs the arm64-only image.
    kube.put(node("gpu-1", {**gfd("12", "4"), "kubernetes.io/arch": "amd64"}))
    kube.put(node("cpu-1", {"kubernetes.io/arch": "arm64"}))
    images = {"images": [{"image": "arm-trainer", "architectures": ["arm64"]}]}
    warn = load_config({"cudaAffinity": False, "runtimeFixes": {"architecture": images}})
    webhook: Webhook = await start(warn)
    result, warnings = await webhook.mutated(arm_pod())
    assert warnings == [NO_ARM_GPU]
    assert "affinity" not in result["spec"]
    assert (await webhook.review("/validate", arm_pod()))["allowed"] is True

    deny = load_config(
        {
            "cudaAffinity": False,
            "noCompatibleNode": "deny",
            "runtimeFixes": {"architecture": images},
        }
    )
    webhook = await start(deny)
    response = await webhook.review("/validate", arm_pod())
    assert response["allowed"] is False
    assert response["status"]["message"].endswith(f"Pod ml/train: {NO_ARM_GPU}.")
