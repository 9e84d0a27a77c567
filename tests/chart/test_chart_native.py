"""The chart's native policies (nativePolicies.enabled): rendered, in sync with the export."""

from __future__ import annotations

from typing import Any

import helm_python
import pytest
import yaml

from scripts.sync_native_policy import POLICY_PATH, render
from webhook.cli.review import load_policies
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.updates import update_reads
from webhook.core.policies.native import export

from .conftest import NAMESPACE, RELEASE, ROOT, Render, manifests_of, render_chart


def test_off_by_default(render: Render) -> None:
    kinds = {obj["kind"] for obj in render()}
    assert "ValidatingAdmissionPolicy" not in kinds
    assert "ValidatingAdmissionPolicyBinding" not in kinds


def test_enabled_renders_the_exported_policy_and_a_binding(render: Render) -> None:
    objs = render({"nativePolicies": {"enabled": True}, "webhooks": {"excludeNamespaces": ["ci"]}})
    (policy,) = [o for o in objs if o["kind"] == "ValidatingAdmissionPolicy"]
    (binding,) = [o for o in objs if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    name = f"{RELEASE}-gpu-admission-webhook-crl"
    exported = export(
        load_policies(ROOT / "configmaps").by_key.values(),
        reads=update_reads(WebhookConfig()),
        name=name,
    ).objects
    assert policy == exported[0]
    assert binding["metadata"]["name"] == name
    assert binding["spec"]["policyName"] == policy["metadata"]["name"] == name
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["paramRef"] == exported[1]["spec"]["paramRef"]
    # The same namespaces as the webhooks skip: kube-system, its own, the configured ones.
    selector = binding["spec"]["matchResources"]["namespaceSelector"]
    (by_name,) = [
        e for e in selector["matchExpressions"] if e["key"] == "kubernetes.io/metadata.name"
    ]
    assert by_name["operator"] == "NotIn"
    assert set(by_name["values"]) == {"kube-system", NAMESPACE, "ci"}
    (webhooks,) = [o for o in objs if o["kind"] == "ValidatingWebhookConfiguration"]
    assert selector == webhooks["webhooks"][0]["namespaceSelector"]


def test_chart_copy_is_in_sync_with_configmaps() -> None:
    assert POLICY_PATH.read_text(encoding="utf-8") == render(), "run make chart-sync"
    assert yaml.safe_load(render())["kind"] == "ValidatingAdmissionPolicy"


def _native(chart: helm_python.Chart, release: str, values: dict[str, Any]) -> list[Any]:
    objs = manifests_of(chart.render(values, name=release, namespace=NAMESPACE))
    return [o for o in objs if o["kind"].startswith("ValidatingAdmissionPolicy")]


def test_two_releases_install_policies_that_do_not_collide(chart: helm_python.Chart) -> None:
    """The policy and binding are named after the release's full name: a second release
    (another team's webhook, a canary) installs its own instead of overwriting the first's."""
    on = {"nativePolicies": {"enabled": True}}
    first, second = _native(chart, "gpu", on), _native(chart, "canary", on)
    names = {(o["kind"], o["metadata"]["name"]) for o in first + second}
    assert names == {
        ("ValidatingAdmissionPolicy", "gpu-gpu-admission-webhook-crl"),
        ("ValidatingAdmissionPolicyBinding", "gpu-gpu-admission-webhook-crl"),
        ("ValidatingAdmissionPolicy", "canary-gpu-admission-webhook-crl"),
        ("ValidatingAdmissionPolicyBinding", "canary-gpu-admission-webhook-crl"),
    }
    # A full name of 63 characters still makes valid names (the "-crl" suffix fits).
    long = _native(chart, "r", {**on, "fullnameOverride": "x" * 63})
    assert {o["metadata"]["name"] for o in long} == {"x" * 59 + "-crl"}


def test_refused_below_kubernetes_1_32(chart: helm_python.Chart) -> None:
    """The policy's UPDATE check uses two-variable comprehensions (Kubernetes 1.32)."""
    on = {"nativePolicies": {"enabled": True}}
    with pytest.raises(Exception, match=r"nativePolicies.enabled needs Kubernetes >= 1.32"):
        render_chart(chart, on, kube_version="v1.31.4")
    kinds = {o["kind"] for o in manifests_of(render_chart(chart, on, kube_version="v1.32.0"))}
    assert "ValidatingAdmissionPolicy" in kinds
