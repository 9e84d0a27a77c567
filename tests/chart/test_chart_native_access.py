"""The chart's GPU access native policies (nativePolicies.access.enabled, issue 46 item 5): the
export of `gpu-webhook export-policies --access`, bound where the access entry goes, and the
access entry at failurePolicy Ignore with the pods entries back in every namespace."""

from __future__ import annotations

import json
from typing import Any

import helm_python
import pytest

from webhook.core.config.model import load_config
from webhook.core.evaluation.native_access import export_access

from .conftest import CHART_DIR, NAMESPACE, RELEASE, Render, manifests_of, render_chart
from .test_chart import WEBHOOK_KINDS, webhooks

KUBE = "v1.36.2"
ENFORCE: dict[str, Any] = {"config": {"gpuAccess": {"mode": "enforce"}}}
ON: dict[str, Any] = {**ENFORCE, "nativePolicies": {"access": {"enabled": True}}}
NAME = f"{RELEASE}-gpu-admission-webhook-access"
KINDS = [
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
]


def _access(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objs if o["metadata"]["name"].endswith("-access")}


def test_off_by_default(render: Render) -> None:
    assert _access(render(ENFORCE, kube_version=KUBE)) == {}


def test_the_shipped_copy_is_the_export_for_the_default_settings() -> None:
    shipped = json.loads((CHART_DIR / "native" / "access.json").read_text(encoding="utf-8"))
    exported = export_access(load_config(None)).objects
    assert shipped["items"] == exported, (
        "regenerate: gpu-webhook export-policies --access -o json > "
        "charts/gpu-admission-webhook/native/access.json"
    )


def test_enabled_renders_the_exported_policies_bound_where_the_access_entry_goes(
    render: Render,
) -> None:
    values = {**ON, "webhooks": {"excludeNamespaces": ["ci"]}}
    objs = render(values, kube_version=KUBE)
    found = _access(objs)
    assert sorted(found) == sorted(KINDS)
    exported = {o["kind"]: o for o in export_access(load_config(ENFORCE["config"])).objects}
    for kind in ("ValidatingAdmissionPolicy", "MutatingAdmissionPolicy"):
        assert found[kind]["spec"] == exported[kind]["spec"]
        assert found[kind]["metadata"]["name"] == NAME
        assert found[kind]["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
    hooks = webhooks(objs)
    for kind in ("ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicyBinding"):
        spec = found[kind]["spec"]
        assert spec["policyName"] == NAME
        for hook_kind in WEBHOOK_KINDS:
            assert (
                spec["matchResources"]["namespaceSelector"]
                == hooks[(hook_kind, "gpu-access")]["namespaceSelector"]
            )
    assert found["ValidatingAdmissionPolicyBinding"]["spec"]["validationActions"] == ["Deny"]
    names = found["MutatingAdmissionPolicyBinding"]["spec"]["matchResources"]
    (by_name,) = [
        e
        for e in names["namespaceSelector"]["matchExpressions"]
        if e["key"] == "kubernetes.io/metadata.name"
    ]
    assert set(by_name["values"]) == {
        "kube-system",
        NAMESPACE,
        "ci",
        "gpu-operator",
        "nvidia-gpu-operator",
    }


def test_with_them_the_access_entry_is_ignore_and_the_pods_entries_take_every_namespace(
    render: Render,
) -> None:
    closed = webhooks(render(ENFORCE, kube_version=KUBE))
    opened = webhooks(render(ON, kube_version=KUBE))
    for kind in WEBHOOK_KINDS:
        assert closed[(kind, "gpu-access")]["failurePolicy"] == "Fail"
        assert opened[(kind, "gpu-access")]["failurePolicy"] == "Ignore"
        # Under a Fail access entry the pods entries keep only the exempt namespaces...
        narrowed = closed[(kind, "pods")]["namespaceSelector"]["matchExpressions"]
        assert {
            "key": "kubernetes.io/metadata.name",
            "operator": "In",
            "values": ["gpu-operator", "nvidia-gpu-operator"],
        } in narrowed
        # ...under an Ignore one they get back every namespace the workloads entry has, and
        # keep their own failurePolicy (Fail: GPU pods are not admitted unchecked for CRLs).
        pods = opened[(kind, "pods")]
        assert pods["namespaceSelector"] == opened[(kind, "workloads")]["namespaceSelector"]
        assert not any(e["operator"] == "In" for e in pods["namespaceSelector"]["matchExpressions"])
        assert pods["failurePolicy"] == "Fail"


def test_ignore_set_explicitly_is_allowed_with_them(render: Render) -> None:
    values = {**ON, "webhooks": {"gpuAccess": {"failurePolicy": "Ignore"}}}
    hooks = webhooks(render(values, kube_version=KUBE))
    assert {hooks[(k, "gpu-access")]["failurePolicy"] for k in WEBHOOK_KINDS} == {"Ignore"}
    values = {**ON, "webhooks": {"gpuAccess": {"failurePolicy": "Fail"}}}
    hooks = webhooks(render(values, kube_version=KUBE))
    assert {hooks[(k, "gpu-access")]["failurePolicy"] for k in WEBHOOK_KINDS} == {"Fail"}


@pytest.mark.parametrize(
    ("values", "kube", "message"),
    [
        (
            ON,
            "v1.35.3",
            "nativePolicies.access.enabled needs Kubernetes >= 1.36: MutatingAdmissionPolicy is "
            "served as admissionregistration.k8s.io/v1 from 1.36",
        ),
        (
            {"nativePolicies": {"access": {"enabled": True}}},
            KUBE,
            "nativePolicies.access.enabled needs config.gpuAccess.mode: enforce",
        ),
        (
            {
                "config": {
                    "gpuAccess": {"mode": "enforce", "vendorRuntimeClasses": {"amd": ["x"]}}
                },
                "nativePolicies": {"access": {"enabled": True}},
            },
            KUBE,
            "config.gpuAccess.vendorRuntimeClasses changes the access policies",
        ),
        (
            {
                "config": {"gpuAccess": {"mode": "enforce", "annotationWriters": ["admin"]}},
                "nativePolicies": {"access": {"enabled": True}},
            },
            KUBE,
            "config.gpuAccess.annotationWriters changes the access policies",
        ),
        (
            {
                "config": {
                    "gpuAccess": {"mode": "enforce", "annotationWriterGroups": ["system:masters"]}
                },
                "nativePolicies": {"access": {"enabled": True}},
            },
            KUBE,
            "config.gpuAccess.annotationWriterGroups changes the access policies",
        ),
    ],
)
def test_refusals_say_why(
    chart: helm_python.Chart, values: dict[str, Any], kube: str, message: str
) -> None:
    with pytest.raises(Exception, match=message.replace(".", r"\.")):
        manifests_of(render_chart(chart, values, kube_version=kube))
