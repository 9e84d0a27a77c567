"""scripts/test_suites.py, which `make test` reports its suites with: the counts come from
pytest's JUnit file, a suite that could run and did not fails, and the last line of the run is
the honest total (the line CI reads)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "test_suites.py"


def suites(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *argv],
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
        cwd=ROOT,
    )


def sample_module(tmp_path: Path, body: str, name: str = "test_sample.py") -> Path:
    folder = tmp_path / "tests" / "demo"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(body, encoding="utf-8")
    return folder / name


def pytest_run(state: Path, name: str, path: Path, *options: str) -> list[str]:
    junit = state / f"{path.stem}.xml"
    return [
        "run",
        str(state),
        name,
        "--junit",
        str(junit),
        *options,
        "--",
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--rootdir={path.parents[2]}",
        str(path),
        f"--junitxml={junit}",
    ]


def test_counts_per_suite_and_the_total_last(tmp_path: Path) -> None:
    state = tmp_path / "state"
    passing = sample_module(
        tmp_path,
        "import pytest\n"
        "def test_a(): pass\n"
        "def test_b(): pass\n"
        "@pytest.mark.skip(reason='no cluster')\n"
        "def test_c(): pass\n",
    )
    failing = sample_module(tmp_path, "def test_d(): assert False\n", "test_other.py")
    assert suites(*pytest_run(state, "one", passing)).returncode == 0
    done = suites(*pytest_run(state, "two", failing))
    assert done.returncode == 1
    assert done.stdout.splitlines()[-1].startswith("two: 0 passed, 1 failed, 0 skipped in ")
    assert suites("skipped", str(state), "three", "no prebuilt binaries").returncode == 0
    report = suites("report", str(state))
    assert report.returncode == 1
    lines = report.stdout.splitlines()
    assert lines[-1] == "total: 2 passed, 1 failed, 1 skipped"
    assert lines[-2] == "failed suites: two"
    assert (
        lines[-3] == "  three: 0 passed, 0 failed, 0 skipped in 0 s (SKIPPED: no prebuilt binaries)"
    )


def test_a_suite_that_could_run_and_did_not_fails_and_counts(tmp_path: Path) -> None:
    state = tmp_path / "state"
    skipping = sample_module(
        tmp_path,
        "import pytest\n"
        "def test_other(): pass\n"
        "@pytest.mark.skip(reason='no API server')\n"
        "def test_binding(): pass\n",
    )
    required = "tests/demo/test_sample.py"
    done = suites(*pytest_run(state, "e2e", skipping, "--must-run", "--require", required))
    assert done.returncode == 1
    assert done.stdout.splitlines()[-1].endswith("(tests/demo/test_sample.py did not run) — FAILED")
    # The API server never came up: no JUnit file at all.
    missing = [
        "run", str(state), "native", "--junit", str(state / "none.xml"), "--must-run", "--",
        sys.executable, "-c", "raise SystemExit(1)",
    ]  # fmt: skip
    assert suites(*missing).returncode == 1
    report = suites("report", str(state))
    assert report.returncode == 1
    # Each failed suite without a failing test counts as one failure.
    assert report.stdout.splitlines()[-1] == "total: 1 passed, 2 failed, 1 skipped"
