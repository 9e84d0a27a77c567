"""The open-loop C load generator (bench/harness/load/openloop.c) against the bench's no-op TLS
server.

Only loopback: the generator refuses any other address, and the server listens on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from bench.harness.load.openloop import openloop_path, run_openloop
from bench.harness.load.wrk import write_templates
from bench.harness.objects import server_templates
from bench.harness.servers import server
from tests.integration.helpers import ready_store, serve_in_thread
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


# bench/harness/load/wrk.py's Lua script, request by request: what the generator must send.
ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


def _suffix(i: int) -> str:
    out = ""
    for _ in range(5):
        out += ALPHABET[i % 27]
        i //= 27
    return out


def _expected(rows: list[tuple[str, str]], counter: int) -> tuple[str, re.Pattern[str]]:
    path, body = rows[counter % len(rows)]
    body = (
        body.replace("@UID@", f"{1:08x}-0000-4000-8000-{counter:012x}")
        .replace("@SEQ@", str(counter))
        .replace("@NAME@", _suffix(counter))
        .replace("@PODUID@", f"{1:08x}-1111-4000-8000-{counter:012x}")
    )
    return path, re.compile(TIME.join(re.escape(part) for part in body.split("@TIME@")))


def test_requests_match_the_lua_script_and_failures_are_counted(
    binary: Path, tls: CertPaths, policy_dir: Path, tmp_path: Path
) -> None:
    # Both mixes: every placeholder (@SEQ@ in distinct, @NAME@ in replicas) is filled.
    rows = server_templates("distinct") + server_templates("replicas")
    assert all(p in "".join(b for _, b in rows) for p in ("@SEQ@", "@NAME@", "@TIME@"))
    templates = write_templates(tmp_path / "templates", rows)
    seed, total = 10**9 + 7, 300
    counters = [seed + i + 1 for i in range(total)]
    # What the server does with some counters: answer 503, close the connection after the
    # answer, drop the connection without answering, or never answer within the timeout.
    refused, closed = set(counters[10:13]), set(counters[20:30])
    dropped, hung = {counters[40]}, {counters[50], counters[60]}
    seen: dict[int, tuple[str, str, bytes]] = {}

    async def review(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        uid = json.loads(body)["request"]["uid"]
        counter = int(uid.rsplit("-", 1)[1], 16)
        seen[counter] = (request.path, request.headers["Content-Type"], body)
        if counter in hung:
            await asyncio.sleep(3)
        if counter in dropped:
            assert request.transport is not None
            request.transport.abort()
            await asyncio.sleep(0.1)
        if counter in refused:
            return web.Response(status=503, text="busy")
        response = web.json_response({"response": {"uid": uid, "allowed": True}})
        if counter in closed:
            response.force_close()
        return response

    app = web.Application()
    app.router.add_post("/mutate", review)
    app.router.add_post("/validate", review)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert, tls.key)
    with serve_in_thread(app, context, tls.ca_cert, ready_store(policy_dir)) as running:
        argv = [str(binary), "127.0.0.1", str(running.port), str(tls.ca_cert)]
        argv += [str(templates / "bodies.tsv"), "200", str(total), "8", str(seed), "0.5"]
        done = _run(argv)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["sent"] == total
    assert result["completed"] == total - len(dropped) - len(hung)
    assert result["non_2xx"] == len(refused)
    assert result["errors"] == len(dropped)
    assert result["timeouts"] == len(hung)
    assert result["reconnects"] >= len(closed)
    assert sorted(seen) == counters
    for counter, (path, content_type, body) in seen.items():
        expected_path, expected_body = _expected(rows, counter)
        assert path == expected_path
        assert content_type == "application/json"
        assert expected_body.fullmatch(body.decode()), counter
