"""The Kubernetes API client plumbing the reflector uses: configuration, errors, back-off."""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kubernetes.aio import config as kube_config
from kubernetes.aio.client import ApiClient, Configuration
from kubernetes.aio.client.exceptions import ApiException
from kubernetes.aio.config.config_exception import ConfigException
from kubernetes.aio.config.incluster_config import (
    SERVICE_CERT_FILENAME,
    SERVICE_TOKEN_FILENAME,
    InClusterConfigLoader,
)

ApiFactory = Callable[[], Awaitable[ApiClient]]


@dataclass(frozen=True)
class ServiceAccount:
    """Where a pod's service-account credentials are mounted, and how often the token file is
    read again. The kubelet rotates the projected token (at 80% of its lifetime) and the old one
    stays valid until it expires, so reading the file again every minute, as client-go's
    in-cluster config (transport's cached file token source) and the python client's
    InClusterConfigLoader do, always sends a valid token."""

    token_file: str = SERVICE_TOKEN_FILENAME
    ca_file: str = SERVICE_CERT_FILENAME
    refresh_seconds: float = 60.0


class RawResponse(Protocol):
    """What the reflector uses of the client's unread response (an aiohttp ClientResponse)."""

    status: int
    reason: str | None
    headers: Mapping[str, str]
    content: AsyncIterable[bytes]

    async def read(self) -> bytes: ...

    def close(self) -> None: ...


class ApiError(Exception):
    """The API server answered a list or watch with an error status; `retry_after`: the
    seconds its Retry-After header asked for (429, or a 5xx), else None."""

    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


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


class _TokenFile:
    """A Configuration.refresh_api_key_hook (the client calls it before each request) that
    reads the service-account token file again once `period` seconds have passed, trimmed as
    client-go's file token source does; an unreadable or empty file keeps the last token."""

    def __init__(self, path: str, period: float) -> None:
        self._path = Path(path)
        self._period = period
        self._read_at: float | None = None

    def __call__(self, configuration: Configuration) -> None:
        now = time.monotonic()
        if self._read_at is not None and now - self._read_at < self._period:
            return
        self._read_at = now
        try:
            token = self._path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return
        if token:
            configuration.api_key["BearerToken"] = f"Bearer {token}"


async def load_configuration(
    kubeconfig: str | None, service_account: ServiceAccount | None = None
) -> Configuration:
    """The client configuration: the kubeconfig given, else in-cluster (`service_account`'s
    files and KUBERNETES_SERVICE_HOST/PORT), else like kubectl.

    GETs retry a 429 (or a 5xx) carrying Retry-After up to 10 times, sleeping as long as the
    server asked, as client-go's rest client does (client-go rest/with_retry.go; the python
    client's `client_go_retries`): a paged list then resumes at the throttled page.
    """
    configuration = Configuration()
    configuration.client_go_retries = True
    if kubeconfig is not None:
        # The client only logs "Config not found" and then fails on a missing key.
        if not Path(kubeconfig).is_file():
            raise ConfigException(f"the kubeconfig file {kubeconfig} does not exist")
        await kube_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, client_configuration=configuration, persist_config=False
        )
        return configuration
    account = service_account or ServiceAccount()
    try:
        # The client's own refresh hook re-reads the token every minute, a period it keeps
        # private; ours does the same with the period of `service_account`.
        InClusterConfigLoader(  # type: ignore[no-untyped-call]
            token_filename=account.token_file,
            cert_filename=account.ca_file,
            try_refresh_token=False,
        ).load_and_set(configuration)
    except ConfigException:
        # Not in a pod: $KUBECONFIG or ~/.kube/config, like kubectl.
        await kube_config.load_kube_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration, persist_config=False
        )
        return configuration
    refresh = _TokenFile(account.token_file, account.refresh_seconds)
    refresh(configuration)
    # The client's attribute is inferred as None-typed (its __init__ assigns None).
    configuration.refresh_api_key_hook = refresh  # type: ignore[assignment]
    return configuration


async def close(api: ApiClient) -> None:
    # kubernetes.aio leaves ApiClient.close and the config loaders unannotated (the API methods
    # are typed); the ignores are limited to those calls.
    await api.close()  # type: ignore[no-untyped-call]


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """The Retry-After header's seconds; like client-go (rest/request.go retryAfterSeconds) only
    a non-negative integer counts, an HTTP date or garbage is ignored."""
    value = (headers or {}).get("Retry-After")
    if value is None or not re.fullmatch(r"[0-9]{1,6}", value.strip()):
        return None
    return float(int(value))


def api_error(
    status: int, reason: str | None, body: bytes, headers: Mapping[str, str] | None = None
) -> ApiError:
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    wait = retry_after(headers)
    if isinstance(parsed, Mapping) and parsed.get("kind") == "Status":
        error = status_error({**parsed, "code": parsed.get("code") or status})
        error.retry_after = wait
        return error
    # max-in-flight and priority-and-fairness answer 429 in plain text (http.Error).
    # Its closing full stop is dropped: the message goes on ("...; retrying in 1.0s").
    text = body.decode("utf-8", "replace").strip()[:200].rstrip(".")
    message = f"HTTP {status} {reason or ''}".strip() + (f": {text}" if text else "")
    return ApiError(status, message, wait)


def client_error(exc: ApiException) -> ApiError:
    """The client's own exception (raised when its Retry-After retries are used up) as an
    ApiError."""
    status = exc.status if isinstance(exc.status, int) else 0
    body = exc.body.encode() if isinstance(exc.body, str) else b""
    return api_error(status, exc.reason, body, exc.headers)


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
    try:
        result = await api.call_api(*params, _request_timeout=timeout, _preload_content=False)
    except ApiException as exc:
        # Raised only when the client's own Retry-After retries are used up: the answer then.
        status = exc.status if isinstance(exc.status, int) else 0
        return status, exc.body.encode() if isinstance(exc.body, str) else b""
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
