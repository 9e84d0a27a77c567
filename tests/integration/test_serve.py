"""`gpu-webhook serve` as a process: self-signed start, metrics listener, SIGTERM, exit codes."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.helpers import TEST_POLICIES, crl_configmap, free_port

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "admissionreview-pod.json"


def gpu_webhook(*args: str) -> list[str]:
    return [
        sys.executable,
        "-c",
        "import sys; from webhook.cli import main; sys.exit(main())",
        *args,
    ]


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
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
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


@contextlib.contextmanager
def serve_process(
    tmp_path: Path,
    policy_dir: Path,
    *extra: str,
    temp_cert_dir: bool = False,
    env: dict[str, str] | None = None,
) -> Iterator[tuple[subprocess.Popen[str], int, int, Path]]:
    """`gpu-webhook serve --self-signed` on free ports; yields once /readyz answers 200.

    The certificates go to tmp_path/certs, or with `temp_cert_dir` to the server's own temp dir.
    """
    port, metrics_port = free_port(), free_port()
    cert_dir = tmp_path / "certs"
    cert_args = [] if temp_cert_dir else ["--cert-dir", str(cert_dir)]
    process = subprocess.Popen(
        gpu_webhook(
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
        ),
        cwd=tmp_path,
        env={**environment(), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if get(metrics_port, "/readyz")[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        yield process, port, metrics_port, cert_dir
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


@pytest.fixture
def served(
    tmp_path: Path, policy_dir: Path
) -> Iterator[tuple[subprocess.Popen[str], int, int, Path]]:
    with serve_process(tmp_path, policy_dir) as running:
        yield running


def https_json(port: int, cert_dir: Path, method: str, path: str, body: bytes = b"") -> Any:
    context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
    conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=10)
    try:
        conn.request(method, path, body or None, {"Content-Type": "application/json"})
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def test_serve_answers_reviews_and_stops_cleanly_on_sigterm(
    served: tuple[subprocess.Popen[str], int, int, Path],
) -> None:
    process, port, metrics_port, cert_dir = served
    assert get(metrics_port, "/readyz") == (200, "ok\n")
    assert get(metrics_port, "/healthz") == (200, "ok\n")
    # The metrics listener serves only the probes and /metrics, never admission.
    assert get(metrics_port, "/policies")[0] == 404

    answer = https_json(port, cert_dir, "POST", "/mutate", EXAMPLE.read_bytes())
    assert answer["response"]["uid"] == "5b5e0c2a-4a5e-4d1c-9f3e-8e2d1f0a7c11"
    assert answer["response"]["patchType"] == "JSONPatch"
    assert "gpu_webhook_reviews_total" in get(metrics_port, "/metrics")[1]

    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert (
        stdout
        == f"CA certificate: {cert_dir / 'ca.crt'} (curl --cacert {cert_dir / 'ca.crt'} ...)\n"
    )
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    reviews = [line for line in lines if line["msg"] == "review"]
    assert len(reviews) == 1
    assert reviews[0]["uid"] == "5b5e0c2a-4a5e-4d1c-9f3e-8e2d1f0a7c11"
    assert reviews[0]["result"] == "patched"
    assert any(line["msg"].startswith("shutting down") for line in lines)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            [],
            "error: no serving certificate: pass --tls-cert FILE --tls-key FILE, --cert-dir DIR "
            "(from `gpu-webhook certs`), or --self-signed for a local run\n",
        ),
        (["--tls-cert", "x.crt"], "error: --tls-cert and --tls-key must be given together\n"),
        (
            ["--tls-cert", "missing.crt", "--tls-key", "missing.key"],
            "error: cannot load the serving certificate missing.crt with key missing.key; "
            "check that both files exist, are PEM, and belong together\n",
        ),
    ],
)
def test_serve_refuses_to_start_without_usable_tls(
    tmp_path: Path, policy_dir: Path, args: list[str], message: str
) -> None:
    result = run_to_exit(
        tmp_path, "serve", "--policies", str(policy_dir), "--port", str(free_port()), *args
    )
    assert result.returncode == 2
    assert result.stderr.endswith(message)


def test_serve_refuses_an_unreadable_policy_directory(tmp_path: Path) -> None:
    result = run_to_exit(
        tmp_path,
        "serve",
        "--self-signed",
        "--cert-dir",
        str(tmp_path / "c"),
        "--policies",
        str(tmp_path / "nope"),
        "--port",
        str(free_port()),
    )
    assert result.returncode == 2
    assert result.stderr.endswith(f"error: {tmp_path / 'nope'} is neither a file nor a directory\n")


def test_serve_reloads_changed_policy_files_without_restart(
    tmp_path: Path, policy_dir: Path
) -> None:
    policies = tmp_path / "policies"
    shutil.copytree(policy_dir, policies)
    with serve_process(tmp_path, policies, "--policies-poll", "0.05") as (_, port, _, cert_dir):

        def default_vcuda_core() -> Any:
            loaded = https_json(port, cert_dir, "GET", "/policies")["policies"]
            return {p["key"]: p for p in loaded}["tencent.com/vcuda-core"]["defaultValue"]

        assert default_vcuda_core() == "10"
        data = {**TEST_POLICIES["cf-crl-test-vcuda-core"], "defaultValue": "30"}
        name = "cf-crl-test-vcuda-core"
        (policies / f"{name}.yaml").write_text(yaml.safe_dump(crl_configmap(name, data)))
        deadline = time.monotonic() + 20
        while default_vcuda_core() != "30":
            assert time.monotonic() < deadline, "the changed policy file was not reloaded"
            time.sleep(0.05)
        # A broken edit keeps the last good policies in force.
        (policies / f"{name}.yaml").write_text("data: [unclosed\n")
        time.sleep(0.5)
        assert default_vcuda_core() == "30"
        # /policies says the files are broken now and what is in force; fixed, it says nothing.
        broken = https_json(port, cert_dir, "GET", "/policies")
        assert broken["sourceError"].startswith(f"cannot reload policies from {policies}: ")
        assert name in broken["sourceError"]
        assert broken["inForce"] == "the last policies loaded successfully"
        (policies / f"{name}.yaml").write_text(yaml.safe_dump(crl_configmap(name, data)))
        deadline = time.monotonic() + 20
        while "sourceError" in https_json(port, cert_dir, "GET", "/policies"):
            assert time.monotonic() < deadline, "the fixed policy file was not reloaded"
            time.sleep(0.05)
