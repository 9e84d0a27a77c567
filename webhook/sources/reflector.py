"""One list/watch implementation for every watched kind (SPEC §8): the reflector.

Protocol, after client-go's tools/cache/reflector.go (ListAndWatch) and kopf's
`_cogs/clients/watching.py` (continuous_watch):
- list in pages (`limit`/`continue`, as client-go's pager does), project every object and keep
  only the projection, then publish one snapshot built from all of them;
- watch from the list's resourceVersion with `allowWatchBookmarks`; a watch that ends (server
  timeout) resumes from the last resourceVersion seen (events and BOOKMARKs);
- `410 Gone` (that version, or the list's continue token, was compacted away) → a fresh list;
- any other failure is counted, logged and retried with capped exponential back-off and jitter
  while the last good snapshot stays in force; the client is dropped and a new one built on
  the next attempt (a rotated service-account token or kubeconfig is picked up);
- `429 Too Many Requests` (and a 5xx) with Retry-After is first retried inside the client, as
  client-go's rest client does (kubeapi.load_configuration); one that still reaches the
  reflector waits at least the Retry-After seconds (capped like an unavailable kind).
An event whose projection does not change (a Node's status heartbeat in a metadata watch) costs
a dict lookup and publishes nothing; changes are debounced into one publish.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from kubernetes.aio.client import ApiClient
from kubernetes.aio.client.exceptions import ApiException

from webhook.sources.kubeapi import (
    ApiError,
    ApiFactory,
    Backoff,
    RawResponse,
    ServiceAccount,
    api_error,
    client_error,
    close,
    load_configuration,
    status_error,
)
from webhook.sources.store import SourceStats
from webhook.sources.watched import (
    METADATA_LIST_ACCEPT,
    METADATA_WATCH_ACCEPT,
    Key,
    Watched,
    describe,
    key_of,
    parse_page,
)

__all__ = ["ApiError", "Backoff", "Reflector", "ServiceAccount"]

log = logging.getLogger(__name__)

V = TypeVar("V")


class Reflector(Generic[V]):
    """Keeps {key: project(object)} for one kind in sync and hands it to `publish`.

    `project` returns what to keep of an object (None: not kept); `publish` receives a
    read-only view of every kept value after each list and after each debounced burst of
    changes, and builds the immutable snapshot the request path reads. `stats` (shared with
    the store) counts syncs, restarts and errors for observability.
    """

    def __init__(
        self,
        watched: Watched,
        project: Callable[[Mapping[str, Any]], V | None],
        publish: Callable[[Mapping[Key, V]], None],
        stats: SourceStats,
        *,
        kubeconfig: str | None = None,
        service_account: ServiceAccount | None = None,
        api_factory: ApiFactory | None = None,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        unavailable_backoff_max: float = 300.0,
        watch_timeout_seconds: int = 300,
        request_timeout: float = 30.0,
        debounce_seconds: float = 0.1,
        page_size: int = 500,
        settle: Callable[[V], V] | None = None,
    ) -> None:
        self.watched = watched
        # Applied to each value a list page projected, once the page is dropped (watched.py
        # parse_page): values unique per object are allocated again then, packed together.
        self._settle = settle
        self.stats = stats
        self._project = project
        self._publish = publish
        self._kubeconfig = kubeconfig
        self._service_account = service_account
        self._api_factory = api_factory
        self._backoff = Backoff(backoff_initial, backoff_max)
        self._unavailable_max = unavailable_backoff_max
        self._watch_timeout = watch_timeout_seconds
        self._request_timeout = request_timeout
        self._debounce = debounce_seconds
        self._page_size = page_size
        self._items: dict[Key, V] = {}
        self._resource_version: str | None = None
        self._watches_since_list = 0
        self._pending: asyncio.TimerHandle | None = None
        self._logged_unavailable: str | None = None
        self._host = "the Kubernetes API server"

    @property
    def synced(self) -> bool:
        return self.stats.synced

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
                    log.info("Watch of %s expired (%s); listing them again", self.watched.what, exc)
                    self.stats.watch_restarts += 1
                    self._resource_version = None
                    if self._watches_since_list <= 1:
                        # 410 on the first watch after a fresh list: a confused server (or a
                        # proxy in between); back off rather than spin on list + watch.
                        await asyncio.sleep(self._backoff.next_delay())
                except Exception as exc:  # every failure is retried; CancelledError is not one
                    broken, api = api, None
                    await self._failed(broken, exc)
        finally:
            if self._pending is not None:
                self._pending.cancel()
            if api is not None:
                await close(api)

    @property
    def host(self) -> str:
        """The API server's address once connected (for messages)."""
        return self._host

    async def list_once(self, api: ApiClient | None = None) -> None:
        """One full list (every page), published once; no watch, no retry (`gpu-webhook
        review --kubeconfig`). Raises ApiError for an error status, ConfigException for an
        unusable client configuration, and the client's own errors for network failures.

        `api`: a connected client to use (and leave open), so one command reading several
        kinds loads the kubeconfig and opens connections once; without it one is made and
        closed here.
        """
        own = api is None
        if api is None:
            api = await self._connect()
        else:
            self._host = str(api.configuration.host)
        try:
            await self._list(api)
        finally:
            if own:
                await close(api)

    async def _failed(self, api: ApiClient | None, exc: Exception) -> None:
        """Record the failure, drop the client (credentials may have rotated) and back off."""
        message = describe(exc, self.watched, self._host)
        self.stats.errors += 1
        self.stats.last_error = message
        # An optional kind that cannot be read (403: no RBAC, 404: the group is not served) is
        # "unavailable", not "not listed yet": readiness stops waiting for it.
        self.stats.unavailable = (
            self.watched.optional and isinstance(exc, ApiError) and exc.status in (403, 404)
        )
        unavailable = self.stats.unavailable
        delay = self._backoff.next_delay(self._unavailable_max if unavailable else None)
        asked = exc.retry_after if isinstance(exc, ApiError) else None
        # The server said when to come back (429 from max-in-flight or priority and fairness):
        # sooner only adds to its load.
        followed = False
        if asked is not None and asked > delay:
            delay, followed = min(asked, self._unavailable_max), True
        if self.stats.synced:
            state = f"keeping the last good {self.watched.snapshot}"
        else:
            state = f"no {self.watched.snapshot} yet" if self.watched.optional else "not ready yet"
        if unavailable and message == self._logged_unavailable:
            # Said once already; a missing permission or API group is not news every minute.
            log.debug("%s; retrying in %.1fs (%s)", message, delay, state)
        else:
            why = " as the API server asked (Retry-After)" if followed else ""
            log.warning("%s; retrying in %.1fs%s (%s)", message, delay, why, state)
        self._logged_unavailable = message if unavailable else None
        if api is not None:
            await close(api)
        await asyncio.sleep(delay)

    async def _connect(self) -> ApiClient:
        if self._api_factory is not None:
            api = await self._api_factory()
        else:
            api = ApiClient(await load_configuration(self._kubeconfig, self._service_account))
        self._host = str(api.configuration.host)
        return api

    async def _get(
        self, api: ApiClient, query: list[tuple[str, Any]], accept: str, timeout: float
    ) -> RawResponse:
        """GET the collection through the client (auth, TLS, proxy, token refresh).

        ApiClient's generic request path, as the typed APIs do it: CoreV1Api itself imports
        ~250 model modules (about 25 MiB of RSS) that raw JSON responses never use.
        """
        selectors = [
            (name, value)
            for name, value in (
                ("labelSelector", self.watched.label_selector),
                ("fieldSelector", self.watched.field_selector),
            )
            if value
        ]
        params = await api.param_serialize(
            method="GET",
            resource_path=self.watched.path,
            query_params=[*selectors, *query],
            header_params={"Accept": accept},
            auth_settings=["BearerToken"],
        )
        try:
            result = await api.call_api(*params, _request_timeout=timeout, _preload_content=False)
        except ApiException as exc:
            # Raised only when the client's own Retry-After retries are used up.
            raise client_error(exc) from None
        response: RawResponse = result.response
        return response

    async def _list(self, api: ApiClient) -> None:
        # Raw JSON rather than the client's models: the projection reads the same dicts the watch
        # events carry, and errors keep the server's own message. Pages of 500 as client-go's
        # tools/pager (defaultPageSize); resourceVersion unset, so the list is consistent and
        # `limit` is honoured (a resourceVersion=0 list may be served whole from the watch
        # cache). An expired continue token is a 410: run() lists again from the first page.
        # Pages bound the memory of one response (10,000 Nodes in one JSON document is tens of
        # MiB); the last good state is replaced only once every page arrived.
        accept = METADATA_LIST_ACCEPT if self.watched.metadata_only else "application/json"
        items: dict[Key, V] = {}
        token: str | None = None
        while True:
            query: list[tuple[str, Any]] = [("limit", self._page_size)]
            if token:
                query.append(("continue", token))
            response = await self._get(api, query, accept, self._request_timeout)
            try:
                body = await response.read()
                if response.status != 200:
                    raise api_error(response.status, response.reason, body, response.headers)
            finally:
                response.close()
            page, token, version = parse_page(body, self._project, self.watched.what, self._settle)
            del body
            items.update(page)
            del page
            if not token:
                break
        self._items = items
        self._resource_version = version
        self._backoff.reset()
        self._watches_since_list = 0
        self.stats.last_error = None
        self.stats.unavailable = False
        self._logged_unavailable = None
        log.debug(
            "Listed %d %s at resourceVersion %s",
            len(items),
            self.watched.what,
            self._resource_version,
        )
        self._flush()

    async def _watch(self, api: ApiClient) -> None:
        """One watch request, until the server ends it; raises ApiError on an ERROR event."""
        self._watches_since_list += 1
        query: list[tuple[str, Any]] = [
            ("watch", True),
            ("resourceVersion", self._resource_version),
            ("allowWatchBookmarks", True),
            ("timeoutSeconds", self._watch_timeout),
        ]
        accept = METADATA_WATCH_ACCEPT if self.watched.metadata_only else "application/json"
        # Client-side cap a little above the server's, to notice a silently dead connection.
        timeout = float(self._watch_timeout) + self._request_timeout
        response = await self._get(api, query, accept, timeout)
        try:
            if response.status != 200:
                body = await response.read()
                raise api_error(response.status, response.reason, body, response.headers)
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
            raise status_error(obj)
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            key = key_of(obj)
            if key is None:
                raise ApiError(0, f"watch event without metadata.name: {str(event)[:200]}")
            value = self._project(obj) if kind != "DELETED" else None
            old = self._items.get(key)
            if value is None:
                changed = self._items.pop(key, None) is not None
            else:
                changed = old != value
                self._items[key] = value
            if changed:
                self._schedule()
        elif kind != "BOOKMARK":
            log.warning("Ignoring a watch event of unknown type %r", kind)
            return
        if version:
            self._resource_version = str(version)

    def _schedule(self) -> None:
        # A burst of events (kubectl apply -f configmaps/, a node pool joining) becomes one
        # publish and one log entry.
        if self._debounce <= 0:
            self._flush()
        elif self._pending is None:
            loop = asyncio.get_running_loop()
            self._pending = loop.call_later(self._debounce, self._flush)

    def _flush(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        self.stats.objects = len(self._items)
        self._publish(MappingProxyType(self._items))
        self.stats.published()
