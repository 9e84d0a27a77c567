"""scripts/register-webhook-url.py: the chart's webhook configurations, pointed at a URL."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from .conftest import Render

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "register-webhook-url.py"
CA_PEM = b"-----BEGIN CERTIFICATE-----\nMIIBdummy\n-----END CERTIFICATE-----\n"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False
    )


def printed(tmp_path: Path, kube_version: str) -> list[dict[str, Any]]:
    ca = tmp_path / "ca.crt"
    ca.write_bytes(CA_PEM)
    result = run(
        "--print", "--kube-version", kube_version, "--url", "https://10.1.2.3:8443/",
        "--ca-file", str(ca),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_configurations_call_the_url_with_the_given_ca(tmp_path: Path) -> None:
    configurations = printed(tmp_path, "v1.30.0")
    assert [c["kind"] for c in configurations] == [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ]
    for configuration in configurations:
        assert configuration["metadata"]["name"] == "gpu-admission-webhook-url"
        # The e2e suite finds registered webhooks by this label.
        assert configuration["metadata"]["labels"]["app.kubernetes.io/name"] == (
            "gpu-admission-webhook"
        )
        path = "/mutate" if configuration["kind"].startswith("Mutating") else "/validate"
        for hook in configuration["webhooks"]:
            assert hook["clientConfig"] == {
                "url": f"https://10.1.2.3:8443{path}",
                "caBundle": base64.b64encode(CA_PEM).decode(),
            }


def test_rules_and_selectors_are_the_charts(tmp_path: Path, render: Render) -> None:
    def comparable(configuration: dict[str, Any]) -> list[dict[str, Any]]:
        hooks = []
        for rendered in configuration["webhooks"]:
            hook = dict(rendered)
            hook.pop("clientConfig")
            hook.pop("name")
            hook.pop("namespaceSelector")  # excludes the (different) release namespace
            hooks.append(hook)
        return hooks

    chart = [obj for obj in render(kube_version="v1.27.0") if obj["kind"].endswith("Configuration")]
    script = printed(tmp_path, "v1.27.0")
    assert [comparable(c) for c in script] == [comparable(c) for c in chart]
    assert all("matchConditions" not in h for c in script for h in c["webhooks"])
    # Every entry, GPU access control's only the one leaving the pods entries' pod CREATEs to
    # them (default `warn`: test_chart_reviews.py).
    for configuration in printed(tmp_path, "v1.28.0"):
        for hook in configuration["webhooks"]:
            names = [c["name"] for c in hook["matchConditions"]]
            if hook["name"].startswith("gpu-access."):
                assert names == ["not-reviewed-by-the-pods-entry"]
    newest = [o for o in render(kube_version="v1.36.2") if o["kind"].endswith("Configuration")]
    assert [comparable(c) for c in printed(tmp_path, "v1.36.2")] == [comparable(c) for c in newest]


def test_plain_http_url_is_refused_with_a_reason(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_bytes(CA_PEM)
    result = run(
        "--print", "--kube-version", "v1.30.0", "--url", "http://x:8443", "--ca-file", str(ca)
    )
    assert result.returncode == 2
    assert "--url must be an https:// URL" in result.stderr


def test_missing_ca_file_is_named(tmp_path: Path) -> None:
    result = run("--url", "https://x:8443", "--ca-file", str(tmp_path / "nope.crt"))
    assert result.returncode == 2
    assert f"--ca-file {tmp_path / 'nope.crt'} does not exist" in result.stderr
