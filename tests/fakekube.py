"""A small fake Kubernetes API server speaking list/watch, for reflector tests and benchmarks.

It runs on 127.0.0.1 over plain HTTP inside the test's event loop (or in its own process for
benchmarks), so the real `kubernetes` client (pointed at it through a kubeconfig file)
exercises its own request, streaming and error paths. Resources: ConfigMaps (namespaced),
Nodes (cluster-scoped, /api/v1/nodes) and resource.k8s.io/v1 ResourceClaimTemplates
(namespaced, with the cluster-wide list). Behaviour follows the API server where the
reflector depends on it:

- a list returns a `<Kind>List` whose `metadata.resourceVersion` is the current revision (one
  revision counter for every resource, as etcd's); `limit`/`continue` page it, and a continue
  token older than the last `compact()` gets `410 Expired`;
- a watch from revision N replays every change after N, then streams new ones; from a revision
  older than the last `compact()` it gets an ERROR event with a `410 Expired` Status, exactly
  like etcd compaction in a real cluster;
- `Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1` on a list and
  `...;as=PartialObjectMetadata;...` on a watch return metadata only (meta.k8s.io/v1
  PartialObjectMetadataList / PartialObjectMetadata), as the API server's content negotiation
  does (apiserver endpoints/handlers/response.go); asking for the list form on a watch or the
  object form on a list is `406 Not Acceptable`;
- a label selector filters both lists and watches, and an object that stops matching is
  sent to the watcher as DELETED (what the API server does for selector watches);
- a watch ends after `timeoutSeconds`, or when the test calls `end_watches()`;
- `forbid(resource)` answers 403 for one resource (RBAC), `not_served(resource)` 404 (API group
  not served), `fail_requests(status)` fails everything (outage).

Every request is recorded in `requests` so tests can assert what the client asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import json
from collections.abc import AsyncIterator, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import yaml
from aiohttp import web

from webhook.core.crl import CRL_NAMESPACE
from webhook.core.crl import crl_configmap as build_crl_configmap

NAMESPACE = CRL_NAMESPACE
CONFIGMAPS, NODES, CLAIM_TEMPLATES = "configmaps", "nodes", "resourceclaimtemplates"
CLAIMS = "resourceclaims"
_PARTIAL = "as=PartialObjectMetadata;"
_PARTIAL_LIST = "as=PartialObjectMetadataList;"


class _Runnable(Protocol):
    def run(self) -> Coroutine[Any, Any, None]: ...


@dataclass(frozen=True)
class _Resource:
    kind: str
    api_version: str
    namespaced: bool


RESOURCES = {
    CONFIGMAPS: _Resource("ConfigMap", "v1", True),
    NODES: _Resource("Node", "v1", False),
    CLAIM_TEMPLATES: _Resource("ResourceClaimTemplate", "resource.k8s.io/v1", True),
    CLAIMS: _Resource("ResourceClaim", "resource.k8s.io/v1", True),
}
_BY_KIND = {resource.kind: name for name, resource in RESOURCES.items()}


@dataclass(frozen=True)
class RecordedRequest:
    """One request the fake server received."""

    path: str
    query: Mapping[str, str]
    accept: str = ""

    @property
    def is_watch(self) -> bool:
        return self.query.get("watch") in ("true", "1")

    @property
    def resource_version(self) -> str | None:
        return self.query.get("resourceVersion")

    @property
    def resource(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass
class _Change:
    revision: int
    type: str
    resource: str
    obj: dict[str, Any]


@dataclass
class _Watcher:
    resource: str
    namespace: str | None
    selector: str | None
    bookmarks: bool
    metadata_only: bool
    queue: asyncio.Queue[dict[str, Any] | None] = field(default_factory=asyncio.Queue)


def crl_configmap(
    name: str,
    key: str,
    *,
    group: str = "gpu-manager",
    enabled: str = "true",
    namespace: str = NAMESPACE,
    **data: str,
) -> dict[str, Any]:
    """A CRL ConfigMap as the API server returns it (without resourceVersion)."""
    fields = {
        "key": key,
        "dataType": "integer",
        "group": group,
        "limits": "optional",
        "requests": "fromLimits",
        "descriptionEn": f"{key} for tests",
    }
    fields.update(data)
    return build_crl_configmap(name, fields, enabled=enabled, namespace=namespace, group=group)


def node(
    name: str, labels: Mapping[str, str] | None = None, *, heartbeat: int = 0
) -> dict[str, Any]:
    """A Node with the bulk a real one carries (annotations, managedFields, status)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                **(labels or {}),
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
            "managedFields": [
                {
                    "manager": "kubelet",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "fieldsType": "FieldsV1",
                }
            ],
        },
        "spec": {"podCIDR": "10.244.0.0/24"},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "heartbeat": heartbeat}],
            "images": [
                {"names": [f"registry.example/image-{i}:v1"], "sizeBytes": 1000} for i in range(5)
            ],
        },
    }


def _device_requests(classes: tuple[str, ...], first_available: bool) -> list[dict[str, Any]]:
    """resource.k8s.io/v1 DeviceClaim.requests: one `exactly` request per class, or one
    `firstAvailable` request listing the classes as alternatives."""
    if first_available:
        return [
            {
                "name": "gpu",
                "firstAvailable": [
                    {"name": f"r{i}", "deviceClassName": c} for i, c in enumerate(classes)
                ],
            }
        ]
    return [{"name": f"r{i}", "exactly": {"deviceClassName": c}} for i, c in enumerate(classes)]


def claim_template(
    namespace: str, name: str, *classes: str, first_available: bool = False
) -> dict[str, Any]:
    """A resource.k8s.io/v1 ResourceClaimTemplate requesting one device of each class."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": _device_requests(classes, first_available)}}},
    }


def resource_claim(
    namespace: str, name: str, *classes: str, first_available: bool = False
) -> dict[str, Any]:
    """A resource.k8s.io/v1 ResourceClaim (its spec is a ResourceClaimSpec directly)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": _device_requests(classes, first_available)}},
    }


def _matches(obj: Mapping[str, Any], selector: str | None) -> bool:
    """Equality-based label selectors (`k=v,k2=v2`, `k==v`, `k!=v`, bare `k`): all we need."""
    if not selector:
        return True
    labels: Mapping[str, str] = obj.get("metadata", {}).get("labels") or {}
    for raw_term in selector.split(","):
        term = raw_term.strip()
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term and term not in labels:
            return False
    return True


def _timestamp(revision: int) -> str:
    moment = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(seconds=revision)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _partial(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj["metadata"],
    }


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj["metadata"]
    return (meta.get("namespace") or "", meta["name"])


class FakeKube:
    """The fake API server; use `async with FakeKube() as kube:` and `kube.write_kubeconfig()`."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.revision = 1
        self._objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {r: {} for r in RESOURCES}
        self._history: list[_Change] = []
        self._compacted = 0
        self._watchers: list[_Watcher] = []
        self._continues: dict[str, tuple[int, list[dict[str, Any]], bool]] = {}
        self._tokens = itertools.count(1)
        self._fail_status: int | None = None
        self._fail_message = ""
        self._refused: dict[str, tuple[int, str]] = {}
        self._gone_next_watch: str | None = None
        # Lists of these resources wait until released: a slow first list (a large cluster).
        self._held: dict[str, asyncio.Event] = {}
        self._runner: web.AppRunner | None = None
        self.port = 0

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self, port: int = 0) -> None:
        app = web.Application()
        app.router.add_get("/api/v1/namespaces/{namespace}/configmaps", self._handle)
        app.router.add_get("/api/v1/nodes", self._handle)
        # Every group-API resource (resource.k8s.io/v1 claim templates and claims): the
        # cluster-wide collection and the per-namespace one.
        for name, resource in RESOURCES.items():
            if "/" in resource.api_version:
                prefix = f"/apis/{resource.api_version}"
                app.router.add_get(f"{prefix}/{name}", self._handle)
                app.router.add_get(f"{prefix}/namespaces/{{namespace}}/{name}", self._handle)
        # handler_cancellation: a client that hangs up ends its watch here, so `open_watches`
        # tells the tests whether the watcher really closed its connection.
        self._runner = web.AppRunner(
            app, handle_signals=False, handler_cancellation=True, shutdown_timeout=0.1
        )
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        self.end_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeKube:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write_kubeconfig(self, directory: Path) -> Path:
        """A kubeconfig pointing at this server, so tests exercise the client's config loading."""
        path = directory / "kubeconfig"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester"}}],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # -- test controls ---------------------------------------------------------------------

    def put(self, obj: Mapping[str, Any]) -> str:
        """Create or update an object (its `kind` says which resource); returns its new
        resourceVersion."""
        resource = _BY_KIND[obj.get("kind", "ConfigMap")]
        key = _key(obj)
        old = self._objects[resource].get(key)
        self.revision += 1
        new = copy.deepcopy(dict(obj))
        new["metadata"]["resourceVersion"] = str(self.revision)
        # Like the API server: set on create, kept on update; one second per revision keeps
        # "oldest wins" conflict ordering deterministic.
        created = old["metadata"]["creationTimestamp"] if old else _timestamp(self.revision)
        new["metadata"]["creationTimestamp"] = created
        self._objects[resource][key] = new
        self._record(_Change(self.revision, "MODIFIED" if old else "ADDED", resource, new), old)
        return str(self.revision)

    def delete(self, name: str, *, kind: str = "ConfigMap", namespace: str | None = None) -> str:
        resource = _BY_KIND[kind]
        if namespace is None:
            namespace = NAMESPACE if RESOURCES[resource].namespaced else ""
        old = self._objects[resource].pop((namespace, name))
        self.revision += 1
        gone = copy.deepcopy(old)
        gone["metadata"]["resourceVersion"] = str(self.revision)
        self._record(_Change(self.revision, "DELETED", resource, gone), None)
        return str(self.revision)

    def touch_unrelated(self) -> str:
        """Another object in the cluster changed: the revision moves without an event for us."""
        self.revision += 1
        return str(self.revision)

    def bookmark(self) -> None:
        """Send a BOOKMARK with the current revision to every watch that asked for bookmarks."""
        for watcher in self._watchers:
            if watcher.bookmarks:
                resource = RESOURCES[watcher.resource]
                obj = {
                    "kind": resource.kind,
                    "apiVersion": resource.api_version,
                    "metadata": {"resourceVersion": str(self.revision)},
                }
                if watcher.metadata_only:
                    obj = _partial(obj)
                watcher.queue.put_nowait({"type": "BOOKMARK", "object": obj})

    def compact(self) -> None:
        """Forget history: watches from any revision up to now get `410 Gone`."""
        self._compacted = self.revision
        self._history.clear()

    def gone_next_watch(self, *, as_http_status: bool = False) -> None:
        """The next watch request fails with 410: as an ERROR event, or as an HTTP status."""
        self._gone_next_watch = "http" if as_http_status else "event"

    def fail_requests(self, status: int | None, message: str = "") -> None:
        """Answer every request with this HTTP status (0: drop the connection); None: recover.

        Open watches are ended too, as when an API server restarts.
        """
        self._fail_status = status
        self._fail_message = message or f"the fake API server answers {status}"
        if status is not None:
            self.end_watches()

    def forbid(self, resource: str, message: str = "") -> None:
        """403 for one resource only, as RBAC does; `allow(resource)` undoes it."""
        self._refused[resource] = (403, message or f"{resource} is forbidden")

    def not_served(self, resource: str) -> None:
        """404 for one resource, as for an API group the server does not serve."""
        self._refused[resource] = (404, "the server could not find the requested resource")

    def allow(self, resource: str) -> None:
        self._refused.pop(resource, None)

    def hold(self, resource: str) -> None:
        """Lists of `resource` wait (as a slow API server's would) until `release(resource)`."""
        self._held[resource] = asyncio.Event()

    def release(self, resource: str) -> None:
        event = self._held.pop(resource, None)
        if event is not None:
            event.set()

    def end_watches(self) -> None:
        """End every open watch stream cleanly, as a server-side timeout does."""
        for watcher in self._watchers:
            watcher.queue.put_nowait(None)

    @property
    def open_watches(self) -> int:
        return len(self._watchers)

    def lists(self, resource: str | None = None) -> list[RecordedRequest]:
        return [r for r in self.requests if not r.is_watch and resource in (None, r.resource)]

    def watches(self, resource: str | None = None) -> list[RecordedRequest]:
        return [r for r in self.requests if r.is_watch and resource in (None, r.resource)]

    def open_watches_of(self, resource: str) -> int:
        return sum(1 for w in self._watchers if w.resource == resource)

    # -- protocol --------------------------------------------------------------------------

    def _record(self, change: _Change, old: Mapping[str, Any] | None) -> None:
        self._history.append(change)
        for watcher in self._watchers:
            event = self._event_for(watcher, change, old)
            if event is not None:
                watcher.queue.put_nowait(event)

    @staticmethod
    def _event_for(
        watcher: _Watcher, change: _Change, old: Mapping[str, Any] | None
    ) -> dict[str, Any] | None:
        if change.resource != watcher.resource:
            return None
        if (
            watcher.namespace is not None
            and change.obj["metadata"].get("namespace") != watcher.namespace
        ):
            return None
        obj = _partial(change.obj) if watcher.metadata_only else change.obj
        selector = watcher.selector
        if _matches(change.obj, selector):
            kind = (
                "ADDED"
                if change.type == "MODIFIED" and not _matches(old or {}, selector)
                else change.type
            )
            return {"type": kind, "object": obj}
        if change.type == "MODIFIED" and old is not None and _matches(old, selector):
            return {"type": "DELETED", "object": obj}
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        accept = request.headers.get("Accept", "")
        recorded = RecordedRequest(request.path, dict(request.query), accept)
        self.requests.append(recorded)
        if self._fail_status is not None:
            if self._fail_status == 0:
                assert request.transport is not None
                request.transport.close()
                raise web.HTTPInternalServerError
            reason = {401: "Unauthorized", 403: "Forbidden"}.get(self._fail_status, "InternalError")
            return web.json_response(
                _status(self._fail_status, reason, self._fail_message), status=self._fail_status
            )
        resource = recorded.resource
        if resource in self._refused:
            code, message = self._refused[resource]
            reason = "Forbidden" if code == 403 else "NotFound"
            return web.json_response(_status(code, reason, message), status=code)
        # The API server's negotiation: the list form for lists, the object form for watches.
        wants_list, wants_object = _PARTIAL_LIST in accept, _PARTIAL in accept
        if (wants_list and recorded.is_watch) or (wants_object and not recorded.is_watch):
            message = f"the requested media type is not acceptable for this request: {accept}"
            return web.json_response(_status(406, "NotAcceptable", message), status=406)
        namespace = request.match_info.get("namespace")
        selector = request.query.get("labelSelector")
        if not recorded.is_watch:
            held = self._held.get(resource)
            if held is not None:
                await held.wait()
            return self._list(request, resource, namespace, selector, wants_list)
        watcher = _Watcher(
            resource,
            namespace,
            selector,
            request.query.get("allowWatchBookmarks") == "true",
            wants_object,
        )
        return await self._watch(request, watcher)

    def _list(
        self,
        request: web.Request,
        resource: str,
        namespace: str | None,
        selector: str | None,
        metadata_only: bool,
    ) -> web.Response:
        token = request.query.get("continue")
        if token:
            if token not in self._continues or self._continues[token][0] < self._compacted:
                message = (
                    "The provided continue parameter is too old to display a consistent list "
                    "result."
                )
                return web.json_response(_status(410, "Expired", message), status=410)
            revision, items, metadata_only = self._continues.pop(token)
        else:
            revision = self.revision
            items = [
                o
                for (ns, _), o in sorted(self._objects[resource].items())
                if namespace in (None, ns) and _matches(o, selector)
            ]
        limit = int(request.query.get("limit") or 0)
        page, rest = (items[:limit], items[limit:]) if limit > 0 else (items, [])
        meta: dict[str, Any] = {"resourceVersion": str(revision)}
        if rest:
            meta["continue"] = f"token-{next(self._tokens)}"
            self._continues[meta["continue"]] = (revision, rest, metadata_only)
        if metadata_only:
            body = {
                "kind": "PartialObjectMetadataList",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": meta,
                "items": [_partial(o) for o in page],
            }
        else:
            kind = RESOURCES[resource]
            body = {
                "kind": f"{kind.kind}List",
                "apiVersion": kind.api_version,
                "metadata": meta,
                "items": page,
            }
        return web.Response(body=json.dumps(body), content_type="application/json")

    async def _watch(self, request: web.Request, watcher: _Watcher) -> web.StreamResponse:
        since = int(request.query.get("resourceVersion") or self.revision)
        gone = self._gone_next_watch
        self._gone_next_watch = None
        expired = _status(410, "Expired", f"too old resource version: {since} ({self.revision})")
        if gone == "http":
            return web.json_response(expired, status=410)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        if gone == "event" or since < self._compacted:
            await response.write(json.dumps({"type": "ERROR", "object": expired}).encode() + b"\n")
            return response
        for change in self._history:
            if change.revision > since:
                # Replays cannot know the object's previous state: send what matches now.
                event = self._event_for(watcher, change, None)
                if event is not None:
                    watcher.queue.put_nowait(event)
        timeout = float(request.query.get("timeoutSeconds") or 3600)
        self._watchers.append(watcher)
        try:
            async with asyncio.timeout(timeout):
                while (event := await watcher.queue.get()) is not None:
                    await response.write(json.dumps(event).encode() + b"\n")
        except (TimeoutError, ConnectionResetError):
            pass
        finally:
            self._watchers.remove(watcher)
        return response


def fast_options(kube: FakeKube, directory: Path, **overrides: Any) -> dict[str, Any]:
    """Reflector options for tests: this server's kubeconfig, millisecond back-off/debounce."""
    options: dict[str, Any] = {
        "kubeconfig": str(kube.write_kubeconfig(directory)),
        "backoff_initial": 0.01,
        "backoff_max": 0.05,
        "unavailable_backoff_max": 0.05,
        "debounce_seconds": 0.01,
    }
    options.update(overrides)
    return options


@contextlib.asynccontextmanager
async def running(source: _Runnable) -> AsyncIterator[asyncio.Task[None]]:
    """Run `source.run()` (a reflector) as a task for the block; cancel it after."""
    task = asyncio.create_task(source.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
