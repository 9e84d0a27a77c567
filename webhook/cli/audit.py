"""`gpu-webhook audit`: what the policies (in force, or a proposed folder) mean for what runs."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from webhook.cli.exits import EXIT_DENIED, EXIT_OK, CommandError
from webhook.cli.inputs import inventory_line
from webhook.cli.progress import Progress
from webhook.cli.quoting import printable
from webhook.cli.review import load_policies
from webhook.core.audit.findings import AuditResult, Finding, Problem
from webhook.core.config.model import WebhookConfig, load_config

if TYPE_CHECKING:
    from webhook.sources.audit import AuditRun
    from webhook.sources.snapshot import ClusterSnapshot


def add_audit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        help="the cluster to audit, read-only (default: in-cluster, else $KUBECONFIG or "
        "~/.kube/config, like kubectl)",
    )
    parser.add_argument(
        "--policies",
        type=Path,
        help="a folder of proposed CRL ConfigMaps to audit with instead of the cluster's "
        "(what would applying them deny?)",
    )
    parser.add_argument(
        "-n", "--namespace", help="audit this namespace only (default: every namespace)"
    )
    parser.add_argument(
        "--config", type=Path, help="webhook config YAML (default: built-in defaults)"
    )
    parser.add_argument(
        "--page-size",
        type=_page_size,
        default=500,
        metavar="N",
        help="objects per list request (default: %(default)s)",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("text", "json", "summary"),
        default="text",
        help="text (default), json, or summary: one line per finding",
    )


def _page_size(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a page size: {text!r} is not a number") from None
    if not 1 <= value <= 10_000:
        raise argparse.ArgumentTypeError(f"not a page size: {value} is out of range: use 1-10000")
    return value


def _where(problem: Problem, is_pod: bool) -> str:
    if is_pod:
        return ""
    parts = ["template"] if problem.in_owner else []
    if problem.pods:
        example = f", e.g. {problem.example}" if problem.example else ""
        parts.append(f"{problem.pods} pod(s){example}")
    return f" [{' and '.join(parts)}]" if parts else ""


def _finding_text(finding: Finding, problems: dict[tuple[str, str, str], Problem]) -> list[str]:
    lines = [f"--- {finding.owner.label()} ({finding.scope()})"]
    for problem in problems.values():
        text = problem.message.replace("\n", " ")
        lines.append(
            f"  - {problem.policy} ({problem.rule}): {text}{_where(problem, finding.is_pod)}"
        )
    if finding.more:
        lines.append(f"  - and {finding.more} more distinct problem(s); see -o json")
    return lines


def print_text(result: AuditResult, run_line: str, out: TextIO) -> None:
    denied, changed = result.denied, result.changed
    if denied:
        out.write("\nWOULD BE DENIED (the next change of these is refused):\n")
        for finding in denied:
            out.write("\n".join(_finding_text(finding, finding.denied)) + "\n")
    if changed:
        out.write("\nWOULD CHANGE (what pods created again would get that these do not have):\n")
        for finding in changed:
            out.write("\n".join(_finding_text(finding, finding.changes)) + "\n")
    access = result.access
    if access:
        out.write(
            "\nGPU ACCESS (reach GPUs without requesting them; denied under gpuAccess enforce):\n"
        )
        for finding in access:
            out.write("\n".join(_finding_text(finding, finding.access)) + "\n")
    tail = f", {len(access)} reach GPUs without requesting them" if access else ""
    out.write(
        f"\n{run_line}: {len(denied)} owner(s) would be denied, {len(changed)} would change{tail}\n"
    )
    if result.runtime_unknown:
        out.write(
            f"runtime version unknown in pods' containers: {result.unknown_text()} (their "
            "placement is not checked: set each image's version annotation or image table entry)\n"
        )


def print_summary(result: AuditResult, out: TextIO) -> None:
    """One line per owner: those that would be denied first, then those that would change,
    then those that only reach GPUs without requesting them (gpuAccess warn or off)."""
    denied, changed = result.denied, [f for f in result.changed if not f.denied]
    others = [f for f in result.access if not f.denied and not f.changes]
    for finding in [*denied, *changed, *others]:
        if finding.denied:
            verdict, count, what = "DENIED", len(finding.denied), "violation(s)"
        elif finding.changes:
            verdict, count, what = "CHANGES", len(finding.changes), "change(s)"
        else:
            verdict, count, what = "ACCESS", len(finding.access), "GPU access finding(s)"
        out.write(f"{verdict:<8} {finding.owner.label()}: {count} {what}; {finding.scope()}\n")


def _header(
    args: argparse.Namespace, snapshot: ClusterSnapshot, config: WebhookConfig
) -> list[str]:
    where = f"the cluster at {snapshot.server}"
    if args.policies is not None:
        lines = [f"policies: proposed, from {args.policies}"]
    else:
        lines = [f"policies: {snapshot.configmaps} CRL ConfigMap(s) from {where}"]
    if snapshot.inventory is not None:
        lines.append(inventory_line(snapshot.inventory, where, config))
    if snapshot.claims is not None:
        lines.append(
            f"DRA claims: {len(snapshot.claims.templates)} ResourceClaimTemplate(s), "
            f"{len(snapshot.claims.claims)} ResourceClaim(s) from {where}"
        )
    return lines


def _run_line(run: AuditRun) -> str:
    result = run.result
    finished = f" ({result.finished_pods} finished pod(s) skipped)" if result.finished_pods else ""
    return (
        f"audited {result.workloads} workload(s) and {result.pods} pod(s){finished} in "
        f"{run.seconds:.1f} s with {run.requests} list request(s)"
    )


def no_cluster_reason(kubeconfig: str | None) -> str:
    """Why no cluster can be read, with the ways out, when no kubeconfig is given, the command
    does not run in a pod and no file the client would read exists; "" when one may be read.
    (The client itself says "Invalid kube-config file. Expected key current-context".)"""
    if kubeconfig is not None or os.environ.get("KUBERNETES_SERVICE_HOST"):
        return ""
    value = os.environ.get("KUBECONFIG", "")
    paths = [p for p in value.split(os.pathsep) if p] or ["~/.kube/config"]
    if any(Path(p).expanduser().is_file() for p in paths):
        return ""
    where = f"KUBECONFIG={value}" if value else "~/.kube/config"
    return (
        f"no cluster to audit: no --kubeconfig given, not in a pod, and {where} does not exist; "
        "pass --kubeconfig FILE or set KUBECONFIG, or review manifests offline with "
        "`gpu-webhook review -f FILE`"
    )


def cmd_audit(args: argparse.Namespace, out: TextIO) -> int:
    config = load_config(args.config)
    reason = no_cluster_reason(args.kubeconfig)
    if reason:
        raise CommandError(reason)
    proposed = load_policies(args.policies) if args.policies is not None else None
    # Imported here: only a command that talks to a cluster needs the kubernetes client.
    from webhook.sources.audit import (  # noqa: PLC0415
        AuditError,
        AuditOptions,
        ListedKind,
        audit_cluster,
    )
    from webhook.sources.snapshot import ClusterReadError  # noqa: PLC0415

    # On a terminal only, and never with -o json (its readers parse what they capture).
    progress = Progress(sys.stderr, "audit", enabled=args.output != "json")

    def listed(kind: ListedKind, pages: int, objects: int) -> None:
        progress.update(
            f"listing {kind.resource} ({kind.api_version}): {pages} page(s), {objects} object(s)"
        )

    options = AuditOptions(
        namespace=args.namespace,
        page_size=args.page_size,
        progress=listed if progress.on else None,
    )
    try:
        snapshot, run = asyncio.run(
            audit_cluster(args.kubeconfig, config, policies=proposed, options=options)
        )
    except (ClusterReadError, AuditError) as exc:
        message = str(exc)
        if "current-context" in message:
            message += (
                "; it names no current context: set one with `kubectl config use-context "
                "NAME`, or pass another --kubeconfig FILE"
            )
        raise CommandError(message) from None
    finally:
        progress.done()
    header = _header(args, snapshot, config)
    notes = [*snapshot.notes, *run.result.notes]
    result = run.result
    if args.output == "text":
        out.writelines(f"{line}\n" for line in header)
        out.writelines(f"note: {note}\n" for note in notes)
        print_text(result, _run_line(run), out)
    else:
        # Machine formats keep their shape: the context lines go to stderr.
        sys.stderr.writelines(f"gpu-webhook audit: {printable(line)}\n" for line in header)
        sys.stderr.writelines(f"gpu-webhook audit: note: {printable(note)}\n" for note in notes)
        if args.output == "json":
            document = result.to_json()
            document["notes"] = notes
            document["summary"]["seconds"] = round(run.seconds, 3)
            document["summary"]["requests"] = run.requests
            json.dump(document, out, indent=2, ensure_ascii=False)
            out.write("\n")
        else:
            print_summary(result, out)
    return EXIT_DENIED if result.denied else EXIT_OK
