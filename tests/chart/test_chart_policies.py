"""The shipped CRL ConfigMaps as an optional part of the release (policies.install)."""

from __future__ import annotations

from pathlib import Path

import yaml

from webhook.core.policies.policyset import PolicySet
from webhook.sources.files import load_policy_dir

from .conftest import Render

ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIR = ROOT / "configmaps"
CHART_COPY_DIR = ROOT / "charts" / "gpu-admission-webhook" / "policies"


def yaml_files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.glob("*.yaml"))}


def test_chart_copies_are_byte_identical_to_configmaps() -> None:
    # Helm can only read files inside the chart, so the chart carries copies of configmaps/.
    # Fix a failure with: cp configmaps/*.yaml charts/gpu-admission-webhook/policies/
    # (or `make chart-sync`).
    source = yaml_files(SOURCE_DIR)
    assert source, f"no CRL ConfigMaps found in {SOURCE_DIR}"
    assert yaml_files(CHART_COPY_DIR) == source
    assert sorted(p.name for p in CHART_COPY_DIR.iterdir()) == sorted(source)


def test_policies_are_not_installed_by_default(render: Render) -> None:
    assert [
        obj
        for obj in render()
        if obj["metadata"].get("namespace") == "kube-public" and obj["kind"] == "ConfigMap"
    ] == []


def test_installed_policies_are_exactly_the_shipped_configmaps(render: Render) -> None:
    rendered = [
        obj
        for obj in render({"policies": {"install": True}})
        if obj["kind"] == "ConfigMap" and obj["metadata"].get("namespace") == "kube-public"
    ]
    shipped = [
        doc
        for path in sorted(SOURCE_DIR.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if doc
    ]
    assert rendered == shipped


def test_installed_policies_all_load_without_errors_or_conflicts(render: Render) -> None:
    rendered = [
        obj
        for obj in render({"policies": {"install": True}})
        if obj["kind"] == "ConfigMap" and obj["metadata"].get("namespace") == "kube-public"
    ]
    policies = PolicySet.from_configmaps(rendered)
    assert policies.invalid == ()
    assert policies.conflicts == ()
    assert policies.inactive == ()
    assert policies.keys == load_policy_dir(SOURCE_DIR).keys
    assert len(policies.limitations) == len(rendered)
