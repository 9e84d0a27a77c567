"""Writing the audit's policy reports (SPEC §6): one per namespace, replaced whole each run.

Reports are owned per installation (`--report-owner`, the chart's release by default): an
installation's reports are named after its owner and labelled
`app.kubernetes.io/managed-by: gpu-admission-webhook` and `gpu-admission-webhook/report-owner:
<owner>`. Each run lists the reports with both labels (paginated, cluster-wide), replaces the
report of every namespace with findings (PUT with the listed resourceVersion, so a concurrent
writer is a 409 Conflict, not a lost update; POST where there is none yet) and deletes the
reports of namespaces that have no finding any more (with the listed resourceVersion as a
precondition, so an object replaced since it was listed is not deleted). Another installation's
reports (another owner label), and an object of the same name without the labels, are never
touched. The label is checked here on every listed object, not only through the list's label
selector: RBAC cannot grant by label, only by name (the chart narrows update and delete to the
owner's report name). A failure in one namespace (403, the namespace being deleted) is reported
and the others are still written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.core.audit.reports import (
    DEFAULT_OWNER,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    OWNER_LABEL,
    ReportFormat,
    check_owner,
)
from webhook.sources.kubeapi import ApiError, Send, api_error, checked


def selector(owner: str) -> str:
    return f"{MANAGED_BY_LABEL}={MANAGED_BY},{OWNER_LABEL}={owner}"


class ReportsUnavailable(Exception):
    """The report API is not served (CRD not installed) or not allowed (RBAC): one line."""


@dataclass
class Published:
    written: int = 0
    deleted: int = 0
    errors: list[str] = field(default_factory=list)  # one line per namespace that failed


async def _owned(
    send: Send, fmt: ReportFormat, page_size: int, namespace: str | None, owner: str
) -> dict[str, str]:
    """{namespace: resourceVersion} of the reports this installation owns (in `namespace` only,
    when the audit covers one namespace)."""
    owned: dict[str, str] = {}
    token: str | None = None
    while True:
        query: list[tuple[str, Any]] = [("labelSelector", selector(owner)), ("limit", page_size)]
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
            labels = meta.get("labels") or {}
            if (
                meta.get("name") == owner
                and isinstance(meta.get("namespace"), str)
                and labels.get(OWNER_LABEL) == owner
                and labels.get(MANAGED_BY_LABEL) == MANAGED_BY
            ):
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
    owner: str = DEFAULT_OWNER,
) -> Published:
    """Make the cluster's reports owned by `owner` exactly `reports` ({namespace: body}, built
    for that owner).

    `send(method, path, query, body)` -> (status, body). Raises ReportsUnavailable when
    reports cannot be listed at all; per-namespace failures are in `Published.errors`. With
    `namespace`, only that namespace's report is kept up to date (an audit of one namespace
    says nothing about the others)."""
    check_owner(owner)
    owned = await _owned(send, fmt, page_size, namespace, owner)
    done = Published()
    for ns, report in reports.items():
        try:
            if ns in owned:
                body = {**report, "metadata": {**report["metadata"]}}
                body["metadata"]["resourceVersion"] = owned[ns]
                path = f"{fmt.collection(ns)}/{owner}"
                checked(*await send("PUT", path, (), body))
            else:
                checked(*await send("POST", fmt.collection(ns), (), report))
            done.written += 1
        except ApiError as exc:
            if exc.status == 409 and ns not in owned:
                message = (
                    f"a {fmt.kind} named {owner} that this installation does not own "
                    f"(no {OWNER_LABEL}={owner} label) is in the way: {exc}"
                )
            else:
                message = f"{exc}"
            done.errors.append(f"cannot write the {fmt.kind} of namespace {ns}: {message}")
    for ns in sorted(set(owned) - set(reports)):
        path = f"{fmt.collection(ns)}/{owner}"
        # Only the object listed with the owner label: not one put in its place since.
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"resourceVersion": owned[ns]},
        }
        status, answer = await send("DELETE", path, (), options if owned[ns] else None)
        if 200 <= status < 300:
            done.deleted += 1
        elif status != 404:  # already gone: what we wanted
            error = api_error(status, None, answer)
            done.errors.append(f"cannot delete the stale {fmt.kind} of namespace {ns}: {error}")
    return done
