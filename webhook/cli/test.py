"""`gpu-webhook test PATH…`: declared expectations checked against the policies (SPEC §9), like
`kyverno test` and `gator verify`.

A test file (`apiVersion: gpu-webhook.dev/v1alpha1`, `kind: Test`, schema in `Suite`,
cli/testfile.py, and the CLI guide) names a CRL folder, the manifests to evaluate, an optional
inventory (the same inputs as `gpu-webhook review`, read by the same code) and, per resource,
what admission must answer. Each resource is evaluated by `review_document`
(core/evaluation/evaluate.py, the admission core); the expected object after the patch is
compared as a document: the core's JSONPatch applied to the resource with `jsonpatch` (what the
API server does with it), then compared with the expected YAML (cli/testrun.py). Exit 0 when
every result passes, 1 when one fails, 2 when a test file is unusable.
"""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from webhook.cli.exits import EXIT_DENIED, EXIT_OK, CommandError
from webhook.cli.testfile import FILE_PATTERN, find_test_files, parse_tests
from webhook.cli.testinit import add_init_arguments, init_test
from webhook.cli.testreport import junit, print_text
from webhook.cli.testrun import Outcome, run_test
from webhook.core.base.errors import ConfigError, ManifestError


def add_test_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help=f"a test file, or a directory searched recursively for {FILE_PATTERN} files "
        "(with --init: the test file to write, or its directory)",
    )
    parser.add_argument("--fail-only", action="store_true", help="list only the failed results")
    parser.add_argument(
        "--detailed-results",
        action="store_true",
        help="after the table, every check of every listed result, and what the webhook answered",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("text", "json", "junit"),
        default="text",
        help="text (a table, default), json, or junit (JUnit XML for CI systems)",
    )
    add_init_arguments(parser)


def cmd_test(args: argparse.Namespace, out: TextIO) -> int:
    if args.init:
        return init_test(args, out)
    given = [
        f"--{n}"
        for n in ("file", "policies", "nodes", "claims", "config", "force")
        if getattr(args, n) not in (None, [], False)
    ]
    if given:
        raise CommandError(f"{', '.join(given)} go with --init (writing a test file)")
    files = find_test_files(args.paths)
    specs = [(path, spec) for path in files for spec in parse_tests(path)]
    total: list[Outcome] = []
    for path, spec in specs:
        try:
            total += run_test(spec, path)
        except (ManifestError, ConfigError) as exc:
            raise CommandError(f"{path}: {' '.join(str(exc).split())}") from None
    numbered = [(n, o) for n, o in enumerate(total, 1) if not (args.fail_only and o.passed)]
    if args.output == "json":
        json.dump(
            {
                "results": [o.to_json(n) for n, o in numbered],
                "summary": {
                    "pass": sum(o.passed for o in total),
                    "fail": sum(not o.passed for o in total),
                },
            },
            out,
            indent=2,
            ensure_ascii=False,
        )
        out.write("\n")
    elif args.output == "junit":
        junit([o for _, o in numbered], out)
    else:
        print_text(numbered, total, args.detailed_results, out)
    return EXIT_OK if all(o.passed for o in total) else EXIT_DENIED
