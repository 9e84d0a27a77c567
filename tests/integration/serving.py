"""`gpu-webhook serve` as a child process for the tests: start, probe, read its log as it comes.

Every wait has a deadline; the deadline only bounds a failing test.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tests.integration.helpers import free_port

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "admissionreview-pod.json"

# Without the `fast` extra (`pip install .`) neither orjson nor uvloop can be imported; a None
# entry in sys.modules makes `import orjson` raise ImportError, exactly as when it is absent.
_WITHOUT_FAST = "sys.modules['orjson'] = None; sys.modules['uvloop'] = None; "


def gpu_webhook(*args: str, codec: str = "orjson") -> list[str]:
    """The command line of `gpu-webhook ARGS`; codec "json" runs it as if orjson were absent."""
    prelude = _WITHOUT_FAST if codec == "json" else ""
    return [
        sys.executable,
        "-c",
        f"import sys; {prelude}from webhook.cli import main; sys.exit(main())",
        *args,
    ]


def environment() -> dict[str, str]:
    env = dict(os.environ)
    # A compiled-core run (tests/conftest.py) keeps its tree first: it imports the package.
    compiled = os.environ.get("GPU_WEBHOOK_COMPILED", "")
    first = str(Path(compiled).resolve()) if compiled else ""
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [first, str(REPO), env.get("PYTHONPATH")]))
    return env


def run_to_exit(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`gpu-webhook ARGS` run until it exits (startup failures), output captured."""
    return subprocess.run(
        gpu_webhook(*args),
        cwd=cwd,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def get(port: int, path: str) -> tuple[int, str]:
    """GET over plain HTTP (the metrics listener): status and body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def poll(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """Call `check` until it holds; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


class Lines:
    """The lines a process writes to a pipe, collected by a thread as they arrive."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self.ended = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self.ended = True
            self._changed.notify_all()

    def wait_for(self, match: Callable[[str], bool], what: str, timeout: float = 20.0) -> str:
        """The first line `match` accepts, waiting for it up to `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = next((line for line in self.lines if match(line)), None)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                assert left > 0 and not self.ended, (
                    f"no log line {what} within {timeout:g} s; got:\n" + "\n".join(self.lines)
                )
                self._changed.wait(left)

    def join(self, timeout: float = 30.0) -> str:
        """All the text, once the pipe is closed (the process exited)."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the process's pipe is still open"
        return "".join(f"{line}\n" for line in self.lines)


def json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON log records of a stderr text (--log-format json)."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def assert_no_errors(stderr: str) -> None:
    """No traceback and no record at error level or above."""
    assert "Traceback" not in stderr
    levels = {record["level"] for record in json_lines(stderr)}
    assert levels <= {"debug", "info", "warning"}, stderr


@dataclass
class Served:
    """A running `gpu-webhook serve`; its stderr is read as it comes (`log`)."""

    process: subprocess.Popen[str]
    port: int
    metrics_port: int
    cert_dir: Path
    log: Lines
    codec: str

    def signal(self, sig: signal.Signals = signal.SIGTERM) -> float:
        """Send `sig`; returns when it was sent (time.monotonic())."""
        self.process.send_signal(sig)
        return time.monotonic()

    def finish(self, timeout: float = 30.0) -> tuple[str, str]:
        """Wait for the exit; stdout and stderr."""
        self.process.wait(timeout)
        assert self.process.stdout is not None
        stdout = self.process.stdout.read()
        return stdout, self.log.join()

    def https_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cert_dir / "ca.crt"))

    def tls_socket(self, timeout: float) -> ssl.SSLSocket:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        return self.https_context().wrap_socket(raw, server_hostname="localhost")

    def post(
        self, body: bytes, headers: dict[str, str] | None = None, path: str = "/mutate"
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPSConnection(
            "localhost", self.port, context=self.https_context(), timeout=10
        )
        try:
            sent = {"Content-Type": "application/json", **(headers or {})}
            conn.request("POST", path, body, sent)
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            conn.close()

    def https_json(self, method: str, path: str, body: bytes = b"") -> Any:
        conn = http.client.HTTPSConnection(
            "localhost", self.port, context=self.https_context(), timeout=10
        )
        try:
            conn.request(method, path, body or None, {"Content-Type": "application/json"})
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()

    def ready(self) -> bool:
        with contextlib.suppress(OSError):
            return get(self.metrics_port, "/readyz")[0] == 200
        return False


@contextlib.contextmanager
def serve_process(
    tmp_path: Path,
    policy_dir: Path,
    *extra: str,
    temp_cert_dir: bool = False,
    env: dict[str, str] | None = None,
    codec: str = "orjson",
) -> Iterator[Served]:
    """`gpu-webhook serve --self-signed` on free ports; yields once /readyz answers 200.

    The certificates go to tmp_path/certs, or with `temp_cert_dir` to the server's own temp
    dir. codec "json" runs the server as installed without the `fast` extra.
    """
    port, metrics_port = free_port(), free_port()
    cert_dir = tmp_path / "certs"
    cert_args = [] if temp_cert_dir else ["--cert-dir", str(cert_dir)]
    command = gpu_webhook(
        "serve",
        "--self-signed",
        *cert_args,
        "--policies",
        str(policy_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--metrics-port",
        str(metrics_port),
        "--log-format",
        "json",
        *extra,
        codec=codec,
    )
    process = subprocess.Popen(
        command,
        cwd=tmp_path,
        env={**environment(), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    served = Served(process, port, metrics_port, cert_dir, Lines(process.stderr), codec)
    try:
        poll(lambda: served.ready() or process.poll() is not None, "/readyz answers 200", 30)
        assert process.poll() is None, f"serve exited at start:\n{served.log.join()}"
        yield served
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
