"""README "Try it on your cluster", what the newcomer then sees, on the real API server:
`gpu-webhook serve --self-signed --policies configmaps/ --register-url` (path (b)), then
scripts/try-show.sh, the same script `scripts/e2e-kind.sh --try` runs on kind (path (a)): a
server dry run of examples/pods.yaml prints the webhook's warnings and its denial of the
Deployment bad-share, and Pod ml/torch-infer gets its CUDA node affinity.

The session's own webhook is registered too, with the same shipped policies, so the run's own
review log must show that this registration was called for the objects the script applies.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cluster
from .test_e2e_try import KINDS, _configuration, _wait, serve_registered

ROOT = Path(__file__).resolve().parents[2]
NAME = "gpu-webhook-try-show-e2e"


def _kubectl() -> str:
    for candidate in (
        Path(os.environ.get("E2E_KAPI_BIN", "/nonexistent")) / "kubectl",
        Path(os.environ.get("KAPI_DIR", "/nonexistent")) / "bin" / "kubectl",
    ):
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("kubectl")
    if found is None:
        pytest.skip("scripts/try-show.sh needs kubectl: none in $KAPI_DIR/bin or on PATH")
    return found


def test_try_show_prints_the_denial_the_warnings_and_the_placement(
    cluster: Cluster, tmp_path: Path
) -> None:
    from kubernetes import client

    if cluster.mode != "url":
        pytest.skip(
            "the try-it command registers a webhook on this machine's loopback: only an API "
            "server on this machine (E2E_MODE=url, scripts/e2e-kapi.sh) can call it"
        )
    kubectl = _kubectl()
    registration: Any = client.AdmissionregistrationV1Api(cluster.api)
    server, log, _ = serve_registered(
        cluster, tmp_path, ROOT / "configmaps", NAME, "--log-format", "json", "--log-level",
        "info",
    )  # fmt: skip
    try:
        _wait("the registration", lambda: "Ctrl-C stops" in log.read_text(), server, log)

        def show() -> subprocess.CompletedProcess[str] | None:
            shown = subprocess.run(
                ["bash", str(ROOT / "scripts" / "try-show.sh"), str(cluster.kubeconfig)],
                env={**os.environ, "KUBECTL": kubectl, "PYTHON": sys.executable},
                capture_output=True, text=True, check=False, timeout=120,
            )  # fmt: skip
            # The API server picks the registration up through its watch: until this run's
            # webhook has answered the Deployment, ask again.
            called = '"Deployment"' in log.read_text() and "bad-share" in log.read_text()
            return shown if called else None

        shown = _wait("this run's webhook called", show, server, log)
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=60)
        left = [_configuration(registration, kind) is not None for kind in KINDS]
        # Whatever happened, no registration of this test outlives it.
        for kind, there in zip(KINDS, left, strict=True):
            if there:
                getattr(registration, f"delete_{kind}_webhook_configuration")(NAME)
    assert shown.returncode == 0, shown.stderr[-4000:]
    out = shown.stdout
    assert "== kubectl apply --dry-run=server -f examples/pods.yaml" in out
    assert "denied the request: Deployment ml/bad-share" in out
    assert "Warning: required GPU nodes with CUDA ≥ 12.1" in out
    assert "== placement: the node affinity the webhook gives Pod ml/torch-infer" in out
    assert '{"key":"cuda-major-version","operator":"Gt","values":["11"]}' in out
    assert left == [False, False], "Ctrl-C did not remove this run's registration"
