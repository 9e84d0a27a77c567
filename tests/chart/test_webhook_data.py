"""webhook/data/webhook-configurations.yaml (what `gpu-webhook serve --register-url` registers)
is the chart's webhooks.yaml rendered with the default values: regenerated, it is unchanged."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

from webhook.sources.registration import configurations

from .conftest import Render

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "register-webhook-url.py"
DATA = ROOT / "webhook" / "data" / "webhook-configurations.yaml"
CA_PEM = b"-----BEGIN CERTIFICATE-----\nMIIBdummy\n-----END CERTIFICATE-----\n"


def test_shipped_configurations_are_the_charts_render(tmp_path: Path) -> None:
    fresh = tmp_path / "webhook-configurations.yaml"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--write-data", str(fresh)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert fresh.read_text(encoding="utf-8") == DATA.read_text(encoding="utf-8"), (
        "the chart's webhook configurations changed: regenerate with "
        "`scripts/register-webhook-url.py --write-data webhook/data/webhook-configurations.yaml`"
    )


def test_registered_configurations_are_the_charts_pointed_at_the_url(render: Render) -> None:
    for version in ("v1.27.0", "v1.36.2"):
        chart = [o for o in render(kube_version=version) if o["kind"].endswith("Configuration")]
        made = configurations("try", "https://10.1.2.3:8443", CA_PEM, version)
        assert [c["kind"] for c in made] == [c["kind"] for c in chart]
        for mine, charts in zip(made, chart, strict=True):
            assert mine["metadata"] == {
                "name": "try",
                "labels": {"app.kubernetes.io/managed-by": "gpu-webhook-serve"},
            }
            path = "/mutate" if mine["kind"].startswith("Mutating") else "/validate"
            assert len(mine["webhooks"]) == len(charts["webhooks"])
            for hook, rendered in zip(mine["webhooks"], charts["webhooks"], strict=True):
                assert hook["clientConfig"] == {
                    "url": f"https://10.1.2.3:8443{path}",
                    "caBundle": base64.b64encode(CA_PEM).decode(),
                }
                # Same rules, policies and conditions; the names and the excluded release
                # namespace follow the release name.
                for key in ("rules", "failurePolicy", "sideEffects", "timeoutSeconds"):
                    assert hook[key] == rendered[key]
                assert hook.get("matchConditions") == rendered.get("matchConditions")
                assert hook.get("reinvocationPolicy") == rendered.get("reinvocationPolicy")
                assert hook["name"].split(".")[0] == rendered["name"].split(".")[0]
