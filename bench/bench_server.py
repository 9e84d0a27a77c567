"""Benchmark of the real admission server over TLS, side by side with a no-op aiohttp TLS server.

Every server and the load generator run in their own processes (the client never shares an
event loop or a GIL with the server it measures). Figures:

1. closed loop, keep-alive, `--concurrency` in flight: reviews/s, p50/p99 for the webhook and
   for a no-op aiohttp TLS server answering a fixed allowed review; the ratio is the headline;
2. the webhook with uvloop and/or orjson disabled (GPU_WEBHOOK_DISABLE_UVLOOP/_ORJSON);
3. open loop at fractions of the webhook's own max throughput (`--open-fractions`, default
   half), driven by bench/harness/load/openloop.c: p50/p99 measured from each request's
   scheduled send time (no coordinated omission), with the generator's send lag and CPU;
4. RSS of the webhook after `--rss-reviews` reviews with `--rss-policies` CRL policies loaded,
   sampled from /proc/<pid>/status, and its growth over the second half, for both policy
   sources: the file source (`--policies DIR`) and the cluster watch (`--kubeconfig FILE`, the
   in-cluster path that imports the `kubernetes` client), the latter served the same
   ConfigMaps by the fake API server of tests/fakekube.py in a thread of this process.

The mix sends each object to /mutate and its mutated form to /validate, as the API server does.
The Python load generator runs with its own GC disabled while it measures (see `_load` in
bench/harness/load/loadgen.py).

    python bench/bench_server.py            # full run, < 5 minutes on 2 cores
    python bench/bench_server.py --quick    # smoke run, ~30 s
    python bench/bench_server.py --only-rss # just the RSS runs (--rss-source to pick one)
    python bench/bench_server.py --json out.json
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# `python bench/bench_server.py` puts bench/ on sys.path, not the repository root.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.harness import cli, processes  # noqa: E402
from bench.harness.load.loadgen import Measurement, drive, measure  # noqa: E402
from bench.harness.load.openloop import openloop_path, run_openloop  # noqa: E402
from bench.harness.load.wrk import run_wrk, write_templates, wrk_path  # noqa: E402
from bench.harness.objects import (  # noqa: E402
    generate_policies,
    policy_configmaps,
    server_templates,
)
from bench.harness.proc import rss_kib  # noqa: E402
from bench.harness.server_report import RSS_SOURCES, TARGETS, print_report  # noqa: E402
from bench.harness.servers import (  # noqa: E402
    certificates,
    fake_cluster,
    gauge,
    get,
    server,
    workdir,
)


def _rss_run(
    tls: Any, policies: Path, reviews: int, concurrency: int, kubeconfig: Path | None = None
) -> dict[str, Any]:
    """Drive `reviews` reviews through a fresh webhook; RSS at start, half-way and the end."""
    rss: dict[str, Any] = {}
    with server("webhook", tls, policies, kubeconfig=kubeconfig) as (port, pid):
        rss["start_kib"] = rss_kib(pid)
        half_reviews = reviews // 2
        first = drive(port, tls.ca_cert, half_reviews, concurrency)
        rss["half_kib"] = rss_kib(pid)
        second = drive(port, tls.ca_cert, reviews - half_reviews, concurrency)
        rss["end_kib"] = rss_kib(pid)
        # Read after the last sample, so the scrape does not count in the figure.
        metrics = get(port, tls.ca_cert, "/metrics")
    rss["policies_loaded"] = gauge(metrics, "gpu_webhook_policies_loaded")
    rss["invalid_configmaps"] = gauge(metrics, "gpu_webhook_invalid_configmaps")
    rss["reviews"] = reviews
    rss["errors"] = first["errors"] + second["errors"]
    statuses = {**first["statuses"]}
    for status, count in second["statuses"].items():
        statuses[status] = statuses.get(status, 0) + count
    rss["statuses"] = statuses
    rss["second_half_rps"] = second["rps"]
    rss["second_half_p99_ms"] = second["p99_ms"]
    rss["growth_second_half_kib"] = rss["end_kib"] - rss["half_kib"]
    rss["meets_rss_target"] = rss["end_kib"] / 1024 <= TARGETS["rss_mib"]
    rss["no_growth"] = rss["growth_second_half_kib"] <= TARGETS["rss_growth_second_half_kib"]
    return rss


STACKS = {"fast": (False, False), "std": (True, True)}


def wrk_runs(args: argparse.Namespace, tls: Any, policies: Path, work: Path) -> dict[str, Any]:
    """The no-op, the webhook (and `--previous`'s) under wrk: each stack by each mix."""
    if wrk_path() is None:
        raise SystemExit(
            "wrk is not installed: `apt-get install wrk` (Debian's package, built with LuaJIT), "
            "or run with --python-load for the Python load generator"
        )
    runs: list[dict[str, Any]] = []
    servers: list[tuple[str, Path | None]] = [("noop", None), ("webhook", None)]
    if args.compiled:
        # The same webhook with its evaluation core compiled (`make compiled`, setup.py).
        servers.append(("compiled", Path(args.compiled).resolve()))
    if args.previous:
        servers.append(("previous", Path(args.previous).resolve()))
    # On 2 cores the scheduler moving the server and wrk between cores (and waking an idle one
    # for every answer) swung the no-op's rate 2,200-4,800/s between runs: each gets a core.
    server_cpus, wrk_cpus = ({1}, {0}) if args.pin else (None, None)
    for stack in args.stacks.split(","):
        no_uvloop, no_orjson = STACKS[stack]
        for mix in args.mixes.split(","):
            templates = write_templates(work / f"wrk-{mix}", server_templates(mix))
            for name, tree in servers:
                kind = "noop" if name == "noop" else "webhook"
                print(f"wrk: {stack} stack, {mix} mix, {name}", flush=True)
                with server(
                    kind,
                    tls,
                    policies,
                    no_uvloop=no_uvloop,
                    no_orjson=no_orjson,
                    tree=tree,
                    cpus=server_cpus,
                ) as (port, pid):
                    result = run_wrk(
                        f"https://localhost:{port}",
                        templates,
                        pid,
                        seconds=args.seconds,
                        connections=args.concurrency,
                        cpus=wrk_cpus,
                        warmup=2,  # a short run first (imports, caches, connections)
                    )
                runs.append({"stack": stack, "mix": mix, "server": name, **result.as_dict()})
    for run in runs:
        same = {
            r["server"]: r["rps"]
            for r in runs
            if (r["stack"], r["mix"]) == (run["stack"], run["mix"])
        }
        run["vs_noop"] = round(run["rps"] / same["noop"], 3)
        if "previous" in same:
            run["vs_previous"] = round(run["rps"] / same["previous"], 3)
    return {"seconds": args.seconds, "connections": args.concurrency, "runs": runs}


# What the report keeps of the C generator's JSON (bench/harness/load/openloop.c documents
# each field).
OPEN_FIELDS = (
    "sent",
    "completed",
    "non_2xx",
    "errors",
    "timeouts",
    "queued",
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "p999_ms",
    "max_ms",
    "send_lag_p99_ms",
    "cpu_share",
    "server_cpu",
)


def open_loop_runs(
    args: argparse.Namespace,
    tls: Any,
    policies: Path,
    work: Path,
    report: dict[str, Any],
    measurements: list[Measurement],
) -> list[dict[str, Any]]:
    """The webhook open loop at fractions of its own maximum (distinct mix, fast stack).

    With --compiled the build the image ships (the compiled core) is the one measured. The load
    comes from bench/harness/load/openloop.c (each request sent at its scheduled time; latency
    from that time), or from the Python generator with --python-load, which cannot keep its schedule
    above ~4,000 requests/s on 2 cores and then measures itself.
    """
    measured = "compiled" if args.compiled and not measurements else "webhook"
    tree = Path(args.compiled).resolve() if measured == "compiled" else None
    if measurements:
        top = measurements[0].rps
    else:
        # The first stack's run of the distinct mix (fast, unless --stacks says otherwise).
        served = [r for r in report["wrk"]["runs"] if r["server"] == measured]
        distinct = [r for r in served if r["mix"] == "distinct"] or served
        top = distinct[0]["rps"]
    binary = None
    if not args.python_load:
        binary, why = openloop_path(work / "openloop")
        if binary is None:
            raise SystemExit(f"the open-loop generator cannot be built: {why}")
    templates = write_templates(work / "open-distinct", server_templates("distinct"))
    server_cpus, load_cpus = ({1}, {0}) if args.pin else (None, None)
    runs: list[dict[str, Any]] = []
    for fraction in (float(f) for f in args.open_fractions.split(",")):
        rate = round(top * fraction, 1)
        print(f"open loop at {rate} reviews/s ({fraction:g} of the {measured} max {top:.0f})")
        with server("webhook", tls, policies, tree=tree, cpus=server_cpus) as (port, pid):
            if binary is not None:
                # A short warm-up at the same rate first (imports, caches, connections).
                run_openloop(
                    port, tls.ca_cert, templates, rate, int(rate), 64, pid, load_cpus, binary=binary
                )
                result = run_openloop(
                    port,
                    tls.ca_cert,
                    templates,
                    rate,
                    args.open_requests,
                    64,
                    pid,
                    load_cpus,
                    binary=binary,
                    realtime=args.open_realtime,
                )
                row = {
                    "generator": "openloop.c",
                    "rps": result["achieved_rate"],
                    **{k: result[k] for k in OPEN_FIELDS if k in result},
                }
            else:
                row = {
                    "generator": "python",
                    **drive(
                        port,
                        tls.ca_cert,
                        args.open_requests,
                        args.concurrency * 8,
                        rate,
                        "distinct",
                    ),
                }
        runs.append(
            {"server": measured, "rate": rate, "fraction": fraction, "mix": "distinct", **row}
        )
    return runs


def run_main(args: argparse.Namespace) -> int:
    if args.quick:
        args.requests, args.rss_reviews, args.open_requests = 3000, 10000, 2000
        args.variant_requests = 2000
    report: dict[str, Any] = {
        "command": cli.command(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "concurrency": args.concurrency,
        "targets": TARGETS,
    }
    with workdir("gpu-webhook-bench-") as work:
        tls = certificates(work)
        policies = Path(args.policies)
        shipped_count = len(list(policies.glob("*.y*ml")))
        measurements: list[Measurement] = []

        if not args.only_rss and not args.python_load:
            report["wrk"] = wrk_runs(args, tls, policies, work)
            report["policies"] = shipped_count

        if not args.only_rss and args.python_load:
            print(
                f"closed loop: {args.requests} reviews, concurrency {args.concurrency}", flush=True
            )
            with server("webhook", tls, policies) as (port, _):
                webhook = measure(
                    "webhook (uvloop+orjson)",
                    drive(port, tls.ca_cert, args.requests, args.concurrency),
                )
            measurements.append(webhook)
            with server("noop", tls, policies) as (port, _):
                noop = measure(
                    "no-op aiohttp TLS", drive(port, tls.ca_cert, args.requests, args.concurrency)
                )
            measurements.append(noop)
            report["throughput_ratio"] = round(webhook.rps / noop.rps, 3)
            report["policies"] = shipped_count

        if not args.only_rss and args.python_load and not args.no_variants:
            variants = [
                ("webhook (uvloop, stdlib json)", False, True, "info"),
                ("webhook (asyncio, orjson)", True, False, "info"),
                ("webhook (asyncio, stdlib json)", True, True, "info"),
                # The one-line-per-review log is part of the per-review cost: show how much.
                ("webhook (uvloop+orjson, no review log)", False, False, "warning"),
            ]
            for name, no_uvloop, no_orjson, level in variants:
                print(f"variant: {name}", flush=True)
                with server(
                    "webhook",
                    tls,
                    policies,
                    no_uvloop=no_uvloop,
                    no_orjson=no_orjson,
                    log_level=level,
                ) as (port, _):
                    result = drive(port, tls.ca_cert, args.variant_requests, args.concurrency)
                measurements.append(measure(name, result))

        if not args.only_rss:
            report["open_loop"] = open_loop_runs(args, tls, policies, work, report, measurements)

        rss: list[dict[str, Any]] = []
        if not args.no_rss:
            big = generate_policies(work / "policies", args.rss_policies)
            configmaps = policy_configmaps(big)
            sources = list(RSS_SOURCES) if args.rss_source == "both" else [args.rss_source]
            for source in sources:
                print(
                    f"RSS, {RSS_SOURCES[source]}: {args.rss_reviews} reviews with "
                    f"{len(configmaps)} CRL ConfigMaps",
                    flush=True,
                )
                if source == "file":
                    row = _rss_run(tls, big, args.rss_reviews, args.concurrency)
                else:
                    with fake_cluster(configmaps, work / "kube") as kubeconfig:
                        row = _rss_run(
                            tls, big, args.rss_reviews, args.concurrency, kubeconfig=kubeconfig
                        )
                rss.append({"source": source, "configmaps": len(configmaps), **row})
        report["rss"] = rss
        report["measurements"] = [asdict(m) for m in measurements]
        print_report(report, measurements)
        if args.json:
            cli.write_json(args.json, report)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = cli.parser(__doc__)
    # The harness's `noop` and `client` processes (`python -m bench.harness`), here too.
    processes.add_commands(parser.add_subparsers(dest="mode"))
    parser.add_argument("--requests", type=int, default=20000, help="per closed-loop run")
    parser.add_argument("--variant-requests", type=int, default=10000, help="per variant run")
    parser.add_argument("--open-requests", type=int, default=20000, help="per open-loop run")
    parser.add_argument(
        "--open-fractions",
        default="0.5",
        help="open-loop rates as fractions of the measured maximum, comma-separated",
    )
    parser.add_argument(
        "--open-realtime",
        action="store_true",
        help="run the open-loop generator under SCHED_FIFO (chrt; root): other processes on its "
        "core then cannot delay its sends",
    )
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0, help="per wrk run")
    parser.add_argument("--stacks", default="fast,std", help="fast (uvloop+orjson), std, or both")
    parser.add_argument("--mixes", default="distinct,replicas", help="distinct, replicas or both")
    parser.add_argument(
        "--previous", metavar="TREE", help="also run the webhook of this checkout (a release)"
    )
    parser.add_argument(
        "--compiled",
        metavar="TREE",
        help="also run the webhook with the compiled core of this tree (`make compiled` builds "
        "build/compiled)",
    )
    parser.add_argument(
        "--no-pin",
        dest="pin",
        action="store_false",
        help="do not pin the server to CPU 1 and wrk to CPU 0 (pinned by default on 2+ CPUs)",
    )
    parser.add_argument(
        "--python-load",
        action="store_true",
        help="closed loop with the Python load generator (the limit for the no-op) instead of wrk",
    )
    parser.add_argument("--policies", default=str(REPO / "configmaps"))
    parser.add_argument("--rss-reviews", type=int, default=100_000)
    parser.add_argument("--rss-policies", type=int, default=1000)
    parser.add_argument("--no-rss", action="store_true", help="skip the RSS runs")
    parser.add_argument(
        "--rss-source",
        choices=("both", *RSS_SOURCES),
        default="both",
        help="policy source(s) of the RSS runs: file (--policies), cluster (--kubeconfig "
        "against the fake API server) or both (default)",
    )
    parser.add_argument(
        "--only-rss", action="store_true", help="skip the throughput and latency runs"
    )
    parser.add_argument("--no-variants", action="store_true", help="skip uvloop/orjson variants")
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    cli.add_json_file(parser)
    args = parser.parse_args(argv)
    if (os.cpu_count() or 1) < 2:
        args.pin = False
    if args.only_rss and args.no_rss:
        parser.error("--only-rss and --no-rss leave nothing to run")
    code = processes.run(args)
    return run_main(args) if code is None else code


if __name__ == "__main__":
    sys.exit(main())
