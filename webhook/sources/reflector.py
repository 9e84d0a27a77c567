"""Policy source for a cluster: list/watch of CRL ConfigMaps in kube-public (kubernetes.aio)."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from kubernetes.aio import config as kube_config
from kubernetes.aio.client import ApiClient, Configuration
from kubernetes.aio.config.config_exception import ConfigException

from webhook.core.crl import CRL_NAMESPACE, LABEL_TYPE, TYPE_VALUE
from webhook.core.policyset import PolicySet
from webhook.sources.store import PolicyStore, log_policy_changes

log = logging.getLogger(__name__)

DEFAULT_LABEL_SELECTOR = f"{LABEL_TYPE}={TYPE_VALUE}"
_RBAC_HINT = (
    "grant the webhook's service account get, list and watch on configmaps in {namespace} "
    "(the Helm chart's Role does this)"
)


class _RawResponse(Protocol):
    """What the watcher uses of the client's unread response (an aiohttp ClientResponse)."""

    status: int
    reason: str | None
    content: AsyncIterable[bytes]

    async def read(self) -> bytes: ...

    def close(self) -> None: ...


class ApiError(Exception):
    """The API server answered a list or watch with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Backoff:
    """Exponential back-off with jitter, capped; `reset()` after a success."""

    def __init__(self, initial: float, maximum: float) -> None:
        self._initial = initial
        self._maximum = maximum
        self._attempts = 0

    def reset(self) -> None:
        self._attempts = 0

    def next_delay(self) -> float:
        delay = min(self._maximum, self._initial * 2.0**self._attempts)
        self._attempts = min(self._attempts + 1, 32)
        # Jitter keeps the replicas of the webhook from hitting a recovering API server in step.
        return delay * random.uniform(0.5, 1.0)


ApiFactory = Callable[[], Awaitable[ApiClient]]


class ConfigMapWatcher:
    """Keeps `store` in sync with the CRL ConfigMaps of one namespace: list, then watch.

    Protocol (as client-go's reflector and kopf's `continuous_watch`): list the ConfigMaps and
    publish a snapshot built from all of them, then watch from the list's resourceVersion; a
    watch that ends (server timeout) resumes from the last resourceVersion seen (events and
    BOOKMARKs); `410 Gone` (that version was compacted away) triggers a fresh list. Any other
    failure is counted, logged and retried with capped exponential back-off while the last good
    snapshot stays in force: admission keeps working on the policies it has.
    """

    def __init__(
        self,
        store: PolicyStore,
        *,
        kubeconfig: str | None = None,
        namespace: str = CRL_NAMESPACE,
        label_selector: str = DEFAULT_LABEL_SELECTOR,
        api_factory: ApiFactory | None = None,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        watch_timeout_seconds: int = 300,
        request_timeout: float = 30.0,
        debounce_seconds: float = 0.1,
    ) -> None:
        self.store = store
        self.namespace = namespace
        self.label_selector = label_selector
        self._kubeconfig = kubeconfig
        self._api_factory = api_factory
        self._backoff = Backoff(backoff_initial, backoff_max)
        self._watch_timeout = watch_timeout_seconds
        self._request_timeout = request_timeout
        self._debounce = debounce_seconds
        self._objects: dict[str, Mapping[str, Any]] = {}
        self._resource_version: str | None = None
        self._watches_since_list = 0
        self._pending_rebuild: asyncio.TimerHandle | None = None
        self._host = "the Kubernetes API server"

    async def run(self) -> None:
        """List and watch until cancelled; never raises for API or network failures."""
        api: ApiClient | None = None
        try:
            while True:
                try:
                    if api is None:
                        api = await self._connect()
                    if self._resource_version is None:
                        await self._list(api)
                    await self._watch(api)
                except ApiError as exc:
                    if exc.status != 410:
                        broken, api = api, None
                        await self._failed(broken, exc)
                        continue
                    # The resourceVersion we hold was compacted away: only a fresh list is
                    # consistent again. Routine after quiet periods, hence info, not warning.
                    log.info("Watch of ConfigMaps expired (%s); listing them again", exc)
                    self.store.stats.watch_restarts += 1
                    self._resource_version = None
                    if self._watches_since_list <= 1:
                        # 410 on the first watch after a fresh list: a confused server (or a
                        # proxy in between); back off rather than spin on list + watch.
                        await asyncio.sleep(self._backoff.next_delay())
                except Exception as exc:  # every failure is retried; CancelledError is not one
                    broken, api = api, None
                    await self._failed(broken, exc)
        finally:
            if self._pending_rebuild is not None:
                self._pending_rebuild.cancel()
            if api is not None:
                await _close(api)

    async def _failed(self, api: ApiClient | None, exc: Exception) -> None:
        """Record the failure, drop the client (credentials may have rotated) and back off."""
        message = self._describe(exc)
        stats = self.store.stats
        stats.errors += 1
        stats.last_error = message
        delay = self._backoff.next_delay()
        state = "keeping the last good policies" if self.store.ready else "not ready yet"
        log.warning("%s; retrying in %.1fs (%s)", message, delay, state)
        if api is not None:
            await _close(api)
        await asyncio.sleep(delay)

    def _describe(self, exc: Exception) -> str:
        where = f"ConfigMaps in {self.namespace} ({self.label_selector})"
        if isinstance(exc, ApiError):
            if exc.status == 403:
                hint = _RBAC_HINT.format(namespace=self.namespace)
                return f"{self._host} refused to list/watch {where}: {exc}; {hint}"
            if exc.status == 401:
                return (
                    f"{self._host} rejected the webhook's credentials: {exc}; check the service "
                    "account token (in a cluster) or the user in the kubeconfig"
                )
            return f"{self._host} failed to list/watch {where}: {exc}"
        if isinstance(exc, ConfigException):
            return (
                f"cannot load the Kubernetes client configuration: {exc}; run in a cluster, "
                "pass --kubeconfig FILE, or use --policies DIR for a local run"
            )
        return f"cannot list/watch {where} at {self._host}: {type(exc).__name__}: {exc}"

    async def _connect(self) -> ApiClient:
        if self._api_factory is not None:
            api = await self._api_factory()
        else:
            configuration = Configuration()
            if self._kubeconfig is not None:
                # The client only logs "Config not found" and then fails on a missing key.
                if not Path(self._kubeconfig).is_file():
                    raise ConfigException(f"the kubeconfig file {self._kubeconfig} does not exist")
                await kube_config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=self._kubeconfig,
                    client_configuration=configuration,
                    persist_config=False,
                )
            else:
                try:
                    kube_config.load_incluster_config(  # type: ignore[no-untyped-call]
                        client_configuration=configuration
                    )
                except ConfigException:
                    # Not in a pod: $KUBECONFIG or ~/.kube/config, like kubectl.
                    await kube_config.load_kube_config(  # type: ignore[no-untyped-call]
                        client_configuration=configuration, persist_config=False
                    )
            api = ApiClient(configuration)
        self._host = str(api.configuration.host)
        return api

    async def _get(
        self, api: ApiClient, query: list[tuple[str, Any]], timeout: float
    ) -> _RawResponse:
        """GET the ConfigMaps collection through the client (auth, TLS, proxy, token refresh).

        ApiClient's generic request path, as CoreV1Api.list_namespaced_config_map does it:
        CoreV1Api itself imports ~250 typed model modules (about 25 MiB of RSS) that raw JSON
        responses never use.
        """
        params = await api.param_serialize(
            method="GET",
            resource_path="/api/v1/namespaces/{namespace}/configmaps",
            path_params={"namespace": self.namespace},
            query_params=[("labelSelector", self.label_selector), *query],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        result = await api.call_api(*params, _request_timeout=timeout, _preload_content=False)
        response: _RawResponse = result.response
        return response

    async def _list(self, api: ApiClient) -> None:
        # Raw JSON rather than the client's models: the snapshot is built from the same dicts
        # the watch events carry (a model round trip would, e.g., rewrite creationTimestamp,
        # which orders conflict winners), and errors keep the server's own message.
        response = await self._get(api, [], self._request_timeout)
        try:
            body = await response.read()
            if response.status != 200:
                raise _api_error(response.status, response.reason, body)
        finally:
            response.close()
        listing = json.loads(body)
        items = [item for item in listing.get("items") or [] if isinstance(item, Mapping)]
        self._objects = {item["metadata"]["name"]: item for item in items}
        self._resource_version = str(listing["metadata"]["resourceVersion"])
        self._backoff.reset()
        self._watches_since_list = 0
        log.debug("Listed %d ConfigMaps at resourceVersion %s", len(items), self._resource_version)
        self._rebuild()

    async def _watch(self, api: ApiClient) -> None:
        """One watch request, until the server ends it; raises ApiError on an ERROR event."""
        self._watches_since_list += 1
        query: list[tuple[str, Any]] = [
            ("watch", True),
            ("resourceVersion", self._resource_version),
            ("allowWatchBookmarks", True),
            ("timeoutSeconds", self._watch_timeout),
        ]
        # Client-side cap a little above the server's, to notice a silently dead connection.
        response = await self._get(api, query, float(self._watch_timeout) + self._request_timeout)
        try:
            if response.status != 200:
                raise _api_error(response.status, response.reason, await response.read())
            async for line in response.content:
                if line.strip():
                    self._apply(json.loads(line))
                    # Only a watch that delivers counts as recovered: a server that accepts
                    # and then drops every stream must still be backed off from.
                    self._backoff.reset()
            self._backoff.reset()
        finally:
            # close, not release: an unfinished watch body must not go back to the pool.
            response.close()
        log.debug("Watch ended at resourceVersion %s; watching again", self._resource_version)

    def _apply(self, event: Any) -> None:
        if not isinstance(event, Mapping) or not isinstance(event.get("object"), Mapping):
            raise ApiError(0, f"malformed watch event: {str(event)[:200]}")
        kind = event.get("type")
        obj: Mapping[str, Any] = event["object"]
        if kind == "ERROR":
            raise _status_error(obj)
        meta = obj.get("metadata") or {}
        version = meta.get("resourceVersion")
        if kind in ("ADDED", "MODIFIED"):
            self._objects[meta["name"]] = obj
        elif kind == "DELETED":
            self._objects.pop(meta["name"], None)
        elif kind != "BOOKMARK":
            log.warning("Ignoring a watch event of unknown type %r", kind)
            return
        if version:
            self._resource_version = str(version)
        if kind != "BOOKMARK":
            self._schedule_rebuild()

    def _schedule_rebuild(self) -> None:
        # A burst of events (kubectl apply -f configmaps/) becomes one rebuild and one log entry.
        if self._debounce <= 0:
            self._rebuild()
        elif self._pending_rebuild is None:
            loop = asyncio.get_running_loop()
            self._pending_rebuild = loop.call_later(self._debounce, self._rebuild)

    def _rebuild(self) -> None:
        if self._pending_rebuild is not None:
            self._pending_rebuild.cancel()
            self._pending_rebuild = None
        old = self.store.current if self.store.ready else None
        policies = PolicySet.from_configmaps(self._objects.values())
        self.store.replace(policies)
        log_policy_changes(old, policies, self.namespace)


async def _close(api: ApiClient) -> None:
    # kubernetes.aio leaves ApiClient.close and the config loaders unannotated (the API methods
    # are typed); the ignores are limited to those calls.
    await api.close()  # type: ignore[no-untyped-call]


def _api_error(status: int, reason: str | None, body: bytes) -> ApiError:
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    if isinstance(parsed, Mapping) and parsed.get("kind") == "Status":
        return _status_error({**parsed, "code": parsed.get("code") or status})
    text = body.decode("utf-8", "replace").strip()[:200]
    return ApiError(status, f"HTTP {status} {reason or ''}".strip() + (f": {text}" if text else ""))


def _status_error(status: Mapping[str, Any]) -> ApiError:
    code = status.get("code")
    code = code if isinstance(code, int) else 0
    reason = status.get("reason") or "Error"
    message = status.get("message") or "no message"
    return ApiError(code, f"{code} {reason}: {message}")
