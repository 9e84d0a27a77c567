"""`scripts/e2e-kind.sh --try`: one command builds the image, loads it into a kind cluster,
installs the chart with the shipped policies and prints the first denial and the placement
of examples/pods.yaml (README, "Try it on your cluster").

It needs a container engine and kind. This project's CI machine has neither (the Docker CLI
without a daemon, no kind): there the test is skipped, saying so. It takes minutes where it
runs (image build, cluster creation), and deletes its cluster afterwards.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _skip_reason() -> str | None:
    if shutil.which("kind") is None:
        return "kind is not on PATH: scripts/e2e-kind.sh --try needs kind and a container engine"
    if shutil.which("docker") is None:
        return "docker is not on PATH: scripts/e2e-kind.sh --try builds the image with it"
    info = subprocess.run(["docker", "info"], capture_output=True, text=True, check=False)
    if info.returncode != 0:
        return "no Docker daemon answers `docker info`: kind cannot create a cluster here"
    if shutil.which("kubectl") is None:
        return "kubectl is not on PATH: scripts/e2e-kind.sh --try prints with it"
    return None


@pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")
def test_try_on_kind_prints_the_first_denial_and_placement() -> None:
    cluster = f"gaw-try-{uuid.uuid4().hex[:6]}"
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "e2e-kind.sh"), "--try"],
        env={**os.environ, "KIND_CLUSTER": cluster, "KEEP_CLUSTER": "0", "PYTHON": sys.executable},
        capture_output=True, text=True, check=False, timeout=1800,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    out = result.stdout
    assert "denied the request: Deployment ml/bad-share" in out
    assert "Warning: required GPU nodes with CUDA ≥ 12.1" in out
    assert '{"key":"cuda-major-version","operator":"Gt","values":["11"]}' in out
