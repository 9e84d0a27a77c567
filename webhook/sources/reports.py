"""Writing the audit's policy reports (SPEC §6): one per namespace, replaced whole each run.

The webhook owns the reports it labels `app.kubernetes.io/managed-by: gpu-admission-webhook`,
all named `gpu-admission-webhook`: each run lists them (paginated, cluster-wide), replaces the
report of every namespace with findings (PUT with the listed resourceVersion, so a concurrent
writer is a 409 Conflict, not a lost update; POST where there is none yet) and deletes the
reports of namespaces that have no finding any more, so stale results disappear. An object
of that name without the label is someone else's and is never touched. A failure in one
namespace (403, the namespace being deleted) is reported and the others are still written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.core.reports import MANAGED_BY, MANAGED_BY_LABEL, REPORT_NAME, ReportFormat
from webhook.sources.kubeapi import ApiError, Send, api_error, checked

SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"


class ReportsUnavailable(Exception):
    """The report API is not served (CRD not installed) or not allowed (RBAC): one line."""


@dataclass
class Published:
    written: int = 0
    deleted: int = 0
    errors: list[str] = field(default_factory=list)  # one line per namespace that failed


async def _owned(
    send: Send, fmt: ReportFormat, page_size: int, namespace: str | None
) -> dict[str, str]:
    """{namespace: resourceVersion} of the reports this webhook owns (in `namespace` only, when
    the audit covers one namespace)."""
    owned: dict[str, str] = {}
    token: str | None = None
    while True:
        query: list[tuple[str, Any]] = [("labelSelector", SELECTOR), ("limit", page_size)]
        if token:
            query.append(("continue", token))
        status, body = await send("GET", fmt.collection(namespace), query, None)
        if status in (403, 404):
            exc = api_error(status, None, body)
            if status == 404:
                raise ReportsUnavailable(
                    f"{fmt.kind} ({fmt.api_version}) is not served: install its CRD (the chart "
                    f"ships it in crds/) or set the report format to the one installed: {exc}"
                )
            raise ReportsUnavailable(
                f"not allowed to list {fmt.resource} ({fmt.api_version}): {exc}; the chart's "
                "audit RBAC grants it"
            )
        page = checked(status, body)
        for item in page.get("items") or []:
            meta = item.get("metadata") or {}
            if meta.get("name") == REPORT_NAME and isinstance(meta.get("namespace"), str):
                owned[meta["namespace"]] = str(meta.get("resourceVersion") or "")
        token = (page.get("metadata") or {}).get("continue") or None
        if not token:
            return owned


async def publish(
    send: Send,
    fmt: ReportFormat,
    reports: Mapping[str, Mapping[str, Any]],
    *,
    page_size: int = 500,
    namespace: str | None = None,
) -> Published:
    """Make the cluster's owned reports exactly `reports` ({namespace: body}).

    `send(method, path, query, body)` -> (status, body). Raises ReportsUnavailable when
    reports cannot be listed at all; per-namespace failures are in `Published.errors`. With
    `namespace`, only that namespace's report is kept up to date (an audit of one namespace
    says nothing about the others)."""
    owned = await _owned(send, fmt, page_size, namespace)
    done = Published()
    for ns, report in reports.items():
        try:
            if ns in owned:
                body = {**report, "metadata": {**report["metadata"]}}
                body["metadata"]["resourceVersion"] = owned[ns]
                path = f"{fmt.collection(ns)}/{REPORT_NAME}"
                checked(*await send("PUT", path, (), body))
            else:
                checked(*await send("POST", fmt.collection(ns), (), report))
            done.written += 1
        except ApiError as exc:
            if exc.status == 409 and ns not in owned:
                message = (
                    f"a {fmt.kind} named {REPORT_NAME} that this webhook does not own "
                    f"(no {SELECTOR} label) is in the way: {exc}"
                )
            else:
                message = f"{exc}"
            done.errors.append(f"cannot write the {fmt.kind} of namespace {ns}: {message}")
    for ns in sorted(set(owned) - set(reports)):
        path = f"{fmt.collection(ns)}/{REPORT_NAME}"
        status, answer = await send("DELETE", path, (), None)
        if 200 <= status < 300:
            done.deleted += 1
        elif status != 404:  # already gone: what we wanted
            error = api_error(status, None, answer)
            done.errors.append(f"cannot delete the stale {fmt.kind} of namespace {ns}: {error}")
    return done
