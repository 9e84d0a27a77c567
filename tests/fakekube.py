"""A small fake Kubernetes API server speaking list/watch for ConfigMaps, for watcher tests.

It runs on 127.0.0.1 over plain HTTP inside the test's event loop, so the real `kubernetes`
client (pointed at it through a kubeconfig file) exercises its own request, streaming and
error paths. Behaviour follows the API server where the watcher depends on it:

- a list returns a ConfigMapList whose `metadata.resourceVersion` is the store's current
  revision; a watch from revision N replays every change after N, then streams new ones;
- a watch from a revision older than the last `compact()` gets an ERROR event with a
  `410 Expired` Status, exactly like etcd compaction in a real cluster;
- a label selector filters both lists and watches, and an object that stops matching is
  sent to the watcher as DELETED (what the API server does for selector watches);
- a watch ends after `timeoutSeconds`, or when the test calls `end_watches()`.

Every request is recorded in `requests` so tests can assert what the client asked for.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from webhook.core.crl import CRL_NAMESPACE
from webhook.core.crl import crl_configmap as build_crl_configmap

NAMESPACE = CRL_NAMESPACE


@dataclass(frozen=True)
class RecordedRequest:
    """One request the fake server received."""

    path: str
    query: Mapping[str, str]

    @property
    def is_watch(self) -> bool:
        return self.query.get("watch") in ("true", "1")

    @property
    def resource_version(self) -> str | None:
        return self.query.get("resourceVersion")


@dataclass
class _Change:
    revision: int
    type: str
    obj: dict[str, Any]


@dataclass
class _Watcher:
    selector: str | None
    bookmarks: bool
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


class FakeKube:
    """The fake API server; use `async with FakeKube() as kube:` and `kube.write_kubeconfig()`."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.revision = 1
        self._objects: dict[str, dict[str, Any]] = {}
        self._history: list[_Change] = []
        self._compacted = 0
        self._watchers: list[_Watcher] = []
        self._fail_status: int | None = None
        self._fail_message = ""
        self._gone_next_watch: str | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/api/v1/namespaces/{namespace}/configmaps", self._handle)
        # handler_cancellation: a client that hangs up ends its watch here, so `open_watches`
        # tells the tests whether the watcher really closed its connection.
        self._runner = web.AppRunner(
            app, handle_signals=False, handler_cancellation=True, shutdown_timeout=0.1
        )
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
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
        """Create or update an object; returns its new resourceVersion."""
        name = obj["metadata"]["name"]
        old = self._objects.get(name)
        self.revision += 1
        new = copy.deepcopy(dict(obj))
        new["metadata"]["resourceVersion"] = str(self.revision)
        # Like the API server: set on create, kept on update; one second per revision keeps
        # "oldest wins" conflict ordering deterministic.
        created = old["metadata"]["creationTimestamp"] if old else _timestamp(self.revision)
        new["metadata"]["creationTimestamp"] = created
        self._objects[name] = new
        self._record(_Change(self.revision, "MODIFIED" if old else "ADDED", new), old)
        return str(self.revision)

    def delete(self, name: str) -> str:
        old = self._objects.pop(name)
        self.revision += 1
        gone = copy.deepcopy(old)
        gone["metadata"]["resourceVersion"] = str(self.revision)
        self._record(_Change(self.revision, "DELETED", gone), None)
        return str(self.revision)

    def touch_unrelated(self) -> str:
        """Another object in the cluster changed: the revision moves without an event for us."""
        self.revision += 1
        return str(self.revision)

    def bookmark(self) -> None:
        """Send a BOOKMARK with the current revision to every watch that asked for bookmarks."""
        event = {
            "type": "BOOKMARK",
            "object": {
                "kind": "ConfigMap",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self.revision)},
            },
        }
        for watcher in self._watchers:
            if watcher.bookmarks:
                watcher.queue.put_nowait(event)

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

    def end_watches(self) -> None:
        """End every open watch stream cleanly, as a server-side timeout does."""
        for watcher in self._watchers:
            watcher.queue.put_nowait(None)

    @property
    def open_watches(self) -> int:
        return len(self._watchers)

    def lists(self) -> list[RecordedRequest]:
        return [r for r in self.requests if not r.is_watch]

    def watches(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.is_watch]

    # -- protocol --------------------------------------------------------------------------

    def _record(self, change: _Change, old: Mapping[str, Any] | None) -> None:
        self._history.append(change)
        for watcher in self._watchers:
            event = self._event_for(watcher.selector, change, old)
            if event is not None:
                watcher.queue.put_nowait(event)

    @staticmethod
    def _event_for(
        selector: str | None, change: _Change, old: Mapping[str, Any] | None
    ) -> dict[str, Any] | None:
        if _matches(change.obj, selector):
            kind = (
                "ADDED"
                if change.type == "MODIFIED" and not _matches(old or {}, selector)
                else change.type
            )
            return {"type": kind, "object": change.obj}
        if change.type == "MODIFIED" and old is not None and _matches(old, selector):
            return {"type": "DELETED", "object": change.obj}
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        recorded = RecordedRequest(request.path, dict(request.query))
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
        if request.match_info["namespace"] != NAMESPACE:
            return web.json_response({"kind": "ConfigMapList", "apiVersion": "v1", "items": []})
        selector = request.query.get("labelSelector")
        if not recorded.is_watch:
            items = [o for _, o in sorted(self._objects.items()) if _matches(o, selector)]
            return web.json_response(
                {
                    "kind": "ConfigMapList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": str(self.revision)},
                    "items": items,
                }
            )
        return await self._watch(request, selector)

    async def _watch(self, request: web.Request, selector: str | None) -> web.StreamResponse:
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
        watcher = _Watcher(selector, request.query.get("allowWatchBookmarks") == "true")
        for change in self._history:
            if change.revision > since:
                # Replays cannot know the object's previous state: send what matches now.
                event = self._event_for(selector, change, None)
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
