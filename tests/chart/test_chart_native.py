"""The chart's native policies (nativePolicies.enabled): rendered, in sync with the export."""

from __future__ import annotations

import yaml

from scripts.sync_native_policy import POLICY_PATH, render
from webhook.cli.review import load_policies
from webhook.core.policies.native import export

from .conftest import NAMESPACE, ROOT, Render


def test_off_by_default(render: Render) -> None:
    kinds = {obj["kind"] for obj in render()}
    assert "ValidatingAdmissionPolicy" not in kinds
    assert "ValidatingAdmissionPolicyBinding" not in kinds


def test_enabled_renders_the_exported_policy_and_a_binding(render: Render) -> None:
    objs = render({"nativePolicies": {"enabled": True}, "webhooks": {"excludeNamespaces": ["ci"]}})
    (policy,) = [o for o in objs if o["kind"] == "ValidatingAdmissionPolicy"]
    (binding,) = [o for o in objs if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    exported = export(load_policies(ROOT / "configmaps").by_key.values()).objects
    assert policy == exported[0]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
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
