"""Chart RBAC for the watched kinds (SPEC §10): CRL ConfigMaps in kube-public (Role), Nodes and
DRA ResourceClaimTemplates and ResourceClaims cluster-wide (ClusterRole), each switched with its
config value. The audit's own ClusterRole (FULLNAME-audit): test_chart_audit.py."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.chart.conftest import NAMESPACE, Render
from tests.chart.test_chart import FULLNAME, find, one

READ = ["get", "list", "watch"]
NODES_RULE = {"apiGroups": [""], "resources": ["nodes"], "verbs": READ}
# The node inventory's DRA half (config.nodeInventory): drivers' ResourceSlices.
SLICES_RULE = {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": READ}
# One switch (config.claimTemplateCache) for the whole DRA claim cache: both kinds.
CLAIMS_RULE = {
    "apiGroups": ["resource.k8s.io"],
    "resources": ["resourceclaimtemplates", "resourceclaims", "deviceclasses"],
    "verbs": READ,
}
# Namespaces' metadata for their Pod Security enforce label (runtime fixes, RDMA).
NAMESPACES_RULE = {"apiGroups": [""], "resources": ["namespaces"], "verbs": READ}
NO_NAMESPACES = {"runtimeFixes": {"namespaceLevels": False}}


def _holds(config: Any, values: Any) -> bool:
    """Every value set (nested mappings: every key of theirs) is in the rendered config."""
    if isinstance(values, dict):
        return all(_holds(config.get(k), v) for k, v in values.items())
    return bool(config is values or config == values)


def rendered_config(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The webhook config file the chart renders from .Values.config."""
    configmaps = [o for o in find(objects, "ConfigMap") if "config.yaml" in o.get("data", {})]
    (configmap,) = configmaps
    config: dict[str, Any] = yaml.safe_load(configmap["data"]["config.yaml"])
    return config


def test_default_install_reads_nodes_slices_and_dra_claims_cluster_wide_and_nothing_else(
    render: Render,
) -> None:
    objects = render()
    role = one(objects, "ClusterRole", FULLNAME)
    assert role["rules"] == [NODES_RULE, SLICES_RULE, CLAIMS_RULE, NAMESPACES_RULE]
    binding = one(objects, "ClusterRoleBinding", FULLNAME)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    account = one(objects, "ServiceAccount")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}
    ]
    # The namespaced Role stays what it was: ConfigMaps in kube-public.
    assert one(objects, "Role", FULLNAME)["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": READ}
    ]
    config = rendered_config(objects)
    assert (config["nodeInventory"], config["claimTemplateCache"]) == (True, True)


@pytest.mark.parametrize(
    ("values", "rules"),
    [
        ({"nodeInventory": False}, [CLAIMS_RULE, NAMESPACES_RULE]),
        ({"claimTemplateCache": False}, [NODES_RULE, SLICES_RULE, NAMESPACES_RULE]),
        ({"runtimeFixes": {"namespaceLevels": False}}, [NODES_RULE, SLICES_RULE, CLAIMS_RULE]),
        ({"runtimeFixes": {"rdma": {"enabled": False}}}, [NODES_RULE, SLICES_RULE, CLAIMS_RULE]),
    ],
    ids=["inventory-off", "claim-cache-off", "namespace-levels-off", "rdma-off"],
)
def test_each_switch_removes_its_permission_and_reaches_the_webhook_config(
    render: Render, values: dict[str, Any], rules: list[dict[str, Any]]
) -> None:
    objects = render({"config": values})
    assert one(objects, "ClusterRole", FULLNAME)["rules"] == rules
    config = rendered_config(objects)
    assert _holds(config, values)


def test_both_switches_off_leave_no_cluster_wide_permission(render: Render) -> None:
    off = {"nodeInventory": False, "claimTemplateCache": False, **NO_NAMESPACES}
    objects = render({"config": off, "audit": {"enabled": False}})
    assert find(objects, "ClusterRole") == []
    assert find(objects, "ClusterRoleBinding") == []
    # With the audit on, its role is the only cluster-wide one left.
    objects = render({"config": off})
    names = [o["metadata"]["name"] for o in find(objects, "ClusterRole")]
    assert names == [f"{FULLNAME}-audit"]


def test_the_values_schema_rejects_a_non_boolean_switch(render: Render) -> None:
    with pytest.raises(Exception, match="nodeInventory"):
        render({"config": {"nodeInventory": "yes"}})
