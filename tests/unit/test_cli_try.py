"""`gpu-webhook serve --register-url`: the try-it path's refusals, before anything is served or
registered (the registration itself runs against the real API server: tests/e2e/test_e2e_try.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from webhook.sources.registration import check_url, shipped_configurations

ROOT = Path(__file__).resolve().parents[2]


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "import sys; from webhook.cli import main; sys.exit(main())"]
    return subprocess.run(
        [*command, "serve", "--policies", str(ROOT / "configmaps"), *args],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip


def test_register_url_needs_the_self_signed_ca() -> None:
    result = serve("--register-url", "https://127.0.0.1:8443")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: --register-url needs --self-signed: the registration carries the CA of the "
        "certificate this run generates (with your own certificate, use the Helm chart)"
    )


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://127.0.0.1:8443", "--register-url must be an https:// URL"),
        ("https://127.0.0.1:8443/mutate", "--register-url must be only https://HOST:PORT"),
        ("https://:8443", "--register-url has no host"),
    ],
)
def test_a_url_the_api_server_cannot_call_is_refused(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_url(url)
    result = serve("--self-signed", "--register-url", url)
    assert result.returncode == 2
    assert message in result.stderr


def test_a_name_the_api_server_refuses_is_refused_first() -> None:
    result = serve("--self-signed", "--register-url", "https://h:1", "--register-name", "Try_1")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --register-name 'Try_1' is not a Kubernetes object name: use lower-case letters, "
        "digits, '-' and '.', starting and ending with a letter or digit"
    )


def test_a_missing_kubeconfig_is_named_and_nothing_is_served(tmp_path: Path) -> None:
    missing = tmp_path / "nope.kubeconfig"
    result = serve(
        "--self-signed", "--kubeconfig", str(missing), "--register-url", "https://127.0.0.1:8443"
    )
    assert result.returncode == 2
    # After the policies' log line: the error, and nothing registered or served.
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: cannot read the kubeconfig (the kubeconfig file {missing} does not exist): "
        "pass --kubeconfig FILE of the cluster to register with"
    )
    assert "registered" not in result.stdout


def test_match_conditions_only_from_kubernetes_1_28() -> None:
    def conditions(version: str) -> bool:
        return any(
            "matchConditions" in h for c in shipped_configurations(version) for h in c["webhooks"]
        )

    assert [conditions(v) for v in ("v1.27.9", "v1.28.0", "v1.36.2-gke.100")] == [
        False,
        True,
        True,
    ]
