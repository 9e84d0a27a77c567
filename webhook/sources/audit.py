"""Listing what the audit evaluates (SPEC §6): the workload kinds of the registry and Pods.

Kinds are found with API discovery (the APIGroupList at /apis, then the APIResourceList of the
group-versions that hold a registry kind), so an operator kind is audited exactly when its CRD
is installed, at whatever version it is served. Every list is paginated (`limit`/`continue`,
as client-go's tools/pager does) and each page is evaluated and dropped before the next is
requested: memory is one page plus the owners, never every pod. Workloads are listed before
Pods, so each pod's owner chain is known when it is grouped (core/audit resolves it anyway
in any order). A kind that is not served (its CRD is not installed) or that the credentials
may not list (403) is a note, not a failure; any other error is an AuditError. A 403 also makes
the run incomplete (`AuditRun.unread`): what that kind holds is unknown, not absent, so the
server's audit publishes nothing from such a run (sources/auditor.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes.aio.client import ApiClient

from webhook.core.audit.audit import Audit, audit_config, evaluate_object, pod_finished
from webhook.core.audit.findings import AuditResult
from webhook.core.config.model import WebhookConfig
from webhook.core.kinds.registry import WorkloadKind
from webhook.core.placement.inventory import NodeInventory
from webhook.core.policies.policyset import PolicySet
from webhook.core.workloads.claims import ClaimIndex
from webhook.core.workloads.pods import registry_for
from webhook.sources.kubeapi import ApiError, api_error, call, checked, close
from webhook.sources.snapshot import ClusterSnapshot, connect, read_snapshot

log = logging.getLogger(__name__)

PAGE_SIZE = 500  # client-go tools/pager defaultPageSize
REQUEST_TIMEOUT = 30.0
# Objects evaluated between two yields to the event loop: the server's audit shares the loop
# with admission, and evaluating a running pod costs ~0.1 ms, so a slice is a few ms.
SLICE = 25


class AuditError(Exception):
    """The cluster could not be listed well enough to audit it (one-line message)."""


@dataclass(frozen=True)
class ListedKind:
    api_version: str  # "apps/v1", "kubeflow.org/v1"; "v1" for Pods
    kind: str
    resource: str  # the plural: "deployments"
    namespaced: bool

    def path(self, namespace: str | None) -> str:
        root = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if namespace and self.namespaced:
            return f"{root}/namespaces/{namespace}/{self.resource}"
        return f"{root}/{self.resource}"


PODS = ListedKind("v1", "Pod", "pods", True)


@dataclass
class AuditOptions:
    namespace: str | None = None  # None: every namespace
    page_size: int = PAGE_SIZE
    page_pause: float = 0.0  # seconds between two pages (the server's share of API load)
    request_timeout: float = REQUEST_TIMEOUT
    # Called after each page: (the kind listed, its pages so far, its objects so far).
    progress: Callable[[ListedKind, int, int], None] | None = None


@dataclass
class AuditRun:
    """One audit's result and what it cost (for logs, metrics and the benchmark)."""

    result: AuditResult
    seconds: float
    requests: int
    kinds: list[ListedKind] = field(default_factory=list)
    # The kinds the credentials may not list (403), as their notes say it: their objects may
    # exist and have findings, so this run's findings are not the cluster's.
    unread: list[str] = field(default_factory=list)


Fetch = Callable[[str, Sequence[tuple[str, Any]]], Awaitable[tuple[int, bytes]]]


def _groups_wanted(kinds: Iterable[WorkloadKind]) -> dict[str, set[str]]:
    wanted: dict[str, set[str]] = {}
    for entry in kinds:
        if entry.kind == "Pod" and entry.group == "":
            continue
        wanted.setdefault(entry.group, set()).add(entry.kind)
    return wanted


async def discover(
    fetch: Fetch, kinds: Iterable[WorkloadKind], notes: list[str]
) -> list[ListedKind]:
    """The served (group, kind)s of `kinds` with their version and plural; absent ones noted."""
    wanted = _groups_wanted(kinds)
    group_list = checked(*await fetch("/apis", ()))
    served: dict[str, list[str]] = {}
    for group in group_list.get("groups") or []:
        if not isinstance(group, Mapping) or group.get("name") not in wanted:
            continue
        preferred = (group.get("preferredVersion") or {}).get("groupVersion")
        versions = [v.get("groupVersion") for v in group.get("versions") or []]
        ordered = [preferred, *(v for v in versions if v != preferred)] if preferred else versions
        served[str(group["name"])] = [v for v in ordered if isinstance(v, str)]
    found: list[ListedKind] = []
    missing: list[str] = []
    for group, names in sorted(wanted.items()):
        left = set(names)
        for group_version in served.get(group, []):
            if not left:
                break
            status, body = await fetch(f"/apis/{group_version}", ())
            if status == 404:  # a version that just went away; the next may serve it
                continue
            resources = checked(status, body).get("resources") or []
            for resource in resources:
                kind, name = resource.get("kind"), resource.get("name")
                if kind in left and isinstance(name, str) and "/" not in name:
                    verbs = resource.get("verbs") or []
                    if "list" in verbs:
                        found.append(
                            ListedKind(group_version, kind, name, bool(resource.get("namespaced")))
                        )
                    left.discard(kind)
        if left:
            missing.append(f"{group} ({', '.join(sorted(left))})")
    if missing:
        notes.append(f"not installed in the cluster, not audited: {'; '.join(missing)}")
    # Built-in controllers first, then operators; the order only makes logs predictable.
    found.sort(key=lambda k: (k.api_version.partition("/")[0] not in ("apps", "batch"), k.kind))
    return found


def _describe(kind: ListedKind, exc: ApiError) -> str:
    if exc.status == 403:
        return (
            f"not allowed to list {kind.resource} ({kind.api_version}), not audited: {exc}; "
            f"grant list on {kind.resource} (the chart's audit RBAC does)"
        )
    return f"{kind.resource} ({kind.api_version}) is not served, not audited: {exc}"


async def run_audit(
    fetch: Fetch,
    policies: PolicySet,
    config: WebhookConfig,
    *,
    inventory: NodeInventory | None = None,
    claims: ClaimIndex | None = None,
    options: AuditOptions | None = None,
) -> AuditRun:
    """List and evaluate everything the webhook checks; raises AuditError when the cluster
    cannot be read (a 403 or 404 on one kind is only a note)."""
    options = options or AuditOptions()
    config = audit_config(config)
    started = time.monotonic()
    counted = _Counting(fetch)
    audit = Audit()
    unread: list[str] = []
    try:
        kinds = await discover(counted, registry_for(config).kinds.values(), audit.notes)
        for kind in [*kinds, PODS]:
            if options.namespace and not kind.namespaced:
                continue
            await _list_kind(
                counted, kind, audit, policies, config, inventory, claims, options, unread
            )
    except ApiError as exc:
        raise AuditError(f"cannot audit the cluster: {exc}") from None
    except AuditError:
        raise
    except Exception as exc:  # network errors of the client, timeouts, bad JSON
        raise AuditError(f"cannot audit the cluster: {type(exc).__name__}: {exc}") from None
    return AuditRun(audit.result(), time.monotonic() - started, counted.requests, kinds, unread)


class _Counting:
    def __init__(self, fetch: Fetch) -> None:
        self._fetch = fetch
        self.requests = 0

    async def __call__(self, path: str, query: Sequence[tuple[str, Any]]) -> tuple[int, bytes]:
        self.requests += 1
        return await self._fetch(path, query)


async def _list_kind(
    fetch: Fetch,
    kind: ListedKind,
    audit: Audit,
    policies: PolicySet,
    config: WebhookConfig,
    inventory: NodeInventory | None,
    claims: ClaimIndex | None,
    options: AuditOptions,
    unread: list[str],
) -> None:
    token: str | None = None
    is_pod = kind is PODS
    pages = objects = 0
    while True:
        query: list[tuple[str, Any]] = [("limit", options.page_size)]
        if token:
            query.append(("continue", token))
        status, body = await fetch(kind.path(options.namespace), query)
        if status in (403, 404):
            note = _describe(kind, api_error(status, None, body))
            audit.notes.append(note)
            if status == 403:  # not allowed: its objects are unknown, not absent
                unread.append(note)
            return
        # A 410 (the continue token expired during a slow audit) fails this run; the next
        # run starts over. Restarting the kind here could double-count what was evaluated.
        page = checked(status, body)
        del body
        items = page.get("items") or []
        token = (page.get("metadata") or {}).get("continue") or None
        del page
        for start in range(0, len(items), SLICE):
            for item in items[start : start + SLICE]:
                if not isinstance(item, Mapping):
                    continue
                if is_pod and pod_finished(item):
                    audit.finished()
                    continue
                if not is_pod:
                    audit.owner(item, kind.api_version, kind.kind)
                decision = evaluate_object(
                    item,
                    kind.api_version,
                    kind.kind,
                    policies,
                    config,
                    inventory=inventory,
                    claims=claims,
                )
                audit.add(item, kind.api_version, kind.kind, decision)
            await asyncio.sleep(0)
        pages += 1
        objects += len(items)
        del items
        if options.progress is not None:
            options.progress(kind, pages, objects)
        if not token:
            return
        if options.page_pause > 0:
            await asyncio.sleep(options.page_pause)


def client_fetch(api: ApiClient, timeout: float = REQUEST_TIMEOUT) -> Fetch:
    """GETs through a connected kubernetes client."""

    async def fetch(path: str, query: Sequence[tuple[str, Any]]) -> tuple[int, bytes]:
        return await call(api, "GET", path, query=query, timeout=timeout)

    return fetch


async def audit_cluster(
    kubeconfig: str | None,
    config: WebhookConfig,
    *,
    policies: PolicySet | None = None,
    options: AuditOptions | None = None,
) -> tuple[ClusterSnapshot, AuditRun]:
    """`gpu-webhook audit`: the cluster's policies (unless `policies` are given: a proposed
    folder), node inventory and DRA claims read once as the webhook would see them, then the
    audit, over one client. Raises ClusterReadError or AuditError (one line each)."""
    api = await connect(kubeconfig)
    try:
        snapshot = await read_snapshot(api, config, policies=policies is None)
        in_force = policies if policies is not None else snapshot.policies
        assert in_force is not None  # read_snapshot lists them when asked
        run = await run_audit(
            client_fetch(api, (options or AuditOptions()).request_timeout),
            in_force,
            config,
            inventory=snapshot.inventory,
            claims=snapshot.claims,
            options=options,
        )
    finally:
        await close(api)
    return snapshot, run
