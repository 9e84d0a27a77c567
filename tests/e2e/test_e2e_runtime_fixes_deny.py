"""The image-architecture rule under `noCompatibleNode: deny` on the real API server (issue 45
item 4): /mutate admits with a warning, /validate denies, and the API server refuses the pod with
the words `gpu-webhook review` prints for it (DENIED). Only the vendor's nodes count: an arm64 CPU
node beside an amd64 GPU node runs no arm64-only GPU image.

Needs KAPI_CONTROLLERS=1 scripts/e2e-kapi.sh (a webhook registered by URL; test_e2e_scheduling's
`serving` runs one with this module's config in place of the session's).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from webhook.core.config.model import WebhookConfig
from webhook.core.policies.policyset import PolicySet

from .conftest import Cluster, kapi_nodes, real_scheduler
from .test_e2e_admission import call, denial
from .test_e2e_scheduling import serving

pytestmark = pytest.mark.e2e

RUN = uuid.uuid4().hex[:6]
TAINT = "gaw-rfd-only"
ARM_ONLY = "registry.local/ml/arm-only-trainer:1.0"
SETTINGS: dict[str, Any] = {
    "noCompatibleNode": "deny",
    "runtimeFixes": {
        "architecture": {"images": [{"image": "arm-only", "architectures": ["arm64"]}]}
    },
}


@pytest.fixture(scope="module")
def scheduler(cluster: Cluster) -> dict[str, str]:
    return real_scheduler(cluster, "the architecture deny e2e", webhook=True)


@pytest.fixture(scope="module")
def nodes(core: Any, cluster: Cluster, scheduler: dict[str, str]) -> Iterator[dict[str, str]]:
    """An amd64 GPU node (CUDA 12.8: `serving`'s probe pod needs it, and this module denies)
    and an arm64 CPU node (no GPU label, no GPU)."""
    gpu = {"cuda-major-version": "12", "cuda-minor-version": "8", "gaw-rfd": RUN}
    specs = {"gpu": (gpu, "nvidia.com/gpu=8"), "cpu": ({"gaw-rfd": RUN}, "example.com/none=1")}
    with kapi_nodes(
        core, cluster, scheduler, specs, prefix=f"gaw-rfd-{RUN}", taint=f"{TAINT}={RUN}:NoSchedule"
    ) as made:
        # node.sh labels every node amd64 (a kubelet sets it from GOARCH).
        core.patch_node(made["cpu"], {"metadata": {"labels": {"kubernetes.io/arch": "arm64"}}})
        yield made


@pytest.fixture(scope="module")
def denying(
    nodes: dict[str, str],
    cluster: Cluster,
    core: Any,
    scheduler: dict[str, str],
    namespace: str,
    policies: PolicySet,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[WebhookConfig]:
    with serving(
        SETTINGS,
        cluster=cluster,
        core=core,
        scheduler=scheduler,
        namespace=namespace,
        policies=policies,
        tmp_path=tmp_path_factory.mktemp("runtime-fixes-deny"),
    ) as config:
        yield config


def _pod(image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"rfd-{uuid.uuid4().hex[:6]}"},
        "spec": {
            "nodeSelector": {"gaw-rfd": RUN},
            "tolerations": [
                {"key": TAINT, "operator": "Equal", "value": RUN, "effect": "NoSchedule"}
            ],
            "containers": [
                {
                    "name": "trainer",
                    "image": image,
                    "command": ["sleep", "3600"],
                    "env": [{"name": "CUDA_VERSION", "value": "12.4.1"}],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }


def test_the_architecture_deny_is_the_api_servers_answer(
    denying: WebhookConfig, core: Any, namespace: str
) -> None:
    # The full evaluation's violation (what `gpu-webhook review` prints as DENIED) is asserted
    # in tests/unit/test_runtime_fixes_vendors.py; here the API server's answer, through
    # /validate (the mutating call alone admits: it only warns).
    message = denial(core.create_namespaced_pod, namespace, _pod(ARM_ONLY), dry_run="All")
    assert message.endswith(
        f"no node of architecture arm64 for {ARM_ONLY} (NVIDIA GPU nodes are amd64)."
    )
    # An image the GPU node runs is admitted.
    created, _ = call(
        core.create_namespaced_pod, namespace, _pod("registry.local/ml/any:1"), dry_run="All"
    )
    assert created["metadata"]["name"].startswith("rfd-")
