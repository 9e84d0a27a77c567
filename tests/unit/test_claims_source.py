"""The DRA claim-template cache: the reflector on resource.k8s.io/v1 ResourceClaimTemplates."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fakekube import CLAIM_TEMPLATES, FakeKube, claim_template, fast_options, running
from tests.helpers import eventually
from webhook.sources.claims import ClaimTemplateSource
from webhook.sources.store import PolicyStore

GPU, MIG, NIC = "gpu.nvidia.com", "mig.nvidia.com", "nic.example.com"
KIND = "ResourceClaimTemplate"


@pytest.fixture
def make_source(
    kube: FakeKube, store: PolicyStore, tmp_path: Path
) -> Callable[..., ClaimTemplateSource]:
    def make(**options: Any) -> ClaimTemplateSource:
        return ClaimTemplateSource(store, **fast_options(kube, tmp_path, **options))

    return make


def templates(store: PolicyStore) -> dict[tuple[str, str], frozenset[str]]:
    assert store.claims is not None
    return dict(store.claims.templates)


async def test_templates_are_watched_cluster_wide_and_projected_to_device_classes(
    kube: FakeKube, store: PolicyStore, make_source: Callable[..., ClaimTemplateSource]
) -> None:
    kube.put(claim_template("ml", "one-gpu", GPU))
    kube.put(claim_template("ml", "gpu-or-mig", GPU, MIG, first_available=True))
    kube.put(claim_template("net", "nic", NIC))
    async with running(make_source()):
        await eventually(lambda: kube.open_watches_of(CLAIM_TEMPLATES) == 1, "the watch is open")
        assert templates(store) == {
            ("ml", "one-gpu"): frozenset({GPU}),
            ("ml", "gpu-or-mig"): frozenset({GPU, MIG}),
            ("net", "nic"): frozenset({NIC}),
        }
        kube.put(claim_template("team-b", "train", MIG))
        await eventually(lambda: ("team-b", "train") in templates(store), "the new template")
        kube.delete("one-gpu", kind=KIND, namespace="ml")
        await eventually(lambda: ("ml", "one-gpu") not in templates(store), "deletion is seen")

    (listing,) = kube.lists(CLAIM_TEMPLATES)
    assert listing.path == "/apis/resource.k8s.io/v1/resourceclaimtemplates"
    assert listing.accept == "application/json"
    assert kube.watches(CLAIM_TEMPLATES)[0].accept == "application/json"
    assert templates(store)[("team-b", "train")] == frozenset({MIG})
    assert store.claims is not None and dict(store.claims.claims) == {}


@pytest.mark.parametrize("status", [403, 404])
async def test_dra_api_not_readable_leaves_no_cache_logs_once_and_backs_off(
    kube: FakeKube,
    store: PolicyStore,
    make_source: Callable[..., ClaimTemplateSource],
    caplog: pytest.LogCaptureFixture,
    status: int,
) -> None:
    caplog.set_level(logging.DEBUG, logger="webhook")
    if status == 403:
        kube.forbid(CLAIM_TEMPLATES, "resourceclaimtemplates.resource.k8s.io is forbidden")
    else:
        kube.not_served(CLAIM_TEMPLATES)
    # Back-off doubles from 10 ms up to 0.4 s (with jitter down to half): a spinning loop
    # would make hundreds of requests in the time window below.
    source = make_source(backoff_initial=0.01, unavailable_backoff_max=0.4)
    async with running(source):
        await eventually(lambda: store.watched[KIND].errors >= 5, "five failures")
        await asyncio.sleep(0.5)
        assert len(kube.requests) <= 10
        assert store.claims is None
    last_error = store.watched[KIND].last_error
    assert last_error is not None
    if status == 403:
        assert last_error.endswith(
            "403 Forbidden: resourceclaimtemplates.resource.k8s.io is forbidden; grant the "
            "webhook's service account get, list and watch on resourceclaimtemplates in "
            "resource.k8s.io (the Helm chart's ClusterRole does this unless "
            "config.claimTemplateCache is false); until then DRA claims are not recognised"
        )
    else:
        assert last_error == (
            f"http://127.0.0.1:{kube.port} does not serve ResourceClaimTemplates "
            "(resource.k8s.io/v1): 404 NotFound: the server could not find the requested "
            "resource; the cluster has no resource.k8s.io/v1 API (DRA needs Kubernetes 1.34 or "
            "later); DRA claims are not recognised"
        )
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].getMessage().startswith(last_error)
