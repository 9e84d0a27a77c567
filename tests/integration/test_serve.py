"""`gpu-webhook serve` as a process: self-signed start, metrics listener, SIGTERM, exit codes."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.helpers import (
    CODECS,
    TEST_POLICIES,
    codec_named,
    crl_configmap,
    free_port,
)
from tests.integration.serving import (
    EXAMPLE,
    Served,
    assert_no_errors,
    get,
    json_lines,
    poll,
    run_to_exit,
    serve_process,
)


@pytest.fixture(params=CODECS)
def served(tmp_path: Path, policy_dir: Path, request: pytest.FixtureRequest) -> Iterator[Served]:
    """A server per test, under each JSON codec (json: installed without the `fast` extra)."""
    codec_named(request.param)  # skips the orjson run when orjson is not installed
    with serve_process(
        tmp_path, policy_dir, "--drain-seconds", "0.5", codec=request.param
    ) as running:
        yield running


def test_serve_answers_reviews_and_stops_cleanly_on_sigterm(served: Served) -> None:
    metrics_port, cert_dir = served.metrics_port, served.cert_dir
    assert get(metrics_port, "/readyz") == (200, "ok\n")
    assert get(metrics_port, "/healthz") == (200, "ok\n")
    # The metrics listener serves only the probes and /metrics, never admission.
    assert get(metrics_port, "/policies")[0] == 404

    answer = served.https_json("POST", "/mutate", EXAMPLE.read_bytes())
    assert answer["response"]["uid"] == "5b5e0c2a-4a5e-4d1c-9f3e-8e2d1f0a7c11"
    assert answer["response"]["patchType"] == "JSONPatch"
    assert "gpu_webhook_reviews_total" in get(metrics_port, "/metrics")[1]

    served.signal(signal.SIGTERM)
    stdout, stderr = served.finish()
    assert served.process.returncode == 0, stderr
    assert (
        stdout
        == f"CA certificate: {cert_dir / 'ca.crt'} (curl --cacert {cert_dir / 'ca.crt'} ...)\n"
    )
    lines = json_lines(stderr)
    # Without the `fast` extra: the standard library's json and asyncio's own loop (also what
    # the GPU_WEBHOOK_DISABLE_* switches of the benchmarks select).
    fast = served.codec == "orjson"
    codec = "orjson" if fast and not os.environ.get("GPU_WEBHOOK_DISABLE_ORJSON") else "json"
    loop = "uvloop" if fast and not os.environ.get("GPU_WEBHOOK_DISABLE_UVLOOP") else "asyncio"
    assert (
        f"serving admission reviews on https://127.0.0.1:{served.port} (json={codec}, "
        f"loop={loop}, metrics port {metrics_port})"
    ) in [line["msg"] for line in lines]
    reviews = [line for line in lines if line["msg"] == "review"]
    assert len(reviews) == 1
    assert reviews[0]["uid"] == "5b5e0c2a-4a5e-4d1c-9f3e-8e2d1f0a7c11"
    assert reviews[0]["result"] == "patched"
    assert any(line["msg"].startswith("shutting down") for line in lines)
    assert_no_errors(stderr)


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


def _replace(path: Path, text: str) -> None:
    """Write `path` as one rename, as the kubelet updates a mounted ConfigMap (its AtomicWriter,
    pkg/volume/util/atomic_writer.go, swaps a symlink): `write_text` truncates first, and a poll
    in between read an empty file, a valid policy set without the edited policy."""
    staged = path.with_name(f".{path.name}.tmp")
    staged.write_text(text)
    os.replace(staged, path)


def test_serve_reloads_changed_policy_files_without_restart(
    tmp_path: Path, policy_dir: Path
) -> None:
    policies = tmp_path / "policies"
    shutil.copytree(policy_dir, policies)
    name = "cf-crl-test-vcuda-core"
    with serve_process(tmp_path, policies, "--policies-poll", "0.05") as served:

        def listed() -> Any:
            return served.https_json("GET", "/policies")

        def default_vcuda_core() -> Any:
            loaded = {p["key"]: p for p in listed()["policies"]}
            return loaded["tencent.com/vcuda-core"]["defaultValue"]

        assert default_vcuda_core() == "10"
        data = {**TEST_POLICIES[name], "defaultValue": "30"}
        _replace(policies / f"{name}.yaml", yaml.safe_dump(crl_configmap(name, data)))
        poll(lambda: default_vcuda_core() == "30", "the changed policy file is reloaded")
        # A broken edit: once the reload has run (/policies names the error), the last good
        # policies are still in force.
        _replace(policies / f"{name}.yaml", "data: [unclosed\n")
        poll(lambda: "sourceError" in listed(), "the broken policy file is read")
        broken = listed()
        assert broken["sourceError"].startswith(f"cannot reload policies from {policies}: ")
        assert name in broken["sourceError"]
        assert broken["inForce"] == "the last policies loaded successfully"
        assert default_vcuda_core() == "30"
        # Fixed: the error is gone, and the fixed file's values are in force.
        data = {**TEST_POLICIES[name], "defaultValue": "40"}
        _replace(policies / f"{name}.yaml", yaml.safe_dump(crl_configmap(name, data)))
        poll(
            lambda: "sourceError" not in listed() and default_vcuda_core() == "40",
            "the fixed policy file is reloaded",
        )
        served.signal(signal.SIGTERM)
        _, stderr = served.finish()
    assert served.process.returncode == 0
    assert "Traceback" not in stderr
