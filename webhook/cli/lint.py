"""`gpu-webhook lint`: validate CRL ConfigMaps offline, and a webhook config (`--config`): the
rows an admin adds to the vendor tables (accelerators.<vendor>.modules, releases, devices) are
checked field by field, each problem on its own line."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from pydantic import BaseModel, ValidationError

from webhook.cli.exits import EXIT_DENIED, EXIT_OK, EXIT_USAGE
from webhook.cli.quoting import unquoted_values
from webhook.core.base.errors import ConfigError
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.policies.crl import parse_configmap
from webhook.core.policies.policyset import PolicySet
from webhook.sources.files import policy_files, read_documents


def _where(loc: tuple[int | str, ...]) -> str:
    """('accelerators', 'rocm', 'releases', 0, 'runtimes') -> accelerators.rocm.releases[0]
    .runtimes"""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text or "(top level)"


def _fields_at(loc: tuple[int | str, ...]) -> list[str]:
    """The camelCase fields the model at `loc` (without its last part) accepts."""
    model: Any = WebhookConfig
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        fields = getattr(model, "model_fields", {})
        name = next((n for n, f in fields.items() if part in (n, f.alias)), None)
        if name is None:
            return []
        annotation = fields[name].annotation
        args = getattr(annotation, "__args__", ())
        model = next((a for a in (annotation, *args) if _is_model(a)), None)
        if model is None:
            return []
    return [f.alias or n for n, f in getattr(model, "model_fields", {}).items()]


def _is_model(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseModel)


def lint_config(path: Path, out: TextIO) -> int:
    """Check a webhook config; the number of errors written."""
    try:
        config = load_config(path)
    except ConfigError as exc:
        cause = exc.__cause__
        if not isinstance(cause, ValidationError):
            out.write(f"ERROR {path}: {exc}\n")
            return 1
        for err in cause.errors():
            where = _where(tuple(err["loc"]))
            if err["type"] == "extra_forbidden":
                known = ", ".join(_fields_at(tuple(err["loc"])))
                out.write(f"ERROR {path}: {where}: unknown field (the fields are {known})\n")
            elif err["type"] == "missing":
                out.write(f"ERROR {path}: {where}: required field missing\n")
            else:
                message = str(err["msg"]).removeprefix("Value error, ")
                out.write(f"ERROR {path}: {where}: {message}\n")
        return len(cause.errors())
    rows = []
    for name in ("rocm", "cann"):
        gate = config.accelerators.gate(name)
        if gate is not None:
            rows.append(
                f"{name} {len(gate.modules)} module, {len(gate.releases)} release, "
                f"{len(gate.devices)} device, {len(gate.image_table)} image row(s)"
            )
    out.write(f"OK    {path}: webhook config (accelerators: {'; '.join(rows)})\n")
    return 0


def cmd_lint(args: argparse.Namespace, out: TextIO) -> int:
    config_errors = lint_config(args.config, out) if args.config is not None else 0
    if args.path is None:
        if args.config is None:
            out.write("nothing to lint: give a CRL ConfigMap path, --config, or both\n")
            return EXIT_USAGE
        out.write(f"\nwebhook config, {config_errors} error(s)\n")
        return EXIT_DENIED if config_errors else EXIT_OK
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
    errors += config_errors
    out.write(f"\n{len(configmaps)} ConfigMap(s), {errors} error(s)\n")
    return EXIT_DENIED if errors else EXIT_OK
