"""Shutdown and logging of the real `gpu-webhook serve` process (SPEC §7, docs: server.md).

A second SIGTERM ends the drain early; a review in flight when the listener closes is still
answered; review lines are flushed by the periodic flush while the server idles.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.helpers import CODECS, codec_named
from tests.integration.serving import (
    EXAMPLE,
    assert_no_errors,
    get,
    json_lines,
    poll,
    serve_process,
)
from tests.integration.test_edges import (
    CONTINUE,
    headers_expecting_continue,
    read_until_closed,
    refuses_connections,
)

UID = "5b5e0c2a-4a5e-4d1c-9f3e-8e2d1f0a7c11"  # examples/admissionreview-pod.json
DRAIN_OVER = "drain over: no longer accepting connections; finishing reviews in flight"


def test_a_second_sigterm_ends_the_drain_early(tmp_path: Path, policy_dir: Path) -> None:
    drain = 120.0
    with serve_process(tmp_path, policy_dir, "--drain-seconds", str(drain)) as served:
        served.signal(signal.SIGTERM)
        # The first signal started the drain: not ready, still serving.
        poll(lambda: get(served.metrics_port, "/readyz")[0] == 503, "/readyz answers 503")
        assert served.post(EXAMPLE.read_bytes())[0] == 200
        assert served.process.poll() is None
        second = served.signal(signal.SIGTERM)
        _, stderr = served.finish(timeout=60)
        exited = time.monotonic()
    assert served.process.returncode == 0
    # Far sooner than the drain delay: the second signal ended it.
    assert exited - second < 30 < drain
    messages = [line["msg"] for line in json_lines(stderr)]
    assert messages[-3:] == [
        "shutting down: /readyz answers 503; still answering reviews (Connection: close) for "
        "the 120 s drain delay",
        "review",
        DRAIN_OVER,
    ]
    assert_no_errors(stderr)


@pytest.mark.parametrize("codec", CODECS)
def test_a_review_in_flight_when_the_listener_closes_is_answered(
    tmp_path: Path, policy_dir: Path, codec: str
) -> None:
    codec_named(codec)
    body = EXAMPLE.read_bytes()
    with serve_process(tmp_path, policy_dir, "--drain-seconds", "0", codec=codec) as served:
        with served.tls_socket(30) as sock:
            # The headers, then nothing: the review is in flight once aiohttp says 100 Continue.
            sock.sendall(headers_expecting_continue("/mutate", len(body)))
            assert sock.recv(100) == CONTINUE
            served.signal(signal.SIGTERM)
            served.log.wait_for(lambda line: DRAIN_OVER in line, "saying the drain is over")
            poll(lambda: refuses_connections(served.port), "the listener is closed")
            # Only now the body: the review is still read, evaluated and answered.
            sock.sendall(body)
            answer = read_until_closed(sock)
        _, stderr = served.finish()
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"\r\nConnection: close" in head
    response = json.loads(payload)["response"]
    assert response["uid"] == UID
    assert response["patchType"] == "JSONPatch"
    assert served.process.returncode == 0
    reviews = [line for line in json_lines(stderr) if line["msg"] == "review"]
    assert [(r["uid"], r["result"]) for r in reviews] == [(UID, "patched")]
    assert_no_errors(stderr)


def review_line_of(uid: str) -> Callable[[str], bool]:
    return lambda line: '"msg":"review"' in line and uid in line


def test_review_lines_are_flushed_while_the_server_idles(tmp_path: Path, policy_dir: Path) -> None:
    # Review lines are written in batches: one arriving within FLUSH_INTERVAL (0.5 s) of the last
    # write waits for the periodic flush. Three reviews pipelined on one connection are handled
    # within milliseconds, so the last one's line waits; it must appear with no more traffic
    # and no signal, only by the periodic flush.
    review = json.loads(EXAMPLE.read_bytes())
    uids = [f"5b5e0c2a-4a5e-4d1c-9f3e-00000000000{i}" for i in range(3)]
    requests = b""
    for uid in uids:
        review["request"]["uid"] = uid
        body = json.dumps(review).encode()
        requests += (
            b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
    with serve_process(tmp_path, policy_dir, "--drain-seconds", "0") as served:
        with served.tls_socket(30) as sock:
            sock.sendall(requests)
            answers = b""
            while answers.count(b"HTTP/1.1 200 OK") < len(uids):
                chunk = sock.recv(65536)
                assert chunk, answers
                answers += chunk
        for uid in uids:
            served.log.wait_for(review_line_of(uid), f"for the review {uid}", timeout=10)
        # Written by the flush every FLUSH_INTERVAL, not at exit: no signal was sent yet.
        assert served.process.poll() is None
        served.signal(signal.SIGTERM)
        _, stderr = served.finish()
    assert served.process.returncode == 0
    assert [line["uid"] for line in json_lines(stderr) if line["msg"] == "review"] == uids
