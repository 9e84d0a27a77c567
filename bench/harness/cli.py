"""The argument parser of a benchmark and the options several share."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.harness import REPO


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A benchmark's parser, described by the first paragraph of its module docstring."""
    return argparse.ArgumentParser(description=doc.split("\n\n")[0] if doc else None)


def add_rounds(parser: argparse.ArgumentParser, rounds: int, inner: int) -> None:
    """--rounds (samples per variant) and --inner (calls per sample)."""
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--inner", type=int, default=inner)


def add_json(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    """--json: print the figures as JSON instead of the text report."""
    parser.add_argument("--json", action="store_true", help=help)


def add_json_file(parser: argparse.ArgumentParser) -> None:
    """--json FILE: also write the report as JSON (see write_json)."""
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON")


def write_json(path: str, report: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(report, indent=2) + "\n")
    print(f"JSON written to {path}")


def add_tree(parser: argparse.ArgumentParser) -> None:
    """--tree DIR: measure the webhook of another checkout (bench.harness.tree)."""
    parser.add_argument("--tree", type=Path, default=REPO)


def command() -> str:
    """How this benchmark was started, for its JSON report."""
    return " ".join([Path(sys.executable).name, *sys.argv])
