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
from webhook.cli.quoting import unquoted_values
from webhook.core.config import WebhookConfig, load_config
from webhook.core.crl import parse_configmap
from webhook.core.errors import ManifestError, WebhookError
from webhook.core.evaluate import Decision, evaluate
from webhook.core.manifests import parse_documents
from webhook.core.policyset import PolicySet
from webhook.sources.files import policy_files, read_documents

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

    file: str
    index: int
    kind: str
    ref: str
    verdict: str  # allowed | denied | skipped
    reason: str = ""  # why it was skipped
    violations: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    patch: list[dict[str, Any]] = field(default_factory=list)
    mutated: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "document": self.index,
            "kind": self.kind,
            "object": self.ref,
            "verdict": self.verdict,
            "reason": self.reason,
            "violations": self.violations,
            "warnings": self.warnings,
            "changes": self.changes,
            "patch": self.patch,
            "mutated": self.mutated,
        }


def _group(doc: Mapping[str, Any]) -> str:
    """The API group of `apiVersion` ("" for the core group's "v1")."""
    api_version = doc.get("apiVersion")
    if not isinstance(api_version, str) or "/" not in api_version:
        return ""
    return api_version.split("/", 1)[0]


def review_document(
    file: str, index: int, doc: Any, policies: PolicySet, config: WebhookConfig
) -> DocumentResult:
    if not isinstance(doc, Mapping) or not isinstance(doc.get("kind"), str):
        return DocumentResult(
            file, index, "", f"document {index}", "skipped", "not a Kubernetes object (no kind)"
        )
    kind = doc["kind"]
    unquoted = unquoted_values(doc)
    try:
        decision: Decision = evaluate(doc, policies, config, kind=kind, group=_group(doc))
    except WebhookError as exc:
        violations = [*unquoted, f"cannot evaluate: {exc}"]
        return DocumentResult(file, index, kind, kind, "denied", violations=violations)
    if unquoted:
        # The API server refuses the object before any webhook sees it.
        return DocumentResult(file, index, kind, decision.object_ref, "denied", violations=unquoted)
    if not decision.handled:
        api_version = doc.get("apiVersion") or "no apiVersion"
        reason = decision.reason or f"{kind} ({api_version}) is not a kind the webhook checks"
        return DocumentResult(file, index, kind, decision.object_ref, "skipped", reason)
    if decision.reason and decision.allowed and not (decision.notes or decision.warnings):
        # Allowed without evaluation (e.g. an exempt namespace): say why, never "ALLOWED".
        return DocumentResult(file, index, kind, decision.object_ref, "skipped", decision.reason)
    return DocumentResult(
        file,
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
        where = f"{result.file}, document {result.index}"
        reason = f" ({result.reason})" if result.reason else ""
        out.write(f"--- {result.ref} ({where}): {result.verdict.upper()}{reason}\n")
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


def _print_summary(results: Sequence[DocumentResult], out: TextIO) -> None:
    """One line per document for pipelines: verdict, where, object, counts or the reason."""
    for r in results:
        if r.verdict == "skipped":
            detail = r.reason
        else:
            detail = (
                f"{len(r.violations)} violation(s), {len(r.changes)} change(s), "
                f"{len(r.warnings)} warning(s)"
            )
        out.write(f"{r.verdict.upper():<8} {r.file}#{r.index} {r.ref}: {detail}\n")


def _load_policies(path: Path | None) -> PolicySet:
    if path is None:
        if not DEFAULT_POLICIES.is_dir():
            raise ManifestError(
                "no policies: pass --policies DIR (a directory of CRL ConfigMap YAML files, "
                "e.g. the project's configmaps/)"
            )
        path = DEFAULT_POLICIES
    found = [
        doc
        for file in policy_files(path)
        for doc in read_documents(file)
        if isinstance(doc, Mapping) and doc.get("kind") == "ConfigMap"
    ]
    if not any(_is_crl(doc) for doc in found):
        # A pipeline must not allow everything because --policies points at the wrong place.
        raise ManifestError(
            f"no CRL ConfigMap in {path} ({len(found)} ConfigMap(s), none a CRL): pass the "
            "directory of CRL ConfigMap YAML files, e.g. the project's configmaps/"
        )
    return PolicySet.from_configmaps(found)


def _is_crl(doc: Mapping[str, Any]) -> bool:
    parsed = parse_configmap(doc)
    return parsed.is_crl or parsed.name.startswith("cf-crl-")


def cmd_review(args: argparse.Namespace, out: TextIO) -> int:
    config = load_config(args.config)
    policies = _load_policies(args.policies)
    if args.file == "-":
        sources = [("<stdin>", parse_documents(sys.stdin.read(), "<stdin>"))]
    else:
        path = Path(args.file)
        files = policy_files(path) if path.is_dir() else [path]
        sources = [(str(file), read_documents(file)) for file in files]
    results = [
        review_document(name, i, doc, policies, config)
        for name, docs in sources
        for i, doc in enumerate(docs, 1)
    ]
    if args.output == "json":
        json.dump([r.to_json() for r in results], out, indent=2, ensure_ascii=False)
        out.write("\n")
    elif args.output == "yaml":
        out.write(_dump_yaml([r.to_json() for r in results]))
    elif args.output == "summary":
        _print_summary(results, out)
    else:
        _print_text(results, out)
    return EXIT_DENIED if any(r.verdict == "denied" for r in results) else EXIT_OK
