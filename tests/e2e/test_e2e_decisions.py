"""The decision cache against the real API server's bytes: the pods a controller creates
(`generateName`) get their answers from it, and exactly the answer the first pod got.

Needs the webhook's own address to read its metrics: `make e2e-kapi` sets E2E_WEBHOOK_URL and
E2E_WEBHOOK_CA (url mode); elsewhere the test skips and says so.
"""

from __future__ import annotations

import os
import ssl
import urllib.request
from typing import Any

import pytest

from webhook.core.config.model import WebhookConfig

from .test_e2e_admission import call, gpu_pod, unique

WEBHOOK_URL = os.environ.get("E2E_WEBHOOK_URL", "")
WEBHOOK_CA = os.environ.get("E2E_WEBHOOK_CA", "")


def _counter(name: str) -> float:
    context = ssl.create_default_context(cafile=WEBHOOK_CA)
    with urllib.request.urlopen(f"{WEBHOOK_URL}/metrics", context=context, timeout=10) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"no {name} in the webhook's /metrics")


def test_replica_pods_are_answered_from_the_decision_cache(
    core: Any, namespace: str, webhook_config: WebhookConfig
) -> None:
    if not WEBHOOK_URL or not WEBHOOK_CA:
        pytest.skip("E2E_WEBHOOK_URL/E2E_WEBHOOK_CA not set (make e2e-kapi sets them)")
    pod = gpu_pod("unused", {"tencent.com/vcuda-core": "50"})
    pod["metadata"] = {"generateName": unique("replica") + "-"}
    before = _counter("gpu_webhook_decision_cache_hits_total")
    created = [call(core.create_namespaced_pod, namespace, pod) for _ in range(3)]
    hits = _counter("gpu_webhook_decision_cache_hits_total") - before
    # Pods 2 and 3: their mutating call (same bytes but the uid) and their validating call
    # (another generated name) both come from the cache, for each entry the pod is sent to: the
    # pods entry, and the gpu-access entry (every pod) under warn. Under enforce the access
    # entry (Fail) alone reviews pods outside its exempt namespaces: one entry
    # (docs/operations/server.md, "Reviews per pod"). With both, the first pod's second
    # validating call may be a hit too (the same bytes as the first's), but only if it arrives
    # after the first one's answer was stored: the API server calls validating webhooks in
    # parallel (k8s.io/apiserver pkg/admission/plugin/webhook/validating/dispatcher.go, one
    # goroutine per webhook). Its second mutating call is not (it carries the first's patch).
    entries = 2 if webhook_config.gpu_access.mode == "warn" else 1
    assert 2 * 2 * entries <= hits <= (entries - 1) + 2 * 2 * entries, hits
    names = {obj["metadata"]["name"] for obj, _ in created}
    assert len(names) == 3
    first, first_warnings = created[0]
    # The webhook's defaults reached every pod (vcuda-memory from its CRL), and the same notes.
    assert "tencent.com/vcuda-memory" in first["spec"]["containers"][0]["resources"]["limits"]
    assert first_warnings
    for obj, warnings in created[1:]:
        assert obj["spec"]["containers"] == first["spec"]["containers"]
        assert obj["spec"].get("affinity") == first["spec"].get("affinity")
        assert warnings == first_warnings
