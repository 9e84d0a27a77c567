"""A small fake Kubernetes API server speaking list/watch, for reflector tests and benchmarks.

It runs on 127.0.0.1 over plain HTTP (or HTTPS with a CA of its own, for in-cluster
configuration) inside the test's event loop (or in its own process for benchmarks), so the real
`kubernetes` client (pointed at it through a kubeconfig file, or the in-cluster service-account
files) exercises its own request, streaming and error paths. Resources: ConfigMaps
(namespaced), Nodes (cluster-scoped, /api/v1/nodes) and resource.k8s.io/v1
ResourceClaimTemplates and ResourceClaims (namespaced, with the cluster-wide list) and
ResourceSlices (cluster-scoped). It is as
strict as kube-apiserver where the reflector depends on it:

- every request must carry `Authorization: Bearer <token>` with a token in `tokens`, parsed as
  apiserver's authentication/request/bearertoken/bearertoken.go does (scheme case-insensitive,
  surrounding space trimmed); without one, or with another, the answer is `401` with the Status
  kube-apiserver writes (endpoints/filters/authentication.go: NewUnauthorized("Unauthorized")).
  (A real server with anonymous auth on treats a request without credentials as
  system:anonymous, which RBAC then refuses with 403; either way nothing is listed.);
- a list returns a `<Kind>List` whose `metadata.resourceVersion` is the current revision (one
  revision counter for every resource, as etcd's); `limit`/`continue` page it, and a continue
  token older than the last `compact()` gets `410 Expired`;
- a watch from revision N replays every change after N, then streams new ones; from a revision
  older than the last `compact()` it gets an ERROR event with a `410 Expired` Status, exactly
  like etcd compaction in a real cluster;
- label selectors (equality-based) and field selectors (`metadata.name`, `metadata.namespace`
  for namespaced kinds, `spec.unschedulable` for Nodes; any other field is `400 BadRequest`)
  filter lists and watches. A watched object that stops matching (a label removed between
  two events, or between two watches: the replay too) is sent as DELETED carrying its
  previous content with the new resourceVersion, and one that starts matching as ADDED: the
  watch cache's cacheWatcher.convertToWatchEvent
  (apiserver/pkg/storage/cacher/cache_watcher.go; etcd3/watcher.go's transform likewise);
- `Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1` on a list and
  `...;as=PartialObjectMetadata;...` on a watch return metadata only (meta.k8s.io/v1
  PartialObjectMetadataList / PartialObjectMetadata), as the API server's content negotiation
  does (apiserver endpoints/handlers/response.go); asking for the list form on a watch or the
  object form on a list is `406 Not Acceptable`;
- `throttle(n, retry_after)` answers the next n requests (lists and watches) `429` with a
  `Retry-After` header and the plain-text body of apiserver's server/filters/maxinflight.go
  tooManyRequests, which priority-and-fairness.go uses too;
- a watch ends after `timeoutSeconds`, or when the test calls `end_watches()`;
- `hold(resource)` keeps lists of a resource waiting until `release(resource)` (a slow first
  list, as of a large cluster);
- `forbid(resource)` answers 403 for one resource (RBAC), `not_served(resource)` 404 (API group
  not served), `fail_requests(status)` fails everything (outage).

Authentication comes first, then throttling, then authorization (RBAC), as in apiserver's
DefaultBuildHandlerChain. Every request is recorded in `requests` (with its Authorization
header and arrival time) so tests can assert what the client sent and when.
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
from kubernetes.aio.client import Configuration

from webhook.core.policies.crl import CRL_NAMESPACE
from webhook.core.policies.crl import crl_configmap as build_crl_configmap
from webhook.tls.certs import create_server_ssl_context, write_certificates

NAMESPACE = CRL_NAMESPACE
CONFIGMAPS, NODES, CLAIM_TEMPLATES = "configmaps", "nodes", "resourceclaimtemplates"
CLAIMS = "resourceclaims"
DEVICE_CLASSES = "deviceclasses"  # cluster-scoped: each class's driver (selectors)
SLICES = "resourceslices"  # cluster-scoped: DRA drivers' devices, read by the node inventory
# What `gpu-webhook audit` lists, and the policy reports the server's audit writes.
PODS, DEPLOYMENTS, REPLICASETS, JOBS = "pods", "deployments", "replicasets", "jobs"
STATEFULSETS, DAEMONSETS, CRONJOBS = "statefulsets", "daemonsets", "cronjobs"
PYTORCHJOBS = "pytorchjobs"
POLICYREPORTS, OPENREPORTS = "policyreports", "reports"
NAMESPACES = "namespaces"  # their Pod Security labels (the runtime fixes' RDMA rule)
LEASES = "leases"  # the lease the server's audit takes, so one replica audits at a time
_PARTIAL = "as=PartialObjectMetadata;"
_PARTIAL_LIST = "as=PartialObjectMetadataList;"
# The bearer token the fake accepts unless told otherwise; write_kubeconfig puts it in.
TOKEN = "fake-token-for-tests"
# apiserver server/filters/maxinflight.go tooManyRequests: http.Error's text body.
TOO_MANY_REQUESTS = "Too many requests, please try again later.\n"


class _Runnable(Protocol):
    def run(self) -> Coroutine[Any, Any, None]: ...


@dataclass(frozen=True)
class _Resource:
    kind: str
    api_version: str
    namespaced: bool

    @property
    def fields(self) -> tuple[str, ...]:
        """The field selector labels the API server accepts for this kind."""
        # generic.ObjectMetaFieldsSet (metadata.namespace for namespaced kinds only) plus the
        # kind's own: pkg/registry/core/node/strategy.go NodeToSelectableFields adds
        # spec.unschedulable (fmt.Sprint of the bool: "true"/"false").
        if self.kind == "Node":
            return ("metadata.name", "spec.unschedulable")
        return ("metadata.name", "metadata.namespace")


RESOURCES = {
    CONFIGMAPS: _Resource("ConfigMap", "v1", True),
    NODES: _Resource("Node", "v1", False),
    NAMESPACES: _Resource("Namespace", "v1", False),
    CLAIM_TEMPLATES: _Resource("ResourceClaimTemplate", "resource.k8s.io/v1", True),
    CLAIMS: _Resource("ResourceClaim", "resource.k8s.io/v1", True),
    SLICES: _Resource("ResourceSlice", "resource.k8s.io/v1", False),
    DEVICE_CLASSES: _Resource("DeviceClass", "resource.k8s.io/v1", False),
    # The audit's kinds (served through discovery, see _discovery) and the report kinds.
    PODS: _Resource("Pod", "v1", True),
    DEPLOYMENTS: _Resource("Deployment", "apps/v1", True),
    REPLICASETS: _Resource("ReplicaSet", "apps/v1", True),
    STATEFULSETS: _Resource("StatefulSet", "apps/v1", True),
    DAEMONSETS: _Resource("DaemonSet", "apps/v1", True),
    JOBS: _Resource("Job", "batch/v1", True),
    CRONJOBS: _Resource("CronJob", "batch/v1", True),
    PYTORCHJOBS: _Resource("PyTorchJob", "kubeflow.org/v1", True),
    POLICYREPORTS: _Resource("PolicyReport", "wgpolicyk8s.io/v1alpha2", True),
    OPENREPORTS: _Resource("Report", "openreports.io/v1alpha1", True),
    LEASES: _Resource("Lease", "coordination.k8s.io/v1", True),
}
_BY_KIND = {resource.kind: name for name, resource in RESOURCES.items()}


@dataclass(frozen=True)
class RecordedRequest:
    """One request the fake server received."""

    path: str
    query: Mapping[str, str]
    accept: str = ""
    authorization: str = ""  # the Authorization header as sent ("" without one)
    at: float = 0.0  # arrival, in the event loop's clock
    method: str = "GET"

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
    # The object before the change (None for a creation): the watch cache keeps it with every
    # event so a selector watch can tell an object leaving the selection (DELETED).
    old: dict[str, Any] | None = None


@dataclass(frozen=True)
class _Selectors:
    labels: str | None = None
    fields: str | None = None


@dataclass
class _Watcher:
    resource: str
    namespace: str | None
    selectors: _Selectors
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


def device_class(
    name: str, *expressions: str, extended_resource: str | None = None
) -> dict[str, Any]:
    """A resource.k8s.io/v1 DeviceClass with one CEL selector per expression."""
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in expressions]}
    if extended_resource is not None:
        spec["extendedResourceName"] = extended_resource
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def _matches_terms(values: Mapping[str, str], selector: str | None) -> bool:
    """Equality-based selectors (`k=v,k2=v2`, `k==v`, `k!=v`, bare `k`): all we need."""
    if not selector:
        return True
    for raw_term in selector.split(","):
        term = raw_term.strip()
        if "!=" in term:
            key, value = term.split("!=", 1)
            if values.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if values.get(key.strip()) != value.strip():
                return False
        elif term and term not in values:
            return False
    return True


def _field_values(resource: _Resource, obj: Mapping[str, Any]) -> dict[str, str]:
    meta = obj.get("metadata") or {}
    values = {"metadata.name": str(meta.get("name", ""))}
    if resource.namespaced:
        values["metadata.namespace"] = str(meta.get("namespace", ""))
    if resource.kind == "Node":
        values["spec.unschedulable"] = (
            "true" if (obj.get("spec") or {}).get("unschedulable") else "false"
        )
    return values


def _matches(resource: _Resource, obj: Mapping[str, Any] | None, selectors: _Selectors) -> bool:
    if obj is None:
        return False
    labels: Mapping[str, str] = obj.get("metadata", {}).get("labels") or {}
    return _matches_terms(labels, selectors.labels) and _matches_terms(
        _field_values(resource, obj), selectors.fields
    )


def _unsupported_field(resource: _Resource, selector: str | None) -> str | None:
    """The API server's 400 message for a field selector naming a field it cannot select on."""
    for raw_term in (selector or "").split(","):
        label = raw_term.split("!=")[0].split("=")[0].strip()
        if label and label not in resource.fields:
            if resource.kind == "Node":
                # pkg/apis/core/v1/conversion.go, the Node field label conversion.
                return f"field label not supported: {label}"
            # apimachinery runtime.DefaultMetaV1FieldSelectorConversion.
            return (
                f'"{label}" is not a known field selector: only "metadata.name", '
                '"metadata.namespace"'
            )
    return None


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


def bearer_token(header: str) -> str | None:
    """The token of an Authorization header, parsed as apiserver's
    authentication/request/bearertoken/bearertoken.go does: TrimSpace, SplitN(" ", 3), the
    scheme compared lower-cased, an empty token (two spaces) is no token."""
    parts = header.strip().split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


class FakeKube:
    """The fake API server; use `async with FakeKube() as kube:` and `kube.write_kubeconfig()`."""

    def __init__(self, *, token: str = TOKEN, tls_directory: Path | None = None) -> None:
        # The token write_kubeconfig hands out, and every token the server accepts (a test
        # rotates credentials by replacing the set).
        self.token = token
        self.tokens = {token}
        self.tls_directory = tls_directory
        self.ca_file: Path | None = None
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
        self._uninstalled: set[str] = set()
        # Lists of these resources wait until released: a slow first list (a large cluster).
        self._held: dict[str, asyncio.Event] = {}
        self._throttled = 0
        self._retry_after = 1
        self._runner: web.AppRunner | None = None
        self.port = 0

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self, port: int = 0) -> None:
        app = web.Application()
        app.router.add_get("/api/v1/namespaces/{namespace}/configmaps", self._handle)
        app.router.add_get("/api/v1/nodes", self._handle)
        app.router.add_get("/api/v1/namespaces", self._handle)
        # Every group-API resource (resource.k8s.io/v1 claim templates and claims): the
        # cluster-wide collection and the per-namespace one.
        for name, resource in RESOURCES.items():
            if "/" in resource.api_version:
                prefix = f"/apis/{resource.api_version}"
                app.router.add_get(f"{prefix}/{name}", self._handle)
                app.router.add_get(f"{prefix}/namespaces/{{namespace}}/{name}", self._handle)
        self._add_audit_routes(app)
        # handler_cancellation: a client that hangs up ends its watch here, so `open_watches`
        # tells the tests whether the watcher really closed its connection.
        self._runner = web.AppRunner(
            app, handle_signals=False, handler_cancellation=True, shutdown_timeout=0.1
        )
        await self._runner.setup()
        ssl_context = None
        if self.tls_directory is not None:
            # A CA of its own and a serving certificate for 127.0.0.1 (Go and Python match the
            # IP SAN), as a pod's ca.crt verifies the real API server's.
            paths = write_certificates(self.tls_directory, [], ["127.0.0.1"])
            self.ca_file = paths.ca_cert
            ssl_context = create_server_ssl_context(paths.cert, paths.key)
        await web.TCPSite(self._runner, "127.0.0.1", port, ssl_context=ssl_context).start()
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
        scheme = "http" if self.tls_directory is None else "https"
        return f"{scheme}://127.0.0.1:{self.port}"

    def write_kubeconfig(self, directory: Path, *, token: str | None = None) -> Path:
        """A kubeconfig pointing at this server, so tests exercise the client's config loading;
        its user has `token` (default: the one the server accepts)."""
        path = directory / "kubeconfig"
        cluster: dict[str, str] = {"server": self.url}
        if self.ca_file is not None:
            cluster["certificate-authority"] = str(self.ca_file)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": cluster}],
            "users": [
                {"name": "tester", "user": {"token": self.token if token is None else token}}
            ],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester"}}],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def client_configuration(self) -> Configuration:
        """A client Configuration for this server with the accepted token, built without the
        config loaders (no client-go-style retries either, unlike load_configuration)."""
        return Configuration(host=self.url, api_key={"BearerToken": f"Bearer {self.token}"})

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
        # Like the API server: a uid on create, kept on update (ownerReferences name it).
        new["metadata"].setdefault("uid", old["metadata"]["uid"] if old else f"uid-{self.revision}")
        self._objects[resource][key] = new
        self._record(_Change(self.revision, "MODIFIED" if old else "ADDED", resource, new, old))
        return str(self.revision)

    def delete(self, name: str, *, kind: str = "ConfigMap", namespace: str | None = None) -> str:
        resource = _BY_KIND[kind]
        if namespace is None:
            namespace = NAMESPACE if RESOURCES[resource].namespaced else ""
        old = self._objects[resource].pop((namespace, name))
        self.revision += 1
        gone = copy.deepcopy(old)
        gone["metadata"]["resourceVersion"] = str(self.revision)
        self._record(_Change(self.revision, "DELETED", resource, gone, old))
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

    def throttle(self, count: int, retry_after: int = 1) -> None:
        """Answer the next `count` requests 429 Too Many Requests with `Retry-After:
        retry_after` (seconds), as max-in-flight or priority-and-fairness does under load."""
        self._throttled = count
        self._retry_after = retry_after

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

    # -- the audit's kinds: Pods, discovery, object reads and writes (the policy reports) ------

    def fail_resource(self, resource: str, status: int, message: str) -> None:
        """One resource answers `status` (e.g. 500 while etcd elects a leader); `allow` undoes."""
        self._refused[resource] = (status, message)

    def not_installed(self, group: str) -> None:
        """The group's CRDs are not installed: absent from discovery, its lists 404."""
        self._uninstalled.add(group)
        for name, resource in RESOURCES.items():
            if resource.api_version.partition("/")[0] == group:
                self.not_served(name)

    def objects(self, resource: str) -> list[dict[str, Any]]:
        """Every stored object of a resource (a test reads what a client wrote)."""
        return [copy.deepcopy(o) for _, o in sorted(self._objects[resource].items())]

    def _add_audit_routes(self, app: web.Application) -> None:
        app.router.add_get("/api/v1/pods", self._handle)
        app.router.add_get("/api/v1/namespaces/{namespace}/pods", self._handle)
        app.router.add_get("/apis", self._group_list)
        app.router.add_get("/apis/{group}/{version}", self._resource_list)
        for name, resource in RESOURCES.items():
            if "/" not in resource.api_version:
                continue
            collection = f"/apis/{resource.api_version}/namespaces/{{namespace}}/{name}"
            app.router.add_post(collection, self._write)
            for method in ("GET", "PUT", "DELETE"):
                app.router.add_route(method, f"{collection}/{{name}}", self._write)

    def _admitted(self, request: web.Request) -> web.Response | None:
        """Record the request; the answer when the handler chain stops it before the resource
        (an outage, authentication), as `_handle` does; None to go on."""
        authorization = request.headers.get("Authorization", "")
        now = asyncio.get_running_loop().time()
        self.requests.append(
            RecordedRequest(
                request.path, dict(request.query), "", authorization, now, request.method
            )
        )
        if self._fail_status is not None:
            if self._fail_status == 0:
                assert request.transport is not None
                request.transport.close()
                raise web.HTTPInternalServerError
            reason = {401: "Unauthorized", 403: "Forbidden"}.get(self._fail_status, "InternalError")
            return web.json_response(
                _status(self._fail_status, reason, self._fail_message), status=self._fail_status
            )
        if not self._authenticated(authorization):
            return web.json_response(_status(401, "Unauthorized", "Unauthorized"), status=401)
        return None

    def _served_groups(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for resource in RESOURCES.values():
            group, _, version = resource.api_version.partition("/")
            if version and group not in self._uninstalled:
                groups.setdefault(group, [])
                if version not in groups[group]:
                    groups[group].append(version)
        return groups

    async def _group_list(self, request: web.Request) -> web.Response:
        """meta/v1 APIGroupList, as GET /apis answers (apimachinery discovery types)."""
        if (stopped := self._admitted(request)) is not None:
            return stopped
        groups = [
            {
                "name": group,
                "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
                "preferredVersion": {
                    "groupVersion": f"{group}/{versions[0]}",
                    "version": versions[0],
                },
            }
            for group, versions in sorted(self._served_groups().items())
        ]
        body = {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        return web.json_response(body)

    async def _resource_list(self, request: web.Request) -> web.Response:
        """meta/v1 APIResourceList of one group-version."""
        if (stopped := self._admitted(request)) is not None:
            return stopped
        group_version = f"{request.match_info['group']}/{request.match_info['version']}"
        if request.match_info["group"] in self._uninstalled:
            message = "the server could not find the requested resource"
            return web.json_response(_status(404, "NotFound", message), status=404)
        resources = [
            {
                "name": name,
                "singularName": resource.kind.lower(),
                "namespaced": resource.namespaced,
                "kind": resource.kind,
                "verbs": ["create", "delete", "get", "list", "update", "watch"],
            }
            for name, resource in RESOURCES.items()
            if resource.api_version == group_version
        ]
        if not resources:
            message = "the server could not find the requested resource"
            return web.json_response(_status(404, "NotFound", message), status=404)
        # A status subresource, as CRDs with one advertise it: never a kind to list.
        resources += [{**r, "name": f"{r['name']}/status", "verbs": ["get"]} for r in resources]
        body = {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": group_version,
            "resources": resources,
        }
        return web.json_response(body)

    async def _write(self, request: web.Request) -> web.Response:
        """GET/PUT/DELETE of one object and POST to a collection, with the API server's
        create (409 AlreadyExists), optimistic concurrency (409 Conflict on a stale
        resourceVersion) and 404 NotFound answers."""
        parts = request.path.split("/")
        name = request.match_info.get("name")
        resource = parts[-2] if name else parts[-1]
        namespace = request.match_info["namespace"]
        if (stopped := self._admitted(request)) is not None:
            return stopped
        refused = self._refused.get(resource)
        if refused is not None:
            code, message = refused
            reason = {403: "Forbidden", 404: "NotFound"}.get(code, "InternalError")
            return web.json_response(_status(code, reason, message), status=code)
        kind = RESOURCES[resource]
        held = self._objects[resource].get((namespace, name or ""))
        if request.method == "POST":
            obj = await request.json()
            name = obj.get("metadata", {}).get("name", "")
            if (namespace, name) in self._objects[resource]:
                message = f'{resource} "{name}" already exists'
                return web.json_response(_status(409, "AlreadyExists", message), status=409)
        elif held is None:
            message = f'{resource} "{name}" not found'
            return web.json_response(_status(404, "NotFound", message), status=404)
        if request.method == "GET":
            return web.json_response(held)
        if request.method == "DELETE":
            self.delete(name or "", kind=kind.kind, namespace=namespace)
            return web.json_response(_status(200, "", "deleted") | {"status": "Success"})
        if request.method == "PUT":
            obj = await request.json()
            sent = obj.get("metadata", {}).get("resourceVersion")
            if sent and held is not None and sent != held["metadata"]["resourceVersion"]:
                message = (
                    "the object has been modified; please apply your changes to the latest "
                    "version and try again"
                )
                return web.json_response(_status(409, "Conflict", message), status=409)
        obj = {**obj, "kind": kind.kind, "apiVersion": kind.api_version}
        obj["metadata"] = {**obj.get("metadata", {}), "namespace": namespace}
        self.put(obj)
        stored = self._objects[resource][(namespace, obj["metadata"]["name"])]
        return web.json_response(stored, status=201 if request.method == "POST" else 200)

    # -- protocol --------------------------------------------------------------------------

    def _record(self, change: _Change) -> None:
        self._history.append(change)
        for watcher in self._watchers:
            event = self._event_for(watcher, change)
            if event is not None:
                watcher.queue.put_nowait(event)

    @staticmethod
    def _event_for(watcher: _Watcher, change: _Change) -> dict[str, Any] | None:
        """The event a watcher gets for a change, after apiserver's cacheWatcher
        .convertToWatchEvent (storage/cacher/cache_watcher.go): the current object passes
        the selectors unless deleted, the previous one if there was one; current only →
        ADDED, both → MODIFIED, previous only → DELETED "with the previous object content,
        but with the event's resource version"; neither → nothing. Replayed events (a watch
        from an older resourceVersion) go through the same conversion, as the watch cache
        keeps every event's previous object."""
        if change.resource != watcher.resource:
            return None
        if (
            watcher.namespace is not None
            and change.obj["metadata"].get("namespace") != watcher.namespace
        ):
            return None
        resource = RESOURCES[change.resource]
        current = change.type != "DELETED" and _matches(resource, change.obj, watcher.selectors)
        previous = _matches(resource, change.old, watcher.selectors)
        if current:
            kind, obj = ("MODIFIED" if previous else "ADDED"), change.obj
        elif previous and change.old is not None:
            obj = copy.deepcopy(change.old)
            obj["metadata"]["resourceVersion"] = str(change.revision)
            kind = "DELETED"
        else:
            return None
        return {"type": kind, "object": _partial(obj) if watcher.metadata_only else obj}

    def _authenticated(self, header: str) -> bool:
        token = bearer_token(header)
        return token is not None and token in self.tokens

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        accept = request.headers.get("Accept", "")
        authorization = request.headers.get("Authorization", "")
        recorded = RecordedRequest(
            request.path,
            dict(request.query),
            accept,
            authorization,
            asyncio.get_running_loop().time(),
        )
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
        # The handler chain's order: authentication, then flow control, then authorization.
        if not self._authenticated(authorization):
            return web.json_response(_status(401, "Unauthorized", "Unauthorized"), status=401)
        if self._throttled > 0:
            self._throttled -= 1
            return web.Response(
                status=429,
                text=TOO_MANY_REQUESTS,
                headers={"Retry-After": str(self._retry_after)},
            )
        resource = recorded.resource
        if resource in self._refused:
            code, message = self._refused[resource]
            reason = {403: "Forbidden", 404: "NotFound"}.get(code, "InternalError")
            return web.json_response(_status(code, reason, message), status=code)
        # The API server's negotiation: the list form for lists, the object form for watches.
        wants_list, wants_object = _PARTIAL_LIST in accept, _PARTIAL in accept
        if (wants_list and recorded.is_watch) or (wants_object and not recorded.is_watch):
            message = f"the requested media type is not acceptable for this request: {accept}"
            return web.json_response(_status(406, "NotAcceptable", message), status=406)
        namespace = request.match_info.get("namespace")
        selectors = _Selectors(
            request.query.get("labelSelector"), request.query.get("fieldSelector")
        )
        unsupported = _unsupported_field(RESOURCES[resource], selectors.fields)
        if unsupported is not None:
            return web.json_response(_status(400, "BadRequest", unsupported), status=400)
        if not recorded.is_watch:
            held = self._held.get(resource)
            if held is not None:
                await held.wait()
            return self._list(request, resource, namespace, selectors, wants_list)
        watcher = _Watcher(
            resource,
            namespace,
            selectors,
            request.query.get("allowWatchBookmarks") == "true",
            wants_object,
        )
        return await self._watch(request, watcher)

    def _list(
        self,
        request: web.Request,
        resource: str,
        namespace: str | None,
        selectors: _Selectors,
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
                if namespace in (None, ns) and _matches(RESOURCES[resource], o, selectors)
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
                event = self._event_for(watcher, change)
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
