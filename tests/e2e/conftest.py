"""End-to-end fixtures: a real cluster from E2E_KUBECONFIG / --kubeconfig, or every test skipped.

Two ways the webhook can be wired into that cluster (E2E_MODE):
- `chart` (default): installed by the Helm chart (`make e2e-kind` does that on kind);
- `url`: running outside the cluster and registered by URL with
  `scripts/register-webhook-url.py` (works on a bare API server without nodes).
Either way the webhook must read its policies from the cluster's kube-public, with the
shipped configmaps/ installed there, so the tests can predict every message with the same
evaluation core the webhook runs. The webhook's config is the chart's default (the built-in
defaults) unless E2E_WEBHOOK_CONFIG names the config file the webhook runs with (`gpu-webhook
serve --config FILE` in url mode, the chart's `config` values in chart mode).
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.placement.dra import DraNode
from webhook.core.placement.dra import from_objects as dra_from_objects
from webhook.core.placement.inventory import NodeInventory
from webhook.core.policies.policyset import PolicySet
from webhook.sources.files import load_policy_dir

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


# What scripts/e2e-kapi.sh exports with KAPI_CONTROLLERS=1: the kapi tools and their bin (for
# node.sh), and the session webhook's URL, CA and port (for a module's own webhook entries).
_SCHEDULER_ENV = {
    "tools": "E2E_KAPI_TOOLS",
    "bin": "E2E_KAPI_BIN",
    "url": "E2E_WEBHOOK_URL",
    "ca": "E2E_WEBHOOK_CA",
    "port": "E2E_WEBHOOK_PORT",
}


def real_scheduler(cluster: Cluster, what: str, *, webhook: bool = False) -> dict[str, str]:
    """The scheduling modules' `scheduler` fixture: `tools` and `bin` (and with `webhook` the
    session webhook's `url`, `ca`, `port`), or the module skipped, saying that `what` needs the
    real scheduler and a webhook registered by URL (KAPI_CONTROLLERS=1 scripts/e2e-kapi.sh)."""
    if os.environ.get("E2E_SCHEDULER") != "1" or cluster.mode != "url":
        pytest.skip(
            f"{what} needs the real scheduler and a webhook registered by URL: "
            "KAPI_CONTROLLERS=1 scripts/e2e-kapi.sh"
        )
    keys = list(_SCHEDULER_ENV) if webhook else ["tools", "bin"]
    found = {key: os.environ.get(_SCHEDULER_ENV[key], "") for key in keys}
    missing = [_SCHEDULER_ENV[key] for key in keys if not found[key]]
    if missing:
        pytest.skip(f"{what} needs {', '.join(missing)} (scripts/e2e-kapi.sh)")
    return found


@contextmanager
def kapi_nodes(
    core: Any,
    cluster: Cluster,
    scheduler: Mapping[str, str],
    nodes: Mapping[str, tuple[Mapping[str, str], str]],
    *,
    prefix: str,
    taint: str,
) -> Iterator[dict[str, str]]:
    """short name -> Node name: for each `short: (labels, capacity)` a Node `{prefix}-{short}`
    made by the kapi tools' node.sh (schedulable, Ready, that extended-resource capacity, no
    kubelet), tainted with `taint` (KEY=VALUE:EFFECT) so only pods that tolerate it land there;
    deleted on exit. `scheduler`: the module's fixture (`tools`, `bin` from scripts/e2e-kapi.sh)."""
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "PATH": f"{scheduler['bin']}:{os.environ.get('PATH', '')}",
    }
    names: dict[str, str] = {}
    try:
        for short, (labels, capacity) in nodes.items():
            name = f"{prefix}-{short}"
            subprocess.run(
                ["bash", str(Path(scheduler["tools"]) / "node.sh"), name,
                 *[f"{k}={v}" for k, v in labels.items()],
                 "--capacity", capacity, "--taint", taint],
                check=True, env=env, capture_output=True, timeout=60,
            )  # fmt: skip
            names[short] = name
        yield names
    finally:
        for name in names.values():
            core.delete_node(name)


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


@pytest.fixture(scope="session")
def policies() -> PolicySet:
    """The shipped policies (configmaps/), which the cluster must run (shipped_policies_installed):
    the expected messages of every module are computed from them."""
    return load_policy_dir(SHIPPED_POLICIES)


@pytest.fixture(scope="session")
def webhook_config() -> WebhookConfig:
    """The config the webhook under test runs with (see the module docstring)."""
    path = os.environ.get("E2E_WEBHOOK_CONFIG")
    # The chart's default values render exactly the built-in defaults (tests/chart checks it).
    return load_config(Path(path) if path else None)


InventoryReader = Callable[[], "dict[str, Any] | None"]


def _hook_client_config(cluster: Cluster) -> dict[str, Any] | None:
    """clientConfig of the first registered gpu-admission-webhook mutating webhook."""
    from kubernetes import client

    registration = client.AdmissionregistrationV1Api(cluster.api)
    selector = "app.kubernetes.io/name=gpu-admission-webhook"
    for configuration in registration.list_mutating_webhook_configuration(
        label_selector=selector
    ).items:
        for hook in configuration.webhooks or []:
            found: dict[str, Any] = cluster.api.sanitize_for_serialization(hook.client_config)
            return found
    return None


@pytest.fixture(scope="session")
def webhook_inventory(cluster: Cluster, webhook_installed: list[str]) -> InventoryReader:
    """Reads the webhook's GET /inventory (served on the admission port): by its URL when it was
    registered by URL, else through the API server's service proxy. Returns None when it cannot
    be reached (then the tests wait with dry runs instead)."""
    from kubernetes import client

    config = _hook_client_config(cluster)

    def by_url(url: str, ca_bundle: str | None) -> dict[str, Any] | None:
        # clientConfig.url is BASE + the webhook's path (/mutate); /inventory is beside it.
        base = url.rsplit("/", 1)[0]
        context = ssl.create_default_context(
            cadata=base64.b64decode(ca_bundle).decode() if ca_bundle else None
        )
        try:
            with urllib.request.urlopen(f"{base}/inventory", context=context, timeout=5) as reply:
                document: dict[str, Any] = json.loads(reply.read())
                return document
        except (OSError, ValueError):
            return None

    def by_proxy(service: dict[str, Any]) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        core = client.CoreV1Api(cluster.api)
        # The service proxy name `https:NAME:PORT` makes the API server speak TLS to the pod.
        name = f"https:{service['name']}:{service.get('port', 443)}"
        try:
            reply: Any = core.connect_get_namespaced_service_proxy_with_path(
                name, service["namespace"], "inventory", _preload_content=False
            )
            document: dict[str, Any] = json.loads(reply.data)
            return document
        except (ApiException, OSError, ValueError):
            return None

    def read() -> dict[str, Any] | None:
        if config is None:
            return None
        if config.get("url"):
            return by_url(config["url"], config.get("caBundle"))
        if config.get("service"):
            return by_proxy(config["service"])
        return None

    return read


def cluster_inventory(core: Any, config: WebhookConfig) -> NodeInventory:
    """The node inventory the webhook builds from this cluster's Nodes: the same core function,
    fed only the label keys the webhook keeps (webhook.sources.nodes does the same filtering)."""
    keys = config.inventory_label_keys
    nodes = {
        item.metadata.name: {k: v for k, v in (item.metadata.labels or {}).items() if k in keys}
        for item in core.list_node().items
    }
    return NodeInventory.build(nodes, config=config, dra=cluster_slices(core))


def cluster_slices(core: Any) -> dict[str, DraNode]:
    """What the cluster's DRA ResourceSlices publish per node, read as the webhook's slice
    source reads them (nothing when the API server does not serve resource.k8s.io/v1)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    custom = client.CustomObjectsApi(core.api_client)
    try:
        listing = custom.list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices")
    except ApiException as exc:
        if exc.status in (403, 404):
            return {}
        raise
    items = listing.get("items") if isinstance(listing, dict) else None
    return dra_from_objects(items if isinstance(items, list) else [])


# Bounded wait for Node changes to reach the webhook through its watch.
INVENTORY_PROPAGATION_SECONDS = 20.0


def synced_inventory(
    core: Any, read: InventoryReader, config: WebhookConfig
) -> tuple[NodeInventory | None, bool]:
    """The inventory the webhook evaluates with, once it agrees with the cluster's Nodes.

    Returns (inventory, confirmed): inventory None when the webhook has none (switched off, or
    it cannot read Nodes: it then places pods as without one); confirmed False when /inventory
    cannot be reached, so the caller cannot know the webhook has caught up.
    """
    deadline = time.monotonic() + INVENTORY_PROPAGATION_SECONDS
    shown: dict[str, Any] | None = None
    while True:
        local = cluster_inventory(core, config)
        document = read()
        if document is None:
            return local, False
        shown = document.get("nodeInventory", {})
        expected = local.to_json(config)
        if shown.get("available") is False:
            # Switched off: final. Otherwise it may still be waiting for its first list; past
            # the deadline it places pods as without an inventory, whatever the reason.
            if "not watched" in str(shown.get("reason")) or time.monotonic() > deadline:
                return None, True
        elif {k: shown.get(k) for k in expected} == expected:
            return local, True
        elif time.monotonic() > deadline:
            raise AssertionError(
                f"the webhook's inventory {shown} did not match the cluster's Nodes {expected} "
                f"within {INVENTORY_PROPAGATION_SECONDS:.0f}s"
            )
        time.sleep(0.5)


NodeMaker = Callable[[dict[str, dict[str, str]]], list[str]]


@pytest.fixture
def make_nodes(core: Any) -> Iterator[NodeMaker]:
    """Creates Node objects (no kubelet: a Node is just an API object) with the given labels,
    `{suffix: labels}`; deletes them afterwards. They are cordoned and tainted so that no pod
    of the cluster is ever scheduled onto a node that does not exist."""
    from kubernetes.client.exceptions import ApiException

    created: list[str] = []

    def make(labels_by_suffix: dict[str, dict[str, str]]) -> list[str]:
        names = []
        for suffix, labels in labels_by_suffix.items():
            name = f"gaw-e2e-{uuid.uuid4().hex[:6]}-{suffix}"
            core.create_node(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": name, "labels": {"gaw-e2e": "fake-node", **labels}},
                    "spec": {
                        "unschedulable": True,
                        "taints": [{"key": "gaw-e2e/fake-node", "effect": "NoSchedule"}],
                    },
                }
            )
            created.append(name)
            names.append(name)
        return names

    yield make
    for name in created:
        try:
            core.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


MANUAL_12_4 = {"cuda-major-version": "12", "cuda-minor-version": "4"}


@pytest.fixture
def placement_inventory(
    core: Any,
    make_nodes: NodeMaker,
    webhook_inventory: InventoryReader,
    webhook_config: WebhookConfig,
) -> NodeInventory | None:
    """The inventory the webhook places pods with, after adding a node labelled CUDA 12.4 so
    CUDA affinity is exercised even on a cluster without labelled nodes (kind, a bare API
    server). Waits until the webhook has seen it when /inventory can be read."""
    make_nodes({"cuda": MANUAL_12_4})
    inventory, _ = synced_inventory(core, webhook_inventory, webhook_config)
    return inventory
