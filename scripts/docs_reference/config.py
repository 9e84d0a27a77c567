"""reference/config.md from the webhook config model: every key of the config file and of its
nested parts, with its type, default and description."""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
import typing
from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from scripts.docs_reference.common import GENERATED, as_json, cell, code, constraints, schema_type
from scripts.docs_reference.values import prose

# The one place the generator names the config model and the parsers: a move of either module
# changes these two lines only.
from webhook.core.config.model import WebhookConfig

# ---------------------------------------------------------------------------------------------
# Config model
# ---------------------------------------------------------------------------------------------


def field_comments(cls: type[BaseModel]) -> dict[str, str]:
    """Field name -> the comment block written right above the field in the class's source."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    comments: dict[str, str] = {}
    classdef = ast.parse(source).body[0]
    assert isinstance(classdef, ast.ClassDef)
    for node in classdef.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            block: list[str] = []
            index = node.lineno - 2
            while index >= 0 and lines[index].strip().startswith("#"):
                block.insert(0, lines[index].strip().removeprefix("#").strip())
                index -= 1
            comments[node.target.id] = " ".join(block)
    return comments


def model_classes(root: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """Every model class reachable from `root`'s fields, by class name (as $defs names them)."""
    found: dict[str, type[BaseModel]] = {}

    def visit(tp: Any) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if tp.__name__ in found:
                return
            found[tp.__name__] = tp
            for info in tp.model_fields.values():
                visit(info.annotation)
            return
        for arg in typing.get_args(tp):
            visit(arg)

    visit(root)
    return found


def camel_names(cls: type[BaseModel], text: str) -> str:
    """`snake_case` field names in a docstring or comment, as the YAML file spells them."""
    fields = cls.model_fields

    def alias(match: re.Match[str]) -> str:
        info = fields.get(match[1])
        return f"`{info.alias}`" if info is not None and info.alias else match[0]

    return re.sub(r"`([a-z][a-z0-9]*(?:_[a-z0-9]+)+)`", alias, text)


def describe_field(cls: type[BaseModel], name: str, comments: Mapping[str, str]) -> str:
    info = cls.model_fields[name]
    return camel_names(cls, info.description or comments.get(name, ""))


def with_factory_defaults(cls: type[BaseModel] | None, schema: Mapping[str, Any]) -> dict[str, Any]:
    """`schema` whose properties also carry the defaults of `default_factory` fields (the JSON
    schema leaves them out)."""
    properties = dict(schema.get("properties", {}))
    if cls is not None:
        for name, info in cls.model_fields.items():
            key = info.alias or name
            factory = info.default_factory is not None
            if factory and key in properties and "default" not in properties[key]:
                value = info.get_default(call_default_factory=True, validated_data={})
                properties[key] = {**properties[key], "default": to_jsonable_python(value)}
    return {**schema, "properties": properties}


def config_sections(
    root: type[BaseModel],
) -> tuple[dict[str, Any], dict[str, type[BaseModel]], dict[str, str]]:
    """The model's JSON schema (by alias, as the YAML file spells keys), its classes, and the
    anchor of each part's section."""
    schema = root.model_json_schema(by_alias=True, mode="validation")
    classes = model_classes(root)
    anchors = {name: f"part-{name.lower()}" for name in schema.get("$defs", {})}
    return schema, classes, anchors


def default_text(schema: Mapping[str, Any], required: bool) -> tuple[str, str]:
    """(inline default, block default) of a property: short defaults inline, long ones in a
    YAML block below."""
    if required:
        return "required", ""
    if "default" not in schema:
        return "", ""
    value = schema["default"]
    inline = as_json(value)
    if len(inline) <= 60:
        return code(inline), ""
    block = yaml.safe_dump(value, sort_keys=False, allow_unicode=True, width=1000).rstrip()
    return "see below", block


def config_page(
    root: type[BaseModel] = WebhookConfig, chart: Mapping[str, str] | None = None
) -> str:
    """The configuration reference. A key the model's source does not describe takes the
    comment of the chart's values.yaml above the same key under `config:` (`chart`: its
    comments by dotted path below `config`), as `values_comments` reads them."""
    schema, classes, anchors = config_sections(root)
    schema = with_factory_defaults(root, schema)
    chart = chart or {}
    comments = {
        name: field_comments(root).get(name) or chart.get(info.alias or name, "")
        for name, info in root.model_fields.items()
    }
    by_alias = {info.alias or name: name for name, info in root.model_fields.items()}
    lines = [
        "# Configuration reference",
        "",
        GENERATED.strip(),
        "",
        "The webhook's own configuration: a YAML file given with `--config` (`gpu-webhook serve`,",
        "`review`, `images`, `export-policies`), or the chart's `config:` value, which the chart",
        "renders into that file. Every key is optional; a key the model does not know is refused",
        "when the file loads. Keys are camelCase; the nested parts follow the top-level keys.",
        "",
        f"{schema.get('description', '')}",
        "",
        "## Top-level keys",
        "",
        "| key | type | default |",
        "|---|---|---|",
    ]
    properties: Mapping[str, Any] = schema.get("properties", {})
    for key, prop in properties.items():
        inline, _ = default_text(prop, key in schema.get("required", ()))
        lines.append(
            f"| [{code(key)}](#config-{key.lower()}) | {schema_type(prop, anchors)} | {inline} |"
        )
    lines.append("")
    for key, prop in properties.items():
        inline, block = default_text(prop, key in schema.get("required", ()))
        lines += [f"({'config-' + key.lower()})=", f"### `{key}`", ""]
        lines.append(f"Type: {schema_type(prop, anchors)}.")
        bounds = constraints(prop)
        if bounds:
            lines.append(f"Allowed: {bounds}.")
        if inline and not block:
            lines.append(f"Default: {inline}.")
        lines.append("")
        text = describe_field(root, by_alias.get(key, key), comments)
        if text:
            lines += [text, ""]
        if block:
            lines += ["Default:", "", "```yaml", block, "```", ""]
    lines += ["## Nested parts", ""]
    # A part that is the value of one top-level key (registryLookups: RegistryLookups) is
    # described under that key in values.yaml too.
    part_keys: dict[str, list[str]] = {}
    for key, prop in properties.items():
        if "$ref" in prop:
            part_keys.setdefault(str(prop["$ref"]).rsplit("/", 1)[-1], []).append(key)
    for name, part in sorted(schema.get("$defs", {}).items()):
        keys = part_keys.get(name, [])
        prefix = f"{keys[0]}." if len(keys) == 1 else None
        fallback = (
            {k.removeprefix(prefix): v for k, v in chart.items() if k.startswith(prefix)}
            if prefix
            else {}
        )
        lines += _part_section(name, part, classes.get(name), anchors, fallback)
    return "\n".join(lines).rstrip() + "\n"


def _part_section(
    name: str,
    part: Mapping[str, Any],
    cls: type[BaseModel] | None,
    anchors: Mapping[str, str],
    chart: Mapping[str, str],
) -> list[str]:
    lines = [f"({anchors[name]})=", f"### {name}", ""]
    if part.get("description"):
        text = " ".join(str(part["description"]).split())
        lines += [camel_names(cls, text) if cls is not None else text, ""]
    part = with_factory_defaults(cls, part)
    properties: Mapping[str, Any] = part.get("properties", {})
    if not properties:
        return [*lines, f"Type: {schema_type(part, anchors)}.", ""]
    comments = field_comments(cls) if cls is not None else {}
    if cls is not None:
        for field, info in cls.model_fields.items():
            if not comments.get(field):
                # A table cell holds prose only: a commented-out example stays in values.yaml.
                comments[field] = prose(chart.get(info.alias or field, ""))
    by_alias = (
        {info.alias or n: n for n, info in cls.model_fields.items()} if cls is not None else {}
    )
    lines += ["| key | type | default | description |", "|---|---|---|---|"]
    blocks: list[str] = []
    for key, prop in properties.items():
        inline, block = default_text(prop, key in part.get("required", ()))
        text = describe_field(cls, by_alias.get(key, key), comments) if cls is not None else ""
        bounds = constraints(prop)
        if bounds:
            text = f"{text} Allowed: {bounds}.".strip()
        lines.append(f"| {code(key)} | {schema_type(prop, anchors)} | {inline} | {cell(text)} |")
        if block:
            blocks += [f"Default of `{key}`:", "", "```yaml", block, "```", ""]
    return [*lines, "", *blocks]


# ---------------------------------------------------------------------------------------------
# Chart values
# ---------------------------------------------------------------------------------------------
