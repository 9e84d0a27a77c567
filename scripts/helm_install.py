#!/usr/bin/env python3
"""`helm upgrade --install` of the chart through helm-python-sdk, for machines without helm.

Usage: scripts/helm_install.py --kubeconfig FILE [--namespace NS] [--release NAME]
       [--set key=value ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import helm_python

CHART_DIR = Path(__file__).resolve().parent.parent / "charts" / "gpu-admission-webhook"


def merge(into: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge `update` into `into` (later --set flags win, like helm)."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value
    return into


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", default="gpu-admission-webhook")
    parser.add_argument("--release", default="gaw")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--timeout", type=int, default=180, help="seconds (%(default)s)")
    args = parser.parse_args(argv)
    values: dict[str, Any] = {}
    for expression in args.sets:
        merge(values, helm_python.parse_set_string(expression))
    with (
        helm_python.Config(kubeconfig_path=args.kubeconfig, namespace=args.namespace) as cfg,
        helm_python.Chart.load(CHART_DIR) as chart,
    ):
        installed = {r.get("name") for r in cfg.list(all_states=True)}
        if args.release in installed:
            cfg.upgrade(
                chart, args.release, values, namespace=args.namespace, wait="watcher",
                timeout=args.timeout,
            )  # fmt: skip
            print(f"upgraded {args.release} in {args.namespace}")
        else:
            cfg.install(
                chart, args.release, values, namespace=args.namespace, wait="watcher",
                timeout=args.timeout, create_namespace=True,
            )  # fmt: skip
            print(f"installed {args.release} in {args.namespace}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
