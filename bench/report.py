"""Targets and the printed report of the server benchmark."""

from __future__ import annotations

from typing import Any

from bench.loadgen import Measurement

TARGETS = {
    "throughput_ratio": 0.5,
    "p99_ms_at_half_load": 5.0,
    "rss_mib": 100.0,
    # "No growth": ≤ 1 MiB over the second half (50,000 reviews by default: ~21 bytes each).
    "rss_growth_second_half_kib": 1024,
}
RSS_SOURCES = {"file": "file (--policies)", "cluster": "cluster watch (--kubeconfig)"}


def print_wrk(wrk: dict[str, Any]) -> None:
    print(f"wrk, 1 thread, {wrk['connections']} connections, {wrk['seconds']:g} s per run")
    print(
        f"{'stack':<6} {'mix':<9} {'server':<9} {'reviews/s':>9} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'vs no-op':>8} {'vs prev':>7} {'server CPU':>10} {'wrk CPU':>7} {'kinstr':>6} "
        f"{'non-2xx':>7}"
    )
    for run in wrk["runs"]:
        previous = f"{run['vs_previous']:.2f}" if "vs_previous" in run else "-"
        print(
            f"{run['stack']:<6} {run['mix']:<9} {run['server']:<9} {run['rps']:>9.0f} "
            f"{run['p50_ms']:>7.2f} {run['p99_ms']:>7.2f} {run['vs_noop']:>8.2f} {previous:>7} "
            f"{run['server_cpu']:>10.2f} {run['wrk_cpu']:>7.2f} "
            f"{run['kinstructions_per_review']:>6} {run['non_2xx'] + run['socket_errors']:>7}"
        )
    print()


def print_report(report: dict[str, Any], measurements: list[Measurement]) -> None:
    print()
    if "wrk" in report:
        print_wrk(report["wrk"])
    if measurements:
        print(f"{'server':<40} {'reviews/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}")
        for m in measurements:
            p50 = f"{m.p50_ms:.2f}" if m.p50_ms is not None else "-"
            print(f"{m.name:<40} {m.rps:>10.0f} {p50:>8} {m.p99_ms:>8.2f} {m.errors:>7}")
        print()
    if "throughput_ratio" in report:
        ratio = report["throughput_ratio"]
        verdict = "meets" if ratio >= TARGETS["throughput_ratio"] else "MISSES"
        print(f"throughput ratio webhook/no-op: {ratio:.2f} ({verdict} target ≥ 0.50)")
    for run in report.get("open_loop", []):
        verdict = "meets" if run["p99_ms"] <= TARGETS["p99_ms_at_half_load"] else "MISSES"
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
        print(
            f"{'policy source':<30} {'loaded':>6} {'invalid':>7} {'start MiB':>9} "
            f"{'half MiB':>8} {'end MiB':>8} {'growth KiB':>10} {'≤ 100 MiB':>9} "
            f"{'no growth':>9} {'errors':>6}"
        )
        for row in rows:
            print(
                f"{RSS_SOURCES[row['source']]:<30} {row['policies_loaded']:>6} "
                f"{row['invalid_configmaps']:>7} {row['start_kib'] / 1024:>9.1f} "
                f"{row['half_kib'] / 1024:>8.1f} {row['end_kib'] / 1024:>8.1f} "
                f"{row['growth_second_half_kib']:>10} "
                f"{'meets' if row['meets_rss_target'] else 'MISSES':>9} "
                f"{'meets' if row['no_growth'] else 'MISSES':>9} {row['errors']:>6}"
            )
