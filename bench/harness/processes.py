"""The harness's own child processes: the no-op TLS server and the Python load generator.

They run as `python -m bench.harness noop|client` (bench.harness.servers, bench.harness.load
start them); bench_server.py keeps its `noop` and `client` subcommands, the same commands.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    noop = sub.add_parser("noop", help="(internal) run the no-op TLS server")
    noop.add_argument("--port", type=int, required=True)
    noop.add_argument("--cert", required=True)
    noop.add_argument("--key", required=True)
    client = sub.add_parser("client", help="(internal) run the load generator")
    client.add_argument("--url", required=True)
    client.add_argument("--ca", required=True)
    client.add_argument("--requests", type=int, required=True)
    client.add_argument("--concurrency", type=int, default=32)
    client.add_argument("--rate", type=float, default=0.0)
    client.add_argument("--mix", choices=("fixed", "distinct", "replicas"), default="fixed")


def run(args: argparse.Namespace) -> int | None:
    """Runs the command `args.mode` names; None when it names none (the benchmark's own run)."""
    if args.mode == "noop":
        from bench.harness.servers import noop_main

        return noop_main(args)
    if args.mode == "client":
        from bench.harness.load.loadgen import client_main

        return client_main(args)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.harness")
    add_commands(parser.add_subparsers(dest="mode", required=True))
    code = run(parser.parse_args(argv))
    assert code is not None
    return code
