"""The decision cache (webhook/admission/decisions.py): a review that differs from an earlier one
only in its uid gets that answer with its own uid, and exactly what the full evaluation gives.

Bodies are sent as the API server writes them: compact JSON, `request.uid` first (Go's
encoding/json writes AdmissionRequest's fields in declaration order, UID first).
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fakekube import node
from tests.helpers import container, crl, pod, standard_policies, workload
from tests.integration.helpers import (
    TEST_POLICIES,
    RunningServer,
    crl_configmap,
    metric_samples,
    ready_store,
    serve_in_thread,
)
from webhook.admission.app import create_app
from webhook.core.config.model import WebhookConfig
from webhook.core.placement.inventory import NodeInventory
from webhook.core.policies.policyset import PolicySet
from webhook.sources.store import PolicyStore
from webhook.tls.certs import CertPaths, CertReloader

CACHE_BYTES = 1024 * 1024


def body(obj: dict[str, Any], uid: str, *, operation: str = "CREATE", name: str = "") -> bytes:
    """An AdmissionReview in the API server's field order and compact form."""
    meta = obj.get("metadata", {})
    group, _, version = obj.get("apiVersion", "v1").rpartition("/")
    request = {
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": obj.get("kind", "")},
        "resource": {"group": group, "version": version, "resource": "pods"},
        "name": name or meta.get("name", ""),
        "namespace": meta.get("namespace", "ml"),
        "operation": operation,
        "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
        "object": obj,
        "oldObject": None,
        "dryRun": False,
    }
    review = {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request}
    return json.dumps(review, separators=(",", ":")).encode()


def generated(obj: dict[str, Any], name: str = "") -> dict[str, Any]:
    """`obj` as a controller creates it (`generateName`), with what the API server sets per
    pod: managedFields with the request's time; and with `name`, as the validating call sees
    it: the generated name, a uid and a creationTimestamp (rest.BeforeCreate)."""
    now = f"2026-11-23T10:{next(_SECONDS) % 60:02d}:00Z"
    meta: dict[str, Any] = {"generateName": "train-7d9f8b6c5-", "namespace": "ml"}
    if name:
        meta = {"name": name, **meta, "uid": str(uuid.uuid4()), "creationTimestamp": now}
    meta["managedFields"] = [
        {
            "manager": "kube-controller-manager",
            "operation": "Update",
            "apiVersion": "v1",
            "time": now,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:containers": {}}},
        }
    ]
    return {**obj, "metadata": meta}


_SECONDS = itertools.count()


def answer(server: RunningServer, endpoint: str, data: bytes) -> dict[str, Any]:
    reply = server.request("POST", endpoint, data)
    assert reply.status == 200, reply.text
    result: dict[str, Any] = reply.json()
    return result


@pytest.fixture(scope="module")
def servers(tls: CertPaths, policy_dir: Path) -> Iterator[tuple[RunningServer, RunningServer]]:
    """The same store served twice: with the decision cache, and without (the full path)."""
    store = ready_store(policy_dir)
    reloader = CertReloader(tls.cert, tls.key)
    cached = create_app(
        WebhookConfig(),
        store,
        cert_reloader=reloader,
        cert_reload_interval=0,
        decision_cache_bytes=CACHE_BYTES,
    )
    full = create_app(WebhookConfig(), store, cert_reloader=reloader, cert_reload_interval=0)
    with (
        serve_in_thread(cached, reloader.context, tls.ca_cert, store) as with_cache,
        serve_in_thread(full, reloader.context, tls.ca_cert, store) as without,
    ):
        yield with_cache, without


def _hits(server: RunningServer) -> float:
    samples = metric_samples(server.request("GET", "/metrics").text)
    return samples["gpu_webhook_decision_cache_hits_total"]


def test_replica_pods_get_the_first_answer_with_their_own_uid(
    servers: tuple[RunningServer, RunningServer],
) -> None:
    cached, full = servers
    replica = generated(
        pod(container("train", image="nvidia/cuda:12.4.1-runtime", limits={"nvidia.com/gpu": "1"}))
    )
    before = _hits(cached)
    first = answer(cached, "/mutate", body(replica, "11111111-aaaa"))
    second = answer(cached, "/mutate", body(replica, "22222222-bbbb"))
    expected = answer(full, "/mutate", body(replica, "22222222-bbbb"))
    assert _hits(cached) == before + 1
    assert first["response"]["uid"] == "11111111-aaaa"
    assert second == expected
    assert second["response"]["uid"] == "22222222-bbbb"
    assert second["response"]["patchType"] == "JSONPatch"


def test_a_denial_names_its_own_object_never_an_earlier_one(
    servers: tuple[RunningServer, RunningServer],
) -> None:
    cached, _ = servers
    bad = {"tencent.com/vcuda-core": "150"}
    asking = pod(container("a", image="nvidia/cuda:12.4.1-runtime", limits=bad))
    one, two = generated(asking, "train-7d9f8b6c5-first"), generated(asking, "train-7d9f8b6c5-two")
    denied_one = answer(cached, "/validate", body(one, "u-1"))
    denied_two = answer(cached, "/validate", body(two, "u-2"))
    assert denied_one["response"]["allowed"] is False
    assert "ml/train-7d9f8b6c5-first" in denied_one["response"]["status"]["message"]
    assert "ml/train-7d9f8b6c5-two" in denied_two["response"]["status"]["message"]
    assert "first" not in denied_two["response"]["status"]["message"]


def test_a_policy_change_empties_the_cache(servers: tuple[RunningServer, RunningServer]) -> None:
    cached, full = servers
    store: PolicyStore = cached.store
    asking = generated(
        pod(container("a", image="nvidia/cuda:12.4.1-runtime", limits={"gpu.example/x": "5"})),
        "train-7d9f8b6c5-xxxxx",
    )
    policies = store.current
    try:
        allowed = answer(cached, "/validate", body(asking, "p-1"))
        assert allowed["response"]["allowed"] is True
        # A new CRL limits gpu.example/x to 2: the same body is now denied.
        extra = crl("gpu.example/x", "extra", max="2")
        store.replace(PolicySet.from_configmaps([*_configmaps(), extra]))
        now = answer(cached, "/validate", body(asking, "p-2"))
        assert now == answer(full, "/validate", body(asking, "p-2"))
        assert now["response"]["allowed"] is False
    finally:
        store.replace(policies)


def test_an_inventory_change_empties_the_cache(
    servers: tuple[RunningServer, RunningServer],
) -> None:
    cached, full = servers
    store: PolicyStore = cached.store
    gpu = generated(
        pod(container("a", image="nvidia/cuda:12.4.1-runtime", limits={"nvidia.com/gpu": "1"}))
    )
    try:
        answer(cached, "/mutate", body(gpu, "i-1"))
        store.inventory = _nodes("12.2")
        now = answer(cached, "/mutate", body(gpu, "i-2"))
        assert now == answer(full, "/mutate", body(gpu, "i-2"))
        assert any("12.2" in w for w in now["response"].get("warnings", [])), now
    finally:
        store.inventory = None


def test_a_uid_with_escapes_is_answered_with_the_uid_it_decodes_to(
    servers: tuple[RunningServer, RunningServer],
) -> None:
    """Past the byte key (which takes plain uids only), the parsed review's uid is echoed."""
    cached, full = servers
    gpu = generated(
        pod(container("a", image="nvidia/cuda:12.4.1-runtime", limits={"nvidia.com/gpu": "1"}))
    )
    answer(cached, "/mutate", body(gpu, "plain-1"))
    escaped = body(gpu, "plain-1").replace(b'"uid":"plain-1"', b'"uid":"pl\\u0061in-2"')
    reply = answer(cached, "/mutate", escaped)
    assert reply["response"]["uid"] == "plain-2"
    assert reply == answer(full, "/mutate", escaped)


def test_objects_with_a_name_of_their_own_are_not_cached(
    servers: tuple[RunningServer, RunningServer],
) -> None:
    """Only what the API server names (generateName) repeats byte for byte."""
    cached, _ = servers
    named = pod(container("a", image="nvidia/cuda:12.4.1-runtime", limits={"nvidia.com/gpu": "1"}))
    answer(cached, "/mutate", body(named, "named-1"))
    before = _hits(cached)
    assert answer(cached, "/mutate", body(named, "named-2"))["response"]["uid"] == "named-2"
    assert _hits(cached) == before


def _configmaps() -> list[dict[str, Any]]:
    return [crl_configmap(name, data) for name, data in TEST_POLICIES.items()]


def _nodes(*cuda: str) -> NodeInventory:
    """An inventory of GPU Feature Discovery-labelled nodes, one per CUDA version."""
    return NodeInventory.from_objects(
        [
            node(
                f"gpu-{index}",
                {
                    "nvidia.com/cuda.runtime-version.major": version.split(".")[0],
                    "nvidia.com/cuda.runtime-version.minor": version.split(".")[1],
                },
            )
            for index, version in enumerate(cuda)
        ]
    )


# The property: for random pods and workloads, under random snapshots, the cached server's
# answer to a replayed body equals the full path's answer to it, byte for byte after decoding.
keys = st.sampled_from(
    ["nvidia.com/gpu", "tencent.com/vcuda-core", "tencent.com/vcuda-memory", "cpu", "memory"]
)
values = st.sampled_from(["0", "1", "2", "50", "100", "150", "500m", "4Gi", "x"])
images = st.sampled_from(
    [
        "nvidia/cuda:12.4.1-runtime-ubuntu22.04",
        "nvidia/cuda:11.8.0-base",
        "paddlepaddle/paddle:2.6.1-gpu-cuda11.8-cudnn8.6-trt8.5",
        "nginx:1.27",
        "nvcr.io/nvidia/tritonserver:24.05-py3",
        "example.invalid/unknown:1",
    ]
)
containers = st.lists(
    st.builds(
        lambda name, image, limits, env: container(
            name, image=image, limits=limits, env=env or None
        ),
        st.sampled_from(["a", "b", "c"]),
        images,
        st.dictionaries(keys, values, max_size=3),
        st.lists(
            st.fixed_dictionaries(
                {
                    "name": st.sampled_from(["CUDA_VERSION", "X", "FLAGS_allocator_strategy"]),
                    "value": st.sampled_from(["11.8", "12.4", "1", "auto_growth"]),
                }
            ),
            max_size=2,
        ),
    ),
    min_size=1,
    max_size=3,
    unique_by=lambda c: c["name"],
)
# Replica pods (what the cache keeps), and workloads (never kept: they have names).
objects = st.builds(
    lambda cs, kind: generated(pod(*cs)) if kind == "Pod" else workload(kind, pod(*cs)),
    containers,
    st.sampled_from(["Pod", "Pod", "Pod", "Deployment", "Job"]),
)
snapshots = st.sampled_from(["standard", "none", "nodes"])


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(obj=objects, endpoint=st.sampled_from(["/mutate", "/validate"]), snapshot=snapshots)
def test_property_cached_answer_equals_full_evaluation(
    servers: tuple[RunningServer, RunningServer], obj: dict[str, Any], endpoint: str, snapshot: str
) -> None:
    cached, full = servers
    store: PolicyStore = cached.store
    policies, inventory = store.current, store.inventory
    try:
        if snapshot == "none":
            store.replace(PolicySet.empty())
        elif snapshot == "nodes":
            store.replace(standard_policies())
            store.inventory = _nodes("12.4", "11.8")
        if endpoint == "/validate" and obj["kind"] == "Pod":
            obj = generated(obj, "train-7d9f8b6c5-zzzzz")
        answer(cached, endpoint, body(obj, "first-uid"))
        before = _hits(cached)
        replayed = answer(cached, endpoint, body(obj, "second-uid"))
        assert replayed == answer(full, endpoint, body(obj, "second-uid"))
        # Every replica's second review is answered from the cache.
        assert _hits(cached) == before + (obj["kind"] == "Pod")
    finally:
        store.replace(policies)
        store.inventory = inventory


def _replica(name: str, limits: dict[str, str], container_name: str = "train") -> dict[str, Any]:
    """A replica as /validate sees it: its generated name, from `generateName`."""
    obj = pod(container(container_name, image="nvidia/cuda:12.4.1-runtime", limits=limits))
    obj["metadata"] = {"name": name, "generateName": "train-7d9f8b6c5-", "namespace": "ml"}
    return obj


def test_replicas_validating_calls_share_a_plain_allowed_answer_across_names(
    servers: tuple[RunningServer, RunningServer],
) -> None:
    cached, full = servers
    gpu = {"nvidia.com/gpu": "1"}
    answer(cached, "/validate", body(_replica("train-7d9f8b6c5-aaaaa", gpu), "v-1"))
    before = _hits(cached)
    second = answer(cached, "/validate", body(_replica("train-7d9f8b6c5-bbbbb", gpu), "v-2"))
    assert _hits(cached) == before + 1
    assert second == answer(full, "/validate", body(_replica("train-7d9f8b6c5-bbbbb", gpu), "v-2"))
    assert second["response"] == {"uid": "v-2", "allowed": True}


def test_denials_and_names_found_elsewhere_in_the_body_are_never_shared_across_names(
    servers: tuple[RunningServer, RunningServer],
) -> None:
    cached, full = servers
    bad = {"tencent.com/vcuda-core": "150"}
    answer(cached, "/validate", body(_replica("train-7d9f8b6c5-ccccc", bad), "d-1"))
    denied = answer(cached, "/validate", body(_replica("train-7d9f8b6c5-ddddd", bad), "d-2"))
    assert "train-7d9f8b6c5-ddddd" in denied["response"]["status"]["message"]
    assert "ccccc" not in denied["response"]["status"]["message"]
    # The container is named like the pod: blanking the name would blank it too.
    gpu = {"nvidia.com/gpu": "1"}
    same = _replica("x-eeeee", gpu, container_name="x-eeeee")
    answer(cached, "/validate", body(same, "e-1"))
    before = _hits(cached)
    other = _replica("x-fffff", gpu, container_name="x-fffff")
    assert answer(cached, "/validate", body(other, "e-2")) == answer(
        full, "/validate", body(other, "e-2")
    )
    assert _hits(cached) == before


names = st.sampled_from(["a", "b", "p1", "pods", "12.4", "train-7d9f8b6c5-aaaaa", "x-1"])


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(obj=objects, first=names, second=names)
def test_property_a_validating_answer_under_another_name_equals_full_evaluation(
    servers: tuple[RunningServer, RunningServer], obj: dict[str, Any], first: str, second: str
) -> None:
    """Names are drawn from what else the body holds (container names, a CUDA version, the
    resource), so blanking a name must never make two different objects look alike."""
    cached, full = servers
    one, two = generated(obj, first), generated(obj, second)
    answer(cached, "/validate", body(one, "n-1"))
    replayed = answer(cached, "/validate", body(two, "n-2"))
    assert replayed == answer(full, "/validate", body(two, "n-2"))
