"""`gpu-webhook` command line: serve, review and test (offline, for CI), audit, images, lint,
tables, nodes, certs, export-policies."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import TextIO

from webhook.cli.audit import add_audit_arguments, cmd_audit
from webhook.cli.exits import EXIT_OK, EXIT_USAGE, CommandError
from webhook.cli.export import add_export_parser, cmd_export
from webhook.cli.images import add_images_parser, add_registry_arguments, cmd_images
from webhook.cli.lint import cmd_lint
from webhook.cli.nodes import add_nodes_parser, cmd_nodes
from webhook.cli.quoting import PrintableOutput, printable
from webhook.cli.review import cmd_review
from webhook.cli.tables import add_tables_parser, cmd_tables
from webhook.cli.test import add_test_arguments, cmd_test
from webhook.core.base.errors import ConfigError, ManifestError


def _version() -> str:
    try:
        return metadata.version("gpu-admission-webhook")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-webhook",
        description="GPU admission webhook: CRL resource policies, CUDA node affinity, env fixes.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    review = sub.add_parser(
        "review",
        help="offline: evaluate manifests like the webhook would (exit 1 if anything is denied)",
    )
    review.add_argument(
        "-f", "--file", required=True, help="manifest file, directory, or - for stdin"
    )
    review.add_argument(
        "--policies",
        type=Path,
        help="CRL ConfigMaps directory (default: ./configmaps, or the cluster's with "
        "--kubeconfig; given together with --kubeconfig, --policies wins for policies)",
    )
    review.add_argument(
        "--nodes",
        type=Path,
        help="node inventory: the output of `kubectl get nodes -o yaml` (or -o json); CUDA "
        "placement then uses the label schemes these nodes carry (overrides the cluster's "
        "nodes with --kubeconfig)",
    )
    review.add_argument(
        "--claims",
        type=Path,
        help="DRA ResourceClaimTemplates/ResourceClaims (YAML or JSON) that pods of the manifest "
        "use; templates in the manifest itself are always used",
    )
    review.add_argument(
        "--kubeconfig",
        help="read CRL ConfigMaps (kube-public), Nodes (metadata only) and "
        "ResourceClaimTemplates from this cluster, read-only, once",
    )
    review.add_argument(
        "--config", type=Path, help="webhook config YAML (default: built-in defaults)"
    )
    review.add_argument(
        "--resolve-images",
        action="store_true",
        help="look up in their registries the runtime version (CUDA, ROCm) of accelerator images "
        "nothing else tells (the offline review never asks a registry otherwise)",
    )
    add_registry_arguments(review)
    review.add_argument(
        "-o",
        "--output",
        choices=("text", "json", "yaml", "summary"),
        default="text",
        help="text (default), json or yaml (with mutated objects), or summary: one line per "
        "document for pipelines",
    )

    audit = sub.add_parser(
        "audit",
        help="read-only: what the policies (or a proposed folder) deny among the cluster's "
        "running workloads (exit 1 if anything would be denied)",
    )
    add_audit_arguments(audit)

    add_images_parser(sub)
    add_export_parser(sub)

    test = sub.add_parser(
        "test",
        help="offline: check declared expectations (test files) against the policies, for CI "
        "(exit 1 if one fails)",
    )
    add_test_arguments(test)

    lint = sub.add_parser(
        "lint",
        help="validate CRL ConfigMaps and a webhook config offline (exit 1 on errors)",
    )
    lint.add_argument("path", nargs="?", help="a CRL ConfigMap YAML file or a directory of them")
    lint.add_argument(
        "--config",
        type=Path,
        help="a webhook config YAML to check too (its accelerators' admin rows: versions, fields)",
    )
    add_tables_parser(sub)
    add_nodes_parser(sub)

    serve = sub.add_parser("serve", help="run the admission webhook server (HTTPS)")
    certs = sub.add_parser("certs", help="generate a CA and a serving certificate into certs/")
    try:
        from webhook.cli.certs import add_certs_arguments
        from webhook.cli.serve import add_serve_arguments
    except ImportError:  # pragma: no cover - only when the package is broken
        pass
    else:
        add_serve_arguments(serve)
        add_certs_arguments(certs)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    # Manifest text reaches the output: its control characters are escaped (quoting.py).
    out = PrintableOutput(out or sys.stdout)
    args = build_parser().parse_args(argv)
    try:
        if args.command == "review":
            return cmd_review(args, out)
        if args.command == "audit":
            return cmd_audit(args, out)
        if args.command == "test":
            return cmd_test(args, out)
        if args.command == "lint":
            return cmd_lint(args, out)
        if args.command == "export-policies":
            return cmd_export(args, out)
        if args.command == "images":
            return cmd_images(args, out)
        if args.command == "tables":
            return cmd_tables(args, out)
        if args.command == "nodes":
            return cmd_nodes(args, out)
        if args.command == "serve":
            from webhook.cli.serve import serve_command

            return serve_command(args)
        from webhook.cli.certs import certs_command

        return certs_command(args)
    except (ConfigError, ManifestError, CommandError) as exc:
        sys.stderr.write(f"gpu-webhook {args.command}: {printable(str(exc))}\n")
        return EXIT_USAGE
    except BrokenPipeError:  # `gpu-webhook review ... | head`
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
