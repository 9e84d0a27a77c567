"""The generic reflector: paging, expired continue tokens, a list failing halfway, selectors,
and what a real API server enforces (bearer token, field selectors, 429 with Retry-After)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from kubernetes.aio.client import ApiClient

from tests.fakekube import NODES, FakeKube, fast_options, node, running
from tests.helpers import eventually
from webhook.sources.reflector import Reflector
from webhook.sources.store import SourceStats
from webhook.sources.watched import Key, Watched

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


# -- what a real API server enforces -------------------------------------------------------


async def test_every_list_and_watch_carries_the_bearer_token(
    kube: FakeKube, tmp_path: Path
) -> None:
    published, stats = Published(), SourceStats(kind="Node")
    async with running(make(kube, tmp_path, zone, published, stats)):
        await eventually(lambda: kube.open_watches_of(NODES) == 1, "the watch is open")
        kube.end_watches()
        await eventually(lambda: len(kube.watches(NODES)) == 2, "the second watch is sent")
    assert len(kube.requests) == 4  # two pages, two watches
    assert {r.authorization for r in kube.requests} == {f"Bearer {kube.token}"}
    assert stats.errors == 0


async def test_a_node_cordoned_between_watches_leaves_a_field_selected_set(
    kube: FakeKube, tmp_path: Path
) -> None:
    # WATCHED selects spec.unschedulable=false: cordoning n0 while no watch is open must reach
    # the resumed watch as DELETED (the API server's replay), not be missed.
    published, stats = Published(), SourceStats(kind="Node")
    async with running(make(kube, tmp_path, zone, published, stats)):
        await eventually(lambda: kube.open_watches_of(NODES) == 1, "the watch is open")
        kube.fail_requests(503)
        await eventually(lambda: stats.errors >= 1, "the outage is seen")
        cordoned = node("n0", {"pool": "gpu", "zone": "z0"})
        cordoned["spec"]["unschedulable"] = True
        kube.put(cordoned)
        kube.fail_requests(None)
        await eventually(lambda: "n0" not in published.snapshots[-1], "n0 leaves the set")
    assert published.snapshots[-1] == {f"n{i}": f"z{i % 2}" for i in range(1, 6)}
    assert len(kube.lists(NODES)) == 2  # the two pages of the first list: no relist
    assert stats.watch_restarts == 0


async def test_a_field_the_server_cannot_select_on_is_reported(
    kube: FakeKube, tmp_path: Path
) -> None:
    published, stats = Published(), SourceStats(kind="Node")
    watched = Watched(
        kind="Node", path="/api/v1/nodes", what="Nodes", rbac_hint="", field_selector="x.y=1"
    )
    options = fast_options(kube, tmp_path, debounce_seconds=0)
    async with running(Reflector(watched, zone, published, stats, **options)):
        await eventually(lambda: stats.errors >= 2, "two failures")
    assert published.snapshots == []
    assert stats.last_error == (
        f"http://127.0.0.1:{kube.port} failed to list/watch Nodes: 400 BadRequest: "
        "field label not supported: x.y"
    )


async def test_a_throttled_page_is_retried_by_the_client_after_retry_after(
    kube: FakeKube, tmp_path: Path
) -> None:
    published, stats = Published(), SourceStats(kind="Node")
    throttled = False

    def throttle_the_next_page(obj: Mapping[str, Any]) -> str | None:
        # While the first page is parsed, the API server starts shedding load (429).
        nonlocal throttled
        if not throttled:
            throttled = True
            kube.throttle(1, retry_after=1)
        return zone(obj)

    async with running(make(kube, tmp_path, throttle_the_next_page, published, stats)):
        await eventually(lambda: kube.open_watches_of(NODES) == 1, "the watch is open")
    first, throttled_page, retried = kube.lists(NODES)
    # The same page again (client-go's rest client retries a GET after Retry-After), not the
    # list from its first page, and not before the second the server asked for.
    assert "continue" not in first.query
    assert retried.query["continue"] == throttled_page.query["continue"]
    assert retried.at - throttled_page.at >= 1.0
    assert published.snapshots == [{f"n{i}": f"z{i % 2}" for i in range(6)}]
    assert (stats.errors, stats.watch_restarts) == (0, 0)


async def test_a_429_reaching_the_reflector_waits_retry_after_and_recovers(
    kube: FakeKube, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A client without client-go-style retries (an api_factory's): the reflector sees the 429.
    async def client() -> ApiClient:
        return ApiClient(kube.client_configuration())

    published, stats = Published(), SourceStats(kind="Node")
    kube.throttle(1, retry_after=1)
    # Its own back-off is 10-50 ms: only Retry-After explains a wait of a second.
    reflector = Reflector(
        WATCHED, zone, published, stats, api_factory=client, backoff_initial=0.01, backoff_max=0.05
    )
    async with running(reflector):
        await eventually(lambda: kube.open_watches_of(NODES) == 1, "the watch is open")
    throttled, retried, *_ = kube.lists(NODES)
    assert retried.at - throttled.at >= 1.0
    assert "continue" not in retried.query
    assert published.snapshots == [{f"n{i}": f"z{i % 2}" for i in range(6)}]
    assert stats.errors == 1
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"http://127.0.0.1:{kube.port} failed to list/watch Nodes: HTTP 429 Too Many Requests: "
        "Too many requests, please try again later; retrying in 1.0s as the API server asked "
        "(Retry-After) (not ready yet)"
    ]


async def test_429s_outlasting_the_client_retries_are_backed_off_and_recovered(
    kube: FakeKube, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    published, stats = Published(), SourceStats(kind="Node")
    # Retry-After: 0 lets the client retry at once; it gives up after 10 retries (client-go's
    # default maximum), then the reflector counts one failure and backs off.
    kube.throttle(11, retry_after=0)
    async with running(make(kube, tmp_path, zone, published, stats)):
        await eventually(lambda: kube.open_watches_of(NODES) == 1, "the watch is open")
    lists = kube.lists(NODES)
    assert len(lists) == 11 + 2  # eleven refused attempts, then the two pages
    assert stats.errors == 1
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"http://127.0.0.1:{kube.port} failed to list/watch Nodes: HTTP 429 Too Many Requests; "
        "retrying in 0.0s (not ready yet)"
    ]
    assert published.snapshots == [{f"n{i}": f"z{i % 2}" for i in range(6)}]


async def test_a_proxy_in_the_environment_does_not_see_loopback_traffic(
    kube: FakeKube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The kubernetes client's aiohttp session trusts the environment: without the NO_PROXY
    # that tests/conftest.py sets for the session, this "proxy" would get the requests.
    connections = 0

    def count(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        writer.close()

    proxy = await asyncio.start_server(count, "127.0.0.1", 0)
    port = proxy.sockets[0].getsockname()[1]
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{port}")
    published, stats = Published(), SourceStats(kind="Node")
    async with proxy, running(make(kube, tmp_path, zone, published, stats)):
        await eventually(lambda: kube.open_watches_of(NODES) == 1, "the watch is open")
    assert connections == 0
    assert stats.errors == 0
