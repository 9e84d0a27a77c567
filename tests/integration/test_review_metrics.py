"""What the per-review counters of /metrics say after exact reviews (ReviewCounts.evaluated):
violations by CRL policy and rule, placements by rule, GPU containers and unknown CUDA
versions by reason; answers from the decision cache count as the full path's do.

Registry lookups (cache hits and misses, over budget, late answers, and the reasons they give
for an unknown CUDA version) are in test_registry_admission.py."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.helpers import GPU, GPUCORES, VMEM, container, pod, standard_policies
from tests.integration.helpers import metric_samples
from tests.integration.test_decision_cache import body, generated
from webhook.admission.app import create_app
from webhook.admission.review_counts import MAX_POLICY_LABELS, ReviewCounts
from webhook.core.config.model import WebhookConfig
from webhook.sources.store import PolicyStore

_UIDS = (f"00000000-0000-4000-8000-{n:012d}" for n in itertools.count())


@pytest.fixture
async def http() -> AsyncIterator[TestClient[Any, Any]]:
    store = PolicyStore()
    store.replace(standard_policies())
    # Registry lookups off (the default): an unknown CUDA version is "lookups-off".
    app = create_app(WebhookConfig(), store, decision_cache_bytes=1 << 20)
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    yield client
    await client.close()


async def answer(http: TestClient[Any, Any], endpoint: str, obj: dict[str, Any]) -> Any:
    headers = {"Content-Type": "application/json"}
    reply = await http.post(f"/{endpoint}", data=body(obj, next(_UIDS)), headers=headers)
    assert reply.status == 200
    return (await reply.json())["response"]


def counters(text: str, *prefixes: str) -> dict[str, float]:
    return {
        series: value
        for series, value in metric_samples(text).items()
        if series.startswith(prefixes) and "_created" not in series
    }


NEW = (
    "gpu_webhook_violations_total",
    "gpu_webhook_placements_total",
    "gpu_webhook_cuda_unknown_total",
    "gpu_webhook_gpu_containers_total",
)


async def test_counters_after_exact_reviews(http: TestClient[Any, Any]) -> None:
    known = pod(container("c", "nvidia/cuda:12.4.1", limits={GPU: "1"}))
    two = pod(
        container("a", "nvidia/cuda:12.4.1", limits={GPU: "1"}),
        container("b", "registry.example/team/app:1", limits={GPU: "1"}),
        container("cpu", "registry.example/team/side:1"),
    )
    over = pod(
        container("c", "nvidia/cuda:12.4.1", limits={GPU: "1", GPUCORES: "150"}),
        container("d", "busybox:1.36", limits={VMEM: "4"}, requests={VMEM: "2"}),
    )
    # A replica's pod twice: the second answer comes from the decision cache.
    replica = generated(known)
    assert (await answer(http, "mutate", replica))["patchType"] == "JSONPatch"
    assert (await answer(http, "mutate", replica))["patchType"] == "JSONPatch"
    await answer(http, "mutate", two)
    assert (await answer(http, "validate", known))["allowed"] is True
    denied = await answer(http, "validate", over)
    assert denied["allowed"] is False
    await answer(http, "validate", over)
    text = await (await http.get("/metrics")).text()
    assert metric_samples(text)["gpu_webhook_decision_cache_hits_total"] == 1
    assert counters(text, *NEW) == {
        'gpu_webhook_violations_total{policy="cf-crl-hami-gpucores",rule="max"}': 2.0,
        'gpu_webhook_violations_total{policy="cf-crl-gpu-manager-vcuda-memory",'
        'rule="requests: disabled"}': 2.0,
        'gpu_webhook_violations_total{policy="cf-crl-gpu-manager-vcuda-memory",'
        'rule="requests = limits"}': 2.0,
        'gpu_webhook_placements_total{rule="backward"}': 3.0,
        'gpu_webhook_cuda_unknown_total{reason="lookups-off",runtime="cuda"}': 1.0,
        # /mutate only: the replica twice, then two of the three containers of `two`.
        'gpu_webhook_gpu_containers_total{runtime="cuda"}': 4.0,
    }


async def test_a_pod_that_is_not_placed_counts_its_containers_only(
    http: TestClient[Any, Any],
) -> None:
    opted_out = pod(
        container("c", "registry.example/team/app:1", limits={GPU: "1"}),
        annotations={"features.alauda.io/cuda-affinity": "false"},
    )
    await answer(http, "mutate", opted_out)
    text = await (await http.get("/metrics")).text()
    assert counters(text, *NEW) == {'gpu_webhook_gpu_containers_total{runtime="cuda"}': 1.0}


def test_policy_labels_are_the_first_ones_then_other_and_rules_are_bounded() -> None:
    counts = ReviewCounts()
    for n in range(MAX_POLICY_LABELS + 3):
        counts.evaluated((), (), ((f"kube-public/cf-crl-{n}", f"max: {n}"),), ())
    counts.evaluated((), (), (("", "cuda"), ("kube-public/cf-crl-0", "made up")), ())
    expected = {(f"cf-crl-{n}", "max"): 1 for n in range(MAX_POLICY_LABELS)}
    expected[("other", "max")] = 3
    expected[("gpu-admission-webhook", "cuda")] = 1
    expected[("cf-crl-0", "other")] = 1
    assert counts.violations == expected
    unknown = (("CUDA", "slow"), ("CUDA", "made-up"), ("ROCm", "lookups-off"), ("x", "slow"))
    counts.evaluated(("CUDA", "ROCm", "made-up"), ("backward", "made-up"), (), unknown)
    assert counts.placements == {"backward": 1, "other": 1}
    assert counts.cuda_unknown == {
        ("slow", "cuda"): 1,
        ("other", "cuda"): 1,
        ("lookups-off", "rocm"): 1,
        ("slow", "other"): 1,
    }
    assert counts.gpu_containers == {"cuda": 1, "rocm": 1, "other": 1}


async def test_every_vendor_counts_its_containers_and_unknown_runtimes_by_runtime(
    http: TestClient[Any, Any],
) -> None:
    """One pod of each family whose runtime version nothing tells, and a ROCm pod whose tag
    names it: the same two series count them, labelled by runtime."""
    pods = [
        pod(container("c", "registry.example/team/cuda-app:1", limits={GPU: "1"})),
        pod(container("r", "registry.example/team/rocm-app:1", limits={"amd.com/gpu": "1"})),
        pod(container("a", "registry.example/team/npu-app:1", limits={"huawei.com/npu": "1"})),
        pod(
            container("k", "rocm/vllm:rocm7.0.0_vllm_0.10.2_20251006", limits={"amd.com/gpu": "1"})
        ),
    ]
    for obj in pods:
        await answer(http, "mutate", obj)
    text = await (await http.get("/metrics")).text()
    assert counters(text, "gpu_webhook_cuda_unknown_total", "gpu_webhook_gpu_containers") == {
        'gpu_webhook_cuda_unknown_total{reason="lookups-off",runtime="cuda"}': 1.0,
        'gpu_webhook_cuda_unknown_total{reason="lookups-off",runtime="rocm"}': 1.0,
        'gpu_webhook_cuda_unknown_total{reason="lookups-off",runtime="cann"}': 1.0,
        'gpu_webhook_gpu_containers_total{runtime="cuda"}': 1.0,
        'gpu_webhook_gpu_containers_total{runtime="rocm"}': 2.0,
        'gpu_webhook_gpu_containers_total{runtime="cann"}': 1.0,
    }
