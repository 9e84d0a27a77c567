"""The shipped-policies table of concepts/policies.md from configmaps/: one row per ConfigMap,
with its key, group, rules and description, between two marker comments of the page."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from scripts.docs_reference.common import ROOT, cell, code

CONFIGMAPS = ROOT / "configmaps"
POLICIES_PAGE = Path("concepts") / "policies.md"
BEGIN = (
    "<!-- BEGIN shipped policies: generated from configmaps/ by `make reference` "
    "(scripts/docs_reference/policies.py); edit the ConfigMaps, not this table. -->"
)
END = "<!-- END shipped policies -->"


def rules(data: Mapping[str, Any]) -> str:
    """The rules of one CRL in words: `default 20, limits optional, requests disabled, max 100`."""
    parts = []
    if "defaultValue" in data:
        parts.append(f"default {data['defaultValue']}")
    parts += [f"limits {data['limits']}", f"requests {data['requests']}"]
    parts += [f"{name} {data[name]}" for name in ("min", "max", "wholeUnit") if name in data]
    return ", ".join(parts)


def policies_table(folder: Path = CONFIGMAPS) -> str:
    """The Markdown table of every ConfigMap in `folder` (by file name), with the markers."""
    rows = [
        "| ConfigMap | key | group | rules | description |",
        "|---|---|---|---|---|",
    ]
    for path in sorted(folder.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        data = doc["data"]
        rows.append(
            "| "
            + " | ".join(
                [
                    code(doc["metadata"]["name"]),
                    code(data["key"]),
                    cell(data["group"]),
                    cell(rules(data)),
                    cell(data.get("descriptionEn", "")),
                ]
            )
            + " |"
        )
    return "\n".join([BEGIN, "", *rows, "", END])


def with_table(page: str, table: str) -> str:
    """`page` with the text from its BEGIN marker to its END marker replaced by `table`."""
    start = page.find(BEGIN)
    end = page.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{POLICIES_PAGE}: the shipped-policies markers are missing")
    return page[:start] + table + page[end + len(END) :]
