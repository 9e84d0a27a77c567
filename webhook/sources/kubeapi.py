"""The Kubernetes API client plumbing the reflector uses: configuration, errors, back-off."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from kubernetes.aio import config as kube_config
from kubernetes.aio.client import ApiClient, Configuration
from kubernetes.aio.config.config_exception import ConfigException

ApiFactory = Callable[[], Awaitable[ApiClient]]


class RawResponse(Protocol):
    """What the reflector uses of the client's unread response (an aiohttp ClientResponse)."""

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

    def next_delay(self, maximum: float | None = None) -> float:
        cap = self._maximum if maximum is None else maximum
        delay = min(cap, self._initial * 2.0**self._attempts)
        self._attempts = min(self._attempts + 1, 32)
        # Jitter keeps the replicas of the webhook from hitting a recovering API server in step.
        return delay * random.uniform(0.5, 1.0)


async def load_configuration(kubeconfig: str | None) -> Configuration:
    """The client configuration: the kubeconfig given, else in-cluster, else like kubectl."""
    configuration = Configuration()
    if kubeconfig is not None:
        # The client only logs "Config not found" and then fails on a missing key.
        if not Path(kubeconfig).is_file():
            raise ConfigException(f"the kubeconfig file {kubeconfig} does not exist")
        await kube_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, client_configuration=configuration, persist_config=False
        )
        return configuration
    try:
        kube_config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration
        )
    except ConfigException:
        # Not in a pod: $KUBECONFIG or ~/.kube/config, like kubectl.
        await kube_config.load_kube_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration, persist_config=False
        )
    return configuration


async def close(api: ApiClient) -> None:
    # kubernetes.aio leaves ApiClient.close and the config loaders unannotated (the API methods
    # are typed); the ignores are limited to those calls.
    await api.close()  # type: ignore[no-untyped-call]


def api_error(status: int, reason: str | None, body: bytes) -> ApiError:
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    if isinstance(parsed, Mapping) and parsed.get("kind") == "Status":
        return status_error({**parsed, "code": parsed.get("code") or status})
    text = body.decode("utf-8", "replace").strip()[:200]
    return ApiError(status, f"HTTP {status} {reason or ''}".strip() + (f": {text}" if text else ""))


def status_error(status: Mapping[str, Any]) -> ApiError:
    code = status.get("code")
    code = code if isinstance(code, int) else 0
    reason = status.get("reason") or "Error"
    message = status.get("message") or "no message"
    return ApiError(code, f"{code} {reason}: {message}")


async def call(
    api: ApiClient,
    method: str,
    path: str,
    *,
    query: Sequence[tuple[str, Any]] = (),
    body: Mapping[str, Any] | None = None,
    timeout: float = 30.0,
) -> tuple[int, bytes]:
    """One request through the client (auth, TLS, proxy, token refresh) with a raw JSON answer:
    (HTTP status, body). ApiClient's generic request path, as the typed APIs use it, without
    their ~250 model modules (see Reflector._get)."""
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    params = await api.param_serialize(
        method=method,
        resource_path=path,
        query_params=list(query),
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    result = await api.call_api(*params, _request_timeout=timeout, _preload_content=False)
    response: RawResponse = result.response
    try:
        return response.status, await response.read()
    finally:
        response.close()


def checked(status: int, body: bytes, reason: str = "") -> Any:
    """The parsed JSON of a 2xx answer; ApiError (with the server's Status message) else."""
    if not 200 <= status < 300:
        raise api_error(status, reason, body)
    return json.loads(body)


# (method, path, query, JSON body or None) -> (HTTP status, body): what the audit's report
# writer needs of a client, and what its tests stand in for.
Send = Callable[
    [str, str, Sequence[tuple[str, Any]], Mapping[str, Any] | None], Awaitable[tuple[int, bytes]]
]


def sender(api: ApiClient, timeout: float = 30.0) -> Send:
    async def send(
        method: str, path: str, query: Sequence[tuple[str, Any]], body: Mapping[str, Any] | None
    ) -> tuple[int, bytes]:
        return await call(api, method, path, query=query, body=body, timeout=timeout)

    return send
