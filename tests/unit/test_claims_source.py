"""The DRA claim cache: reflectors on resource.k8s.io/v1 ResourceClaimTemplates and
ResourceClaims, and what a pod naming a cached claim gets from evaluation."""

from __future__ import annotations

import copy
import itertools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fakekube import (
    CLAIM_TEMPLATES,
    CLAIMS,
    FakeKube,
    claim_template,
    fast_options,
    resource_claim,
    running,
)

# Tests of the claim cache: evaluated without the /dev/shm fix (on by default), whose volume and
# warning would be in every pod here (tests/helpers.py `without_shm`; the rule's own tests:
# test_runtime_fixes.py).
from tests.helpers import (
    PREFERRED_12_4_TERMS,
    REQUIRED_12_4_TERMS,
    apply,
    container,
    eventually,
    node_terms,
    pod,
    standard_policies,
    without_shm,
)
from webhook.core.evaluation.evaluate import evaluate
from webhook.sources.claims import ClaimTemplateSource, ResourceClaimSource, claim_sources
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
    # Back-off doubles from 10 ms up to 0.4 s, with jitter down to half: the waits before the
    # 2nd to 6th attempts are at least 5, 10, 20, 40 and 80 ms; a loop that did not back off
    # would show gaps of a millisecond or two.
    source = make_source(backoff_initial=0.01, unavailable_backoff_max=0.4)
    async with running(source):
        await eventually(lambda: store.watched[KIND].errors >= 6, "six failures")
        assert store.claims is None
    arrivals = [r.at for r in kube.requests[:6]]
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
    for gap, least in zip(gaps, [0.005, 0.01, 0.02, 0.04, 0.08], strict=True):
        assert gap >= least
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


CUDA_12_4 = "nvidia/cuda:12.4.1-runtime-ubuntu22.04"


def claims(store: PolicyStore) -> dict[tuple[str, str], frozenset[str]]:
    assert store.claims is not None
    return dict(store.claims.claims)


def claim_pod(**source: str) -> dict[str, Any]:
    """A pod whose container "train" uses pod claim "gpu" from `source`."""
    train = container("train", CUDA_12_4, resources={"claims": [{"name": "gpu"}]})
    return pod(train, resourceClaims=[{"name": "gpu", **source}])


async def test_a_pod_naming_a_cached_resource_claim_gets_cuda_placement(
    kube: FakeKube, store: PolicyStore, tmp_path: Path
) -> None:
    kube.put(resource_claim("ml", "shared-gpu", GPU))
    kube.put(resource_claim("ml", "mig-or-gpu", MIG, GPU, first_available=True))
    kube.put(resource_claim("ml", "nic", NIC))
    obj = claim_pod(resourceClaimName="shared-gpu")
    # Before the cache has the claim: evaluated as without it, and the warning says so.
    early = evaluate(obj, standard_policies(), without_shm(), claims=store.claims)
    assert early.patch == []
    assert early.warnings == (
        "ResourceClaim shared-gpu: no DRA claim data here; evaluated without it "
        "(no GPU placement from it)",
    )
    source = ResourceClaimSource(store, **fast_options(kube, tmp_path))
    async with running(source):
        await eventually(lambda: kube.open_watches_of(CLAIMS) == 1, "the watch is open")
        assert claims(store) == {
            ("ml", "shared-gpu"): frozenset({GPU}),
            ("ml", "mig-or-gpu"): frozenset({GPU, MIG}),
            ("ml", "nic"): frozenset({NIC}),
        }
        kube.put(resource_claim("team-b", "late", MIG))
        await eventually(lambda: ("team-b", "late") in claims(store), "the new claim")
        kube.delete("nic", kind="ResourceClaim", namespace="ml")
        await eventually(lambda: ("ml", "nic") not in claims(store), "deletion is seen")
    (listing,) = kube.lists(CLAIMS)
    assert listing.path == "/apis/resource.k8s.io/v1/resourceclaims"
    assert listing.accept == "application/json"
    assert store.claims is not None and dict(store.claims.templates) == {}

    decision = evaluate(obj, standard_policies(), without_shm(), claims=store.claims)
    assert decision.allowed
    assert decision.warnings == ()
    assert decision.notes == (
        f"required GPU nodes with CUDA ≥ 12.4 (image {CUDA_12_4}), preferably < 14.0",
    )
    mutated = apply(decision)
    assert node_terms(mutated) == REQUIRED_12_4_TERMS
    # Only the affinity is added: the container's claim reference stays as written.
    assert mutated["spec"]["containers"] == obj["spec"]["containers"]

    # A claim the cache does not hold: no placement, and the warning says why.
    unknown = claim_pod(resourceClaimName="brand-new")
    decision = evaluate(unknown, standard_policies(), without_shm(), claims=store.claims)
    assert decision.patch == []
    assert decision.warnings == (
        "ResourceClaim brand-new: not in the DRA cache yet; evaluated without it "
        "(no GPU placement from it)",
    )


async def test_a_cached_claim_on_a_nic_class_gets_no_placement_because_of_its_class(
    kube: FakeKube, store: PolicyStore, tmp_path: Path
) -> None:
    kube.put(resource_claim("ml", "shared-gpu", GPU))
    async with running(ResourceClaimSource(store, **fast_options(kube, tmp_path))):
        await eventually(lambda: kube.open_watches_of(CLAIMS) == 1, "the watch is open")
        # Created while the webhook watches; judged only once the cache holds it, so "no
        # placement" below comes from its class, not from a claim the cache never saw.
        kube.put(resource_claim("ml", "nic", NIC))
        await eventually(lambda: ("ml", "nic") in claims(store), "the NIC claim is cached")
    assert claims(store) == {
        ("ml", "shared-gpu"): frozenset({GPU}),
        ("ml", "nic"): frozenset({NIC}),
    }

    nic = claim_pod(resourceClaimName="nic")
    decision = evaluate(nic, standard_policies(), without_shm(), claims=store.claims)
    assert decision.allowed
    assert (decision.patch, decision.warnings, decision.notes) == ([], (), ())
    assert apply(decision) == nic

    # The control: the same pod naming the GPU claim of the same cache is placed.
    gpu = claim_pod(resourceClaimName="shared-gpu")
    decision = evaluate(gpu, standard_policies(), without_shm(), claims=store.claims)
    assert decision.allowed
    assert decision.warnings == ()
    assert decision.notes == (
        f"required GPU nodes with CUDA ≥ 12.4 (image {CUDA_12_4}), preferably < 14.0",
    )
    placed = copy.deepcopy(gpu)
    placed["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": REQUIRED_12_4_TERMS
            },
            "preferredDuringSchedulingIgnoredDuringExecution": PREFERRED_12_4_TERMS,
        }
    }
    assert apply(decision) == placed


async def test_templates_and_claims_are_both_kept_when_both_sources_sync(
    kube: FakeKube, store: PolicyStore, tmp_path: Path
) -> None:
    kube.put(claim_template("ml", "one-gpu", GPU))
    kube.put(resource_claim("ml", "shared-gpu", MIG))
    sources = claim_sources(store, **fast_options(kube, tmp_path))
    assert [s.watched.kind for s in sources] == [
        "ResourceClaimTemplate",
        "ResourceClaim",
        "DeviceClass",
    ]
    async with running(sources[0]), running(sources[1]):
        await eventually(
            lambda: (
                kube.open_watches_of(CLAIM_TEMPLATES) == 1 and kube.open_watches_of(CLAIMS) == 1
            ),
            "both watches are open",
        )
        assert templates(store) == {("ml", "one-gpu"): frozenset({GPU})}
        assert claims(store) == {("ml", "shared-gpu"): frozenset({MIG})}
        # A change of one kind republishes its field only; the other one is kept.
        kube.put(claim_template("ml", "two", MIG))
        await eventually(lambda: ("ml", "two") in templates(store), "the new template")
        assert claims(store) == {("ml", "shared-gpu"): frozenset({MIG})}
        kube.put(resource_claim("ml", "other", GPU))
        await eventually(lambda: ("ml", "other") in claims(store), "the new claim")
        assert set(templates(store)) == {("ml", "one-gpu"), ("ml", "two")}
    assert store.snapshot_status("ResourceClaimTemplate") == {"available": True}
    assert store.snapshot_status("ResourceClaim") == {"available": True}
    for obj in (
        claim_pod(resourceClaimTemplateName="one-gpu"),
        claim_pod(resourceClaimName="other"),
    ):
        decision = evaluate(obj, standard_policies(), without_shm(), claims=store.claims)
        assert node_terms(apply(decision)) == REQUIRED_12_4_TERMS


async def test_forbidden_resource_claims_leave_templates_working(
    kube: FakeKube, store: PolicyStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:

    caplog.set_level(logging.DEBUG, logger="webhook")
    kube.put(claim_template("ml", "one-gpu", GPU))
    kube.put(resource_claim("ml", "shared-gpu", GPU))
    kube.forbid(CLAIMS, "resourceclaims.resource.k8s.io is forbidden")
    template_source, claim_source, _ = claim_sources(store, **fast_options(kube, tmp_path))
    async with running(template_source), running(claim_source):
        await eventually(
            lambda: (
                store.watched["ResourceClaim"].errors >= 3
                and kube.open_watches_of(CLAIM_TEMPLATES) == 1
            ),
            "templates watched, claims refused",
        )
    assert templates(store) == {("ml", "one-gpu"): frozenset({GPU})}
    assert claims(store) == {}
    host = f"http://127.0.0.1:{kube.port}"
    reason = (
        f"{host} refused to list/watch ResourceClaims (resource.k8s.io/v1): 403 Forbidden: "
        "resourceclaims.resource.k8s.io is forbidden; grant the webhook's service account get, "
        "list and watch on resourceclaims in resource.k8s.io (the Helm chart's ClusterRole does "
        "this unless config.claimTemplateCache is false); until then pods naming a "
        "ResourceClaim are evaluated as without it"
    )
    assert store.watched["ResourceClaim"].last_error == reason
    assert store.snapshot_status("ResourceClaimTemplate") == {"available": True}
    assert store.snapshot_status("ResourceClaim") == {
        "available": False,
        "reason": reason,
        "effect": "pods naming a ResourceClaim are evaluated as if it requested no GPU",
    }
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith(reason)

    by_template = claim_pod(resourceClaimTemplateName="one-gpu")
    decision = evaluate(by_template, standard_policies(), without_shm(), claims=store.claims)
    assert node_terms(apply(decision)) == REQUIRED_12_4_TERMS
    by_claim = claim_pod(resourceClaimName="shared-gpu")
    decision = evaluate(by_claim, standard_policies(), without_shm(), claims=store.claims)
    assert decision.patch == []
    assert decision.warnings == (
        "ResourceClaim shared-gpu: not in the DRA cache yet; evaluated without it "
        "(no GPU placement from it)",
    )
