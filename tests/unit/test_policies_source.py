"""The cluster policy source: the real kubernetes client against a fake API server."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes.aio.client import ApiClient

from tests.fakekube import FakeKube, crl_configmap, fast_options, running
from tests.helpers import eventually
from webhook.sources.policies import ConfigMapWatcher
from webhook.sources.reflector import Backoff
from webhook.sources.store import PolicyStore

CORE = "tencent.com/vcuda-core"
MEMORY = "tencent.com/vcuda-memory"
GPU = "nvidia.com/gpu"
SELECTOR = "features.alauda.io/type=CustomResourceLimitation"


def core_cm(**data: str) -> dict[str, Any]:
    return crl_configmap("cf-crl-gpu-manager-vcuda-core", CORE, **data)


def memory_cm(**data: str) -> dict[str, Any]:
    return crl_configmap("cf-crl-gpu-manager-vcuda-memory", MEMORY, **data)


def gpu_cm(name: str = "cf-crl-nvidia-gpu", **data: str) -> dict[str, Any]:
    return crl_configmap(name, GPU, group="nvidia", **data)


@pytest.fixture
def make_watcher(
    kube: FakeKube, store: PolicyStore, tmp_path: Path
) -> Callable[..., ConfigMapWatcher]:
    def make(**options: Any) -> ConfigMapWatcher:
        return ConfigMapWatcher(store, **fast_options(kube, tmp_path, **options))

    return make


async def watching(kube: FakeKube, count: int = 1) -> None:
    """Wait until the watcher has opened its `count`-th watch and the server holds it open."""
    await eventually(
        lambda: len(kube.watches()) >= count and kube.open_watches == 1,
        f"watch number {count} is open",
    )


# -- list, then watch ----------------------------------------------------------------------


async def test_initial_list_loads_policies_and_makes_store_ready(
    kube: FakeKube, store: PolicyStore, make_watcher: Callable[..., ConfigMapWatcher]
) -> None:
    kube.put(core_cm())
    kube.put(memory_cm())
    listed_at = kube.put(gpu_cm())
    assert not store.ready

    async with running(make_watcher()):
        await watching(kube)

    assert store.ready
    assert sorted(store.current.by_key) == [GPU, CORE, MEMORY]
    assert [lim.key for lim in store.current.by_group["gpu-manager"]] == [CORE, MEMORY]
    assert store.current.by_key[CORE].configmap == "kube-public/cf-crl-gpu-manager-vcuda-core"
    (listing,) = kube.lists()
    assert listing.path == "/api/v1/namespaces/kube-public/configmaps"
    assert listing.query["labelSelector"] == SELECTOR
    first_watch = kube.watches()[0]
    assert first_watch.resource_version == listed_at
    assert first_watch.query["labelSelector"] == SELECTOR
    assert first_watch.query["allowWatchBookmarks"] == "true"


async def test_empty_namespace_is_a_successful_sync(
    kube: FakeKube, store: PolicyStore, make_watcher: Callable[..., ConfigMapWatcher]
) -> None:
    async with running(make_watcher()):
        await watching(kube)

    assert store.ready
    assert store.current.limitations == ()
    assert store.stats.errors == 0


async def test_added_modified_deleted_events_update_the_snapshot(
    kube: FakeKube, store: PolicyStore, make_watcher: Callable[..., ConfigMapWatcher]
) -> None:
    kube.put(core_cm())
    async with running(make_watcher()):
        await watching(kube)

        kube.put(memory_cm(defaultValue="1"))
        await eventually(lambda: MEMORY in store.current.by_key, "the added policy is loaded")
        assert store.current.by_key[MEMORY].default == 1

        kube.put(memory_cm(defaultValue="256"))
        await eventually(
            lambda: store.current.by_key[MEMORY].default == 256, "the modified default is loaded"
        )

        kube.delete("cf-crl-gpu-manager-vcuda-memory")
        await eventually(lambda: MEMORY not in store.current.by_key, "the policy is removed")
        assert list(store.current.by_key) == [CORE]

    # One list at the start; every change arrived through the single watch.
    assert len(kube.lists()) == 1
    assert len(kube.watches()) == 1


async def test_configmap_losing_its_label_leaves_the_snapshot(
    kube: FakeKube, store: PolicyStore, make_watcher: Callable[..., ConfigMapWatcher]
) -> None:
    kube.put(core_cm())
    kube.put(memory_cm())
    async with running(make_watcher()):
        await watching(kube)
        unlabelled = memory_cm()
        del unlabelled["metadata"]["labels"]["features.alauda.io/type"]
        kube.put(unlabelled)
        await eventually(lambda: MEMORY not in store.current.by_key, "the policy is removed")
    assert list(store.current.by_key) == [CORE]


async def test_configmap_losing_its_label_between_watches_leaves_the_snapshot(
    kube: FakeKube, store: PolicyStore, make_watcher: Callable[..., ConfigMapWatcher]
) -> None:
    # The label is removed while the webhook has no watch open (an API server outage): the
    # resumed watch replays the change as DELETED, as the API server's watch cache does for an
    # object that left the selector, so the policy goes without a new list.
    kube.put(core_cm())
    kube.put(memory_cm())
    async with running(make_watcher()):
        await watching(kube)
        kube.fail_requests(503)
        await eventually(lambda: store.stats.errors >= 1, "the outage is seen")
        unlabelled = memory_cm()
        del unlabelled["metadata"]["labels"]["features.alauda.io/type"]
        kube.put(unlabelled)
        kube.fail_requests(None)
        await eventually(lambda: MEMORY not in store.current.by_key, "the policy is removed")
    assert list(store.current.by_key) == [CORE]
    assert store.current.by_key[CORE].configmap == "kube-public/cf-crl-gpu-manager-vcuda-core"
    assert len(kube.lists()) == 1
    assert store.stats.watch_restarts == 0


async def test_disabled_configmap_is_inactive(
    kube: FakeKube, store: PolicyStore, make_watcher: Callable[..., ConfigMapWatcher]
) -> None:
    kube.put(core_cm())
    async with running(make_watcher()):
        await watching(kube)
        kube.put(crl_configmap("cf-crl-gpu-manager-vcuda-core", CORE, enabled="false"))
        await eventually(lambda: CORE not in store.current.by_key, "the policy is disabled")
    assert store.current.inactive == ("kube-public/cf-crl-gpu-manager-vcuda-core",)


async def test_invalid_configmap_is_skipped_and_reported(
    kube: FakeKube,
    store: PolicyStore,
    make_watcher: Callable[..., ConfigMapWatcher],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="webhook")
    kube.put(core_cm())
    async with running(make_watcher()):
        await watching(kube)
        kube.put(memory_cm(dataType="float"))
        await eventually(lambda: bool(store.current.invalid), "the invalid ConfigMap is recorded")

    assert list(store.current.by_key) == [CORE]
    (invalid,) = store.current.invalid
    assert invalid.name == "kube-public/cf-crl-gpu-manager-vcuda-memory"
    assert invalid.errors == ("data.dataType 'float' is not supported (supported: \"integer\")",)
    assert store.current.to_json()["invalid"] == [
        {"configMap": invalid.name, "errors": list(invalid.errors)}
    ]
    assert (
        "Skipping invalid CRL ConfigMap kube-public/cf-crl-gpu-manager-vcuda-memory: "
        "data.dataType 'float' is not supported (supported: \"integer\")"
    ) in caplog.messages
    assert (
        "Loaded 1 CRL policies from kube-public: "
        "kube-public/cf-crl-gpu-manager-vcuda-core (tencent.com/vcuda-core)"
    ) in caplog.messages


async def test_duplicate_key_is_a_conflict_with_the_oldest_as_winner(
    kube: FakeKube,
    store: PolicyStore,
    make_watcher: Callable[..., ConfigMapWatcher],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="webhook")
    # The later-created ConfigMap sorts first by name: the winner must still be the oldest.
    kube.put(gpu_cm("cf-crl-zz-nvidia-gpu", defaultValue="1"))
    kube.put(gpu_cm("cf-crl-aa-nvidia-gpu", defaultValue="2"))
    async with running(make_watcher()):
        await watching(kube)
        (conflict,) = store.current.conflicts
        assert conflict.key == GPU
        assert conflict.winner == "kube-public/cf-crl-zz-nvidia-gpu"
        assert conflict.losers == ("kube-public/cf-crl-aa-nvidia-gpu",)
        assert store.current.by_key[GPU].default == 1

        kube.delete("cf-crl-zz-nvidia-gpu")
        await eventually(lambda: not store.current.conflicts, "the conflict is resolved")
        assert store.current.by_key[GPU].default == 2

    assert (
        "Conflicting CRL ConfigMaps: 2 enabled CRL ConfigMaps define nvidia.com/gpu: "
        "kube-public/cf-crl-zz-nvidia-gpu is in force (oldest, then first by name); "
        "ignored: kube-public/cf-crl-aa-nvidia-gpu"
    ) in caplog.messages


# -- resourceVersion bookkeeping -----------------------------------------------------------


async def test_watch_resumes_from_last_resource_version_after_the_stream_ends(
    kube: FakeKube, store: PolicyStore, make_watcher: Callable[..., ConfigMapWatcher]
) -> None:
    async with running(make_watcher()):
        await watching(kube)
        added_at = kube.put(core_cm())
        await eventually(lambda: CORE in store.current.by_key, "the policy is loaded")

        kube.end_watches()
        await watching(kube, 2)
        assert kube.watches()[1].resource_version == added_at

        # A bookmark moves the resourceVersion although no ConfigMap of ours changed.
        bookmarked_at = kube.touch_unrelated()
        kube.bookmark()
        kube.end_watches()
        await watching(kube, 3)
        assert kube.watches()[2].resource_version == bookmarked_at

    assert len(kube.lists()) == 1
    assert store.stats.watch_restarts == 0
    assert store.stats.errors == 0


async def test_server_side_watch_timeout_is_requested_and_honoured(
    kube: FakeKube, store: PolicyStore, make_watcher: Callable[..., ConfigMapWatcher]
) -> None:
    # timeoutSeconds=1: the fake server ends each watch after a second, like a real one after
    # its timeout; the watcher must simply watch again, without listing or counting errors.
    async with running(make_watcher(watch_timeout_seconds=1)):
        await watching(kube, 2)
    assert kube.watches()[0].query["timeoutSeconds"] == "1"
    assert len(kube.lists()) == 1
    assert store.stats.errors == 0


@pytest.mark.parametrize("as_http_status", [False, True], ids=["error-event", "http-410"])
async def test_gone_triggers_a_fresh_list(
    kube: FakeKube,
    store: PolicyStore,
    make_watcher: Callable[..., ConfigMapWatcher],
    as_http_status: bool,
) -> None:
    kube.put(core_cm())
    async with running(make_watcher()):
        await watching(kube)
        kube.gone_next_watch(as_http_status=as_http_status)
        kube.end_watches()
        await eventually(lambda: len(kube.lists()) == 2, "the watcher lists again")
        relisted_at = str(kube.revision)
        await watching(kube, 3)

    assert store.stats.watch_restarts == 1
    assert store.stats.errors == 0
    assert kube.watches()[2].resource_version == relisted_at
    assert list(store.current.by_key) == [CORE]


async def test_changes_missed_during_an_outage_are_recovered_by_relisting(
    kube: FakeKube, store: PolicyStore, make_watcher: Callable[..., ConfigMapWatcher]
) -> None:
    kube.put(core_cm())
    kube.put(memory_cm())
    async with running(make_watcher()):
        await watching(kube)
        kube.fail_requests(503)
        await eventually(lambda: store.stats.errors >= 2, "the watcher has failed twice")
        # While the watcher cannot reach the server, a policy is deleted and etcd compacts the
        # history: resuming the watch gets 410, and only a new list can show the deletion.
        kube.delete("cf-crl-gpu-manager-vcuda-memory")
        kube.compact()
        kube.fail_requests(None)
        await eventually(lambda: MEMORY not in store.current.by_key, "the deletion is seen")

    assert store.stats.watch_restarts == 1
    assert len(kube.lists()) == 2


# -- failures ------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [500, 0], ids=["http-500", "connection-dropped"])
async def test_api_errors_back_off_and_keep_the_last_good_policies(
    kube: FakeKube,
    store: PolicyStore,
    make_watcher: Callable[..., ConfigMapWatcher],
    status: int,
) -> None:
    kube.put(core_cm())
    async with running(make_watcher()):
        await watching(kube)
        good = store.current
        requests_before = len(kube.requests)

        kube.fail_requests(status)
        await eventually(lambda: store.stats.errors >= 3, "three failures are counted")
        assert store.current is good
        assert store.ready
        assert len(kube.requests) - requests_before >= 3
        assert store.stats.last_error is not None
        assert "ConfigMaps in kube-public" in store.stats.last_error
        if status:
            assert "500 InternalError: the fake API server answers 500" in store.stats.last_error

        kube.fail_requests(None)
        await watching(kube, len(kube.watches()))
        kube.put(memory_cm())
        await eventually(lambda: MEMORY in store.current.by_key, "events flow again")

    assert sorted(store.current.by_key) == [CORE, MEMORY]


async def test_forbidden_explains_the_missing_rbac_and_stays_not_ready(
    kube: FakeKube, store: PolicyStore, make_watcher: Callable[..., ConfigMapWatcher]
) -> None:
    denied = (
        'configmaps is forbidden: User "system:serviceaccount:gpu:webhook" cannot list '
        'resource "configmaps" in API group "" in the namespace "kube-public"'
    )
    kube.fail_requests(403, denied)
    async with running(make_watcher()):
        await eventually(lambda: store.stats.errors >= 2, "the failures are counted")
        assert not store.ready
        assert store.stats.last_error == (
            f"http://127.0.0.1:{kube.port} refused to list/watch ConfigMaps in kube-public "
            f"({SELECTOR}): 403 Forbidden: {denied}; grant the webhook's service account get, "
            "list and watch on configmaps in kube-public (the Helm chart's Role does this)"
        )
        kube.fail_requests(None)
        await watching(kube)
    assert store.ready


async def test_a_wrong_token_is_reported_and_a_corrected_kubeconfig_recovers(
    kube: FakeKube, store: PolicyStore, tmp_path: Path
) -> None:
    kube.put(core_cm())
    options = fast_options(kube, tmp_path)
    # The kubeconfig's user has a token the API server does not accept (expired, revoked).
    assert options["kubeconfig"] == str(kube.write_kubeconfig(tmp_path, token="revoked-token"))
    async with running(ConfigMapWatcher(store, **options)):
        await eventually(lambda: store.stats.errors >= 2, "the failures are counted")
        assert not store.ready
        assert store.current.limitations == ()
        assert store.stats.last_error == (
            f"http://127.0.0.1:{kube.port} rejected the webhook's credentials: 401 "
            "Unauthorized: Unauthorized; check the service account token (in a cluster) or the "
            "user in the kubeconfig"
        )
        assert {r.authorization for r in kube.requests} == {"Bearer revoked-token"}
        # Each attempt loads the kubeconfig again: fixing the file is enough.
        kube.write_kubeconfig(tmp_path)
        await watching(kube)
    assert store.ready
    assert list(store.current.by_key) == [CORE]
    assert kube.requests[-1].authorization == f"Bearer {kube.token}"


async def test_missing_kubeconfig_is_reported(store: PolicyStore, tmp_path: Path) -> None:
    watcher = ConfigMapWatcher(
        store, kubeconfig=str(tmp_path / "nowhere"), backoff_initial=0.01, backoff_max=0.01
    )
    async with running(watcher):
        await eventually(lambda: store.stats.errors >= 1, "the failure is counted")
    assert not store.ready
    assert store.stats.last_error is not None
    assert store.stats.last_error == (
        f"cannot load the Kubernetes client configuration: the kubeconfig file "
        f"{tmp_path / 'nowhere'} does not exist; run in a cluster, pass --kubeconfig FILE, "
        "or use --policies DIR for a local run"
    )


async def test_api_factory_is_used_instead_of_config_loading(
    kube: FakeKube, store: PolicyStore
) -> None:
    calls = 0

    async def factory() -> ApiClient:
        nonlocal calls
        calls += 1
        return ApiClient(kube.client_configuration())

    kube.put(core_cm())
    async with running(ConfigMapWatcher(store, api_factory=factory)):
        await watching(kube)
    assert calls == 1
    assert list(store.current.by_key) == [CORE]


# -- cancellation --------------------------------------------------------------------------


async def test_cancelling_run_closes_the_watch(
    kube: FakeKube, make_watcher: Callable[..., ConfigMapWatcher]
) -> None:
    task = asyncio.create_task(make_watcher().run())
    await watching(kube)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    await eventually(lambda: kube.open_watches == 0, "the server sees the watch closed")


async def test_cancelling_run_during_back_off(
    kube: FakeKube, store: PolicyStore, make_watcher: Callable[..., ConfigMapWatcher]
) -> None:
    kube.fail_requests(500)
    task = asyncio.create_task(make_watcher(backoff_initial=600, backoff_max=600).run())
    await eventually(lambda: store.stats.errors == 1, "the first failure is counted")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)


def test_backoff_grows_exponentially_with_jitter_up_to_the_cap() -> None:
    backoff = Backoff(0.5, 4.0)
    delays = [backoff.next_delay() for _ in range(6)]
    for delay, nominal in zip(delays, [0.5, 1.0, 2.0, 4.0, 4.0, 4.0], strict=True):
        assert nominal / 2 <= delay <= nominal
    backoff.reset()
    assert backoff.next_delay() <= 0.5
