"""The sources with in-cluster configuration, as in a pod: KUBERNETES_SERVICE_HOST/PORT, the
service-account token and CA files, HTTPS to the API server, and a token the kubelet rotates."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fakekube import CONFIGMAPS, NODES, FakeKube, crl_configmap, node, running
from tests.helpers import eventually
from webhook.core.config.model import WebhookConfig
from webhook.sources.kubeapi import ServiceAccount, load_configuration
from webhook.sources.nodes import NodeSource
from webhook.sources.policies import ConfigMapWatcher
from webhook.sources.store import PolicyStore

GPU = "nvidia.com/gpu"
FAST: dict[str, Any] = {"backoff_initial": 0.01, "backoff_max": 0.05, "debounce_seconds": 0.01}


@dataclass
class Pod:
    """What the kubelet gives a pod: the API server's address in the environment, and the
    projected service-account volume (token, ca.crt)."""

    kube: FakeKube
    token_file: Path

    def account(self, refresh_seconds: float = 60.0) -> ServiceAccount:
        assert self.kube.ca_file is not None
        return ServiceAccount(str(self.token_file), str(self.kube.ca_file), refresh_seconds)

    def rotate(self, token: str) -> None:
        # The kubelet's AtomicWriter swaps the file in one rename: never a half-written token.
        staged = self.token_file.with_name(".token.new")
        staged.write_text(token, encoding="utf-8")
        staged.replace(self.token_file)


@pytest.fixture
async def pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Pod]:
    tls = tmp_path / "tls"
    tls.mkdir()
    async with FakeKube(token="sa-token-1", tls_directory=tls) as kube:
        kube.put(crl_configmap("cf-crl-nvidia-gpu", GPU, group="nvidia"))
        kube.put(node("gpu-1", {"cuda-major-version": "12", "cuda-minor-version": "4"}))
        token_file = tmp_path / "serviceaccount" / "token"
        token_file.parent.mkdir()
        token_file.write_text("sa-token-1", encoding="utf-8")
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(kube.port))
        pod = Pod(kube, token_file)
        # Guard first: the in-cluster configuration must point at the fake, or a failed load
        # would fall back to a developer's ~/.kube/config and its cluster.
        configuration = await load_configuration(None, pod.account())
        assert configuration.host == f"https://127.0.0.1:{kube.port}"
        yield pod


def watch_authorizations(kube: FakeKube, resource: str) -> list[str]:
    return [r.authorization for r in kube.watches(resource)]


async def test_policies_and_nodes_are_read_with_the_service_account(pod: Pod) -> None:
    kube, store = pod.kube, PolicyStore()
    policies = ConfigMapWatcher(store, service_account=pod.account(), **FAST)
    nodes = NodeSource(store, WebhookConfig(), service_account=pod.account(), **FAST)
    async with running(policies), running(nodes):
        await eventually(
            lambda: kube.open_watches_of(CONFIGMAPS) == 1 and kube.open_watches_of(NODES) == 1,
            "both watches are open",
        )
    assert store.ready
    assert list(store.current.by_key) == [GPU]
    assert store.inventory is not None
    assert dict(store.inventory.nodes["gpu-1"]) == {
        "cuda-major-version": "12",
        "cuda-minor-version": "4",
    }
    # Over HTTPS verified with the pod's ca.crt, with the token of the file on every request.
    assert kube.url.startswith("https://")
    assert {r.authorization for r in kube.requests} == {"Bearer sa-token-1"}
    assert (store.stats.errors, store.watched["Node"].errors) == (0, 0)


async def test_a_rotated_token_file_is_read_again_without_a_failure(pod: Pod) -> None:
    # Period 0: the file is read before every request (60 s in a pod, as client-go does).
    kube, store = pod.kube, PolicyStore()
    async with running(ConfigMapWatcher(store, service_account=pod.account(0), **FAST)):
        await eventually(lambda: kube.open_watches == 1, "the watch is open")
        pod.rotate("sa-token-2")
        kube.tokens = {"sa-token-2"}  # the old one is no longer accepted
        kube.end_watches()
        await eventually(lambda: len(kube.watches()) == 2, "the second watch is sent")
        await eventually(lambda: kube.open_watches == 1, "the second watch is open")
    assert watch_authorizations(kube, CONFIGMAPS) == ["Bearer sa-token-1", "Bearer sa-token-2"]
    assert store.stats.errors == 0


async def test_a_revoked_token_is_replaced_from_the_file_after_one_401(pod: Pod) -> None:
    # The default period: the webhook still holds the old token when the API server stops
    # accepting it (a deleted service account token); the 401 makes it build a new client,
    # which reads the file again.
    kube, store = pod.kube, PolicyStore()
    async with running(ConfigMapWatcher(store, service_account=pod.account(), **FAST)):
        await eventually(lambda: kube.open_watches == 1, "the watch is open")
        pod.rotate("sa-token-2")
        kube.tokens = {"sa-token-2"}
        kube.end_watches()
        await eventually(lambda: len(kube.watches()) == 3, "the third watch is sent")
        await eventually(lambda: kube.open_watches == 1, "the third watch is open")
    assert watch_authorizations(kube, CONFIGMAPS) == [
        "Bearer sa-token-1",
        "Bearer sa-token-1",  # refused: 401
        "Bearer sa-token-2",
    ]
    assert store.stats.errors == 1
    assert store.stats.last_error == (
        f"https://127.0.0.1:{kube.port} rejected the webhook's credentials: 401 Unauthorized: "
        "Unauthorized; check the service account token (in a cluster) or the user in the "
        "kubeconfig"
    )
    assert list(store.current.by_key) == [GPU]  # kept through the 401
