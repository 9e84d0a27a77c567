"""`gpu-webhook test`: a test file's inputs loaded, each expectation checked against the answer."""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

from webhook.cli.inputs import Context, read_manifests
from webhook.cli.review import DocumentResult, _context, load_policies, review_document
from webhook.cli.testfile import Expectation, Suite
from webhook.core.base.errors import ManifestError
from webhook.core.config.image_rules import parse_image_table
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.policies.policyset import PolicySet
from webhook.sources.files import read_documents


@dataclass
class Check:
    what: str  # "verdict", "violations", "messages", ...
    passed: bool
    detail: str  # "expected denied, got allowed"
    diff: str = ""  # the unified diff of a patched-resource mismatch


@dataclass
class Outcome:
    test: str
    test_file: str
    expectation: str  # the selector as written
    resource: str  # the object found ("Pod ml/a (pods.yaml#1)"), or the selector
    checks: list[Check] = field(default_factory=list)
    actual: DocumentResult | None = None

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def reason(self) -> str:
        failed = [c.detail for c in self.checks if not c.passed]
        if failed:
            return "; ".join(failed)
        actual = self.actual
        if actual is None:
            return "Ok"
        if actual.verdict == "skipped":
            return "skipped as expected"
        return f"{actual.verdict} as expected ({len(actual.violations)} violation(s))"

    def to_json(self, number: int) -> dict[str, Any]:
        return {
            "id": number,
            "test": self.test,
            "testFile": self.test_file,
            "expectation": self.expectation,
            "resource": self.resource,
            "result": "pass" if self.passed else "fail",
            "reason": self.reason(),
            "checks": [
                {"check": c.what, "passed": c.passed, "detail": c.detail}
                | ({"diff": c.diff} if c.diff else {})
                for c in self.checks
            ],
        }


@dataclass
class Inputs:
    policies: PolicySet
    config: WebhookConfig
    context: Context
    documents: list[tuple[str, int, Any]]  # (file as written in the test, index, document)
    paths: dict[str, Path]  # file as written -> resolved path


def _image_table(path: Path, config: WebhookConfig) -> WebhookConfig:
    ref = config.image_cuda_table_config_map
    key = ref.key if ref is not None else "imageCudaTable"
    docs = [
        d for d in read_documents(path) if isinstance(d, Mapping) and d.get("kind") == "ConfigMap"
    ]
    if len(docs) != 1:
        raise ManifestError(
            f"{path}: expected one ConfigMap holding the image table, found {len(docs)}"
        )
    data = docs[0].get("data")
    text = data.get(key) if isinstance(data, Mapping) else None
    if not isinstance(text, str):
        raise ManifestError(f"{path}: the ConfigMap has no data key {key!r} (the image table)")
    try:
        return config.with_image_table(parse_image_table(text, f"{path} key {key}"))
    except ValueError as exc:
        raise ManifestError(" ".join(str(exc).split())) from None


def load_inputs(spec: Suite, base: Path) -> Inputs:
    """Everything a test evaluates with, read by `review`'s own loaders."""
    inv = spec.inventory
    config = load_config(base / inv.config if inv.config else None)
    if inv.imageTable:
        config = _image_table(base / inv.imageTable, config)
    policies = load_policies(base / spec.policies)
    sources: list[tuple[str, list[Any]]] = []
    paths: dict[str, Path] = {}
    for written in spec.resources:
        manifests = read_manifests(base / written)
        if manifests.unreadable:
            raise ManifestError(manifests.unreadable[0])
        for name, docs in manifests.sources:
            shown = (
                str(Path(written) / Path(name).relative_to(base / written))
                if (base / written).is_dir()
                else written
            )
            paths[shown] = Path(name).resolve()
            sources.append((shown, docs))
    flags = argparse.Namespace(
        nodes=base / inv.nodes if inv.nodes else None,
        claims=base / inv.claims if inv.claims else None,
    )
    context = _context(flags, config, None, sources)
    documents = [(name, i, doc) for name, docs in sources for i, doc in enumerate(docs, 1)]
    return Inputs(policies, config, context, documents, paths)


def review_input(inputs: Inputs, file: str, index: int, doc: Any) -> DocumentResult:
    """One document of the test's manifests, reviewed with the test's policies and inventory
    (what `test` checks and what `test --init` writes)."""
    return review_document(
        file,
        index,
        doc,
        inputs.policies,
        inputs.config,
        inventory=inputs.context.inventory,
        claims=inputs.context.claims,
    )


def _meta(doc: Any, key: str) -> str | None:
    meta = doc.get("metadata") if isinstance(doc, Mapping) else None
    value = meta.get(key) if isinstance(meta, Mapping) else None
    return value if isinstance(value, str) else None


def _matches(exp: Expectation, inputs: Inputs, base: Path) -> list[tuple[str, int, Any]]:
    if exp.file is not None:
        wanted = (base / exp.file).resolve()
        return [
            (name, i, doc)
            for name, i, doc in inputs.documents
            if inputs.paths[name] == wanted and i == exp.document
        ]
    return [
        (name, i, doc)
        for name, i, doc in inputs.documents
        if isinstance(doc, Mapping)
        and _meta(doc, "name") == exp.name
        and (exp.kind is None or doc.get("kind") == exp.kind)
        and (exp.namespace is None or (_meta(doc, "namespace") or "default") == exp.namespace)
    ]


def _regex_checks(what: str, patterns: Sequence[str], lines: Sequence[str]) -> list[Check]:
    """Each pattern must match (re.search) at least one line; `--detailed-results` and the
    JUnit failure list the lines the webhook gave."""
    checks = []
    for pattern in patterns:
        hit = any(re.search(pattern, line) for line in lines)
        noun = "violation message" if what == "messages" else what[:-1]
        detail = f"{noun} {pattern!r} matched" if hit else f"no {noun} matches {pattern!r}"
        checks.append(Check(what, hit, detail))
    return checks


def _document(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=True, allow_unicode=True, default_flow_style=False)


def same_json(a: Any, b: Any) -> bool:
    """JSON equality: as the API server stores the object, `true` is not `1` and `"1"` is not
    `1` (Python's `==` has True == 1 == 1.0). Numbers compare by value (JSON has one number
    type: 1 and 1.0 are the same), mappings by key, lists in order."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same_json(a[key], b[key]) for key in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _patched_check(exp: Expectation, result: DocumentResult, doc: Any, base: Path) -> Check:
    assert exp.patchedResource is not None
    path = base / exp.patchedResource
    expected_docs = read_documents(path)
    if len(expected_docs) != 1:
        raise ManifestError(
            f"{path}: a patchedResource file holds one document, not {len(expected_docs)}"
        )
    expected = expected_docs[0]
    # The patch the core answered, applied as the API server applies it.
    try:
        actual = jsonpatch.apply_patch(doc, result.patch) if result.patch else doc
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
        # The API server would refuse such a patch too: a failed expectation, not a crash.
        return Check("patchedResource", False, f"the webhook's patch does not apply: {exc}")
    if same_json(actual, expected):
        return Check("patchedResource", True, f"the patched object equals {exp.patchedResource}")
    diff = "".join(
        difflib.unified_diff(
            _document(expected).splitlines(keepends=True),
            _document(actual).splitlines(keepends=True),
            fromfile=f"expected ({exp.patchedResource})",
            tofile="patched by the webhook",
        )
    )
    return Check(
        "patchedResource", False, f"the patched object differs from {exp.patchedResource}", diff
    )


def _violation_check(expected: int | bool, got: int) -> Check:
    if isinstance(expected, bool):
        ok = (got > 0) == expected
        want = "some violation" if expected else "no violation"
    else:
        ok = got == expected
        want = f"{expected} violation(s)"
    return Check("violations", ok, f"violations: expected {want}, got {got}")


def run_test(spec: Suite, path: Path) -> list[Outcome]:
    base = path.parent
    name = spec.metadata.name if spec.metadata else path.name
    inputs = load_inputs(spec, base)
    outcomes = []
    for exp in spec.results:
        outcome = Outcome(name, str(path), exp.selector(), exp.selector())
        outcomes.append(outcome)
        found = _matches(exp, inputs, base)
        if len(found) != 1:
            what = "no resource matches" if not found else f"{len(found)} resources match"
            hint = "" if not found else "; add kind and namespace, or use file and document"
            outcome.checks.append(Check("resource", False, f"{what} {exp.selector()}{hint}"))
            continue
        file, index, doc = found[0]
        result = review_input(inputs, file, index, doc)
        outcome.actual = result
        outcome.resource = f"{result.ref} ({file}#{index})"
        verdict_ok = result.verdict == exp.verdict
        why = f" ({result.reason})" if result.reason and not verdict_ok else ""
        outcome.checks.append(
            Check(
                "verdict", verdict_ok, f"verdict: expected {exp.verdict}, got {result.verdict}{why}"
            )
        )
        if exp.violations is not None:
            outcome.checks.append(_violation_check(exp.violations, len(result.violations)))
        outcome.checks += _regex_checks("messages", exp.messages, result.violations)
        outcome.checks += _regex_checks("warnings", exp.warnings, result.warnings)
        outcome.checks += _regex_checks("changes", exp.changes, result.changes)
        if exp.patchedResource is not None:
            outcome.checks.append(_patched_check(exp, result, doc, base))
    return outcomes
