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


def test_replica_pods_are_answered_from_the_decision_cache(core: Any, namespace: str) -> None:
    if not WEBHOOK_URL or not WEBHOOK_CA:
        pytest.skip("E2E_WEBHOOK_URL/E2E_WEBHOOK_CA not set (make e2e-kapi sets them)")
    pod = gpu_pod("unused", {"tencent.com/vcuda-core": "50"})
    pod["metadata"] = {"generateName": unique("replica") + "-"}
    before = _counter("gpu_webhook_decision_cache_hits_total")
    created = [call(core.create_namespaced_pod, namespace, pod) for _ in range(3)]
    hits = _counter("gpu_webhook_decision_cache_hits_total") - before
    # Pods 2 and 3: their mutating call (same bytes but the uid) and their validating call
    # (another generated name) both come from the cache, for the one entry the pod is sent to:
    # the pods entry under warn (the access entry, Ignore, leaves it the pod CREATEs it
    # reviews), the access entry (Fail) under enforce outside its exempt namespaces
    # (docs/operations/server.md, "Reviews per pod"). The first pod's calls are misses.
    assert hits == 2 * 2, hits
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
