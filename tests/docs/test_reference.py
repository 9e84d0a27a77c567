"""The generated reference pages cover the code they are generated from: every subcommand and
argument of the CLI, every key of the config model, every value of the chart."""

from __future__ import annotations

import argparse
import json
import re
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

# The parsers and the config model through the generator's own imports: a move of either
# module is fixed in scripts/docs_reference/ alone.
from scripts.docs_reference import WebhookConfig, build_parser, pages
from scripts.docs_reference.cli import cli_page, subparsers
from scripts.docs_reference.common import SCHEMA_PATH, VALUES_PATH
from scripts.docs_reference.config import config_page
from scripts.docs_reference.values import values_comments, values_page


def sections(page: str) -> dict[str, str]:
    """Level-2 heading -> the text below it, up to the next level-2 heading."""
    parts = re.split(r"^## (.+)$", page, flags=re.MULTILINE)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def argument_names(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string and positional name a user can type, as --help lists them."""
    names: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if action.option_strings:
            names += action.option_strings
        else:
            names.append(action.metavar if isinstance(action.metavar, str) else action.dest)
    return names


def test_cli_reference_names_every_subcommand_and_argument() -> None:
    parser = build_parser()
    page = pages()["cli.md"]
    by_heading = sections(page)
    subs = list(subparsers(parser))
    assert {name for name, _, _ in subs} >= {"review", "lint", "test", "serve"}
    for name, help_text, sub in subs:
        section = by_heading.get(f"gpu-webhook {name}")
        assert section is not None, f"no section for subcommand {name}"
        assert " ".join(help_text.split()) in " ".join(section.split())
        assert "usage: gpu-webhook " + name in section
        for option in argument_names(sub):
            assert f"`{option}" in section, f"gpu-webhook {name}: {option} missing"
    for option in argument_names(parser):
        assert f"`{option}" in page


def test_cli_reference_shows_a_new_subcommand_and_an_option_without_help() -> None:
    parser = argparse.ArgumentParser(prog="gpu-webhook", description="Demo.")
    sub = parser.add_subparsers(dest="command")
    fresh = sub.add_parser("fresh", help="a subcommand added later")
    fresh.add_argument("--quiet-flag", action="store_true")
    fresh.add_argument("--level", choices=("low", "high"), default="low")
    fresh.add_argument("--port", type=int, default=8443, help="port (default: %(default)s)")
    page = cli_page(parser)
    section = sections(page)["gpu-webhook fresh"]
    assert "| [`fresh`](#gpu-webhook-fresh) | a subcommand added later |" in page
    assert "| `--quiet-flag` |  |  |  |" in section
    assert "| `--level` | `low` \\| `high` | `low` |  |" in section
    # argparse's %(default)s is filled in, as --help shows it.
    assert "| `--port` | `PORT` | `8443` | port (default: 8443) |" in section


def test_config_reference_covers_every_top_level_key_and_part() -> None:
    page = pages()["config.md"]
    for name, info in WebhookConfig.model_fields.items():
        key = info.alias or name
        assert f"### `{key}`" in page, f"config key {key} missing"
    schema = WebhookConfig.model_json_schema(by_alias=True)
    for part, definition in schema["$defs"].items():
        assert f"### {part}\n" in page, f"config part {part} missing"
        for key in definition.get("properties", {}):
            assert f"| `{key}` |" in page, f"{part}.{key} missing"


class _Part(BaseModel):
    """A nested part whose `snake_name` is written camelCase in the reference."""

    model_config = ConfigDict(alias_generator=to_camel)

    # How many of them.
    snake_name: int = Field(default=3, ge=1)
    other: bool = True


class _Demo(BaseModel):
    """A demo config."""

    model_config = ConfigDict(alias_generator=to_camel)

    # Which mode: the comment above a field is its description,
    # over several lines.
    run_mode: Literal["a", "b"] = "a"
    part: _Part = _Part()
    tags: dict[str, str] = Field(default_factory=lambda: {"team": "ml"})
    named: str = Field(default="x", description="a description given to Field wins")
    plain: int = 1


def test_config_reference_reads_types_defaults_and_comments_from_the_model() -> None:
    page = config_page(_Demo)
    run_mode = page.split("### `runMode`", 1)[1].split("###", 1)[0]
    assert 'Type: `"a"` \\| `"b"`.' in run_mode
    assert 'Default: `"a"`.' in run_mode
    assert "Which mode: the comment above a field is its description, over several lines." in (
        run_mode
    )
    assert 'Default: `{"team": "ml"}`.' in page.split("### `tags`", 1)[1]
    assert "a description given to Field wins" in page.split("### `named`", 1)[1]
    assert "A nested part whose `snakeName` is written camelCase in the reference." in page
    assert "| `snakeName` | integer | `3` | How many of them. Allowed: ≥ 1. |" in page


def test_config_reference_takes_the_charts_comment_where_the_model_has_none() -> None:
    chart = {
        "plain": "From values.yaml, e.g.\n\n```yaml\nplain: 2\n```",
        "part.other": "Other, from values.yaml.\n\n```yaml\nother: false\n```",
        "runMode": "Not used: the model's comment wins.",
    }
    page = config_page(_Demo, chart)
    plain = page.split("### `plain`", 1)[1].split("###", 1)[0]
    assert "From values.yaml, e.g.\n\n```yaml\nplain: 2\n```" in plain
    assert "| `other` | boolean | `true` | Other, from values.yaml. |" in page
    assert "Not used" not in page


def test_values_reference_covers_every_value() -> None:
    page = pages()["values.md"]
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    values = yaml.safe_load(VALUES_PATH.read_text(encoding="utf-8"))
    for key in schema["properties"]:
        assert f"| `{key}` |" in page, f"value {key} missing"
    for key in values:
        assert f"| `{key}` |" in page, f"values.yaml's {key} is not in the reference"
    for key in schema["properties"]["image"]["properties"]:
        assert f"| `image.{key}` |" in page


def test_values_reference_reads_defaults_and_comments_from_values_yaml() -> None:
    text = (
        "# -- The replicas.\n"
        "replicaCount: 2\n"
        "service:\n"
        "  # Port of the Service,\n"
        "  # on two lines.\n"
        "  port: 443\n"
        "# Images, e.g.\n"
        "#   - image: a/b:*\n"
        "#     cudaVersion: '12.4'\n"
        "table: []\n"
    )
    schema = {
        "properties": {
            "replicaCount": {"type": "integer", "minimum": 1},
            "service": {"type": "object", "properties": {"port": {"$ref": "#/$defs/Port"}}},
            "table": {"type": "array", "items": {"type": "object"}},
        },
        "$defs": {"Port": {"type": "integer", "maximum": 65535}},
    }
    page = values_page(schema, yaml.safe_load(text), values_comments(text))
    assert "| `replicaCount` | integer | `2` | The replicas. Allowed: ≥ 1. |" in page
    port = "| `service.port` | integer | `443` | Port of the Service, on two lines. "
    port += "Allowed: ≤ 65535. |"
    assert port in page
    assert "| `table` | list of object | `[]` | Images, e.g. |" in page
    assert "```yaml\n- image: a/b:*\n  cudaVersion: '12.4'\n```" in page
