#!/usr/bin/env python3
"""Generate the documentation's reference pages from the code, so they cannot drift from it.

- reference/cli.md from the argparse parsers (`webhook.cli.build_parser`): every subcommand
  with its usage, every option with its help, choices and default;
- reference/config.md from the webhook config model (`WebhookConfig`): every key of the config
  file and of its nested parts, with its type, default and description (the model's JSON schema
  for types and defaults; the comment above each field in the model's source, or a field's
  `description`, for the description);
- reference/values.md from the chart's values.schema.json: every value, its type, its default
  (the chart's values.yaml) and its description (the comment above it in values.yaml).

- the shipped-policies table of concepts/policies.md from configmaps/ (every ConfigMap).

The pages are committed, so they read on the forge without a build: `make reference` writes them
(`generated`, `write_generated`), tests/docs/test_committed.py fails when one is stale, and
docs/conf.py fails the docs build on a stale page of docs/ (docs/development/docs.md).

Usage: python -m scripts.docs_reference [OUTDIR]
  without OUTDIR: write every generated page and table into docs/;
  with OUTDIR: write the three reference pages there only.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from scripts.docs_reference.cli import cli_page
from scripts.docs_reference.common import DEFAULT_OUT, SCHEMA_PATH, VALUES_PATH
from scripts.docs_reference.config import config_page
from scripts.docs_reference.policies import POLICIES_PAGE, policies_table, with_table
from scripts.docs_reference.values import values_comments, values_page

# The one place the generator names the config model and the parsers: a move of either module
# changes these two lines only.
from webhook.cli import build_parser
from webhook.core.config.model import WebhookConfig

__all__ = [
    "WebhookConfig",
    "build_parser",
    "generated",
    "pages",
    "stale",
    "write_generated",
    "write_references",
]
DOCS = DEFAULT_OUT.parent


def pages() -> dict[str, str]:
    """File name -> page text of every generated reference page."""
    values_text = VALUES_PATH.read_text(encoding="utf-8")
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    chart_comments = values_comments(values_text)
    config_comments = {
        path.removeprefix("config."): text
        for path, text in chart_comments.items()
        if path.startswith("config.")
    }
    return {
        "cli.md": cli_page(build_parser()),
        "config.md": config_page(WebhookConfig, config_comments),
        "values.md": values_page(schema, yaml.safe_load(values_text), chart_comments),
    }


def write_references(out: Path = DEFAULT_OUT) -> list[Path]:
    """Write the pages into `out`; a page whose text did not change is left untouched (so
    Sphinx does not rebuild it). Returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in pages().items():
        path = out / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


def generated(docs: Path = DOCS) -> dict[Path, str]:
    """Path -> the text it must hold, for every generated file under `docs`: the reference pages
    and the policies page with its shipped-policies table regenerated."""
    out = {docs / "reference" / name: text for name, text in pages().items()}
    page = docs / POLICIES_PAGE
    out[page] = with_table(page.read_text(encoding="utf-8"), policies_table())
    return out


def stale(docs: Path = DOCS) -> list[Path]:
    """The generated files under `docs` that are missing or differ from what the code makes."""
    return [
        path
        for path, text in generated(docs).items()
        if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]


def write_generated(docs: Path = DOCS) -> list[Path]:
    """Write every stale generated file under `docs`; returns the paths written."""
    written = stale(docs)
    texts = generated(docs)
    for path in written:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(texts[path], encoding="utf-8")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("outdir", nargs="?", type=Path, default=None)
    args = parser.parse_args(argv)
    written = write_generated() if args.outdir is None else write_references(args.outdir)
    for path in written:
        print(f"wrote {path}")
    if not written:
        print("the generated pages are up to date")
    return 0
