#!/usr/bin/env python3
"""Run `make test`'s suites one by one and say, at the end, what each of them did.

    scripts/test_suites.py run STATE NAME [--junit FILE] [--must-run] [--require PATH]... -- CMD...
    scripts/test_suites.py skipped STATE NAME REASON
    scripts/test_suites.py report STATE

`run` runs CMD (its output passes through unchanged), then records in STATE/suites.jsonl the
suite NAME with its counts, read from the JUnit XML file CMD wrote (pytest --junitxml), its
wall time and its exit code. Several `run`s with one NAME add up to one suite. With
`--must-run` (a suite whose real components are there) the suite fails unless its tests ran:
no JUnit file, no test at all, or a test of a `--require` path (such as
tests/e2e/test_e2e_scheduling.py) skipped is a failure, said so on its line. `run` exits with
CMD's code (1 when CMD succeeded but the suite failed its requirement).

`skipped` records a suite that cannot run here, with the reason (printed at once and again in
the report).

`report` prints one line per suite, e.g. `e2e (real control plane): 31 passed, 0 failed,
9 skipped in 62 s`, and as the very last line the total over every suite,
`total: 4321 passed, 0 failed, 60 skipped` (a suite that failed without a failing test, e.g.
one that could run and did not, counts as one failure); it exits 1 when a suite failed.

Standard library only: it runs before and after anything else is installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

RECORDS = "suites.jsonl"


@dataclass
class Record:
    name: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0
    ok: bool = True
    notes: list[str] = field(default_factory=list)


@dataclass
class Counts:
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    # The modules (JUnit classnames) with a test that ran, and with a test that was skipped.
    files_with_runs: set[str] = field(default_factory=set)
    files_skipped: set[str] = field(default_factory=set)


def junit_counts(path: Path) -> Counts:
    """Counts of one pytest JUnit XML file: errors count as failed, xfail as skipped."""
    counts = Counts()
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        # classname is the dotted module path plus the class, e.g. tests.e2e.test_e2e_x.TestY
        module = case.get("classname", "")
        children = {child.tag for child in case}
        if children & {"failure", "error"}:
            counts.failed += 1
            counts.files_with_runs.add(module)
        elif "skipped" in children:
            counts.skipped += 1
            counts.files_skipped.add(module)
        else:
            counts.passed += 1
            counts.files_with_runs.add(module)
    return counts


def module_of(path: str) -> str:
    """tests/e2e/test_e2e_scheduling.py -> tests.e2e.test_e2e_scheduling"""
    return path.removesuffix(".py").replace("/", ".")


def ran(counts: Counts, path: str) -> bool:
    """Whether the tests of `path` ran: some test of it passed or failed, none was skipped."""
    module = module_of(path)

    def of(names: set[str]) -> bool:
        return any(name == module or name.startswith(module + ".") for name in names)

    return of(counts.files_with_runs) and not of(counts.files_skipped)


def load(state: Path) -> list[Record]:
    records: dict[str, Record] = {}
    file = state / RECORDS
    lines = file.read_text(encoding="utf-8").splitlines() if file.exists() else []
    for line in lines:
        item = Record(**json.loads(line))
        into = records.setdefault(item.name, Record(item.name))
        into.passed += item.passed
        into.failed += item.failed
        into.skipped += item.skipped
        into.seconds += item.seconds
        into.ok = into.ok and item.ok
        into.notes += item.notes
    return list(records.values())


def save(state: Path, record: Record) -> None:
    state.mkdir(parents=True, exist_ok=True)
    with (state / RECORDS).open("a", encoding="utf-8") as out:
        out.write(json.dumps(asdict(record)) + "\n")


def run(argv: list[str]) -> int:
    if "--" not in argv:
        raise SystemExit("test_suites.py run: the command comes after --")
    options, command = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    state, name = Path(options[0]), options[1]
    junit: Path | None = None
    must_run = False
    required: list[str] = []
    rest = options[2:]
    while rest:
        option = rest.pop(0)
        if option == "--junit":
            junit = Path(rest.pop(0))
        elif option == "--must-run":
            must_run = True
        elif option == "--require":
            required.append(rest.pop(0))
        else:
            raise SystemExit(f"test_suites.py run: unknown option {option}")
    if junit is not None:
        junit.unlink(missing_ok=True)
    started = time.monotonic()
    code = subprocess.call(command, stdin=subprocess.DEVNULL)
    record = Record(name, seconds=time.monotonic() - started, ok=code == 0)
    if code != 0:
        record.notes.append(f"exit code {code}")
    counts = junit_counts(junit) if junit is not None and junit.exists() else None
    if counts is not None:
        record.passed, record.failed, record.skipped = counts.passed, counts.failed, counts.skipped
    if counts is None and not must_run:
        # e.g. unit-compiled without a C compiler: it printed why.
        record.notes.append("no test ran (its output above says why)")
    if must_run:
        if counts is None or counts.passed + counts.failed == 0:
            record.ok = False
            record.notes.append("did not run though it could (see the output above)")
        else:
            for path in required:
                if not ran(counts, path):
                    record.ok = False
                    record.notes.append(f"{path} did not run")
    if record.failed:
        record.ok = False
    save(state, record)
    print(f"{name}: {line(record)}", flush=True)
    return code if code != 0 else (0 if record.ok else 1)


def skipped(argv: list[str]) -> int:
    state, name, reason = Path(argv[0]), argv[1], argv[2]
    record = Record(name, notes=[f"SKIPPED: {reason}"])
    save(state, record)
    print(f"{name}: SKIPPED: {reason}", flush=True)
    return 0


def line(record: Record) -> str:
    text = (
        f"{record.passed} passed, {record.failed} failed, {record.skipped} skipped"
        f" in {record.seconds:.0f} s"
    )
    if record.notes:
        text += f" ({'; '.join(record.notes)})"
    if not record.ok:
        text += " — FAILED"
    return text


def report(argv: list[str]) -> int:
    records = load(Path(argv[0]))
    print("\nsuites:")
    for record in records:
        print(f"  {record.name}: {line(record)}")
    total = Record(
        "total",
        passed=sum(r.passed for r in records),
        failed=sum(r.failed for r in records),
        skipped=sum(r.skipped for r in records),
        seconds=sum(r.seconds for r in records),
    )
    bad = [r.name for r in records if not r.ok]
    if bad:
        print(f"failed suites: {', '.join(bad)}")
    # A suite that failed with no failing test (it could run and did not, or its command failed
    # outside the tests) counts as one failure: the total never reads as green when it is not.
    total.failed += sum(1 for r in records if not r.ok and not r.failed)
    # The last line of the run, in the form CI reads: the honest total over every suite.
    print(f"total: {total.passed} passed, {total.failed} failed, {total.skipped} skipped")
    return 1 if bad or not records else 0


def main() -> int:
    if len(sys.argv) < 3 or sys.argv[1] not in {"run", "skipped", "report"}:
        print(__doc__, file=sys.stderr)
        return 2
    command = {"run": run, "skipped": skipped, "report": report}[sys.argv[1]]
    return command(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
