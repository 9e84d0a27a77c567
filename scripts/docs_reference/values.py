"""reference/values.md from the chart's values.schema.json: every value, its type, its default
(values.yaml) and its description (the comment above it in values.yaml)."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from scripts.docs_reference.common import GENERATED, as_json, cell, code, constraints, schema_type

# The one place the generator names the config model and the parsers: a move of either module
# changes these two lines only.

_KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][A-Za-z0-9_]*):(?:\s|$)")


def values_comments(text: str) -> dict[str, str]:
    """Dotted value path -> the comment block right above the key in values.yaml (helm-docs'
    `# --` marker removed). Keys inside lists are not values of their own and are skipped."""
    comments: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    block: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            block.append(stripped.removeprefix("#").removeprefix(" ").removeprefix("-- "))
            continue
        match = _KEY_LINE.match(line)
        if match:
            indent = len(match["indent"])
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, match["key"]))
            comments[".".join(k for _, k in stack)] = _comment_markdown(block)
        block = []
    return comments


def _comment_markdown(block: list[str]) -> str:
    """A comment block as Markdown, in its order: runs of prose joined into paragraphs,
    indented example lines (a commented-out YAML example) as code blocks."""
    segments: list[tuple[bool, list[str]]] = []
    for line in block:
        is_example = line.startswith("  ") or (
            bool(segments) and segments[-1][0] and line.startswith("-")
        )
        if not segments or segments[-1][0] != is_example:
            segments.append((is_example, []))
        segments[-1][1].append(line)
    parts = [
        "```yaml\n" + textwrap.dedent("\n".join(lines)) + "\n```"
        if example
        else " ".join(" ".join(lines).split())
        for example, lines in segments
    ]
    return "\n\n".join(p for p in parts if p)


def prose(text: str) -> str:
    """A description without its code blocks, for a table cell."""
    kept = [p for p in text.split("\n\n") if not p.startswith("```")]
    return " ".join(kept)


def examples(text: str) -> list[str]:
    """The code blocks of a description."""
    return [p for p in text.split("\n\n") if p.startswith("```")]


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target: Mapping[str, Any] = root["$defs"][ref.removeprefix("#/$defs/")]
        return {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def value_rows(
    schema: Mapping[str, Any], values: Any, root: Mapping[str, Any], prefix: str = ""
) -> Iterator[tuple[str, Mapping[str, Any], Any, bool]]:
    """(dotted path, schema, default, has_default) of every value, depth first. `config` is the
    webhook config model, documented in the configuration reference: not expanded here."""
    properties: Mapping[str, Any] = schema.get("properties", {})
    for key, prop in properties.items():
        path = f"{prefix}{key}"
        resolved = _resolve(prop, root)
        present = isinstance(values, Mapping) and key in values
        default = values[key] if present else None
        yield path, resolved, default, present
        if path != "config" and "properties" in resolved:
            yield from value_rows(resolved, default, root, f"{path}.")


def values_page(schema: Mapping[str, Any], values: Any, comments: Mapping[str, str]) -> str:
    lines = [
        "# Helm chart values",
        "",
        GENERATED.strip(),
        "",
        "Every value of the chart `charts/gpu-admission-webhook`, from its `values.schema.json`",
        "(`helm install` refuses a value that does not fit it) with its default from",
        "`values.yaml`. `config` is the webhook's own configuration: its keys are in the",
        "[configuration reference](config.md).",
        "",
        "| value | type | default | description |",
        "|---|---|---|---|",
    ]
    blocks: list[str] = []
    for path, prop, default, present in value_rows(schema, values, schema):
        text = str(prop.get("description") or "")
        comment = prose(comments.get(path, ""))
        samples = examples(comments.get(path, ""))
        if comment and comment not in text:
            text = f"{text} {comment}".strip()
        bounds = constraints(prop)
        if bounds:
            text = f"{text} Allowed: {bounds}.".strip()
        if path == "config":
            text = f"{text} See the [configuration reference](config.md).".strip()
            shown = "see the configuration reference"
        elif not present:
            shown = ""
        elif isinstance(default, Mapping) and "properties" in prop and default:
            shown = "(the keys below)"
        else:
            inline = as_json(default)
            shown = code(inline) if len(inline) <= 60 else f"[see below](#value-{_slug(path)})"
            if len(inline) > 60:
                dumped = yaml.safe_dump(default, sort_keys=False, width=1000).rstrip()
                blocks += [
                    f"(value-{_slug(path)})=",
                    f"### `{path}`",
                    "",
                    "```yaml",
                    dumped,
                    "```",
                    "",
                ]
        for sample in samples:
            blocks += [f"Example for `{path}`:", "", sample, ""]
        lines.append(f"| {code(path)} | {schema_type(prop)} | {shown} | {cell(text)} |")
    lines.append("")
    if blocks:
        lines += ["## Long defaults and examples", "", *blocks]
    return "\n".join(lines).rstrip() + "\n"


def _slug(path: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-")


# ---------------------------------------------------------------------------------------------
