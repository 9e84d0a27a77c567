"""End-to-end fixtures: a real cluster from E2E_KUBECONFIG / --kubeconfig, or every test skipped.

Two ways the webhook can be wired into that cluster (E2E_MODE):
- `chart` (default): installed by the Helm chart (`make e2e-kind` does that on kind);
- `url`: running outside the cluster and registered by URL with
  `scripts/register-webhook-url.py` (works on a bare API server without nodes).
Either way the webhook must read its policies from the cluster's kube-public, with the
shipped configmaps/ installed there, so the tests can predict every message with the same
evaluation core the webhook runs.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_POLICIES = ROOT / "configmaps"
CRL_TYPE_LABEL = "features.alauda.io/type"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("e2e", "end-to-end tests against a real cluster")
    group.addoption(
        "--kubeconfig",
        dest="e2e_kubeconfig",
        default=None,
        help="kubeconfig of the cluster to test (default: $E2E_KUBECONFIG; none: skip e2e)",
    )
    group.addoption(
        "--e2e-mode",
        dest="e2e_mode",
        default=None,
        choices=("chart", "url"),
        help="how the webhook is installed: chart or url (default: $E2E_MODE or chart)",
    )


def _option(config: pytest.Config, name: str) -> str | None:
    # The options exist only when this conftest was loaded at start-up (tests/e2e given on the
    # command line); with a plain `pytest` the environment variables still work.
    try:
        value = config.getoption(name)
    except ValueError:
        return None
    return str(value) if value else None


@dataclass(frozen=True)
class Cluster:
    """Where the tests run and how the webhook was installed there."""

    kubeconfig: Path
    mode: str
    api: Any  # kubernetes.client.ApiClient


@pytest.fixture(scope="session")
def cluster(pytestconfig: pytest.Config) -> Iterator[Cluster]:
    kubeconfig = _option(pytestconfig, "e2e_kubeconfig") or os.environ.get("E2E_KUBECONFIG")
    if not kubeconfig:
        pytest.skip(
            "end-to-end tests need a cluster: set E2E_KUBECONFIG=PATH or pass --kubeconfig PATH "
            "(`make e2e-kind` creates a kind cluster and runs them)"
        )
    path = Path(kubeconfig).expanduser()
    if not path.is_file():
        pytest.fail(f"E2E kubeconfig {path} does not exist", pytrace=False)
    mode = _option(pytestconfig, "e2e_mode") or os.environ.get("E2E_MODE", "chart")
    if mode not in ("chart", "url"):
        pytest.fail(f"E2E_MODE must be chart or url, got {mode!r}", pytrace=False)
    kubernetes = pytest.importorskip("kubernetes", reason="the kubernetes client is not installed")
    api = kubernetes.config.new_client_from_config(config_file=str(path))
    try:
        yield Cluster(path, mode, api)
    finally:
        api.close()


@pytest.fixture(autouse=True)
def _require_cluster(cluster: Cluster) -> None:
    """Every e2e test needs the cluster (and is skipped, with the reason, without one)."""


@pytest.fixture(scope="session")
def core(cluster: Cluster) -> Any:
    from kubernetes import client

    return client.CoreV1Api(cluster.api)


@pytest.fixture(scope="session")
def apps(cluster: Cluster) -> Any:
    from kubernetes import client

    return client.AppsV1Api(cluster.api)


@pytest.fixture(scope="session")
def webhook_installed(cluster: Cluster) -> list[str]:
    """Names of the webhooks registered for gpu-admission-webhook; skips when there are none."""
    from kubernetes import client

    registration = client.AdmissionregistrationV1Api(cluster.api)
    selector = "app.kubernetes.io/name=gpu-admission-webhook"
    names = [
        hook.name
        for config in registration.list_validating_webhook_configuration(
            label_selector=selector
        ).items
        for hook in config.webhooks or []
    ]
    if not names:
        how = (
            "helm install ... charts/gpu-admission-webhook"
            if cluster.mode == "chart"
            else "scripts/register-webhook-url.py --url https://HOST:PORT --ca-file CA"
        )
        pytest.skip(f"no gpu-admission-webhook is registered in this cluster: run {how}")
    return names


@pytest.fixture(scope="session")
def shipped_policies_installed(core: Any, webhook_installed: list[str]) -> None:
    """The expected messages come from configmaps/: they must be what the cluster runs."""
    import yaml

    shipped = {
        doc["metadata"]["name"]
        for path in sorted(SHIPPED_POLICIES.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if doc
    }
    present = {cm.metadata.name for cm in core.list_namespaced_config_map("kube-public").items}
    missing = sorted(shipped - present)
    if missing:
        pytest.skip(
            f"the shipped CRL ConfigMaps are not installed in kube-public ({', '.join(missing)}): "
            "helm install with --set policies.install=true, or kubectl apply -f configmaps/"
        )


@pytest.fixture(scope="session")
def namespace(core: Any, shipped_policies_installed: None) -> Iterator[str]:
    """A fresh namespace for the session's objects, deleted afterwards."""
    from kubernetes import client

    name = f"gaw-e2e-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        core.delete_namespace(name)


def api_error(exc: Exception) -> dict[str, Any]:
    """The Status object of a failed API call."""
    body = getattr(exc, "body", None) or "{}"
    status: dict[str, Any] = json.loads(body)
    return status
