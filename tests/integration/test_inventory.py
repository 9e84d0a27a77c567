"""/inventory, /policies and /metrics of the real app, fed by serve's cluster reflectors from the
fake API server (same event loop, plain HTTP through aiohttp's test client)."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.fakekube import (
    CLAIM_TEMPLATES,
    CLAIMS,
    DEVICE_CLASSES,
    NODES,
    FakeKube,
    claim_template,
    crl_configmap,
    node,
    resource_claim,
)
from tests.helpers import eventually
from tests.integration.helpers import metric_samples
from webhook.admission.app import create_app
from webhook.cli.serve import _policy_source
from webhook.core.config.model import WebhookConfig, load_config
from webhook.sources.store import PolicyStore

MAJOR, MINOR = "cuda-major-version", "cuda-minor-version"
Get = Callable[[str], Coroutine[Any, Any, Any]]


@pytest.fixture
async def kube() -> AsyncIterator[FakeKube]:
    async with FakeKube() as server:
        server.put(crl_configmap("cf-crl-nvidia-gpu", "nvidia.com/gpu", group="nvidia"))
        server.put(node("gpu-1", {MAJOR: "12", MINOR: "4"}))
        server.put(node("gpu-2", {MAJOR: "12", MINOR: "4"}))
        server.put(node("cpu-1"))
        server.put(claim_template("ml", "one-gpu", "gpu.nvidia.com"))
        server.put(resource_claim("ml", "shared-gpu", "gpu.nvidia.com"))
        server.put(resource_claim("ml", "nic", "rdma.example.com"))
        yield server


async def started(
    kube: FakeKube, tmp_path: Path, config: WebhookConfig | None = None
) -> tuple[TestClient[Any, Any], PolicyStore]:
    config = config or WebhookConfig()
    store = PolicyStore()
    args = argparse.Namespace(policies=None, kubeconfig=str(kube.write_kubeconfig(tmp_path)))
    app = create_app(config, store, policy_source=_policy_source(args, store, config))
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    return client, store


@pytest.fixture
async def get(kube: FakeKube, tmp_path: Path) -> AsyncIterator[Get]:
    client, _ = await started(kube, tmp_path)

    async def fetch(path: str) -> Any:
        response = await client.get(path)
        assert response.status == 200
        if path == "/metrics":
            return metric_samples(await response.text())
        return await response.json()

    try:
        yield fetch
    finally:
        await client.close()


async def inventory_when(get: Get, condition: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """GET /inventory until `condition` holds for it; the deadline only bounds a failing test
    (generous: a loaded 2-core machine must not flake it)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    document: dict[str, Any] = await get("/inventory")
    while not condition(document):
        if loop.time() > deadline:
            raise AssertionError(f"condition never held: {document}")
        await asyncio.sleep(0.02)
        document = await get("/inventory")
    return document


async def test_inventory_shows_nodes_templates_and_the_sync_state_of_each_kind(
    kube: FakeKube, get: Get
) -> None:
    kinds = (
        "ConfigMap",
        "DeviceClass",
        "Namespace",
        "Node",
        "ResourceClaim",
        "ResourceClaimTemplate",
        "ResourceSlice",
    )
    document = await inventory_when(
        get, lambda d: all(d["sources"].get(k, {}).get("synced") for k in kinds)
    )
    assert document["nodeInventory"]["available"] is True
    assert document["nodeInventory"]["nodes"] == 3
    assert document["claimTemplates"] == {"available": True, "templates": 1, "claims": 2}
    assert document["resourceClaims"] == {"available": True}
    # The node inventory's DRA half: listed (no slice here), in force.
    assert document["resourceSlices"] == {"available": True}
    sources = document["sources"]
    assert sorted(sources) == list(kinds)
    assert sources["ResourceClaim"]["objects"] == 2
    assert sources["Node"]["objects"] == 3
    assert sources["Node"]["lastError"] is None
    assert sources["ConfigMap"]["objects"] == 1
    assert sources["ResourceClaimTemplate"]["errors"] == 0
    # Nodes are asked for metadata only; the templates whole (their spec holds the classes).
    assert {r.accept for r in kube.requests if r.resource == NODES} == {
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
    }

    kube.delete("cpu-1", kind="Node")
    await inventory_when(get, lambda d: d["nodeInventory"]["nodes"] == 2)

    policies = await get("/policies")
    assert policies["ready"] is True
    assert policies["nodeInventory"] == {"available": True}
    assert sorted(policies["sources"]) == list(kinds)

    samples = await get("/metrics")
    assert samples['gpu_webhook_reflector_synced{kind="Node"}'] == 1
    assert samples['gpu_webhook_reflector_objects{kind="Node"}'] == 2
    assert samples['gpu_webhook_reflector_objects{kind="ResourceClaimTemplate"}'] == 1
    assert samples['gpu_webhook_reflector_errors_total{kind="ConfigMap"}'] == 0
    assert samples['gpu_webhook_reflector_restarts_total{kind="Node"}'] == 0
    assert samples['gpu_webhook_reflector_seconds_since_sync{kind="Node"}'] >= 0


async def test_unreadable_nodes_and_missing_dra_api_are_explained_and_do_not_block_readiness(
    kube: FakeKube, tmp_path: Path
) -> None:
    kube.forbid(NODES, "nodes is forbidden")
    kube.not_served(CLAIM_TEMPLATES)
    kube.not_served(CLAIMS)  # a cluster without resource.k8s.io/v1 serves none of them
    kube.not_served(DEVICE_CLASSES)
    client, store = await started(kube, tmp_path)
    try:
        await eventually(
            lambda: (
                store.ready
                and store.watched["Node"].errors > 0
                and store.watched["ResourceClaimTemplate"].errors > 0
                and store.watched["ResourceClaim"].errors > 0
                and store.watched["DeviceClass"].errors > 0
                # The other kinds' first lists (Namespaces...) may still be on their way on a
                # loaded machine; the four failed kinds must not be among the pending ones.
                and not store.pending_kinds()
            ),
            "policies synced, every optional kind failed, and no kind is waited for",
        )
        assert (await client.get("/readyz")).status == 200
        document = await (await client.get("/inventory")).json()
        host = f"http://127.0.0.1:{kube.port}"
        assert document["nodeInventory"] == {
            "available": False,
            "reason": (
                f"{host} refused to list/watch Nodes: 403 Forbidden: nodes is forbidden; grant "
                "the webhook's service account get, list and watch on nodes (the Helm chart's "
                "ClusterRole does this unless config.nodeInventory is false); until then CUDA "
                "placement works as without a node inventory"
            ),
            "effect": "CUDA placement uses the first label scheme, as without a node inventory",
        }
        assert document["claimTemplates"]["available"] is False
        assert document["claimTemplates"]["reason"].startswith(
            f"{host} does not serve ResourceClaimTemplates (resource.k8s.io/v1): 404 NotFound"
        )
        assert document["resourceClaims"]["available"] is False
        assert document["resourceClaims"]["effect"] == (
            "pods naming a ResourceClaim are evaluated as if it requested no GPU"
        )
        policies = await (await client.get("/policies")).json()
        assert policies["nodeInventory"] == document["nodeInventory"]
        assert store.inventory is None and store.claims is None
    finally:
        await client.close()


async def test_switched_off_kinds_are_not_watched(kube: FakeKube, tmp_path: Path) -> None:
    config = load_config(
        {
            "nodeInventory": False,
            "claimTemplateCache": False,
            "runtimeFixes": {"namespaceLevels": False},
        }
    )
    client, store = await started(kube, tmp_path, config)
    try:
        await eventually(lambda: store.ready, "policies synced")
        document = await (await client.get("/inventory")).json()
    finally:
        await client.close()
    assert kube.lists(NODES) == [] and kube.lists(CLAIM_TEMPLATES) == []
    assert kube.lists(CLAIMS) == []
    assert list(document["sources"]) == ["ConfigMap"]
    assert document["nodeInventory"]["reason"] == (
        "Node objects are not watched (a local run with --policies, or switched off in the "
        "webhook config)"
    )


async def test_inventory_counts_amd_and_ascend_nodes_by_driver_release(
    kube: FakeKube, get: Get
) -> None:
    """The reflector keeps the ROCm and CANN gates' labels (SPEC §13), and /inventory says
    what the gates read from them, as `review --nodes` does."""
    kube.put(
        node("mi300", {"amd.com/gpu.driver-version": "6.14.14", "amd.com/gpu.device-id": "74a1"})
    )
    kube.put(node("mi210", {"amd.com/gpu.driver-version": ""}))
    kube.put(node("a2", {"huawei.com/driver.version": "25.5.1"}))
    document = await inventory_when(get, lambda d: d["nodeInventory"].get("nodes") == 6)
    assert document["nodeInventory"]["accelerators"] == [
        "2 AMD GPU nodes (amdgpu driver 30.10: 1, unknown: 1)",
        "1 Ascend node (Ascend HDK 25.5.1: 1)",
    ]
