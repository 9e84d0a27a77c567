"""`gpu-webhook export-policies`: the CRL rules as native ValidatingAdmissionPolicies, and with
`--access` GPU access control's rules as a validating and a mutating admission policy."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, TextIO

import yaml

from webhook.cli.exits import EXIT_OK, CommandError
from webhook.cli.review import load_policies
from webhook.core.config.model import load_config
from webhook.core.evaluation.native_access import DEFAULT_NAME as ACCESS_NAME
from webhook.core.evaluation.native_access import export_access
from webhook.core.evaluation.updates import update_reads
from webhook.core.policies.native import DEFAULT_NAME, export
from webhook.core.policies.native_cost import (
    cost_problem,
    estimated_cost,
    estimated_update_cost,
)


def add_export_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "export-policies",
        help="the CRL rules CEL can express, as a ValidatingAdmissionPolicy and its binding "
        "that read the CRL ConfigMaps as params (a CRL edit needs no re-export)",
    )
    parser.add_argument(
        "--policies",
        type=Path,
        help="CRL ConfigMaps directory: its groups of several keys are written into the "
        "policy (default: ./configmaps)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        help="webhook config YAML: its exemptNamespaces are left out of the binding, and an "
        "UPDATE is compared on what it makes the webhook read (env fixes, GPU access checks)",
    )
    parser.add_argument(
        "--name",
        default=None,
        help="name of the policy and of its binding, unique in the cluster (default: "
        f"{DEFAULT_NAME}, or {ACCESS_NAME} with --access)",
    )
    parser.add_argument(
        "--access",
        action="store_true",
        help="export GPU access control's rules instead (gpuAccess under enforce, from --config): "
        "a ValidatingAdmissionPolicy for the denials and a MutatingAdmissionPolicy writing the "
        "voids, each with its binding (Kubernetes >= 1.36)",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("yaml", "json"),
        default="yaml",
        help="the policy and its binding as YAML documents or one JSON List (default: %(default)s)",
    )


def _write(objects: list[dict[str, Any]], lines: list[str], output: str, out: TextIO) -> int:
    if output == "json":
        out.write(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
        out.write("\n")
        return EXIT_OK
    out.write("\n".join(lines) + "\n")
    out.write(yaml.safe_dump_all(objects, sort_keys=False, width=100_000))
    return EXIT_OK


def _export_access(args: argparse.Namespace, out: TextIO) -> int:
    config = load_config(args.config)
    result = export_access(config, name=args.name or ACCESS_NAME)
    kinds = ", ".join(o["kind"] for o in result.objects)
    lines = [
        "# gpu-webhook export-policies --access: GPU access control under enforce, as native",
        f"# policies ({kinds}).",
        "# With them installed the chart runs the access entry at failurePolicy Ignore: a",
        "# webhook outage blocks no pod, and these still deny the routes and write the voids.",
        *(f"# Note: {note}." for note in result.notes),
        "# Not expressed here (the webhook still does them):",
        *(f"#  - {item}" for item in result.not_expressed),
    ]
    return _write(result.objects, lines, args.output, out)


def cmd_export(args: argparse.Namespace, out: TextIO) -> int:
    if args.access:
        return _export_access(args, out)
    policies = load_policies(args.policies)
    config = load_config(args.config)
    result = export(
        policies.by_key.values(),
        reads=update_reads(config),
        exempt_namespaces=config.exempt_namespaces,
        name=args.name or DEFAULT_NAME,
    )
    problem = cost_problem(result.groups)
    if problem:
        raise CommandError(f"not exported: {problem}")
    groups = ", ".join(f"{g} ({len(k)} keys)" for g, k in result.groups.items()) or "none"
    lines = [
        "# gpu-webhook export-policies: the CRL rules as a ValidatingAdmissionPolicy.",
        "# Every enabled CRL ConfigMap in kube-public is a param: editing a CRL needs no",
        f"# re-export. Groups of several keys written into the policy: {groups}.",
        f"# Estimated CEL cost for a 64-container Pod: {estimated_cost(result.groups):,}, and "
        f"{estimated_update_cost():,} for the UPDATE check of such a template (linear in the "
        "containers; limit 1,000,000 per expression).",
        "# Not expressed here (the webhook still does them):",
        *(f"#  - {item}" for item in result.not_expressed),
    ]
    return _write(result.objects, lines, args.output, out)
