"""What bench/bench_server.py prints: the closed-loop (wrk) table, the per-measurement table,
the resident memory table, and whether each target was met."""

from __future__ import annotations

from typing import Any

from bench.harness.load.loadgen import Measurement
from bench.harness.report import Column, Table

TARGETS = {
    "throughput_ratio": 0.5,
    "p99_ms_at_half_load": 5.0,
    "rss_mib": 100.0,
    # "No growth": ≤ 1 MiB over the second half (50,000 reviews by default: ~21 bytes each).
    "rss_growth_second_half_kib": 1024,
}
RSS_SOURCES = {"file": "file (--policies)", "cluster": "cluster watch (--kubeconfig)"}

WRK_TABLE = Table(
    Column("stack", 6, align="<"),
    Column("mix", 9, align="<"),
    Column("server", 9, align="<"),
    Column("reviews/s", 9, ".0f"),
    Column("p50 ms", 7, ".2f"),
    Column("p99 ms", 7, ".2f"),
    Column("vs no-op", 8, ".2f"),
    Column("vs prev", 7),
    Column("server CPU", 10, ".2f"),
    Column("wrk CPU", 7, ".2f"),
    Column("kinstr", 6),
    Column("non-2xx", 7),
)
MEASUREMENT_TABLE = Table(
    Column("server", 40, align="<"),
    Column("reviews/s", 10, ".0f"),
    Column("p50 ms", 8),
    Column("p99 ms", 8, ".2f"),
    Column("errors", 7),
)
RSS_TABLE = Table(
    Column("policy source", 30, align="<"),
    Column("loaded", 6),
    Column("invalid", 7),
    Column("start MiB", 9, ".1f"),
    Column("half MiB", 8, ".1f"),
    Column("end MiB", 8, ".1f"),
    Column("growth KiB", 10),
    Column("≤ 100 MiB", 9),
    Column("no growth", 9),
    Column("errors", 6),
)


def _meets(met: bool) -> str:
    return "meets" if met else "MISSES"


def print_wrk(wrk: dict[str, Any]) -> None:
    print(f"wrk, 1 thread, {wrk['connections']} connections, {wrk['seconds']:g} s per run")
    print(WRK_TABLE.header())
    for run in wrk["runs"]:
        previous = f"{run['vs_previous']:.2f}" if "vs_previous" in run else "-"
        print(
            WRK_TABLE.row(
                *(run[k] for k in ("stack", "mix", "server", "rps", "p50_ms", "p99_ms")),
                run["vs_noop"],
                previous,
                run["server_cpu"],
                run["wrk_cpu"],
                run["kinstructions_per_review"],
                run["non_2xx"] + run["socket_errors"],
            )
        )
    print()


def print_report(report: dict[str, Any], measurements: list[Measurement]) -> None:
    print()
    if "wrk" in report:
        print_wrk(report["wrk"])
    if measurements:
        print(MEASUREMENT_TABLE.header())
        for m in measurements:
            p50 = f"{m.p50_ms:.2f}" if m.p50_ms is not None else "-"
            print(MEASUREMENT_TABLE.row(m.name, m.rps, p50, m.p99_ms, m.errors))
        print()
    if "throughput_ratio" in report:
        ratio = report["throughput_ratio"]
        verdict = _meets(ratio >= TARGETS["throughput_ratio"])
        print(f"throughput ratio webhook/no-op: {ratio:.2f} ({verdict} target ≥ 0.50)")
    for run in report.get("open_loop", []):
        verdict = _meets(run["p99_ms"] <= TARGETS["p99_ms_at_half_load"])
        target = f" ({verdict} target ≤ 5 ms)" if run.get("fraction", 0.5) == 0.5 else ""
        generator = run.get("generator", "python")
        extra = ""
        if generator == "openloop.c":
            extra = (
                f", send lag p99 {run['send_lag_p99_ms']:.2f} ms, generator CPU "
                f"{run['cpu_share']:.2f}, server CPU {run['server_cpu']:.2f}, "
                f"errors {run['non_2xx'] + run['errors'] + run['timeouts']}"
            )
        print(
            f"open loop ({run.get('server', 'webhook')}, {generator}) at {run['rate']:.0f}/s: "
            f"achieved {run['rps']:.0f}/s, p50 {run['p50_ms']:.2f} ms, "
            f"p99 {run['p99_ms']:.2f} ms{target}{extra}"
        )
    rows = report["rss"]
    if rows:
        reviews = rows[0]["reviews"]
        growth_target = TARGETS["rss_growth_second_half_kib"]
        print()
        print(
            f"RSS after {reviews} reviews (half-way: {reviews // 2}); targets: end ≤ "
            f"{TARGETS['rss_mib']:.0f} MiB, growth over the second half ≤ {growth_target} KiB"
        )
        print(RSS_TABLE.header())
        for row in rows:
            print(
                RSS_TABLE.row(
                    RSS_SOURCES[row["source"]],
                    row["policies_loaded"],
                    row["invalid_configmaps"],
                    row["start_kib"] / 1024,
                    row["half_kib"] / 1024,
                    row["end_kib"] / 1024,
                    row["growth_second_half_kib"],
                    _meets(row["meets_rss_target"]),
                    _meets(row["no_growth"]),
                    row["errors"],
                )
            )
