"""The node inventory source: the reflector on Nodes, metadata-only, against the fake API server."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fakekube import NODES, FakeKube, fast_options, node, running
from tests.helpers import eventually
from webhook.core.config.model import WebhookConfig
from webhook.sources.nodes import NodeSource
from webhook.sources.store import PolicyStore
from webhook.sources.watched import METADATA_LIST_ACCEPT, METADATA_WATCH_ACCEPT

MAJOR, MINOR = "cuda-major-version", "cuda-minor-version"


def cuda(major: str, minor: str, **other: str) -> dict[str, str]:
    return {MAJOR: major, MINOR: minor, **other}


def nodes_of(store: PolicyStore) -> dict[str, dict[str, str]]:
    assert store.inventory is not None
    return {name: dict(labels) for name, labels in store.inventory.nodes.items()}


@pytest.fixture
def make_source(kube: FakeKube, store: PolicyStore, tmp_path: Path) -> Callable[..., NodeSource]:
    def make(**options: Any) -> NodeSource:
        return NodeSource(store, WebhookConfig(), **fast_options(kube, tmp_path, **options))

    return make


async def watching(kube: FakeKube, count: int = 1) -> None:
    await eventually(
        lambda: len(kube.watches(NODES)) >= count and kube.open_watches_of(NODES) == 1,
        f"node watch number {count} is open",
    )


async def test_nodes_are_listed_and_watched_metadata_only_keeping_only_cuda_labels(
    kube: FakeKube, store: PolicyStore, make_source: Callable[..., NodeSource]
) -> None:
    kube.put(node("gpu-1", cuda("12", "4", **{"nvidia.com/gpu.product": "A100"})))
    kube.put(node("cpu-1"))
    listed_at = kube.put(node("gpu-2", cuda("11", "8")))
    async with running(make_source()):
        await watching(kube)

    assert nodes_of(store) == {
        "gpu-1": {MAJOR: "12", MINOR: "4"},
        "cpu-1": {},
        "gpu-2": {MAJOR: "11", MINOR: "8"},
    }
    (listing,) = kube.lists(NODES)
    assert listing.path == "/api/v1/nodes"
    assert listing.accept == METADATA_LIST_ACCEPT
    assert listing.accept == "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
    watch = kube.watches(NODES)[0]
    assert watch.accept == "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
    assert watch.accept == METADATA_WATCH_ACCEPT
    assert watch.resource_version == listed_at
    assert watch.query["allowWatchBookmarks"] == "true"
    # The inventory is not the policies: readiness is untouched.
    assert not store.ready
    assert store.watched["Node"].objects == 3


async def test_added_relabelled_and_deleted_nodes_update_the_inventory(
    kube: FakeKube, store: PolicyStore, make_source: Callable[..., NodeSource]
) -> None:
    kube.put(node("gpu-1", cuda("12", "2")))
    async with running(make_source()):
        await watching(kube)
        first = store.inventory

        kube.put(node("gpu-2", cuda("12", "4")))
        await eventually(lambda: "gpu-2" in nodes_of(store), "the added node is in the inventory")
        assert first is not None and "gpu-2" not in first.nodes  # snapshots are never mutated

        kube.put(node("gpu-1", cuda("12", "6")))
        await eventually(
            lambda: nodes_of(store)["gpu-1"] == {MAJOR: "12", MINOR: "6"}, "the relabel is seen"
        )

        kube.delete("gpu-2", kind="Node")
        await eventually(lambda: "gpu-2" not in nodes_of(store), "the deleted node is gone")

    assert nodes_of(store) == {"gpu-1": {MAJOR: "12", MINOR: "6"}}
    assert len(kube.lists(NODES)) == 1


async def test_heartbeats_that_change_no_kept_label_publish_nothing(
    kube: FakeKube, store: PolicyStore, make_source: Callable[..., NodeSource]
) -> None:
    kube.put(node("gpu-1", cuda("12", "4")))
    # No debounce: every event that changed the projection would publish on its own.
    async with running(make_source(debounce_seconds=0)):
        await watching(kube)
        snapshot, syncs = store.inventory, store.watched["Node"].syncs
        for beat in range(1, 4):
            kube.put(
                node("gpu-1", cuda("12", "4", **{"unrelated/label": str(beat)}), heartbeat=beat)
            )
        kube.put(node("gpu-2", cuda("12", "4")))  # a real change after them, as a marker
        await eventually(lambda: "gpu-2" in nodes_of(store), "the marker change is seen")
    assert snapshot is not None and snapshot.nodes["gpu-1"] == {MAJOR: "12", MINOR: "4"}
    assert store.watched["Node"].syncs == syncs + 1


async def test_large_lists_are_paged(
    kube: FakeKube, store: PolicyStore, make_source: Callable[..., NodeSource]
) -> None:
    for index in range(25):
        kube.put(node(f"node-{index:02d}", cuda("12", str(index % 3))))
    async with running(make_source(page_size=10)):
        await watching(kube)
    pages = kube.lists(NODES)
    assert [page.query.get("limit") for page in pages] == ["10", "10", "10"]
    assert [bool(page.query.get("continue")) for page in pages] == [False, True, True]
    assert len(nodes_of(store)) == 25
    assert nodes_of(store)["node-24"] == {MAJOR: "12", MINOR: "0"}


async def test_gone_relists_and_catches_up(
    kube: FakeKube, store: PolicyStore, make_source: Callable[..., NodeSource]
) -> None:
    kube.put(node("gpu-1", cuda("12", "2")))
    async with running(make_source()):
        await watching(kube)
        kube.fail_requests(503)
        await eventually(lambda: store.watched["Node"].errors >= 1, "the outage is seen")
        kube.put(node("gpu-1", cuda("12", "8")))
        kube.compact()
        kube.fail_requests(None)
        await eventually(
            lambda: nodes_of(store)["gpu-1"] == {MAJOR: "12", MINOR: "8"}, "the relist catches up"
        )
    assert store.watched["Node"].watch_restarts == 1
    assert len(kube.lists(NODES)) == 2


async def test_an_outage_keeps_the_last_inventory(
    kube: FakeKube, store: PolicyStore, make_source: Callable[..., NodeSource]
) -> None:
    kube.put(node("gpu-1", cuda("12", "4")))
    async with running(make_source()):
        await watching(kube)
        good = store.inventory
        kube.fail_requests(0)
        await eventually(lambda: store.watched["Node"].errors >= 3, "three failures are counted")
        assert store.inventory is good
        stats = store.watched["Node"]
        assert stats.last_error is not None
        assert stats.last_error.startswith(
            f"cannot list/watch Nodes at http://127.0.0.1:{kube.port}"
        )
        kube.fail_requests(None)
        await watching(kube, len(kube.watches(NODES)))
        kube.put(node("gpu-2", cuda("12", "4")))
        await eventually(lambda: "gpu-2" in nodes_of(store), "events flow again")


async def test_nodes_not_readable_leave_no_inventory_and_say_why_once(
    kube: FakeKube,
    store: PolicyStore,
    make_source: Callable[..., NodeSource],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="webhook")
    denied = (
        'nodes is forbidden: User "system:serviceaccount:gpu:webhook" cannot list resource '
        '"nodes" in API group "" at the cluster scope'
    )
    kube.put(node("gpu-1", cuda("12", "4")))
    kube.forbid(NODES, denied)
    async with running(make_source()):
        await eventually(lambda: store.watched["Node"].errors >= 3, "the failures are counted")
        assert store.inventory is None
        message = (
            f"http://127.0.0.1:{kube.port} refused to list/watch Nodes: 403 Forbidden: {denied}; "
            "grant the webhook's service account get, list and watch on nodes (the Helm chart's "
            "ClusterRole does this unless config.nodeInventory is false); until then CUDA "
            "placement works as without a node inventory"
        )
        assert store.watched["Node"].last_error == message
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert [r.getMessage().split("; retrying")[0] for r in warnings] == [message]
        assert warnings[0].getMessage().endswith("(no node inventory yet)")

        kube.allow(NODES)
        await watching(kube)
    assert nodes_of(store) == {"gpu-1": {MAJOR: "12", MINOR: "4"}}
    assert store.watched["Node"].last_error is None


def test_equal_label_values_are_stored_once(store: PolicyStore) -> None:
    source = NodeSource(store, WebhookConfig())
    first = source._project(node("a", cuda("12", "4")))
    second = source._project(node("b", cuda("12", "4")))
    kept = {key: value for key, value in zip(source.keys, first, strict=True) if value}
    assert kept == {MAJOR: "12", MINOR: "4"}
    assert first is second
    assert set(source._project({"metadata": {"labels": "not a map"}})) == {None}


async def test_a_wrong_token_leaves_no_inventory_and_says_why(
    kube: FakeKube,
    store: PolicyStore,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Not a silent empty inventory: nothing is published, and /inventory says why.
    kube.put(node("gpu-1", cuda("12", "4")))
    options = fast_options(kube, tmp_path)
    kube.write_kubeconfig(tmp_path, token="token-of-a-deleted-service-account")
    async with running(NodeSource(store, WebhookConfig(), **options)):
        await eventually(lambda: store.watched["Node"].errors >= 2, "the failures are counted")
    assert store.inventory is None
    reason = (
        f"http://127.0.0.1:{kube.port} rejected the webhook's credentials: 401 Unauthorized: "
        "Unauthorized; check the service account token (in a cluster) or the user in the "
        "kubeconfig"
    )
    status = store.snapshot_status("Node")
    assert (status["available"], status["reason"]) == (False, reason)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings and all(w.startswith(f"{reason}; retrying in ") for w in warnings)
    assert warnings[0].endswith("(no node inventory yet)")
    assert kube.lists(NODES) and all(
        r.authorization == "Bearer token-of-a-deleted-service-account" for r in kube.requests
    )
