"""`gpu-webhook test` output: the text table with its details, and JUnit XML."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO
from xml.etree import ElementTree as ET

from webhook.cli.quoting import printable
from webhook.cli.testrun import Outcome


def _table(rows: Sequence[Sequence[str]], out: TextIO) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        out.write("  ".join(cells).rstrip() + "\n")


def _answered(outcome: Outcome) -> list[str]:
    """What the webhook answered for the resource: "violation: ...", "warning: ...", ..."""
    actual = outcome.actual
    if actual is None:
        return []
    lines = [f"answered: {actual.verdict}" + (f" ({actual.reason})" if actual.reason else "")]
    for title, found in (
        ("violation", actual.violations),
        ("warning", actual.warnings),
        ("change", actual.changes),
    ):
        lines += [f"{title}: {line}" for line in found]
    return lines


def print_text(
    numbered: Sequence[tuple[int, Outcome]], total: Sequence[Outcome], detailed: bool, out: TextIO
) -> None:
    if numbered:
        rows = [("ID", "TEST", "RESOURCE", "RESULT", "REASON")]
        rows += [
            (str(n), o.test, o.resource, "PASS" if o.passed else "FAIL", o.reason())
            for n, o in numbered
        ]
        _table(rows, out)
    for number, outcome in numbered:
        diffs = [c.diff for c in outcome.checks if c.diff]
        if not (detailed or diffs):
            continue
        out.write(f"\n--- {number}: {outcome.resource} ({outcome.test_file})\n")
        if detailed:
            for check in outcome.checks:
                out.write(f"  {'PASS' if check.passed else 'FAIL'} {check.detail}\n")
            out.writelines(f"  {line}\n" for line in _answered(outcome))
        for diff in diffs:
            out.write(diff if diff.endswith("\n") else diff + "\n")
    failed = sum(not o.passed for o in total)
    out.write(f"\nTest summary: {len(total) - failed} passed, {failed} failed\n")


def junit(total: Sequence[Outcome], out: TextIO) -> None:
    """JUnit XML (the schema Jenkins, GitLab and GitHub test reporters read): one testsuite per
    test, one testcase per expected result, a <failure> with every failed check. Manifest text
    is escaped (`printable`) before ElementTree sees it: a control character is not XML, and a
    carriage return in an attribute would come back raw from the reader."""
    root = ET.Element("testsuites", name="gpu-webhook test")
    root.set("tests", str(len(total)))
    root.set("failures", str(sum(not o.passed for o in total)))
    suites: dict[tuple[str, str], ET.Element] = {}
    for outcome in total:
        key = (outcome.test_file, outcome.test)
        suite = suites.get(key)
        if suite is None:
            suite = suites[key] = ET.SubElement(
                root, "testsuite", name=printable(outcome.test), file=printable(outcome.test_file)
            )
        case = ET.SubElement(
            suite,
            "testcase",
            name=printable(outcome.resource),
            classname=printable(outcome.test),
        )
        if not outcome.passed:
            failure = ET.SubElement(
                case, "failure", message=printable(outcome.reason()), type="expectation"
            )
            text = [c.detail for c in outcome.checks if not c.passed]
            text += _answered(outcome)
            text += [c.diff for c in outcome.checks if c.diff]
            failure.text = printable("\n".join(text))
    for suite in suites.values():
        cases = suite.findall("testcase")
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(sum(c.find("failure") is not None for c in cases)))
    ET.indent(root)
    out.write('<?xml version="1.0" encoding="UTF-8"?>\n')
    out.write(ET.tostring(root, encoding="unicode") + "\n")
