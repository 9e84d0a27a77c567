"""`gpu-webhook tables`: the vendor tables in force (SPEC §13) — the shipped rows of
webhook/data/accelerators.yaml and the rows the config adds (accelerators.<vendor>.modules,
releases, devices, imageTable) — each row with where it was read."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, TextIO

from webhook.cli.exits import EXIT_OK, CommandError
from webhook.core.config.accelerators import VendorGate
from webhook.core.config.model import load_config
from webhook.core.placement.vendors import Vendor, shipped_vendors

Row = dict[str, Any]


def add_tables_parser(sub: Any) -> None:
    tables = sub.add_parser(
        "tables",
        help="print the vendor tables in force (shipped rows and the config's), each row "
        "with its source",
    )
    tables.add_argument(
        "--config", type=Path, help="webhook config YAML whose rows are added (default: none)"
    )
    tables.add_argument(
        "--vendor", help="only this vendor's tables (rocm, cann; default: every vendor)"
    )
    tables.add_argument(
        "-o",
        "--output",
        choices=("text", "json"),
        default="text",
        help="a listing, or JSON for scripts (default: %(default)s)",
    )


def _rows(vendor: Vendor, gate: VendorGate | None) -> dict[str, list[Row]]:
    """Per table, its rows: the shipped ones, then the config's (origin "config")."""
    modules: list[Row] = [
        {"value": r.value, "release": r.target, "origin": "shipped", "source": r.source}
        for r in vendor.modules
    ]
    releases: list[Row] = []
    for release in vendor.releases:
        if release.runtimes:
            releases.append(
                {
                    "release": release.release,
                    "runtimes": list(release.runtimes),
                    "devices": [],
                    "origin": "shipped",
                    "source": release.source,
                }
            )
        by_devices: dict[tuple[tuple[str, ...], str], list[str]] = {}
        for q in release.qualified:
            by_devices.setdefault((q.devices, q.source), []).append(q.runtime)
        for (only, source), runtimes in by_devices.items():
            releases.append(
                {
                    "release": release.release,
                    "runtimes": runtimes,
                    "devices": list(only),
                    "origin": "shipped",
                    "source": source,
                }
            )
    devices: list[Row] = [
        {"value": r.value, "device": r.target, "origin": "shipped", "source": r.source}
        for r in vendor.devices.values()
    ]
    images: list[Row] = [
        {
            "image": f"{repository}:{release}",
            "version": version,
            "devices": list(known.default_devices),
            "origin": "shipped",
            "source": known.source,
        }
        for known in vendor.images
        for repository in sorted(known.repositories)
        for release, version in known.releases.items()
    ]
    if gate is not None:
        modules += [
            {"value": m.value, "release": m.release, "origin": "config", "source": m.source}
            for m in gate.modules
        ]
        releases += [
            {
                "release": r.release,
                "runtimes": list(r.runtimes),
                "devices": list(r.devices),
                "origin": "config",
                "source": r.source,
            }
            for r in gate.releases
        ]
        devices += [
            {"value": d.value, "device": d.device, "origin": "config", "source": d.source}
            for d in gate.devices
        ]
        images += [
            {
                "image": i.image,
                "version": i.version,
                "devices": list(i.devices),
                "origin": "config",
                "source": "imageTable",
            }
            for i in gate.image_table
        ]
    return {"modules": modules, "releases": releases, "devices": devices, "images": images}


def _text(vendor: Vendor, gate: VendorGate | None, tables: dict[str, list[Row]]) -> list[str]:
    state = "" if gate is None or gate.enabled else " (gate disabled in the config)"
    lines = [f"{vendor.name}: {vendor.runtime} on the {vendor.driver}{state}"]
    heads = {
        "modules": f"kernel module -> {vendor.driver} release",
        "releases": f"{vendor.driver} release -> {vendor.runtime} versions it runs",
        "devices": f"node label value -> {vendor.device}",
        "images": f"image -> {vendor.runtime} version",
    }
    for table, rows in tables.items():
        lines.append(f"  {table} ({heads[table]}): {len(rows)} row(s)")
        for row in rows:
            if table == "modules":
                what = f"{row['value']} -> {row['release']}"
            elif table == "releases":
                only = f" on {', '.join(row['devices'])} only" if row["devices"] else ""
                what = f"{row['release']}{only}: {', '.join(row['runtimes'])}"
            elif table == "devices":
                what = f"{row['value']} -> {row['device']}"
            else:
                built = f" (built for {', '.join(row['devices'])})" if row["devices"] else ""
                what = f"{row['image']} -> {row['version']}{built}"
            lines.append(f"    {what}  [{row['origin']}: {row['source']}]")
    return lines


def cmd_tables(args: argparse.Namespace, out: TextIO) -> int:
    config = load_config(args.config)
    result: list[dict[str, Any]] = []
    text: list[str] = []
    for vendor in shipped_vendors():
        if args.vendor and vendor.name != args.vendor:
            continue
        gate = config.accelerators.gate(vendor.name)
        tables = _rows(vendor, gate)
        enabled = gate.enabled if gate is not None else False
        result.append(
            {"vendor": vendor.name, "runtime": vendor.runtime, "enabled": enabled, **tables}
        )
        text += _text(vendor, gate, tables)
    if not result:
        names = ", ".join(v.name for v in shipped_vendors())
        raise CommandError(f"no vendor {args.vendor!r}: the vendors are {names}")
    if args.output == "json":
        out.write(json.dumps(result, indent=2) + "\n")
    else:
        out.write("\n".join(text) + "\n")
    return EXIT_OK
