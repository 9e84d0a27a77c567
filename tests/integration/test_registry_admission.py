"""Admission with registry lookups (SPEC §4 step 6), end to end through the aiohttp app: the
pod's resulting object and warnings, how long admission waits, and how many times the
registry (in-process, TLS, 127.0.0.1) is asked."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.fakeregistry import FakeRegistry, HangingServer, closed_port
from tests.helpers import (
    GPU,
    REQUIRED_12_4_TERMS,
    container,
    eventually,
    node_terms,
    pod,
    standard_policies,
    without_shm,
)
from tests.integration.helpers import metric_samples
from tests.integration.test_admission import admission_review, apply_patch
from tests.ociimages import digest, image
from tests.registryhelpers import client as registry_client
from webhook.admission.app import create_app, create_metrics_app
from webhook.core.config.model import WebhookConfig
from webhook.registry.client import RegistryClient
from webhook.registry.resolver import ImageResolver
from webhook.sources.store import PolicyStore
from webhook.tls.certs import CertPaths, write_certificates

CUDA_12_4 = ["CUDA_VERSION=12.4.1"]


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> CertPaths:
    return write_certificates(tmp_path_factory.mktemp("tls"), ["localhost"], ["127.0.0.1"])


@pytest.fixture
async def registry(tls: CertPaths) -> AsyncIterator[FakeRegistry]:
    fake = FakeRegistry(tls, auth="bearer")
    await fake.start()
    yield fake
    await fake.close()


class Webhook:
    def __init__(
        self, http: TestClient[Any, Any], ops: TestClient[Any, Any], images: ImageResolver
    ) -> None:
        self.http = http  # the admission port
        self.ops = ops  # the metrics port: /metrics, /images
        self.images = images

    async def mutate(self, obj: dict[str, Any]) -> tuple[dict[str, Any], list[str], float]:
        """(the stored object, warnings, seconds admission took)."""
        started = time.perf_counter()
        reply = await self.http.post("/mutate", json=admission_review(obj))
        elapsed = time.perf_counter() - started
        assert reply.status == 200
        response = (await reply.json())["response"]
        assert response["allowed"] is True
        return apply_patch(obj, response), response.get("warnings", []), elapsed

    async def get(self, path: str) -> Any:
        reply = await self.ops.get(path)
        assert reply.status == 200
        return await reply.json() if path != "/metrics" else await reply.text()


async def started(client: RegistryClient, config: WebhookConfig) -> Webhook:
    # What registry lookups decide, alone: without the /dev/shm fix (on by default), whose volume
    # and warning would be in every pod here (its own tests: tests/unit/test_runtime_fixes.py).
    config = without_shm(config)
    store = PolicyStore()
    store.replace(standard_policies())
    images = ImageResolver(client, config.registry_lookups)
    app = create_app(config, store, images=images)
    http: TestClient[Any, Any] = TestClient(TestServer(app))
    await http.start_server()
    ops: TestClient[Any, Any] = TestClient(TestServer(create_metrics_app(app)))
    await ops.start_server()
    return Webhook(http, ops, images)


@pytest.fixture
async def webhook_for(tls: CertPaths) -> AsyncIterator[Any]:
    hooks: list[Webhook] = []

    async def make(*hosts: str, **settings: Any) -> Webhook:
        client = registry_client(tls.ca_cert, *hosts, **settings)
        hook = await started(client, client.config)
        hooks.append(hook)
        return hook

    yield make
    for hook in hooks:
        await hook.ops.close()
        await hook.http.close()


def gpu_pod(image_ref: str, **spec: Any) -> dict[str, Any]:
    return pod(container("main", image_ref, limits={GPU: "1"}), **spec)


async def test_an_image_whose_config_names_cuda_gets_its_affinity(
    registry: FakeRegistry, webhook_for: Any
) -> None:
    registry.push(
        "public/trainer", "v3", image({"arm64": ["CUDA_VERSION=12.6.0"], "amd64": CUDA_12_4})
    )
    hook = await webhook_for(registry.host)
    stored, warnings, _ = await hook.mutate(gpu_pod(f"{registry.host}/public/trainer:v3"))
    assert node_terms(stored) == REQUIRED_12_4_TERMS
    assert warnings == [
        'set requests.nvidia.com/gpu=1 from limits in container "main"',
        "required GPU nodes with CUDA ≥ 12.4 (image config CUDA_VERSION=12.4.1), preferably < 14.0",
    ]


async def test_a_private_image_without_credentials_gets_a_warning_naming_it_and_no_placement(
    registry: FakeRegistry, webhook_for: Any
) -> None:
    registry.push("private/trainer", "v3", image(CUDA_12_4))
    hook = await webhook_for(registry.host)
    ref = f"{registry.host}/private/trainer:v3"
    stored, warnings, _ = await hook.mutate(gpu_pod(ref))
    assert node_terms(stored) is None
    assert (
        f"CUDA lookup of {ref}: 401 from the registry: add credentials for it to --registry-auth"
        in warnings
    )
    # The image is named whole; the fixed words are the shorter wording that fits in 120
    # characters with this 49-character reference (the port is 5 digits: an ephemeral port).
    assert (
        f"CUDA version of {ref} unknown: set features.alauda.io/cuda-version or imageCudaTable"
        in warnings
    )


async def test_images_known_otherwise_never_reach_the_registry(
    registry: FakeRegistry, webhook_for: Any
) -> None:
    hook = await webhook_for(registry.host)
    by_tag = gpu_pod("nvidia/cuda:12.4.1-runtime-ubuntu22.04")
    by_env = pod(
        container(
            "main",
            f"{registry.host}/team/x:1",
            limits={GPU: "1"},
            env=[{"name": "CUDA_VERSION", "value": "12.4"}],
        )
    )
    for obj in (by_tag, by_env):
        stored, _, _ = await hook.mutate(obj)
        assert node_terms(stored) == REQUIRED_12_4_TERMS
    # A pod without GPUs is never looked up either.
    await hook.mutate(pod(container("main", f"{registry.host}/team/cpu:1")))
    assert registry.hits == [] and hook.images.size == 0


async def test_forty_pods_of_one_image_make_one_registry_round_trip(
    registry: FakeRegistry, webhook_for: Any
) -> None:
    built = image(CUDA_12_4)
    registry.push("public/trainer", "v3", built)
    hook = await webhook_for(registry.host)
    results = await asyncio.gather(
        *(hook.mutate(gpu_pod(f"{registry.host}/public/trainer:v3")) for _ in range(40))
    )
    assert all(node_terms(stored) == REQUIRED_12_4_TERMS for stored, _, _ in results)
    # One token, the index, the amd64 manifest, the config: nothing per pod.
    assert len(registry.token_hits) == 1
    amd64 = digest(built.manifests[0][1])
    assert [h.path for h in registry.hits if h.authorization] == [
        "/v2/public/trainer/manifests/v3",
        f"/v2/public/trainer/manifests/{amd64}",
        f"/v2/public/trainer/blobs/{built.config_digest(0)}",
    ]


async def test_a_digest_reference(registry: FakeRegistry, webhook_for: Any) -> None:
    built = image(["NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla"])
    registry.push("public/trainer", "v3", built)
    hook = await webhook_for(registry.host)
    stored, warnings, _ = await hook.mutate(
        gpu_pod(f"{registry.host}/public/trainer@{built.digest}")
    )
    assert node_terms(stored) == REQUIRED_12_4_TERMS
    assert (
        "required GPU nodes with CUDA ≥ 12.4 (image config NVIDIA_REQUIRE_CUDA), preferably < 14.0"
        in warnings
    )


async def test_a_registry_that_never_answers_costs_one_budget_then_none(
    webhook_for: Any,
) -> None:
    server = HangingServer()
    await server.start()
    try:
        hook = await webhook_for(server.host, budget_seconds=0.5, timeout_seconds=1.5)
        ref = f"{server.host}/team/trainer:1"
        stored, warnings, first = await hook.mutate(gpu_pod(ref))
        assert 0.5 <= first < 1.2
        assert node_terms(stored) is None
        assert (
            f"CUDA lookup of {ref}: no answer within 0.5 s; later pods get the answer when it comes"
            in warnings
        )
        _, warnings, second = await hook.mutate(gpu_pod(ref))
        assert second < 0.25
        assert (
            f"CUDA lookup of {ref}: its registry is slow; later pods get the answer when it comes"
            in warnings
        )
        await eventually(lambda: hook.images.in_flight == 0, "the lookup timed out")
        _, warnings, third = await hook.mutate(gpu_pod(ref))
        assert third < 0.25
        assert (
            f"CUDA lookup of {ref}: the registry did not answer within 1.5 s "
            "(not asked again for 600 s)" in warnings
        )
        assert server.accepted == 1
    finally:
        await server.close()


async def test_a_late_answer_serves_the_next_pod(registry: FakeRegistry, webhook_for: Any) -> None:
    registry.push("public/trainer", "v3", image(CUDA_12_4))
    registry.delay = 0.6
    hook = await webhook_for(registry.host, budget_seconds=0.2)
    ref = f"{registry.host}/public/trainer:v3"
    stored, _, _ = await hook.mutate(gpu_pod(ref))
    assert node_terms(stored) is None
    await eventually(lambda: hook.images.in_flight == 0, "the lookup ended")
    stored, _, took = await hook.mutate(gpu_pod(ref))
    assert node_terms(stored) == REQUIRED_12_4_TERMS
    assert took < 0.2


async def test_a_refused_connection_is_a_warning(webhook_for: Any) -> None:
    host = closed_port()
    hook = await webhook_for(host)
    ref = f"{host}/team/trainer:1"
    _, warnings, _ = await hook.mutate(gpu_pod(ref))
    assert f"CUDA lookup of {ref}: cannot connect to 127.0.0.1: Connection refused" in warnings


async def test_a_metadata_endpoint_image_is_refused_without_waiting(webhook_for: Any) -> None:
    hook = await webhook_for()
    ref = "169.254.169.254/latest/meta-data:1"
    _, warnings, took = await hook.mutate(gpu_pod(ref))
    assert took < 0.25
    assert (
        f"CUDA lookup of {ref}: non-public address; allow it in registryLookups.allowedRegistries"
        in warnings
    )


async def test_the_architecture_the_pod_pins_is_looked_up(
    registry: FakeRegistry, webhook_for: Any
) -> None:
    registry.push(
        "public/trainer", "v3", image({"amd64": ["CUDA_VERSION=11.8.0"], "arm64": CUDA_12_4})
    )
    hook = await webhook_for(registry.host)
    stored, _, _ = await hook.mutate(
        gpu_pod(f"{registry.host}/public/trainer:v3", nodeSelector={"kubernetes.io/arch": "arm64"})
    )
    assert node_terms(stored) == REQUIRED_12_4_TERMS


def arch_affinity(*terms: list[str], zone: str = "") -> dict[str, Any]:
    """A required node affinity whose terms (ORed) each pin kubernetes.io/arch In `values`
    (an empty list: a term on the zone only, which lets any architecture in)."""
    node_selector_terms = []
    for values in terms:
        exprs: list[dict[str, Any]] = [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone or "z1"]}
        ]
        if values:
            exprs.append({"key": "kubernetes.io/arch", "operator": "In", "values": values})
        node_selector_terms.append({"matchExpressions": exprs})
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": node_selector_terms
            }
        }
    }


def user_terms_of(affinity: dict[str, Any]) -> list[dict[str, Any]]:
    terms: list[dict[str, Any]] = affinity["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    return terms


def merged(user_terms: list[dict[str, Any]], injected: list[dict[str, Any]]) -> list[Any]:
    """The user's terms ANDed with the injected ones, as the patch writes them."""
    return [
        {"matchExpressions": [*u["matchExpressions"], *i["matchExpressions"]]}
        for u in user_terms
        for i in injected
    ]


async def test_the_architecture_a_node_affinity_pins_is_looked_up(
    registry: FakeRegistry, webhook_for: Any
) -> None:
    registry.push(
        "public/trainer", "v3", image({"amd64": ["CUDA_VERSION=11.8.0"], "arm64": CUDA_12_4})
    )
    hook = await webhook_for(registry.host)
    # Two terms, both arm64: the pod runs on arm64 nodes only.
    affinity = arch_affinity(["arm64"], ["arm64"])
    user_terms = user_terms_of(affinity)
    stored, warnings, _ = await hook.mutate(
        gpu_pod(f"{registry.host}/public/trainer:v3", affinity=affinity)
    )
    assert node_terms(stored) == merged(user_terms, REQUIRED_12_4_TERMS)
    assert (
        "required GPU nodes with CUDA ≥ 12.4 (image config CUDA_VERSION=12.4.1), preferably < 14.0"
        in warnings
    )
    listing = await hook.get("/images")
    assert {row["arch"] for row in listing["images"]} == {"arm64"}


async def test_a_pod_allowed_on_several_architectures_gets_the_strictest_answer(
    registry: FakeRegistry, webhook_for: Any
) -> None:
    registry.push(
        "public/trainer", "v3", image({"amd64": ["CUDA_VERSION=11.8.0"], "arm64": CUDA_12_4})
    )
    hook = await webhook_for(registry.host)
    affinity = arch_affinity(["amd64"], ["arm64"])
    user_terms = user_terms_of(affinity)
    stored, warnings, _ = await hook.mutate(
        gpu_pod(f"{registry.host}/public/trainer:v3", affinity=affinity)
    )
    # 12.4 (arm64) is stricter than 11.8 (amd64): required on every node the pod may get.
    assert node_terms(stored) == merged(user_terms, REQUIRED_12_4_TERMS)
    assert warnings == [
        'set requests.nvidia.com/gpu=1 from limits in container "main"',
        "required GPU nodes with CUDA ≥ 12.4 (image config CUDA_VERSION=12.4.1 for linux/arm64), "
        "preferably < 14.0",
    ]
    listing = await hook.get("/images")
    cached = {(row["arch"], row["cuda"]) for row in listing["images"] if "@" not in row["image"]}
    assert cached == {("amd64", "11.8"), ("arm64", "12.4")}
    # The two lookups ran together and shared one token.
    assert len(registry.token_hits) == 1


async def test_an_architecture_missing_from_the_index_is_said_and_the_others_decide(
    registry: FakeRegistry, webhook_for: Any
) -> None:
    registry.push("public/trainer", "v3", image({"amd64": CUDA_12_4}))
    hook = await webhook_for(registry.host)
    ref = f"{registry.host}/public/trainer:v3"
    affinity = arch_affinity(["amd64", "arm64"])
    stored, warnings, _ = await hook.mutate(gpu_pod(ref, affinity=affinity))
    assert node_terms(stored) == merged(user_terms_of(affinity), REQUIRED_12_4_TERMS)
    assert (
        "required GPU nodes with CUDA ≥ 12.4 (image config CUDA_VERSION=12.4.1 for linux/amd64), "
        "preferably < 14.0" in warnings
    )
    assert f"CUDA lookup of {ref}: no linux/arm64 image in its index" in warnings


async def test_the_same_failure_for_several_architectures_is_said_once(
    registry: FakeRegistry, webhook_for: Any
) -> None:
    registry.push("private/trainer", "v3", image({"amd64": CUDA_12_4, "arm64": CUDA_12_4}))
    hook = await webhook_for(registry.host)
    ref = f"{registry.host}/private/trainer:v3"
    stored, warnings, _ = await hook.mutate(
        gpu_pod(ref, affinity=arch_affinity(["amd64", "arm64"]))
    )
    denied = (
        f"CUDA lookup of {ref}: 401 from the registry: add credentials for it to --registry-auth"
    )
    assert warnings.count(denied) == 1
    assert node_terms(stored) == user_terms_of(arch_affinity(["amd64", "arm64"]))


async def test_a_term_that_lets_any_architecture_in_means_amd64(
    registry: FakeRegistry, webhook_for: Any
) -> None:
    registry.push(
        "public/trainer", "v3", image({"amd64": CUDA_12_4, "arm64": ["CUDA_VERSION=12.8.0"]})
    )
    hook = await webhook_for(registry.host)
    # The second term says nothing about the architecture: any node of zone z1 will do.
    affinity = arch_affinity(["arm64"], [])
    stored, warnings, _ = await hook.mutate(
        gpu_pod(f"{registry.host}/public/trainer:v3", affinity=affinity)
    )
    assert node_terms(stored) == merged(user_terms_of(affinity), REQUIRED_12_4_TERMS)
    assert (
        "required GPU nodes with CUDA ≥ 12.4 (image config CUDA_VERSION=12.4.1), preferably < 14.0"
        in warnings
    )
    listing = await hook.get("/images")
    assert {row["arch"] for row in listing["images"]} == {"amd64"}


async def test_images_endpoint_and_metrics_show_the_cache(
    registry: FakeRegistry, webhook_for: Any
) -> None:
    built = image(CUDA_12_4)
    registry.push("public/trainer", "v3", built)
    hook = await webhook_for(registry.host)
    await hook.mutate(gpu_pod(f"{registry.host}/public/trainer:v3"))
    await hook.mutate(gpu_pod(f"{registry.host}/private/nope:1"))
    listing = await hook.get("/images")
    assert listing["enabled"] is True and listing["inFlight"] == 0
    rows = {(r["image"], r["result"], r["cuda"], r["source"]) for r in listing["images"]}
    assert rows == {
        (f"{registry.host}/public/trainer:v3", "found", "12.4", "CUDA_VERSION=12.4.1"),
        (f"{registry.host}/public/trainer@{built.digest}", "found", "12.4", "CUDA_VERSION=12.4.1"),
        (
            f"{registry.host}/private/nope:1",
            "unauthorized",
            None,
            "401 from the registry: add credentials for it to --registry-auth",
        ),
    }
    samples = metric_samples(await hook.get("/metrics"))
    assert samples['gpu_webhook_image_lookups_total{result="found"}'] == 1
    assert samples['gpu_webhook_image_lookups_total{result="unauthorized"}'] == 1
    assert samples["gpu_webhook_image_cache_entries"] == 3
    assert samples["gpu_webhook_image_lookup_duration_seconds_count"] == 2


async def test_lookup_results_are_not_served_on_the_admission_port(
    registry: FakeRegistry, webhook_for: Any
) -> None:
    registry.push("public/trainer", "v3", image(CUDA_12_4))
    hook = await webhook_for(registry.host)
    await hook.mutate(gpu_pod(f"{registry.host}/public/trainer:v3"))
    assert (await hook.http.get("/images")).status == 404
    listing = await hook.get("/images")  # the metrics port
    assert [row["image"] for row in listing["images"] if "@" not in row["image"]] == [
        f"{registry.host}/public/trainer:v3"
    ]


def lookup_counters(text: str) -> dict[str, float]:
    prefixes = (
        "gpu_webhook_image_cache_requests_total",
        "gpu_webhook_image_lookups_over_budget_total",
        "gpu_webhook_image_lookups_late_total",
        "gpu_webhook_cuda_unknown_total",
        "gpu_webhook_placements_total",
        "gpu_webhook_gpu_containers_total",
    )
    return {k: v for k, v in metric_samples(text).items() if k.startswith(prefixes)}


async def test_metrics_count_misses_the_budget_late_answers_and_cache_hits(
    registry: FakeRegistry, webhook_for: Any
) -> None:
    registry.push("public/trainer", "v3", image(CUDA_12_4))
    registry.delay = 0.6
    hook = await webhook_for(registry.host, budget_seconds=0.2)
    ref = f"{registry.host}/public/trainer:v3"
    await hook.mutate(gpu_pod(ref))  # a miss: the lookup starts, no answer within the budget
    await hook.mutate(gpu_pod(ref))  # a miss: its registry is slow, not waited for
    await eventually(lambda: hook.images.in_flight == 0, "the lookup ended")
    stored, _, _ = await hook.mutate(gpu_pod(ref))  # a hit: the late answer, placed
    assert node_terms(stored) == REQUIRED_12_4_TERMS
    assert lookup_counters(await hook.get("/metrics")) == {
        'gpu_webhook_image_cache_requests_total{result="hit"}': 1.0,
        'gpu_webhook_image_cache_requests_total{result="miss"}': 2.0,
        "gpu_webhook_image_lookups_over_budget_total": 2.0,
        "gpu_webhook_image_lookups_late_total": 1.0,
        'gpu_webhook_cuda_unknown_total{reason="slow",runtime="cuda"}': 2.0,
        'gpu_webhook_placements_total{rule="backward"}': 1.0,
        'gpu_webhook_gpu_containers_total{runtime="cuda"}': 3.0,
    }


async def test_metrics_say_why_a_cuda_version_is_unknown(
    registry: FakeRegistry, webhook_for: Any
) -> None:
    host = closed_port()
    registry.push("private/trainer", "v3", image(CUDA_12_4))
    hook = await webhook_for(host, registry.host)
    await hook.mutate(gpu_pod(f"{host}/team/trainer:1"))
    await hook.mutate(gpu_pod(f"{host}/team/trainer:1"))  # the failure, from the cache
    await hook.mutate(gpu_pod(f"{registry.host}/private/trainer:v3"))
    # No image reference at all: nothing to look up.
    await hook.mutate(pod(container("main", None, limits={GPU: "1"})))
    assert lookup_counters(await hook.get("/metrics")) == {
        'gpu_webhook_image_cache_requests_total{result="hit"}': 1.0,
        'gpu_webhook_image_cache_requests_total{result="miss"}': 2.0,
        "gpu_webhook_image_lookups_over_budget_total": 0.0,
        "gpu_webhook_image_lookups_late_total": 0.0,
        'gpu_webhook_cuda_unknown_total{reason="unreachable",runtime="cuda"}': 2.0,
        'gpu_webhook_cuda_unknown_total{reason="unauthorized",runtime="cuda"}': 1.0,
        'gpu_webhook_cuda_unknown_total{reason="not-known",runtime="cuda"}': 1.0,
        'gpu_webhook_gpu_containers_total{runtime="cuda"}': 4.0,
    }


async def test_an_amd64_only_index_requires_amd64_nodes_in_a_mixed_cluster(
    registry: FakeRegistry, tls: CertPaths
) -> None:
    # The image-architecture runtime fix (SPEC §14): the index read for the CUDA version lists
    # only linux/amd64 (and BuildKit's attestation); the cluster has arm64 GPU nodes too.
    from webhook.core.placement.inventory import NodeInventory

    registry.push("public/x86-only", "v1", image({"amd64": CUDA_12_4}))
    registry.push("public/both", "v1", image({"amd64": CUDA_12_4, "arm64": CUDA_12_4}))
    client = registry_client(tls.ca_cert, registry.host)
    config = client.config
    store = PolicyStore()
    store.replace(standard_policies())
    labels = {"cuda-major-version": "12", "cuda-minor-version": "4"}
    store.inventory = NodeInventory.build(
        {
            "x86": {**labels, "kubernetes.io/arch": "amd64"},
            "gh200": {**labels, "kubernetes.io/arch": "arm64"},
        },
        config=config,
    )
    app = create_app(config, store, images=ImageResolver(client, config.registry_lookups))
    http: TestClient[Any, Any] = TestClient(TestServer(app))
    await http.start_server()
    try:
        from webhook.admission.state import STATE

        resolver = app[STATE].images
        assert resolver is not None
        hook = Webhook(http, http, resolver)
        stored, warnings, _ = await hook.mutate(gpu_pod(f"{registry.host}/public/x86-only:v1"))
        arch = {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
        assert node_terms(stored) == [
            {"matchExpressions": [*term["matchExpressions"], arch]} for term in REQUIRED_12_4_TERMS
        ]
        assert warnings[-1] == (
            f"required nodes of architecture amd64: {registry.host}/public/x86-only:v1 has no "
            "linux/arm64 (architecture fix)"
        )
        stored, warnings, _ = await hook.mutate(gpu_pod(f"{registry.host}/public/both:v1"))
        assert node_terms(stored) == REQUIRED_12_4_TERMS
        assert not any("architecture" in w for w in warnings)
    finally:
        await http.close()


async def started_with(client: RegistryClient, nodes: dict[str, dict[str, str]]) -> Webhook:
    """A webhook whose node inventory is `nodes` (labels by node name)."""
    from webhook.admission.state import STATE
    from webhook.core.placement.inventory import NodeInventory

    config = client.config
    store = PolicyStore()
    store.replace(standard_policies())
    store.inventory = NodeInventory.build(nodes, config=config)
    app = create_app(config, store, images=ImageResolver(client, config.registry_lookups))
    http: TestClient[Any, Any] = TestClient(TestServer(app))
    await http.start_server()
    resolver = app[STATE].images
    assert resolver is not None
    return Webhook(http, http, resolver)


# MI210 (740f, gfx90a) and MI300X (74a1, gfx942) on amdgpu module 6.12.12 (the ROCm 6.4
# driver) and 6.14.14 (amdgpu 30.10), as AMD's labeller labels them.
AMD_NODES = {
    "mi210-old": {"amd.com/gpu.driver-version": "6.12.12", "amd.com/gpu.device-id": "740f"},
    "mi300-new": {"amd.com/gpu.driver-version": "6.14.14", "amd.com/gpu.device-id": "74a1"},
}
ROCM_CONFIG = ["ROCM_VERSION=6.4.1", "PYTORCH_ROCM_ARCH=gfx942"]


async def test_a_rocm_image_whose_config_names_its_version_and_targets_is_placed(
    registry: FakeRegistry, tls: CertPaths
) -> None:
    # SPEC §13: the tag says nothing; the config read from the registry names ROCm 6.4.1 and
    # the one gfx target it was built for (gfx942: MI300X, not the MI210).
    registry.push("public/rocm-train", "v1", image({"amd64": ROCM_CONFIG}))
    registry.push("public/rocm-plain", "v1", image({"amd64": ["PYTORCH_ROCM_ARCH=gfx942"]}))
    hook = await started_with(registry_client(tls.ca_cert, registry.host), AMD_NODES)
    try:
        ref = f"{registry.host}/public/rocm-train:v1"
        stored, warnings, _ = await hook.mutate(
            pod(container("main", ref, limits={"amd.com/gpu": "1"}))
        )
        assert node_terms(stored) == [
            {
                "matchExpressions": [
                    {"key": "amdgpu-driver-release", "operator": "DoesNotExist"},
                    {"key": "amd.com/gpu.driver-version", "operator": "In", "values": ["6.14.14"]},
                    {"key": "amd.com/gpu.device-id", "operator": "In", "values": ["74a1"]},
                ]
            }
        ]
        # Every vendor's accelerator container gets /dev/shm too (SPEC §14).
        shm = 'mounted a 16Gi memory-backed /dev/shm in container "main" (shm fix)'
        assert warnings == [
            "required nodes whose amdgpu driver runs ROCm 6.4 on GPU target gfx942 "
            "(image config ROCM_VERSION=6.4.1)",
            shm,
        ]
        # A config without ROCM_VERSION: the lookup says so, and nothing is placed.
        plain = f"{registry.host}/public/rocm-plain:v1"
        stored, warnings, _ = await hook.mutate(
            pod(container("main", plain, limits={"amd.com/gpu": "1"}))
        )
        assert node_terms(stored) is None
        assert warnings == [
            shm,
            f"ROCm of {plain} unknown: set features.alauda.io/rocm-version",
            f"ROCm lookup of {plain}: its config sets no ROCM_VERSION",
        ]
    finally:
        await hook.http.close()


@pytest.mark.parametrize("index", [False, True], ids=["single-manifest", "index"])
async def test_an_arm64_only_image_requires_arm64_nodes_in_a_mixed_cluster(
    registry: FakeRegistry, tls: CertPaths, index: bool
) -> None:
    # SPEC §14 (issue 39 item 4): no index, one manifest whose config says linux/arm64 (a
    # Grace/GH200 build): the pod must not reach the x86 node, where it would fail with
    # `exec format error`. Issue 45 item 4: an index listing only linux/arm64 (the pod pins no
    # architecture: amd64 is asked for) lost its platforms and its CUDA version: the same.
    registry.push("public/grace-only", "v1", image({"arm64": CUDA_12_4}, index=index))
    labels = {"cuda-major-version": "12", "cuda-minor-version": "4"}
    nodes = {
        "x86": {**labels, "kubernetes.io/arch": "amd64"},
        "gh200": {**labels, "kubernetes.io/arch": "arm64"},
    }
    hook = await started_with(registry_client(tls.ca_cert, registry.host), nodes)
    try:
        ref = f"{registry.host}/public/grace-only:v1"
        stored, warnings, _ = await hook.mutate(gpu_pod(ref))
        arch = {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}
        assert node_terms(stored) == [
            {"matchExpressions": [*term["matchExpressions"], arch]} for term in REQUIRED_12_4_TERMS
        ]
        assert warnings[-1] == (
            f"required nodes of architecture arm64: {ref} has no linux/amd64 (architecture fix)"
        )
    finally:
        await hook.http.close()


async def test_an_ascend_images_visible_devices_is_looked_up_and_denied_under_enforce(
    registry: FakeRegistry, tls: CertPaths
) -> None:
    """Issue 46: on a first-entry ascend-docker-runtime build (nodeSettings.ascendRuntime
    first-entry, the default) containerd puts the image's ASCEND_VISIBLE_DEVICES before the
    written void. Under enforce the webhook looks up every image of an NPU pod through the
    registry lookups (their cache and budget) and denies the image that sets it; a clean image
    is admitted with its void; an unreachable registry leaves the voids and a warning."""
    from webhook.core.config.access import GpuAccess

    registry.push("public/npu-tools", "v1", image({"amd64": ["ASCEND_VISIBLE_DEVICES=0-7"]}))
    registry.push("public/plain-tools", "v1", image({"amd64": ["PATH=/usr/bin"]}))
    down_host = closed_port()
    client = registry_client(tls.ca_cert, registry.host, down_host)
    config = client.config.model_copy(update={"gpu_access": GpuAccess(mode="enforce")})
    hook = await started(client, config)
    try:
        npu = container("npu", "ascendai/cann:8.3.rc1-910b-ubuntu22.04-py3.11")
        npu["resources"] = {"limits": {"huawei.com/Ascend910": "1"}}
        bad = f"{registry.host}/public/npu-tools:v1"
        # /mutate writes the voids; /validate (called with the mutated pod) denies.
        stored, _, _ = await hook.mutate(pod(npu, container("side", bad)))
        reply = await hook.http.post("/validate", json=admission_review(stored))
        response = (await reply.json())["response"]
        assert response["allowed"] is False
        assert response["status"]["message"].splitlines()[0] == (
            f'Pod ml/train, container "side" runs image "{bad}" setting '
            "ASCEND_VISIBLE_DEVICES=0-7 but requests no NPU: rebuild it without "
            "ASCEND_VISIBLE_DEVICES, or run ascend-docker-runtime v6.0.0-RC3 or later and set "
            "gpuAccess.nodeSettings.ascendRuntime: last-entry. GPUs reached without a request are "
            "counted by no quota, CRL or scheduler."
        )
        # One registry round trip for the image: /validate's lookup was answered by the cache.
        assert [
            row["result"]
            for row in (await hook.get("/images"))["images"]
            if row["image"].endswith("/public/npu-tools:v1")
        ] == ["no-cuda"]
        plain = f"{registry.host}/public/plain-tools:v1"
        stored, warnings, _ = await hook.mutate(pod(npu, container("side", plain)))
        assert {"name": "ASCEND_VISIBLE_DEVICES", "value": ""} in stored["spec"]["containers"][1][
            "env"
        ]
        assert not [w for w in warnings if "ASCEND_VISIBLE_DEVICES=" in w]
        reply = await hook.http.post("/validate", json=admission_review(stored))
        assert (await reply.json())["response"]["allowed"] is True
        # The registry cannot answer: the voids are written, the pod admitted, the lookup said.
        down = f"{down_host}/team/tools:1"
        stored, warnings, _ = await hook.mutate(pod(npu, container("side", down)))
        assert {"name": "ASCEND_VISIBLE_DEVICES", "value": ""} in stored["spec"]["containers"][1][
            "env"
        ]
        assert (
            f"Image config lookup of {down}: cannot connect to 127.0.0.1: Connection refused"
            in (warnings)
        )
    finally:
        await hook.ops.close()
        await hook.http.close()
