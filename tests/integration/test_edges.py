"""Hostile clients and shutdown, through the real `gpu-webhook serve` process over TLS (SPEC §7).

Loopback only, bounded: every socket has a timeout and every wait a deadline.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import signal
import socket
import ssl
import subprocess
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import CODECS, codec_named
from tests.integration.serving import (
    EXAMPLE,
    Served,
    assert_no_errors,
    environment,
    get,
    gpu_webhook,
    poll,
    run_to_exit,
    serve_process,
)
from webhook.admission.body import MAX_BODY_BYTES
from webhook.admission.limits import BODY_TIMEOUT, HEADER_TIMEOUT, TLS_HANDSHAKE_TIMEOUT


@pytest.fixture(scope="module", params=CODECS)
def served(
    tmp_path_factory: pytest.TempPathFactory, policy_dir: Path, request: pytest.FixtureRequest
) -> Iterator[Served]:
    """One server per codec for the tests of what a body holds."""
    codec_named(request.param)
    with serve_process(
        tmp_path_factory.mktemp("edges"), policy_dir, codec=request.param
    ) as running:
        yield running


@pytest.fixture(scope="module")
def slow_clients_server(
    tmp_path_factory: pytest.TempPathFactory, policy_dir: Path
) -> Iterator[Served]:
    """One server for the deadline tests, which never get as far as JSON."""
    with serve_process(tmp_path_factory.mktemp("deadlines"), policy_dir) as running:
        yield running


def read_until_closed(sock: ssl.SSLSocket) -> bytes:
    """Everything the server sends until it closes the connection (the socket has a timeout)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def read_response(sock: ssl.SSLSocket, ending: bytes) -> bytes:
    """Read from a kept-alive connection until the data ends with `ending`."""
    data = b""
    while not data.endswith(ending):
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    return data


def refuses_connections(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def headers_expecting_continue(path: str, length: int) -> bytes:
    """Request headers with `Expect: 100-continue`: aiohttp answers `100 Continue` once the
    handler runs, which tells the test that the review is in flight."""
    return (
        f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Expect: 100-continue\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def test_partial_headers_are_closed_within_the_header_timeout(
    slow_clients_server: Served,
) -> None:
    with slow_clients_server.tls_socket(HEADER_TIMEOUT + 5) as sock:
        started = time.monotonic()
        sock.sendall(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: app")
        assert read_until_closed(sock) == b""
        assert time.monotonic() - started < HEADER_TIMEOUT + 2


def test_a_stalled_tls_handshake_is_closed_within_its_timeout(slow_clients_server: Served) -> None:
    port = slow_clients_server.port
    with socket.create_connection(("127.0.0.1", port), timeout=TLS_HANDSHAKE_TIMEOUT + 5) as raw:
        started = time.monotonic()
        raw.sendall(b"\x16\x03\x01")  # the first bytes of a ClientHello, then nothing
        while raw.recv(65536):
            pass
        assert time.monotonic() - started < TLS_HANDSHAKE_TIMEOUT + 2


def test_a_trickled_body_is_answered_408_and_closed(slow_clients_server: Served) -> None:
    with slow_clients_server.tls_socket(HEADER_TIMEOUT + 5) as sock:
        started = time.monotonic()
        sock.sendall(
            b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: 7000000\r\n\r\n" + b" " * 60_000
        )
        answer = read_until_closed(sock)
        elapsed = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"Connection: close" in answer
    assert answer.endswith(f"did not arrive within {BODY_TIMEOUT:g} seconds\n".encode())
    # BODY_TIMEOUT, plus at most the short lingering read aiohttp does after an early answer.
    assert BODY_TIMEOUT - 0.5 < elapsed < BODY_TIMEOUT + 3


@pytest.mark.parametrize(
    ("encoding", "body", "reason"),
    [
        (
            "deflate",
            gzip.compress(EXAMPLE.read_bytes()),
            b"request body is not valid deflate data: Error -3 while decompressing data",
        ),
        ("gzip", b"not gzip at all", b"request body is not valid gzip data: "),
        ("gzip", gzip.compress(EXAMPLE.read_bytes())[:-30], b"request body is truncated gzip data"),
        ("br", b"{}", b"Content-Encoding 'br' is not supported; send gzip, deflate or none"),
        ("x-custom", b"{}", b"Content-Encoding 'x-custom' is not supported; send gzip, deflate"),
    ],
)
def test_a_body_that_cannot_be_decoded_is_a_400_with_the_reason(
    served: Served, encoding: str, body: bytes, reason: bytes
) -> None:
    status, _, text = served.post(body, {"Content-Encoding": encoding})
    assert status == 400
    assert text.startswith(reason)


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        # Raw deflate labelled deflate: non-RFC but common; accepted as aiohttp does.
        ("deflate", lambda data: zlib.compress(data)[2:-4]),
        ("identity", lambda data: data),
    ],
)
def test_compressed_bodies_are_reviewed(
    served: Served, encoding: str, compress: Callable[[bytes], bytes]
) -> None:
    status, _, plain = served.post(EXAMPLE.read_bytes())
    assert status == 200
    status, _, text = served.post(compress(EXAMPLE.read_bytes()), {"Content-Encoding": encoding})
    assert status == 200
    # The same answer as for the body sent as it is (a patch, so the review was evaluated).
    assert json.loads(text) == json.loads(plain)
    assert json.loads(text)["response"]["patchType"] == "JSONPatch"


def test_a_decompression_bomb_is_413_not_memory(served: Served) -> None:
    bomb = gzip.compress(b" " * (MAX_BODY_BYTES + 1024))  # ~8 KB on the wire
    status, _, text = served.post(bomb, {"Content-Encoding": "gzip"})
    assert status == 413
    assert text.endswith(b"(after decompression)\n")


def test_a_client_leaving_mid_body_is_no_error_in_the_logs(
    tmp_path: Path, policy_dir: Path
) -> None:
    with serve_process(
        tmp_path, policy_dir, "--drain-seconds", "0", "--log-level", "debug"
    ) as served:
        with served.tls_socket(10) as sock:
            sock.sendall(headers_expecting_continue("/validate", 5000) + b'{"kind": ')
            assert sock.recv(100) == CONTINUE  # the review is in flight
        # The server saw the client leave (a debug line, nothing louder) and goes on serving.
        served.log.wait_for(
            lambda line: "client disconnected before sending the whole body of /validate" in line,
            "saying the client left",
        )
        status, _, _ = served.post(EXAMPLE.read_bytes())
        assert status == 200
        served.signal(signal.SIGTERM)
        _, stderr = served.finish()
    assert served.process.returncode == 0
    assert_no_errors(stderr)


def test_sigterm_drains_then_exits_zero(tmp_path: Path, policy_dir: Path) -> None:
    drain = 3.0
    with serve_process(tmp_path, policy_dir, "--drain-seconds", str(drain)) as served:
        assert get(served.metrics_port, "/readyz")[0] == 200
        signalled = served.signal(signal.SIGTERM)
        # During the drain delay: not ready, but reviews are still answered, with
        # Connection: close so the API server's keep-alive connections move elsewhere.
        poll(lambda: get(served.metrics_port, "/readyz")[0] == 503, "/readyz answers 503")
        assert get(served.metrics_port, "/readyz") == (
            503,
            "shutting down: draining connections, send reviews to other replicas\n",
        )
        status, headers, body = served.post(EXAMPLE.read_bytes())
        assert status == 200
        assert headers["Connection"] == "close"
        assert json.loads(body)["response"]["allowed"] is True
        assert time.monotonic() - signalled < drain
        assert served.process.poll() is None
        _, stderr = served.finish()
        exited = time.monotonic()
    assert served.process.returncode == 0
    assert drain - 0.5 < exited - signalled < drain + 10
    # After the drain the listener is closed.
    assert refuses_connections(served.port)
    assert_no_errors(stderr)


def test_self_signed_without_cert_dir_leaves_no_ca_key_when_start_up_fails(
    tmp_path: Path,
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = subprocess.run(
        gpu_webhook("serve", "--self-signed", "--policies", str(tmp_path / "missing")),
        cwd=tmp_path,
        env={**environment(), "TMPDIR": str(scratch)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "missing is neither a file nor a directory" in done.stderr
    assert list(scratch.iterdir()) == []


def test_self_signed_without_cert_dir_removes_its_ca_at_exit(
    tmp_path: Path, policy_dir: Path
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    with serve_process(
        tmp_path,
        policy_dir,
        "--drain-seconds",
        "0",
        temp_cert_dir=True,
        env={"TMPDIR": str(scratch)},
    ) as served:
        assert served.process.stdout is not None
        ca = Path(served.process.stdout.readline().split()[2])
        assert ca.parent.parent == scratch
        assert (ca.parent / "ca.key").exists()
        served.signal(signal.SIGTERM)
        served.finish()
    assert served.process.returncode == 0
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--port", "99999", "argument --port: not a TCP port: 99999 is out of range: use 1-65535"),
        ("--port", "0", "argument --port: not a TCP port: 0 is out of range: use 1-65535"),
        ("--port", "https", "argument --port: not a TCP port: 'https' is not a number"),
        ("--metrics-port", "70000", "argument --metrics-port: not a TCP port: 70000 is out of"),
        (
            "--drain-seconds",
            "-1",
            "argument --drain-seconds: not a drain delay in seconds: -1 is out of range: use 0-300",
        ),
        (
            "--decision-cache-mib",
            "5000",
            "argument --decision-cache-mib: not a cache size in MiB (0: off): 5000 is out of "
            "range: use 0-4096",
        ),
    ],
)
def test_out_of_range_ports_are_refused_with_exit_2(
    tmp_path: Path, flag: str, value: str, message: str
) -> None:
    done = run_to_exit(tmp_path, "serve", "--self-signed", flag, value)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_connections_past_the_cap_are_closed_at_once(tmp_path: Path, policy_dir: Path) -> None:
    with serve_process(
        tmp_path, policy_dir, "--max-connections", "2", "--drain-seconds", "0"
    ) as served:
        held = [served.tls_socket(HEADER_TIMEOUT + 5) for _ in range(2)]
        try:
            for sock in held:
                # An answered request: the server has counted this connection, which stays
                # open (keep-alive) for HEADER_TIMEOUT seconds.
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
                assert read_response(sock, b"\r\n\r\nok\n").startswith(b"HTTP/1.1 200 ")
            started = time.monotonic()
            with (
                contextlib.suppress(ssl.SSLError, ConnectionError),
                served.tls_socket(HEADER_TIMEOUT + 5) as extra,
            ):
                extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
                assert read_until_closed(extra) == b""
            assert time.monotonic() - started < 2
        finally:
            for sock in held:
                sock.close()

        # Once the held connections are gone, the server accepts again.
        def accepts() -> bool:
            with contextlib.suppress(OSError, ssl.SSLError):
                return served.post(EXAMPLE.read_bytes())[0] == 200
            return False

        poll(accepts, "the server accepts connections again")
        served.signal(signal.SIGTERM)
        _, stderr = served.finish()
    assert "refusing connections: 2 are open (--max-connections); 1 refused so far" in stderr
