"""A pod's placement follows the cluster: the real app, fed by serve's own reflectors from the
fake API server, answers real AdmissionReviews while the fake server relabels and deletes Nodes
(issue 11, SPEC §4). Assertions are on the object the patch produces and the exact warnings."""

from __future__ import annotations

import argparse
import base64
import json
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.fakekube import FakeKube, crl_configmap, node
from tests.helpers import (
    PREFERRED_12_4_TERMS,
    REQUIRED_12_4_TERMS,
    eventually,
    expr,
    node_terms,
    preferred,
    preferred_terms,
    without_shm,
)
from tests.integration.test_admission import admission_review
from webhook.admission.app import create_app
from webhook.cli.serve import _policy_source
from webhook.core.config.model import WebhookConfig, load_config
from webhook.sources.store import PolicyStore

GFD_MAJOR = "nvidia.com/cuda.runtime-version.major"
GFD_MINOR = "nvidia.com/cuda.runtime-version.minor"
NOT_ENFORCED = "CUDA placement is not enforced: no node advertises its CUDA version"
TOO_OLD = "no node supports CUDA 12.4; highest available is 12.2 (1 node)"
REQUIRED = "required GPU nodes with CUDA ≥ 12.4 (env CUDA_VERSION=12.4.1), preferably < 14.0"


def gfd(major: str, minor: str) -> dict[str, str]:
    return {GFD_MAJOR: major, GFD_MINOR: minor}


def gpu_pod() -> dict[str, Any]:
    """A pod whose one GPU container needs CUDA 12.4 (from its image's CUDA_VERSION env)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "containers": [
                {
                    "name": "train",
                    "image": "registry.example/train:1",
                    "env": [{"name": "CUDA_VERSION", "value": "12.4.1"}],
                    "resources": {
                        "limits": {"nvidia.com/gpu": "1"},
                        "requests": {"nvidia.com/gpu": "1"},
                    },
                }
            ]
        },
    }


class Webhook:
    """The app as `gpu-webhook serve --kubeconfig` wires it, behind a real HTTP listener."""

    def __init__(self, client: TestClient[Any, Any], store: PolicyStore) -> None:
        self.client, self.store = client, store

    async def review(self, endpoint: str, obj: dict[str, Any]) -> dict[str, Any]:
        reply = await self.client.post(endpoint, json=admission_review(obj))
        assert reply.status == 200, await reply.text()
        response: dict[str, Any] = (await reply.json())["response"]
        return response

    async def mutated(self, obj: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """The object the API server stores after /mutate, and the warnings shown."""
        response = await self.review("/mutate", obj)
        assert response["allowed"] is True
        patch = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
        result: dict[str, Any] = jsonpatch.apply_patch(obj, patch)
        return result, list(response.get("warnings", []))

    def nodes(self) -> dict[str, dict[str, str]]:
        inventory = self.store.inventory
        return {} if inventory is None else {n: dict(v) for n, v in inventory.nodes.items()}


@pytest.fixture
async def kube() -> AsyncIterator[FakeKube]:
    async with FakeKube() as server:
        server.put(crl_configmap("cf-crl-nvidia-gpu", "nvidia.com/gpu", group="nvidia"))
        server.put(node("gpu-1", gfd("12", "4")))
        server.put(node("cpu-1"))
        yield server


@pytest.fixture
async def start(kube: FakeKube, tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    clients: list[TestClient[Any, Any]] = []

    async def started(config: WebhookConfig) -> Webhook:
        # Placement alone: without the /dev/shm fix (on by default), whose volume and warning
        # would be in every pod here (its own tests: tests/unit/test_runtime_fixes.py).
        config = without_shm(config)
        store = PolicyStore()
        args = argparse.Namespace(policies=None, kubeconfig=str(kube.write_kubeconfig(tmp_path)))
        app = create_app(config, store, policy_source=_policy_source(args, store, config))
        client: TestClient[Any, Any] = TestClient(TestServer(app))
        await client.start_server()
        clients.append(client)
        webhook = Webhook(client, store)
        await eventually(
            lambda: store.ready and webhook.nodes().keys() == {"gpu-1", "cpu-1"},
            "policies and both nodes synced",
        )
        return webhook

    yield started
    for client in clients:
        await client.close()


def gfd_terms(low_minor: int) -> list[dict[str, Any]]:
    """The terms for CUDA ≥ 12.<low_minor> on GFD's labels only: 12.x, or 13.x (an image built
    for CUDA 12 runs on a 13 driver; the webhook bounds the major version above)."""
    return [
        {
            "matchExpressions": [
                expr(GFD_MAJOR, "Gt", 11),
                expr(GFD_MAJOR, "Lt", 13),
                expr(GFD_MINOR, "Gt", low_minor - 1),
            ]
        },
        {"matchExpressions": [expr(GFD_MAJOR, "Gt", 12)]},
    ]


async def test_placement_follows_node_relabelling_and_deletion(
    kube: FakeKube, start: Callable[..., Any]
) -> None:
    webhook: Webhook = await start(WebhookConfig())
    pod = gpu_pod()

    # (a) The only labelled node carries GFD's labels: the terms use GFD's keys, not the
    # reference's cuda-major-version (the first scheme, used without an inventory).
    result, warnings = await webhook.mutated(pod)
    assert node_terms(result) == gfd_terms(4)
    assert preferred_terms(result) == preferred(13, GFD_MAJOR)
    assert warnings == [REQUIRED]
    assert result["spec"]["containers"] == pod["spec"]["containers"]

    # (b) Relabelled to 12.2: no node can run the pod. Warned (the default); the affinity
    # stays, so the pod waits for a suitable node instead of crashing on an old driver.
    kube.put(node("gpu-1", gfd("12", "2")))
    await eventually(lambda: webhook.nodes()["gpu-1"].get(GFD_MINOR) == "2", "relabel seen")
    result, warnings = await webhook.mutated(pod)
    assert warnings == [REQUIRED, TOO_OLD]
    assert node_terms(result) == gfd_terms(4)
    assert (await webhook.review("/validate", pod))["allowed"] is True

    # (c) Every labelled node deleted: placement is not enforced, nothing injected.
    kube.delete("gpu-1", kind="Node")
    await eventually(lambda: "gpu-1" not in webhook.nodes(), "deletion seen")
    result, warnings = await webhook.mutated(pod)
    assert warnings == [NOT_ENFORCED]
    assert result == pod

    # A labelled node appears again: the affinity comes back, on the new node's scheme.
    kube.put(node("gpu-2", {"cuda-major-version": "12", "cuda-minor-version": "6"}))
    await eventually(lambda: "gpu-2" in webhook.nodes(), "new node seen")
    result, warnings = await webhook.mutated(pod)
    assert warnings == [REQUIRED]
    assert node_terms(result) == REQUIRED_12_4_TERMS
    assert preferred_terms(result) == PREFERRED_12_4_TERMS


async def test_no_compatible_node_deny_denies_once_the_node_is_relabelled(
    kube: FakeKube, start: Callable[..., Any]
) -> None:
    webhook: Webhook = await start(load_config({"noCompatibleNode": "deny"}))
    pod = gpu_pod()
    assert (await webhook.review("/validate", pod))["allowed"] is True

    kube.put(node("gpu-1", gfd("12", "2")))
    await eventually(lambda: webhook.nodes()["gpu-1"].get(GFD_MINOR) == "2", "relabel seen")

    response = await webhook.review("/validate", pod)
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert response["status"]["message"] == f"Pod ml/train: {TOO_OLD}."


# --- start-up: the first Node list still running (issue 18, defect 2) ---------------------------


def claims_listed(store: PolicyStore) -> bool:
    """Every watched kind but Node listed (the DRA kinds, and Namespaces since the RDMA fix
    reads them): only the held Node list is left for readiness to wait for. Waiting for the DRA
    kinds alone raced the Namespace list, whose name /readyz then also gave."""
    return all(state.synced for kind, state in store.watched.items() if kind != "Node")


async def held_nodes_webhook(
    kube: FakeKube, tmp_path: Path, ready_timeout: float
) -> tuple[TestClient[Any, Any], PolicyStore]:
    """The app as serve wires it, while the fake API server holds the Node list (a slow first
    list): released by the caller with `kube.release("nodes")`."""
    kube.hold("nodes")
    store = PolicyStore()
    config = without_shm()  # placement alone, as in `start`
    args = argparse.Namespace(policies=None, kubeconfig=str(kube.write_kubeconfig(tmp_path)))
    source = _policy_source(args, store, config)
    app = create_app(config, store, policy_source=source, ready_timeout=ready_timeout)
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    return client, store


NOT_YET = "CUDA placement is not enforced yet: the webhook is still listing the cluster's Nodes"


async def test_nothing_is_injected_and_not_ready_until_the_first_node_list(
    kube: FakeKube, tmp_path: Path
) -> None:
    # A GFD-only cluster whose Node list is slow: before the fix the webhook answered /readyz
    # 200 and placed pods on the first scheme (cuda-major-version), which no node carries.
    client, store = await held_nodes_webhook(kube, tmp_path, ready_timeout=60)
    try:
        webhook = Webhook(client, store)
        await eventually(lambda: store.ready and claims_listed(store), "policies, claims listed")
        await eventually(lambda: bool(kube.lists("nodes")), "the Node list started")
        ready = await client.get("/readyz")
        assert ready.status == 503
        assert re.fullmatch(r"waiting for the first list of Node \(\d+ s\)\n", await ready.text())
        document = await (await client.get("/inventory")).json()
        assert document["nodeInventory"] == {
            "available": False,
            "reason": "waiting for the first list of Node objects",
            "effect": (
                "CUDA and compute-capability placement are not enforced yet: nothing is "
                "injected until the first list of Nodes arrives"
            ),
        }
        # A review that reaches it anyway (readiness is the API server's business): the pod is
        # left as it is, with a warning, instead of a guessed scheme.
        obj, warnings = await webhook.mutated(gpu_pod())
        assert obj == gpu_pod()
        assert warnings == [NOT_YET]

        kube.release("nodes")
        await eventually(lambda: webhook.nodes().keys() == {"gpu-1", "cpu-1"}, "nodes listed")
        ready = await client.get("/readyz")
        assert (ready.status, await ready.text()) == (200, "ok\n")
        obj, warnings = await webhook.mutated(gpu_pod())
        assert node_terms(obj) == gfd_terms(4)  # GFD's scheme, the one the nodes carry
        assert warnings == [REQUIRED]
    finally:
        kube.release("nodes")
        await client.close()


async def test_ready_after_the_timeout_says_placement_is_not_enforced_yet(
    kube: FakeKube, tmp_path: Path
) -> None:
    client, store = await held_nodes_webhook(kube, tmp_path, ready_timeout=0)
    try:
        await eventually(lambda: store.ready and claims_listed(store), "policies, claims listed")
        ready = await client.get("/readyz")
        assert (ready.status, await ready.text()) == (
            200,
            "ok; placement not enforced yet: Node not listed after 0 s\n",
        )
        obj, warnings = await Webhook(client, store).mutated(gpu_pod())
        assert obj == gpu_pod()
        assert warnings == [NOT_YET]
    finally:
        kube.release("nodes")
        await client.close()
