"""`gpu-webhook test PATH…`: declared expectations checked against the policies (SPEC §9), like
`kyverno test` and `gator verify`.

A test file (`apiVersion: gpu-webhook.dev/v1alpha1`, `kind: Test`, schema in `Suite` and the
CLI guide) names a CRL folder, the manifests to evaluate, an optional inventory (the same inputs as
`gpu-webhook review`, read by the same code) and, per resource, what admission must answer. Each
resource is evaluated by `review_document` (core/evaluation/evaluate.py, the admission core); the
expected object after the patch is compared as a document: the core's JSONPatch applied to the
resource with `jsonpatch` (what the API server does with it), then compared with the expected
YAML. Exit 0 when every result passes, 1 when one fails, 2 when a test file is unusable.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO
from xml.etree import ElementTree as ET

import jsonpatch
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from webhook.cli.exits import EXIT_DENIED, EXIT_OK, CommandError
from webhook.cli.inputs import Context, read_manifests
from webhook.cli.review import DocumentResult, _context, load_policies, review_document
from webhook.core.base.errors import ConfigError, ManifestError
from webhook.core.config.image_rules import parse_image_table
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.policies.policyset import PolicySet
from webhook.sources.files import read_documents

API_VERSION = "gpu-webhook.dev/v1alpha1"
KIND = "Test"
# Directories are searched recursively for files with these names (kyverno's is
# `kyverno-test.yaml`): `gpu-webhook-test.yaml`, `gpu-a100-gpu-webhook-test.yaml`, ...
FILE_SUFFIXES = ("gpu-webhook-test.yaml", "gpu-webhook-test.yml")
FILE_PATTERN = "*gpu-webhook-test.yaml"


class _Strict(BaseModel):
    # Unknown keys and wrong types are errors (no "1" for 1, no 1 for "yes").
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Metadata(_Strict):
    name: str = Field(min_length=1)


class Inventory(_Strict):
    """What `gpu-webhook review` takes besides policies and manifests (its flags)."""

    nodes: str | None = None  # --nodes: `kubectl get nodes -o yaml` output
    claims: str | None = None  # --claims: ResourceClaimTemplates/ResourceClaims
    config: str | None = None  # --config: the webhook config YAML
    # The image-table ConfigMap the server watches (its data key: the config's
    # imageCudaTableConfigMap.key, default imageCudaTable), in force before the config's table.
    imageTable: str | None = None


class Expectation(_Strict):
    """One resource's expected outcome, found by kind/namespace/name or by file/document."""

    kind: str | None = None
    namespace: str | None = None
    name: str | None = None
    file: str | None = None
    document: int | None = Field(default=None, ge=1)
    verdict: Literal["allowed", "denied", "skipped"]
    violations: int | bool | None = None  # a count, or yes/no (true/false)
    messages: list[str] = []  # each regex matches some violation message
    warnings: list[str] = []  # each regex matches some warning
    changes: list[str] = []  # each regex matches some change (mutation) line
    patchedResource: str | None = None

    @field_validator("violations", mode="before")
    @classmethod
    def _count(cls, value: Any) -> Any:
        # One message for both spellings (a strict union reports each member's refusal).
        if isinstance(value, bool) or value is None:
            return value
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"expected a count (0, 1, ...) or yes/no, got {value!r}")
        return value

    @field_validator("messages", "warnings", "changes")
    @classmethod
    def _regexes(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _one_selector(self) -> Expectation:
        by_name = self.name is not None
        by_file = self.file is not None
        if by_name == by_file:
            raise ValueError("name the resource by `name` (with `kind`, `namespace`) or by `file`")
        if by_file and (self.document is None or self.kind or self.namespace):
            raise ValueError("`file` takes `document` (1 for the first), not kind or namespace")
        if by_name and self.document is not None:
            raise ValueError("`document` goes with `file`, not with `name`")
        return self

    def selector(self) -> str:
        if self.file is not None:
            return f"{self.file}#{self.document}"
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind or '*'} {where}{self.name}"


class Suite(_Strict):
    apiVersion: Literal["gpu-webhook.dev/v1alpha1"]
    kind: Literal["Test"]
    metadata: Metadata | None = None
    policies: str  # a CRL ConfigMap folder (or file), relative to the test file
    resources: list[str] = Field(min_length=1)  # manifest files or directories
    inventory: Inventory = Inventory()
    results: list[Expectation] = Field(min_length=1)


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


def find_test_files(paths: Sequence[str]) -> list[Path]:
    """Each PATH: a test file itself, or a directory searched recursively for FILE_PATTERN."""
    found: list[Path] = []
    for text in paths:
        path = Path(text)
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            files = sorted(
                p for p in path.rglob("*") if p.is_file() and p.name.endswith(FILE_SUFFIXES)
            )
            if not files:
                raise CommandError(f"no test file ({FILE_PATTERN}) under {path}")
            found.extend(files)
        else:
            raise CommandError(f"{path}: no such file or directory")
    return found


def _location(loc: Sequence[int | str]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif not part.startswith(("function-", "literal[", "int", "bool", "str", "tuple[")):
            text += f".{part}" if text else str(part)
    return text or "the document"


def parse_tests(path: Path) -> list[Suite]:
    """The Test documents of a file; CommandError (exit 2, one line naming the file and the
    field) for anything else."""
    try:
        documents = read_documents(path)
    except ManifestError as exc:
        raise CommandError(" ".join(str(exc).split())) from None
    tests: list[Suite] = []
    for number, doc in enumerate(documents, 1):
        where = f"{path}" if len(documents) == 1 else f"{path} (document {number})"
        if not isinstance(doc, Mapping) or doc.get("kind") != KIND:
            raise CommandError(
                f"{where}: not a test file: expected apiVersion {API_VERSION}, kind {KIND}"
            )
        try:
            tests.append(Suite.model_validate(doc))
        except ValidationError as exc:
            error = exc.errors()[0]
            message = error["msg"].removeprefix("Value error, ")
            more = (
                f" (and {exc.error_count() - 1} more problem(s))" if exc.error_count() > 1 else ""
            )
            raise CommandError(f"{where}: {_location(error['loc'])}: {message}{more}") from None
    return tests


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
    if actual == expected:
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
        result = review_document(
            file,
            index,
            doc,
            inputs.policies,
            inputs.config,
            inventory=inputs.context.inventory,
            claims=inputs.context.claims,
        )
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


def add_test_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help=f"a test file, or a directory searched recursively for {FILE_PATTERN} files",
    )
    parser.add_argument("--fail-only", action="store_true", help="list only the failed results")
    parser.add_argument(
        "--detailed-results",
        action="store_true",
        help="after the table, every check of every listed result, and what the webhook answered",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("text", "json", "junit"),
        default="text",
        help="text (a table, default), json, or junit (JUnit XML for CI systems)",
    )


def _table(rows: Sequence[Sequence[str]], out: TextIO) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        out.write("  ".join(cells).rstrip() + "\n")


def _answered(outcome: Outcome) -> list[str]:
    """What the webhook answered for the resource: "violation: ...", "warning: ...", ..."""
    actual = outcome.actual
    if actual is None:
        return []
    lines = [f"answered: {actual.verdict}" + (f" ({actual.reason})" if actual.reason else "")]
    for title, found in (
        ("violation", actual.violations),
        ("warning", actual.warnings),
        ("change", actual.changes),
    ):
        lines += [f"{title}: {line}" for line in found]
    return lines


def _print_text(
    numbered: Sequence[tuple[int, Outcome]], total: Sequence[Outcome], detailed: bool, out: TextIO
) -> None:
    if numbered:
        rows = [("ID", "TEST", "RESOURCE", "RESULT", "REASON")]
        rows += [
            (str(n), o.test, o.resource, "PASS" if o.passed else "FAIL", o.reason())
            for n, o in numbered
        ]
        _table(rows, out)
    for number, outcome in numbered:
        diffs = [c.diff for c in outcome.checks if c.diff]
        if not (detailed or diffs):
            continue
        out.write(f"\n--- {number}: {outcome.resource} ({outcome.test_file})\n")
        if detailed:
            for check in outcome.checks:
                out.write(f"  {'PASS' if check.passed else 'FAIL'} {check.detail}\n")
            out.writelines(f"  {line}\n" for line in _answered(outcome))
        for diff in diffs:
            out.write(diff if diff.endswith("\n") else diff + "\n")
    failed = sum(not o.passed for o in total)
    out.write(f"\nTest summary: {len(total) - failed} passed, {failed} failed\n")


def _junit(total: Sequence[Outcome], out: TextIO) -> None:
    """JUnit XML (the schema Jenkins, GitLab and GitHub test reporters read): one testsuite per
    test, one testcase per expected result, a <failure> with every failed check."""
    root = ET.Element("testsuites", name="gpu-webhook test")
    root.set("tests", str(len(total)))
    root.set("failures", str(sum(not o.passed for o in total)))
    suites: dict[tuple[str, str], ET.Element] = {}
    for outcome in total:
        key = (outcome.test_file, outcome.test)
        suite = suites.get(key)
        if suite is None:
            suite = suites[key] = ET.SubElement(
                root, "testsuite", name=outcome.test, file=outcome.test_file
            )
        case = ET.SubElement(suite, "testcase", name=outcome.resource, classname=outcome.test)
        if not outcome.passed:
            failure = ET.SubElement(case, "failure", message=outcome.reason(), type="expectation")
            text = [c.detail for c in outcome.checks if not c.passed]
            text += _answered(outcome)
            text += [c.diff for c in outcome.checks if c.diff]
            failure.text = "\n".join(text)
    for suite in suites.values():
        cases = suite.findall("testcase")
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(sum(c.find("failure") is not None for c in cases)))
    ET.indent(root)
    out.write('<?xml version="1.0" encoding="UTF-8"?>\n')
    out.write(ET.tostring(root, encoding="unicode") + "\n")


def cmd_test(args: argparse.Namespace, out: TextIO) -> int:
    files = find_test_files(args.paths)
    specs = [(path, spec) for path in files for spec in parse_tests(path)]
    total: list[Outcome] = []
    for path, spec in specs:
        try:
            total += run_test(spec, path)
        except (ManifestError, ConfigError) as exc:
            raise CommandError(f"{path}: {' '.join(str(exc).split())}") from None
    numbered = [(n, o) for n, o in enumerate(total, 1) if not (args.fail_only and o.passed)]
    if args.output == "json":
        json.dump(
            {
                "results": [o.to_json(n) for n, o in numbered],
                "summary": {
                    "pass": sum(o.passed for o in total),
                    "fail": sum(not o.passed for o in total),
                },
            },
            out,
            indent=2,
            ensure_ascii=False,
        )
        out.write("\n")
    elif args.output == "junit":
        _junit([o for _, o in numbered], out)
    else:
        _print_text(numbered, total, args.detailed_results, out)
    return EXIT_OK if all(o.passed for o in total) else EXIT_DENIED
