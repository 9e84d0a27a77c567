"""The chart's image reference: registry, repository, tag defaulting to the appVersion, and an
optional digest that pins it, as the peers' charts write it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from .conftest import Render
from .test_chart import container

CHART_DIR = Path(__file__).resolve().parents[2] / "charts" / "gpu-admission-webhook"
APP_VERSION = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text(encoding="utf-8"))["appVersion"]
DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("image", "reference"),
    [
        ({}, f"gpu-admission-webhook:{APP_VERSION}"),
        ({"tag": "0.2.0-rc.1"}, "gpu-admission-webhook:0.2.0-rc.1"),
        (
            {"registry": "registry.example.com:5000", "repository": "platform/gpu-webhook"},
            f"registry.example.com:5000/platform/gpu-webhook:{APP_VERSION}",
        ),
        # A digest pins the image; the tag, even when set, is not part of the reference.
        ({"tag": "0.1.0", "digest": DIGEST}, f"gpu-admission-webhook@{DIGEST}"),
        (
            {"registry": "registry.example.com/", "digest": DIGEST},
            f"registry.example.com/gpu-admission-webhook@{DIGEST}",
        ),
    ],
)
def test_image_reference(render: Render, image: dict[str, Any], reference: str) -> None:
    assert container(render({"image": image}))["image"] == reference


@pytest.mark.parametrize("digest", ["sha256:abc", "latest", "sha512:" + "0" * 128])
def test_a_digest_that_is_not_sha256_fails_the_install(
    chart: helm_python.Chart, digest: str
) -> None:
    with pytest.raises(helm_python.HelmValuesError) as failure:
        chart.render({"image": {"digest": digest}}, name="gaw", namespace="x")
    assert f"at '/image/digest': '{digest}' does not match pattern" in str(failure.value)
