"""`gpu-webhook` command line: serve, review (offline, for CI), lint, certs."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml

from webhook.config import WebhookConfig, load_config
from webhook.crl import parse_configmap
from webhook.errors import ConfigError, ManifestError, WebhookError
from webhook.evaluate import Decision, evaluate
from webhook.policyset import (
    PolicySet,
    load_policy_dir,
    parse_documents,
    policy_files,
    read_documents,
)

EXIT_OK = 0
EXIT_DENIED = 1
EXIT_USAGE = 2
DEFAULT_POLICIES = Path("configmaps")


class _NoAliasDumper(yaml.SafeDumper):
    """Mutated objects share unchanged subtrees; print them in full, not as YAML anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _dump_yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_NoAliasDumper, sort_keys=False, allow_unicode=True)


@dataclass
class DocumentResult:
    """The review of one document of a manifest, ready to print."""

    index: int
    kind: str
    ref: str
    verdict: str  # allowed | denied | skipped
    violations: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    patch: list[dict[str, Any]] = field(default_factory=list)
    mutated: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "document": self.index,
            "kind": self.kind,
            "object": self.ref,
            "verdict": self.verdict,
            "violations": self.violations,
            "warnings": self.warnings,
            "changes": self.changes,
            "patch": self.patch,
            "mutated": self.mutated,
        }


def review_document(
    index: int, doc: Any, policies: PolicySet, config: WebhookConfig
) -> DocumentResult:
    if not isinstance(doc, Mapping) or not isinstance(doc.get("kind"), str):
        return DocumentResult(
            index,
            "",
            f"document {index}",
            "skipped",
            warnings=["not a Kubernetes object (no kind)"],
        )
    kind = doc["kind"]
    try:
        decision: Decision = evaluate(doc, policies, config, kind=kind)
    except WebhookError as exc:
        return DocumentResult(index, kind, kind, "denied", violations=[f"cannot evaluate: {exc}"])
    if not decision.handled:
        return DocumentResult(
            index,
            kind,
            decision.object_ref,
            "skipped",
            warnings=[f"kind {kind} is not checked by the webhook"],
        )
    return DocumentResult(
        index,
        kind,
        decision.object_ref,
        "allowed" if decision.allowed else "denied",
        violations=[v.message for v in decision.violations],
        warnings=list(decision.warnings),
        changes=list(decision.notes),
        patch=decision.patch,
        mutated=decision.mutated,
    )


def _print_text(results: Sequence[DocumentResult], out: TextIO) -> None:
    for result in results:
        out.write(f"--- {result.ref} (document {result.index}): {result.verdict.upper()}\n")
        for title, lines in (
            ("violations", result.violations),
            ("changes", result.changes),
            ("warnings", result.warnings),
        ):
            if lines:
                out.write(f"{title}:\n")
                for line in lines:
                    out.write("  - " + line.replace("\n", "\n    ") + "\n")
        if result.mutated is not None:
            out.write("mutated object:\n")
            text = _dump_yaml(dict(result.mutated))
            out.write("".join(f"  {line}\n" for line in text.splitlines()))
    denied = sum(r.verdict == "denied" for r in results)
    changed = sum(bool(r.changes) for r in results)
    out.write(
        f"\n{len(results)} document(s): {denied} denied, {changed} with changes, "
        f"{sum(r.verdict == 'skipped' for r in results)} skipped\n"
    )


def _load_policies(path: Path | None) -> PolicySet:
    if path is None:
        if not DEFAULT_POLICIES.is_dir():
            raise ManifestError(
                "no policies: pass --policies DIR (a directory of CRL ConfigMap YAML files, "
                "e.g. the project's configmaps/)"
            )
        path = DEFAULT_POLICIES
    return load_policy_dir(path)


def cmd_review(args: argparse.Namespace, out: TextIO) -> int:
    config = load_config(args.config)
    policies = _load_policies(args.policies)
    if args.file == "-":
        docs = parse_documents(sys.stdin.read(), "<stdin>")
    else:
        path = Path(args.file)
        if path.is_dir():
            docs = [doc for file in policy_files(path) for doc in read_documents(file)]
        else:
            docs = read_documents(path)
    results = [review_document(i, doc, policies, config) for i, doc in enumerate(docs, 1)]
    if args.output == "json":
        json.dump([r.to_json() for r in results], out, indent=2, ensure_ascii=False)
        out.write("\n")
    elif args.output == "yaml":
        out.write(_dump_yaml([r.to_json() for r in results]))
    else:
        _print_text(results, out)
    return EXIT_DENIED if any(r.verdict == "denied" for r in results) else EXIT_OK


def cmd_lint(args: argparse.Namespace, out: TextIO) -> int:
    path = Path(args.path)
    configmaps: list[Mapping[str, Any]] = []
    errors = 0
    for file in policy_files(path):
        for doc in read_documents(file):
            if not isinstance(doc, Mapping) or doc.get("kind") != "ConfigMap":
                continue
            configmaps.append(doc)
            parsed = parse_configmap(doc)
            if not parsed.is_crl and not parsed.name.startswith("cf-crl-"):
                out.write(f"SKIP  {file}: {parsed.ref} is not a CRL ConfigMap\n")
                continue
            status = "ERROR" if parsed.errors else "OK   "
            detail = ""
            if parsed.limitation is not None:
                state = "enabled" if parsed.active else "disabled"
                detail = f" ({parsed.limitation.key}, group {parsed.limitation.group}, {state})"
            out.write(f"{status} {file}: {parsed.ref}{detail}\n")
            for error in parsed.errors:
                out.write(f"  error: {error}\n")
            for warning in parsed.warnings:
                out.write(f"  warning: {warning}\n")
            errors += len(parsed.errors)
    for conflict in PolicySet.from_configmaps(configmaps).conflicts:
        out.write(f"ERROR {conflict.message()}\n")
        errors += 1
    out.write(f"\n{len(configmaps)} ConfigMap(s), {errors} error(s)\n")
    return EXIT_DENIED if errors else EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-webhook",
        description="GPU admission webhook: CRL resource policies, CUDA node affinity, env fixes.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    review = sub.add_parser(
        "review",
        help="offline: evaluate manifests like the webhook would (exit 1 if anything is denied)",
    )
    review.add_argument(
        "-f", "--file", required=True, help="manifest file, directory, or - for stdin"
    )
    review.add_argument(
        "--policies", type=Path, help="CRL ConfigMaps directory (default: ./configmaps)"
    )
    review.add_argument(
        "--config", type=Path, help="webhook config YAML (default: built-in defaults)"
    )
    review.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text")

    lint = sub.add_parser("lint", help="validate CRL ConfigMaps offline (exit 1 on errors)")
    lint.add_argument("path", help="a CRL ConfigMap YAML file or a directory of them")

    serve = sub.add_parser("serve", help="run the admission webhook server (HTTPS)")
    certs = sub.add_parser("certs", help="generate a CA and a serving certificate into certs/")
    try:
        from webhook.certs import add_certs_arguments
        from webhook.server import add_serve_arguments
    except ImportError:  # pragma: no cover - only when the package is broken
        pass
    else:
        add_serve_arguments(serve)
        add_certs_arguments(certs)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    try:
        if args.command == "review":
            return cmd_review(args, out)
        if args.command == "lint":
            return cmd_lint(args, out)
        if args.command == "serve":
            from webhook.server import serve_command

            return serve_command(args)
        from webhook.certs import certs_command

        return certs_command(args)
    except (ConfigError, ManifestError) as exc:
        sys.stderr.write(f"gpu-webhook {args.command}: {exc}\n")
        return EXIT_USAGE
    except BrokenPipeError:  # `gpu-webhook review ... | head`
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
