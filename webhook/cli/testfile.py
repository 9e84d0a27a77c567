"""`gpu-webhook test` files: their schema (Suite, Expectation), finding and parsing them."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from webhook.cli.exits import CommandError
from webhook.core.base.errors import ManifestError
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
