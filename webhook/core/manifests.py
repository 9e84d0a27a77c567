"""Manifest text (YAML or JSON, one or many documents) -> plain Python data. Pure: no files."""

from __future__ import annotations

import json
from typing import Any

import yaml

from webhook.core.errors import ManifestError


def yaml_error_text(exc: yaml.YAMLError) -> str:
    """PyYAML's error as one line with the position (its own text spans several lines)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        context = f" ({exc.context})" if exc.context else ""
        return f"{exc.problem}{context} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(exc).split())


def parse_documents(text: str, where: str) -> list[Any]:
    if where.endswith(".json"):
        try:
            return [json.loads(text)]
        except json.JSONDecodeError as exc:
            raise ManifestError(f"{where} is not valid JSON: {exc}") from exc
    try:
        docs = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        raise ManifestError(f"{where} is not valid YAML: {yaml_error_text(exc)}") from exc
    expanded: list[Any] = []
    for doc in docs:
        # `kubectl get -o yaml` output: a List of items.
        if isinstance(doc, dict) and doc.get("kind") in ("List", "ConfigMapList"):
            expanded.extend(doc.get("items") or [])
        else:
            expanded.append(doc)
    return expanded
