#!/usr/bin/env python3
"""Regenerate the `config` part of the chart's values.schema.json from webhook.core.config.model.

The chart renders `.Values.config` into the webhook's config file, so the schema of that key is
the pydantic model's JSON schema: `helm install` then rejects a mistyped key before any pod
starts. Run after changing webhook/core/config/model.py; tests/chart checks the file is in sync.

Usage: scripts/sync_chart_schema.py [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

# The project must be installed (`pip install -e .`, as `make install` does).
from webhook.core.config.model import WebhookConfig

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_PATH = ROOT / "charts" / "gpu-admission-webhook" / "values.schema.json"
# Definitions owned by the hand-written part of the schema; everything else in $defs comes
# from the config model.
CHART_DEF_PREFIX = "Chart"


def synced_schema(current: dict[str, Any]) -> dict[str, Any]:
    """Return `current` with properties.config and the model's $defs replaced."""
    model = WebhookConfig.model_json_schema(by_alias=True, mode="validation")
    model_defs: dict[str, Any] = model.pop("$defs", {})
    clashes = sorted(name for name in model_defs if name.startswith(CHART_DEF_PREFIX))
    if clashes:
        raise SystemExit(f"config model definitions clash with the chart's own: {clashes}")
    schema = dict(current)
    schema["properties"] = {**current["properties"], "config": model}
    chart_defs = {
        name: value
        for name, value in current.get("$defs", {}).items()
        if name.startswith(CHART_DEF_PREFIX)
    }
    schema["$defs"] = {**chart_defs, **dict(sorted(model_defs.items()))}
    return schema


def render(schema: dict[str, Any]) -> str:
    """The file's exact text, so that --check compares bytes."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Rewrite the schema file, or with --check report whether it is stale."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    current_text = SCHEMA_PATH.read_text(encoding="utf-8")
    wanted = render(synced_schema(json.loads(current_text)))
    if args.check:
        if wanted != current_text:
            print(f"{SCHEMA_PATH} is stale: run scripts/sync_chart_schema.py", file=sys.stderr)
            return 1
        return 0
    SCHEMA_PATH.write_text(wanted, encoding="utf-8")
    print(f"wrote {SCHEMA_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
