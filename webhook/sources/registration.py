"""Registering an out-of-cluster `gpu-webhook serve` with an API server by URL (the try-it path).

`gpu-webhook serve --self-signed --kubeconfig K --register-url https://HOST:PORT` creates the
Helm chart's MutatingWebhookConfiguration and ValidatingWebhookConfiguration (same webhooks,
rules, namespace selectors, failure policies and matchConditions, rendered with the chart's
default values) with each clientConfig set to `url: URL/mutate|validate` and the run's CA as
caBundle, and deletes both when it stops. The configurations come from
webhook/data/webhook-configurations.yaml, rendered from the chart by
`scripts/register-webhook-url.py --write-data` (tests/chart/test_webhook_data.py fails when the
two differ), so no helm is needed at run time.

A configuration of the same name left by a run that could not clean up (killed, crashed) is
replaced, and the caller is told so.
"""

from __future__ import annotations

import base64
import copy
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import quote, urlsplit

import yaml
from kubernetes.aio.client import ApiClient
from kubernetes.aio.config.config_exception import ConfigException

from webhook.sources.kubeapi import ApiError, call, checked, close, load_configuration

DATA_FILE = "webhook-configurations.yaml"
DEFAULT_NAME = "gpu-webhook-try"
# Registrations made here carry this label, so they are told from a Helm release's.
MANAGED_BY = "gpu-webhook-serve"
KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
_RESOURCES = {
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
}
_API = "/apis/admissionregistration.k8s.io/v1"
# matchConditions are GA (and on by default) from Kubernetes 1.28: the chart's `auto`.
_MATCH_CONDITIONS_FROM = (1, 28)
# metadata.name of these kinds: an RFC 1123 subdomain (apimachinery IsDNS1123Subdomain).
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class RegistrationError(Exception):
    """The registration could not be made or removed; the message says what to do.
    `made`: the configurations created or replaced before the failure (to be deleted)."""

    def __init__(self, message: str, made: int = 0) -> None:
        super().__init__(message)
        self.made = made


def check_url(url: str) -> str:
    """The base URL without a trailing slash; raises ValueError saying what is wrong."""
    parts = urlsplit(url)
    if parts.scheme != "https":
        raise ValueError(
            f"--register-url must be an https:// URL (the API server calls webhooks over "
            f"HTTPS only), got {url!r}"
        )
    if not parts.hostname:
        raise ValueError(f"--register-url has no host: {url!r}")
    if parts.path.strip("/") or parts.query or parts.fragment or parts.username:
        raise ValueError(
            f"--register-url must be only https://HOST:PORT (no path, query or user): {url!r}"
        )
    return url.rstrip("/")


def _minor(version: str) -> tuple[int, int]:
    """(major, minor) of a gitVersion such as v1.36.2 or v1.29.4-eks-1234."""
    found = re.match(r"v?(\d+)\.(\d+)", version)
    if found is None:
        raise RegistrationError(f"the API server reported no usable version: {version!r}")
    return int(found.group(1)), int(found.group(2))


def shipped_configurations(kube_version: str) -> list[dict[str, Any]]:
    """The chart's two configurations for a server of `kube_version` (without metadata and
    with clientConfig holding only the path)."""
    text = resources.files("webhook").joinpath("data", DATA_FILE).read_text(encoding="utf-8")
    variants = yaml.safe_load(text)
    key = (
        "matchConditions"
        if _minor(kube_version) >= _MATCH_CONDITIONS_FROM
        else ("noMatchConditions")
    )
    configurations: list[dict[str, Any]] = variants[key]
    return configurations


def configurations(
    name: str, base_url: str, ca_pem: bytes, kube_version: str
) -> list[dict[str, Any]]:
    """The two configurations to create: named `name`, calling `base_url` with `ca_pem`."""
    ca_bundle = base64.b64encode(ca_pem).decode()
    made = []
    for shipped in shipped_configurations(kube_version):
        configuration = copy.deepcopy(shipped)
        configuration["metadata"] = {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": MANAGED_BY},
        }
        for hook in configuration["webhooks"]:
            path = hook["clientConfig"]["path"]
            hook["clientConfig"] = {"url": base_url + path, "caBundle": ca_bundle}
        made.append(configuration)
    return made


@dataclass
class Registered:
    """What `register` did: the server, its version, and one line per configuration."""

    server: str
    version: str
    lines: list[str]
    webhooks: int


async def _client(kubeconfig: str | None) -> ApiClient:
    try:
        configuration = await load_configuration(kubeconfig)
    except (ConfigException, OSError) as exc:
        raise RegistrationError(
            f"cannot read the kubeconfig ({exc}): pass --kubeconfig FILE of the cluster to "
            "register with"
        ) from None
    return ApiClient(configuration)


def _failed(what: str, server: str, exc: Exception) -> RegistrationError:
    if isinstance(exc, ApiError) and exc.status in (401, 403):
        hint = (
            "; the kubeconfig's user may not manage admission webhooks: it needs create, get, "
            "update and delete on mutatingwebhookconfigurations and "
            "validatingwebhookconfigurations (cluster-admin has them)"
        )
    elif isinstance(exc, ApiError) and exc.status:
        hint = ""  # the API server's own message says what it refused
    else:
        hint = f"; check that {server} is reachable with this kubeconfig"
    return RegistrationError(f"cannot {what} at {server}: {exc}{hint}")


def check_name(name: str) -> str:
    """A configuration name the API server accepts (a DNS subdomain); raises ValueError."""
    if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        raise ValueError(
            f"--register-name {name!r} is not a Kubernetes object name: use lower-case "
            "letters, digits, '-' and '.', starting and ending with a letter or digit"
        )
    return name


async def server_version(kubeconfig: str | None) -> tuple[str, str]:
    """(the API server's address, its gitVersion): whether the kubeconfig reaches a cluster."""
    api = await _client(kubeconfig)
    server = str(api.configuration.host)
    try:
        return server, await _version(api, server)
    finally:
        await close(api)


async def _version(api: ApiClient, server: str) -> str:
    try:
        return str(checked(*await call(api, "GET", "/version"))["gitVersion"])
    except (ApiError, OSError, KeyError, ValueError, TypeError) as exc:
        raise _failed("read the version of the API server", server, exc) from None


async def register(kubeconfig: str | None, name: str, base_url: str, ca_pem: bytes) -> Registered:
    """Create (or replace, when an earlier run left them) both configurations."""
    api = await _client(kubeconfig)
    server = str(api.configuration.host)
    try:
        version = await _version(api, server)
        lines = []
        count = 0
        for configuration in configurations(name, base_url, ca_pem, version):
            try:
                lines.append(await _apply(api, configuration))
            except (ApiError, OSError, ValueError) as exc:
                error = _failed(f"register {configuration['kind']} {name}", server, exc)
                error.made = len(lines)
                raise error from None
            count += len(configuration["webhooks"])
        return Registered(server, version, lines, count)
    finally:
        await close(api)


async def _apply(api: ApiClient, configuration: dict[str, Any]) -> str:
    kind = configuration["kind"]
    name = configuration["metadata"]["name"]
    collection = f"{_API}/{_RESOURCES[kind]}"
    status, body = await call(api, "POST", collection, body=configuration)
    if status != 409:
        checked(status, body)
        return f"created {kind} {name}"
    # Left by an earlier run that did not end cleanly: replaced with this run's URL and CA.
    item = f"{collection}/{quote(name, safe='')}"
    current = checked(*await call(api, "GET", item))
    replacement = {
        **configuration,
        "metadata": {
            **configuration["metadata"],
            "resourceVersion": current["metadata"]["resourceVersion"],
        },
    }
    checked(*await call(api, "PUT", item, body=replacement))
    return f"replaced {kind} {name} (left by an earlier run)"


async def unregister(kubeconfig: str | None, name: str) -> list[str]:
    """Delete both configurations; one line per configuration (absent ones too)."""
    api = await _client(kubeconfig)
    server = str(api.configuration.host)
    lines = []
    try:
        for kind in KINDS:
            item = f"{_API}/{_RESOURCES[kind]}/{quote(name, safe='')}"
            try:
                status, body = await call(api, "DELETE", item)
                if status == 404:
                    lines.append(f"{kind} {name} was already gone")
                    continue
                checked(status, body)
            except (ApiError, OSError, ValueError) as exc:
                raise _failed(f"delete {kind} {name}", server, exc) from None
            lines.append(f"deleted {kind} {name}")
    finally:
        await close(api)
    return lines
