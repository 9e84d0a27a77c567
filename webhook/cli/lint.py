"""`gpu-webhook lint`: validate CRL ConfigMaps offline."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from webhook.cli.exits import EXIT_DENIED, EXIT_OK, EXIT_USAGE
from webhook.cli.quoting import unquoted_values
from webhook.core.policies.crl import parse_configmap
from webhook.core.policies.policyset import PolicySet
from webhook.sources.files import policy_files, read_documents


def cmd_lint(args: argparse.Namespace, out: TextIO) -> int:
    path = Path(args.path)
    configmaps: list[Mapping[str, Any]] = []
    errors = 0
    for file in policy_files(path):
        for doc in read_documents(file):
            if not isinstance(doc, Mapping) or doc.get("kind") != "ConfigMap":
                continue
            configmaps.append(doc)
            parsed = parse_configmap(doc)
            if not parsed.is_crl and not parsed.name.startswith("cf-crl-"):
                out.write(f"SKIP  {file}: {parsed.ref} is not a CRL ConfigMap\n")
                continue
            # A label YAML read as a bool or number (`enabled: true`): the API server refuses
            # the ConfigMap, whatever the CRL fields say.
            unquoted = unquoted_values(doc)
            status = "ERROR" if parsed.errors or unquoted else "OK   "
            detail = ""
            if parsed.limitation is not None:
                state = "enabled" if parsed.active else "disabled"
                detail = f" ({parsed.limitation.key}, group {parsed.limitation.group}, {state})"
            out.write(f"{status} {file}: {parsed.ref}{detail}\n")
            for error in [*unquoted, *parsed.errors]:
                out.write(f"  error: {error}\n")
            for warning in parsed.warnings:
                out.write(f"  warning: {warning}\n")
            errors += len(parsed.errors) + len(unquoted)
    if not configmaps:
        out.write(f"no ConfigMaps in {path}: expected CRL ConfigMap YAML files (kind: ConfigMap)\n")
        return EXIT_USAGE
    for conflict in PolicySet.from_configmaps(configmaps).conflicts:
        out.write(f"ERROR {conflict.message()}\n")
        errors += 1
    out.write(f"\n{len(configmaps)} ConfigMap(s), {errors} error(s)\n")
    return EXIT_DENIED if errors else EXIT_OK
