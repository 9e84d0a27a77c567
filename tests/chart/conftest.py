"""Fixtures that render the Helm chart offline (helm-python-sdk, no cluster, no helm binary)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml
from helm_python import _native

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / "charts" / "gpu-admission-webhook"
RELEASE = "gaw"
NAMESPACE = "gpu-webhook-system"

Manifest = dict[str, Any]
Render = Callable[..., list[Manifest]]


@pytest.fixture(scope="session")
def chart() -> Iterator[helm_python.Chart]:
    """The chart, loaded once (rendering is cheap, loading parses every file)."""
    with helm_python.Chart.load(CHART_DIR) as loaded:
        yield loaded


def render_chart(
    chart: helm_python.Chart,
    values: dict[str, Any] | None = None,
    *,
    kube_version: str | None = None,
    api_versions: list[str] | None = None,
    namespace: str = NAMESPACE,
) -> dict[str, str]:
    """Render like `helm template`: template path -> text.

    helm-python-sdk 0.2.2's Chart.render() has no kube_version/api_versions parameters,
    although the C ABI's render options accept them (`helm template --kube-version
    --api-versions`); without them .Capabilities is the SDK's built-in default. So a
    render that needs a cluster version goes through the same native call with those keys.
    """
    if kube_version is None and api_versions is None:
        return chart.render(values, name=RELEASE, namespace=namespace)
    opts: dict[str, Any] = {"name": RELEASE, "namespace": namespace}
    if kube_version is not None:
        opts["kube_version"] = kube_version
    if api_versions is not None:
        opts["api_versions"] = api_versions
    rendered = _native.call_string(
        "helm_render",
        chart._raw(),
        None if values is None else json.dumps(values),
        json.dumps(opts),
    )
    manifests: dict[str, str] = json.loads(rendered)
    return manifests


def manifests_of(rendered: dict[str, str]) -> list[Manifest]:
    """Every Kubernetes object of a render (NOTES.txt and empty documents left out)."""
    objects: list[Manifest] = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects


@pytest.fixture
def render(chart: helm_python.Chart) -> Render:
    """render(values=None, kube_version=None, ...) -> the release's objects."""

    def _render(values: dict[str, Any] | None = None, **kwargs: Any) -> list[Manifest]:
        return manifests_of(render_chart(chart, values, **kwargs))

    return _render


@pytest.fixture
def render_text(chart: helm_python.Chart) -> Callable[..., dict[str, str]]:
    """render_text(values=None, ...) -> template path -> rendered text (incl. NOTES.txt)."""

    def _render(values: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, str]:
        return render_chart(chart, values, **kwargs)

    return _render
