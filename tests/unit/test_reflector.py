"""The generic reflector: paging, expired continue tokens, a list failing halfway, selectors."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.fakekube import NODES, FakeKube, fast_options, node, running
from tests.helpers import eventually
from webhook.sources.reflector import Key, Reflector, Watched
from webhook.sources.store import SourceStats

WATCHED = Watched(
    kind="Node",
    path="/api/v1/nodes",
    what="Nodes",
    rbac_hint="grant it",
    metadata_only=True,
    label_selector="pool=gpu",
    field_selector="spec.unschedulable=false",
)


@pytest.fixture
async def kube() -> AsyncIterator[FakeKube]:
    async with FakeKube() as server:
        for index in range(6):
            server.put(node(f"n{index}", {"pool": "gpu", "zone": f"z{index % 2}"}))
        server.put(node("cpu", {"pool": "cpu"}))
        yield server


class Published:
    """What the reflector published, in order: {name: zone}."""

    def __init__(self) -> None:
        self.snapshots: list[dict[str, str]] = []

    def __call__(self, items: Mapping[Key, str]) -> None:
        self.snapshots.append({name: zone for (_, name), zone in items.items()})


def zone(obj: Mapping[str, Any]) -> str | None:
    labels = obj["metadata"].get("labels") or {}
    value = labels.get("zone")
    return value if isinstance(value, str) else None


def make(
    kube: FakeKube,
    tmp_path: Path,
    project: Callable[[Mapping[str, Any]], str | None],
    published: Published,
    stats: SourceStats,
) -> Reflector[str]:
    options = fast_options(kube, tmp_path, debounce_seconds=0, page_size=4)
    return Reflector(WATCHED, project, published, stats, **options)


async def test_selectors_and_pages_reach_the_server_and_one_snapshot_is_published(
    kube: FakeKube, tmp_path: Path
) -> None:
    published, stats = Published(), SourceStats(kind="Node")
    async with running(make(kube, tmp_path, zone, published, stats)):
        await eventually(lambda: kube.open_watches_of(NODES) == 1, "the watch is open")
    first, second = kube.lists(NODES)
    for request in (first, second, *kube.watches(NODES)):
        assert request.query["labelSelector"] == "pool=gpu"
        assert request.query["fieldSelector"] == "spec.unschedulable=false"
    assert "continue" not in first.query and second.query["continue"]
    # Two pages, one publish: nothing partial is ever shown.
    assert published.snapshots == [{f"n{i}": f"z{i % 2}" for i in range(6)}]
    assert (stats.syncs, stats.objects) == (1, 6)


async def test_an_expired_continue_token_restarts_the_list_from_the_first_page(
    kube: FakeKube, tmp_path: Path
) -> None:
    published, stats = Published(), SourceStats(kind="Node")
    compacted = False

    def compact_during_the_first_page(obj: Mapping[str, Any]) -> str | None:
        # etcd compacts while the webhook holds a continue token: the next page gets 410.
        nonlocal compacted
        if not compacted:
            compacted = True
            kube.touch_unrelated()
            kube.compact()
        return zone(obj)

    async with running(make(kube, tmp_path, compact_during_the_first_page, published, stats)):
        await eventually(lambda: kube.open_watches_of(NODES) == 1, "the watch is open")
    assert [bool(r.query.get("continue")) for r in kube.lists(NODES)] == [False, True, False, True]
    assert published.snapshots == [{f"n{i}": f"z{i % 2}" for i in range(6)}]
    assert stats.watch_restarts == 1
    assert stats.errors == 0


async def test_a_relist_failing_halfway_keeps_the_last_good_snapshot(
    kube: FakeKube, tmp_path: Path
) -> None:
    published, stats = Published(), SourceStats(kind="Node")
    fail_on_relist = False

    def project(obj: Mapping[str, Any]) -> str | None:
        nonlocal fail_on_relist
        if fail_on_relist:
            fail_on_relist = False
            kube.fail_requests(500)  # the next page fails
        return zone(obj)

    async with running(make(kube, tmp_path, project, published, stats)):
        await eventually(lambda: kube.open_watches_of(NODES) == 1, "the watch is open")
        kube.put(node("n0", {"pool": "gpu", "zone": "z9"}))
        await eventually(lambda: len(published.snapshots) == 2, "the change is published")
        fail_on_relist = True
        kube.compact()
        kube.gone_next_watch()
        kube.end_watches()
        await eventually(lambda: stats.errors >= 1, "the second page failed")
        assert len(published.snapshots) == 2  # nothing half-listed was published
        kube.fail_requests(None)
        await eventually(lambda: len(published.snapshots) == 3, "the relist completes")
    assert published.snapshots[-1] == published.snapshots[1]
    assert published.snapshots[1]["n0"] == "z9"
