"""What a reflector lists and watches (Watched), and how its list pages and failures read."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from kubernetes.aio.config.config_exception import ConfigException

from webhook.sources.kubeapi import ApiError

# Media types of metadata-only requests, as client-go's metadata client sends them
# (k8s.io/client-go/metadata/metadata.go: PartialObjectMetadataList for lists, ConfigFor sets
# PartialObjectMetadata for everything else, watches included). The API server then answers
# with meta.k8s.io/v1 PartialObjectMetadataList / watch events carrying PartialObjectMetadata:
# metadata only, never a Node's status (images, conditions: most of its size).
METADATA_LIST_ACCEPT = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
METADATA_WATCH_ACCEPT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

Key = tuple[str, str]  # (namespace or "", name)
V = TypeVar("V")


@dataclass(frozen=True)
class Watched:
    """What a reflector lists and watches."""

    kind: str  # "Node": the metric label and the key in PolicyStore.watched
    path: str  # the collection, e.g. /api/v1/nodes
    what: str  # for messages: "Nodes", "ConfigMaps in kube-public (selector)"
    rbac_hint: str  # appended to a 403: which permission is missing and who grants it
    snapshot: str = "state"  # what the kept state is called in logs: "policies", "node inventory"
    label_selector: str | None = None
    field_selector: str | None = None
    metadata_only: bool = False
    # Optional kinds (the node inventory, DRA templates): 403/404 mean "not available here";
    # logged once per distinct message and retried slowly instead of every 30 s.
    optional: bool = False
    not_served_hint: str = ""  # appended to a 404 (the API group is not served)


def describe(exc: Exception, watched: Watched, host: str) -> str:
    """The one line a failed list or watch of `watched` at `host` is logged and shown with."""
    what = watched.what
    if isinstance(exc, ApiError):
        if exc.status == 403:
            return f"{host} refused to list/watch {what}: {exc}; {watched.rbac_hint}"
        if exc.status == 401:
            return (
                f"{host} rejected the webhook's credentials: {exc}; check the service "
                "account token (in a cluster) or the user in the kubeconfig"
            )
        if exc.status == 404 and watched.not_served_hint:
            return f"{host} does not serve {what}: {exc}; {watched.not_served_hint}"
        return f"{host} failed to list/watch {what}: {exc}"
    if isinstance(exc, ConfigException):
        return (
            f"cannot load the Kubernetes client configuration: {exc}; run in a cluster, "
            "pass --kubeconfig FILE, or use --policies DIR for a local run"
        )
    return f"cannot list/watch {what} at {host}: {type(exc).__name__}: {exc}"


def parse_page(
    body: bytes,
    project: Callable[[Mapping[str, Any]], V | None],
    what: str,
    settle: Callable[[V], V] | None = None,
) -> tuple[list[tuple[Key, V]], str | None, str]:
    """(key, projection) of every item of one list page, its continue token and version.

    Memory: the parsed page (metadata of 500 Nodes with their managedFields is ~20 MiB of
    Python objects) is dropped before the next page is read, and the names kept are copied
    out of it, so the allocator's arenas that held the page can be released instead of
    staying pinned by a few strings each (measured: RSS growth for 10,000 Nodes 28 MiB
    before, 10 MiB after; bench/bench_inventory.py). `settle` does the same for values that
    are unique per object (a ResourceSlice's node name): it copies them after the page is gone.
    """
    listing = json.loads(body)
    parsed = []
    for item in listing.get("items") or []:
        if isinstance(item, Mapping):
            key = key_of(item)
            value = project(item)
            if key is not None and value is not None:
                parsed.append((key, value))
    meta = listing.get("metadata") or {}
    token, version = meta.get("continue"), meta.get("resourceVersion")
    del listing, meta
    if version is None:
        raise ApiError(0, f"a list of {what} without metadata.resourceVersion")
    if settle is not None:
        parsed = [(key, settle(value)) for key, value in parsed]
    return [((ns, _copy(name)), value) for (ns, name), value in parsed], token, str(version)


def copy_text(text: str) -> str:
    """A new string object with the value of `text` (see parse_page)."""
    return _copy(text)


def _copy(text: str) -> str:
    # A new string object with the same value (str() and slicing return the same object).
    return (text + " ")[:-1]


def key_of(obj: Mapping[str, Any]) -> Key | None:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
        return None
    namespace = meta.get("namespace")
    return (namespace if isinstance(namespace, str) else "", meta["name"])
