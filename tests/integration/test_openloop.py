"""The open-loop C load generator (bench/openloop.c) against the bench's no-op TLS server.

Only loopback: the generator refuses any other address, and the server listens on 127.0.0.1.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.openloop import openloop_path, run_openloop
from bench.servers import server
from bench.workload import server_templates
from bench.wrkload import write_templates
from webhook.tls.certs import CertPaths, write_certificates


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path, reason = openloop_path(tmp_path_factory.mktemp("openloop-bin"))
    if path is None:
        pytest.skip(reason)
    return path


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_templates(tmp_path_factory.mktemp("templates"), server_templates("distinct"))


@pytest.fixture(scope="module")
def noop(tls: CertPaths, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    with server("noop", tls, tmp_path_factory.mktemp("policies")) as running:
        yield running


def test_open_loop_run_keeps_its_rate(
    binary: Path, templates: Path, noop: tuple[int, int], tls: CertPaths
) -> None:
    port, pid = noop
    result = run_openloop(port, tls.ca_cert, templates, 400, 800, 16, pid, binary=binary)
    assert result["completed"] == 800
    assert result["sent"] == 800
    assert result["non_2xx"] == 0
    assert result["errors"] == 0
    assert result["timeouts"] == 0
    assert 0 < result["p50_ms"] <= result["p99_ms"] <= result["max_ms"]
    assert abs(result["achieved_rate"] - 400) <= 40
    assert result["server_cpu"] > 0


def test_wrong_ca_fails_clearly(
    binary: Path, templates: Path, noop: tuple[int, int], tmp_path: Path
) -> None:
    port, _ = noop
    other = write_certificates(tmp_path / "other", ["localhost"], ["127.0.0.1"], days=2)
    argv = [str(binary), "127.0.0.1", str(port), str(other.ca_cert), str(templates / "bodies.tsv")]
    done = _run([*argv, "100", "10", "2"])
    assert done.returncode == 1
    assert "certificate verif" in done.stderr
    assert done.stdout == ""


def test_refuses_host_names_and_bad_arguments(
    binary: Path, templates: Path, tls: CertPaths
) -> None:
    # A host name is refused before any socket exists (only numeric loopback addresses pass).
    bodies = str(templates / "bodies.tsv")
    argv = [str(binary), "localhost", "1", str(tls.ca_cert), bodies, "10", "10"]
    done = _run(argv)
    assert done.returncode == 2
    assert "loopback" in done.stderr
    done = _run(argv[:3])
    assert done.returncode == 2
    assert "usage" in done.stderr
