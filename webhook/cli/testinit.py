"""`gpu-webhook test --init PATH -f MANIFEST --policies DIR`: a test file written from what the
webhook answers today (like `kyverno create test`), ready to commit.

The manifests are evaluated exactly as `gpu-webhook test` will evaluate them: a Suite is built
in memory with the paths as the file will hold them (relative to its folder), loaded by
testrun.load_inputs and reviewed by the same review_document, so the file it writes passes
until the policies, the config or the webhook change their answer. Each document gets its
verdict, its number of violations and every violation message, warning and change line as an
escaped regular expression (the whole line, so a changed message fails the test).
"""

from __future__ import annotations

import argparse
import os
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import yaml

from webhook.cli.exits import CommandError
from webhook.cli.review import DEFAULT_POLICIES
from webhook.cli.testfile import API_VERSION, FILE_SUFFIXES, KIND, Inventory, Suite
from webhook.cli.testrun import Inputs, load_inputs, review_input
from webhook.core.base.errors import ConfigError, ManifestError

DEFAULT_NAME = "gpu-webhook-test.yaml"
HEADER = (
    "# Written by `gpu-webhook test --init` from what the webhook answered for these manifests\n"
    "# and policies. Read each result before committing it: it records today's behaviour, not\n"
    "# the intended one. Run it with `gpu-webhook test {path}`.\n"
)


def add_init_arguments(parser: argparse.ArgumentParser) -> None:
    init = parser.add_argument_group(
        "writing a test file (--init)",
        "`gpu-webhook test --init PATH -f MANIFEST [--policies DIR]` writes PATH (a directory: "
        f"PATH/{DEFAULT_NAME}) with the current verdicts of every document of the manifests",
    )
    init.add_argument(
        "--init",
        action="store_true",
        help="write a test file at PATH from the manifests (-f) and policies instead of running",
    )
    init.add_argument(
        "-f",
        "--file",
        action="append",
        default=[],
        metavar="MANIFEST",
        help="with --init: a manifest file or directory to test (repeatable)",
    )
    init.add_argument(
        "--policies",
        type=Path,
        help="with --init: the CRL ConfigMap folder (default: ./configmaps)",
    )
    init.add_argument("--nodes", type=Path, help="with --init: the inventory's Nodes YAML")
    init.add_argument("--claims", type=Path, help="with --init: DRA claims/templates YAML")
    init.add_argument("--config", type=Path, help="with --init: the webhook config YAML")
    init.add_argument(
        "--force", action="store_true", help="with --init: overwrite an existing test file"
    )


def _relative(path: Path, base: Path) -> str:
    """`path` as the test file names it: relative to the file's folder, with forward slashes."""
    return Path(os.path.relpath(path.resolve(), base.resolve())).as_posix()


def _target(paths: list[str], force: bool) -> Path:
    if len(paths) != 1:
        raise CommandError("--init writes one test file: give one PATH")
    path = Path(paths[0])
    if path.is_dir():
        path = path / DEFAULT_NAME
    if not path.name.endswith(FILE_SUFFIXES):
        raise CommandError(
            f"{path}: a test file's name ends in {FILE_SUFFIXES[0]} (so that `gpu-webhook test "
            "DIR` finds it), e.g. " + str(path.with_name(DEFAULT_NAME))
        )
    if path.exists() and not force:
        raise CommandError(f"{path} exists: pass --force to overwrite it")
    if not path.parent.is_dir():
        raise CommandError(f"{path.parent}: no such directory")
    return path


# The characters with a meaning in a regular expression outside a character class (re.escape
# also escapes spaces, `-`, `#` ...: valid, but hard to read in a file meant to be read).
_SPECIAL = re.compile(r"([\\.^$*+?{}\[\]|()])")


def escaped(line: str) -> str:
    """`line` as a regular expression that matches it literally."""
    return _SPECIAL.sub(r"\\\1", line)


def _selectors(inputs: Inputs, base: Path) -> list[dict[str, Any]]:
    """How each document is named in the file: kind/namespace/name when that names it alone,
    else its file and document number."""
    keys = [_key(doc) for _, _, doc in inputs.documents]
    counts = Counter(k for k in keys if k is not None)
    out: list[dict[str, Any]] = []
    for (name, index, _), key in zip(inputs.documents, keys, strict=True):
        if key is not None and counts[key] == 1:
            kind, namespace, obj = key
            out.append(
                {"kind": kind} | ({"namespace": namespace} if namespace else {}) | {"name": obj}
            )
        else:
            out.append({"file": _relative(inputs.paths[name], base), "document": index})
    return out


def _key(doc: Any) -> tuple[str, str, str] | None:
    if not isinstance(doc, Mapping) or not isinstance(doc.get("kind"), str):
        return None
    meta = doc.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
        return None
    namespace = meta.get("namespace")
    # The runner matches a document without a namespace as `default`: say so only when written.
    return doc["kind"], namespace if isinstance(namespace, str) else "", meta["name"]


def init_test(args: argparse.Namespace, out: TextIO) -> int:
    if not args.file:
        raise CommandError("--init needs the manifests to test: -f FILE (repeatable)")
    target = _target(args.paths, args.force)
    base = target.parent
    policies = args.policies if args.policies is not None else DEFAULT_POLICIES
    if args.policies is None and not DEFAULT_POLICIES.is_dir():
        raise CommandError(
            "--init needs the policies: --policies PATH (a folder or file of CRL ConfigMaps: "
            "the project's configmaps/, or your cluster's: kubectl get configmaps -n "
            "kube-public -o yaml > crl.yaml)"
        )
    for given in [*args.file, policies, args.nodes, args.claims, args.config]:
        if given is not None and not Path(given).exists():
            raise CommandError(f"{given}: no such file or directory")
    inventory = Inventory(
        nodes=_relative(args.nodes, base) if args.nodes else None,
        claims=_relative(args.claims, base) if args.claims else None,
        config=_relative(args.config, base) if args.config else None,
    )
    spec: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": Path(args.file[0]).stem or "manifests"},
        "policies": _relative(Path(policies), base),
        "resources": [_relative(Path(f), base) for f in args.file],
    }
    written_inventory = inventory.model_dump(exclude_none=True)
    if written_inventory:
        spec["inventory"] = written_inventory
    try:
        inputs = load_inputs(
            Suite.model_validate(spec | {"inventory": inventory, "results": [_PLACEHOLDER]}),
            base,
        )
    except (ManifestError, ConfigError) as exc:
        raise CommandError(" ".join(str(exc).split())) from None
    if not inputs.documents:
        raise CommandError(f"no document in {', '.join(args.file)}")
    results = []
    for (file, index, doc), selector in zip(
        inputs.documents, _selectors(inputs, base), strict=True
    ):
        result = review_input(inputs, file, index, doc)
        entry: dict[str, Any] = selector | {"verdict": result.verdict}
        if result.verdict != "skipped":
            entry["violations"] = len(result.violations)
        for key, lines in (
            ("messages", result.violations),
            ("warnings", result.warnings),
            ("changes", result.changes),
        ):
            if lines:
                entry[key] = [escaped(line) for line in lines]
        results.append(entry)
    spec["results"] = results
    text = HEADER.format(path=target) + yaml.safe_dump(
        spec, sort_keys=False, allow_unicode=True, width=10_000, default_flow_style=False
    )
    target.write_text(text, encoding="utf-8")
    verdicts = Counter(r["verdict"] for r in results)
    counted = ", ".join(
        f"{verdicts[v]} {v}" for v in ("allowed", "denied", "skipped") if v in verdicts
    )
    out.write(
        f"wrote {target}: {len(results)} result(s) ({counted}); check them, then run "
        f"`gpu-webhook test {target}`\n"
    )
    return 0


# load_inputs reads a Suite, which needs one result: never checked, only the inputs are read.
_PLACEHOLDER = {"name": "-", "verdict": "allowed"}
