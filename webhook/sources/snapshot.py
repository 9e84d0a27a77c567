"""One read-only snapshot of a live cluster for `gpu-webhook review --kubeconfig` (SPEC §9).

The same reflectors the server runs (same requests, paging, metadata-only Nodes, projections),
each asked for one list (`Reflector.list_once`) instead of list-and-watch: CRL ConfigMaps,
Nodes, ResourceClaimTemplates and ResourceClaims, the image-table ConfigMap the config names
(`imageCudaTableConfigMap`), one list per kind, over one client. Nothing is written.

The image table is read as the server's ImageTableSource reads it (same request, projection and
parsing), so an offline review answers with the table the server uses: its entries before the
config file's. As in the server it is optional: refused (403) or absent, the config file's
table applies and a note says so; a table that does not parse is a note too (the server logs it
and keeps the last good one, which for a first read is none).

CRL ConfigMaps are required: without them the answers would not be the cluster's, so any
failure there is a `ClusterReadError`. Nodes and DRA claims are optional, as in the server
(SPEC §4, §6): a 403 (no RBAC) or 404 (API not served) leaves that snapshot None and adds a
note saying why; other failures are errors too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubernetes.aio.client import ApiClient

from webhook.core.config.model import WebhookConfig
from webhook.core.placement.inventory import NodeInventory
from webhook.core.policies.crl import CRL_NAMESPACE
from webhook.core.policies.policyset import PolicySet
from webhook.core.workloads.claims import ClaimIndex
from webhook.sources.claims import ClaimTemplateSource, DeviceClassSource, ResourceClaimSource
from webhook.sources.image_table import ImageTableSource
from webhook.sources.kubeapi import ApiError, close, load_configuration
from webhook.sources.nodes import inventory_sources
from webhook.sources.policies import DEFAULT_LABEL_SELECTOR, ConfigMapWatcher
from webhook.sources.reflector import Reflector
from webhook.sources.store import PolicyStore

# Never wait longer than this for one page: a CLI run in CI must end.
REQUEST_TIMEOUT = 30.0


class ClusterReadError(Exception):
    """The cluster could not be read well enough to answer as it would (one-line message)."""


@dataclass
class ClusterSnapshot:
    """What the cluster's webhook would evaluate with; None: not available (see `notes`)."""

    server: str
    policies: PolicySet | None = None  # None only when the caller did not ask for them
    configmaps: int = 0  # CRL ConfigMaps listed
    inventory: NodeInventory | None = None
    claims: ClaimIndex | None = None
    # The webhook config with the image-table ConfigMap's entries (None: it has none, or the
    # config names no such ConfigMap), and "<namespace>/<name>" -> entries read, when read.
    config: WebhookConfig | None = None
    image_table: tuple[str, int] | None = None
    notes: list[str] = field(default_factory=list)  # why a snapshot is missing, one line each


def _failure(reflector: Reflector[Any], exc: BaseException) -> str:
    what, host = reflector.watched.what, reflector.host
    if isinstance(exc, ApiError):
        if exc.status == 403:
            return f"{host} refused to list {what}: {exc}"
        if exc.status == 401:
            return f"{host} rejected the kubeconfig's credentials: {exc}"
        if exc.status == 404:
            return f"{host} does not serve {what}: {exc}"
        return f"{host} failed to list {what}: {exc}"
    return f"cannot list {what} at {host}: {type(exc).__name__}: {exc}"


async def connect(kubeconfig: str | None) -> ApiClient:
    """A client for `kubeconfig` (None: in-cluster, else like kubectl); ClusterReadError (one
    line) when it cannot be used."""
    try:
        configuration = await load_configuration(kubeconfig)
    except Exception as exc:  # ConfigException, the client's yaml/OS errors: all one line
        reason = " ".join(str(exc).split()) or type(exc).__name__
        where = (
            f"the kubeconfig {kubeconfig}" if kubeconfig else "a Kubernetes client configuration"
        )
        raise ClusterReadError(f"cannot use {where}: {reason}") from None
    return ApiClient(configuration)


async def read_cluster(
    kubeconfig: str | None,
    config: WebhookConfig,
    *,
    policies: bool = True,
    nodes: bool = True,
    namespace: str = CRL_NAMESPACE,
    label_selector: str = DEFAULT_LABEL_SELECTOR,
) -> ClusterSnapshot:
    """List each kind once through `kubeconfig`; raises ClusterReadError (one line) when the
    cluster cannot be read. `nodes`/`config.node_inventory` and `config.claim_template_cache`
    say which optional kinds to read, as the server's config does."""
    api = await connect(kubeconfig)
    try:
        return await read_snapshot(
            api,
            config,
            policies=policies,
            nodes=nodes,
            namespace=namespace,
            label_selector=label_selector,
        )
    finally:
        await close(api)


async def read_snapshot(
    api: ApiClient,
    config: WebhookConfig,
    *,
    policies: bool = True,
    nodes: bool = True,
    namespace: str = CRL_NAMESPACE,
    label_selector: str = DEFAULT_LABEL_SELECTOR,
) -> ClusterSnapshot:
    """read_cluster over a connected client (left open, for the caller's further requests)."""
    store = PolicyStore()
    options: dict[str, Any] = {"request_timeout": REQUEST_TIMEOUT}
    snapshot = ClusterSnapshot(server=str(api.configuration.host))
    if policies:
        crls = ConfigMapWatcher(
            store, namespace=namespace, label_selector=label_selector, **options
        )
        await _list(crls, api, without=None, notes=snapshot.notes)
        snapshot.policies = store.current
        snapshot.configmaps = crls.stats.objects or 0
    optional: list[tuple[Reflector[Any], str]] = []
    if nodes and config.node_inventory:
        node_source, slice_source = inventory_sources(store, config, **options)
        optional.append((node_source, "a node inventory"))
        optional.append((slice_source, "the DRA ResourceSlices' node facts"))
    if config.claim_template_cache:
        optional.append((ClaimTemplateSource(store, **options), "the cluster's claim templates"))
        optional.append((ResourceClaimSource(store, **options), "the cluster's claims"))
        optional.append(
            (DeviceClassSource(store, **options), "the cluster's DeviceClasses (by driver)")
        )
    for reflector, without in optional:
        await _list(reflector, api, without=without, notes=snapshot.notes)
    snapshot.inventory = store.inventory
    snapshot.claims = store.claims
    if config.image_cuda_table_config_map is not None:
        await _image_table(ImageTableSource(store, config, **options), api, snapshot)
        snapshot.config = store.config
    return snapshot


async def _image_table(table: ImageTableSource, api: ApiClient, snapshot: ClusterSnapshot) -> None:
    before = len(snapshot.notes)
    without = "its entries (the config file's imageCudaTable applies)"
    await _list(table, api, without=without, notes=snapshot.notes)
    if len(snapshot.notes) > before:
        return  # refused or not served: noted
    if table.stats.source_error:
        snapshot.notes.append(
            f"ignoring the image table of {table.stats.source_error}; "
            "the config file's imageCudaTable applies"
        )
        return
    snapshot.image_table = (table.ref.ref, len(table.entries or ()))


async def _list(
    reflector: Reflector[Any], api: ApiClient, *, without: str | None, notes: list[str]
) -> None:
    """List once; `without`: what evaluation goes without when an optional kind is refused."""
    try:
        await reflector.list_once(api)
    except ApiError as exc:
        message = _failure(reflector, exc)
        if without is not None and exc.status in (403, 404):
            # What the server does too: evaluate without that snapshot (SPEC §4, §6).
            notes.append(f"{message}; evaluating without {without}")
            return
        raise ClusterReadError(message) from None
    except Exception as exc:  # network errors of the client (aiohttp), timeouts, bad JSON
        raise ClusterReadError(_failure(reflector, exc)) from None
