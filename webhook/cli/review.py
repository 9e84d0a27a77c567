"""`gpu-webhook review`: evaluate manifests offline exactly as the webhook would."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml

from webhook.cli.exits import EXIT_DENIED, EXIT_OK
from webhook.core.config import WebhookConfig, load_config
from webhook.core.errors import ManifestError, WebhookError
from webhook.core.evaluate import Decision, evaluate
from webhook.core.manifests import parse_documents
from webhook.core.policyset import PolicySet
from webhook.sources.files import load_policy_dir, policy_files, read_documents

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
