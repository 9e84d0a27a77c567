"""Issue 28 item 5 through a real API server: the webhook's own terms in a mutated template
(a), updates that change nothing the evaluation reads (c), and a pod bound with spec.nodeName
(e). Each expectation comes from the evaluation core the webhook runs, and the exact sentences
are asserted too.

Works on a bare API server (E2E_MODE=url, no controllers): no pod of a Deployment is needed.
Case (a) needs the webhook to run with `mutateTemplates: true` (E2E_CONFIG); it is skipped
otherwise.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.policies.policyset import PolicySet

from .conftest import InventoryReader, NodeMaker, synced_inventory
from .test_e2e_admission import call, crl_configmap, denial, gpu_deployment, gpu_pod, unique
from .test_e2e_updates import wait_until_denied

pytestmark = pytest.mark.e2e

TEMPLATE_SPEC = ("spec", "template", "spec")
MAJOR, MINOR = "cuda-major-version", "cuda-minor-version"
MARK = "features.alauda.io/injected-node-affinity"  # ANNOTATION_INJECTED_AFFINITY


def _at(obj: Any, *path: str) -> Any:
    for part in path:
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _terms(deployment: Any) -> Any:
    return _at(
        deployment,
        *TEMPLATE_SPEC,
        "affinity",
        "nodeAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
        "nodeSelectorTerms",
    )


def cuda_deployment(name: str, image: str) -> dict[str, Any]:
    deployment = gpu_deployment(name, {"nvidia.com/gpu": "1"})
    deployment["spec"]["template"]["spec"]["containers"][0]["image"] = image
    return deployment


def test_set_image_replaces_the_affinity_the_webhook_injected_into_the_template(
    core: Any,
    apps: Any,
    namespace: str,
    policies: PolicySet,
    webhook_config: WebhookConfig,
    make_nodes: NodeMaker,
    webhook_inventory: InventoryReader,
) -> None:
    """(a) `kubectl set image` from CUDA 12.4 to 12.8 on a template the webhook mutated: the
    stored template needs ≥ 12.8, with no "kept as is" warning."""
    if not webhook_config.mutate_templates:
        pytest.skip("the webhook runs without mutateTemplates (set it in E2E_CONFIG)")
    make_nodes({"cuda": {MAJOR: "12", MINOR: "8"}})
    inventory, _ = synced_inventory(core, webhook_inventory, webhook_config)
    created, _ = call(
        apps.create_namespaced_deployment,
        namespace,
        cuda_deployment(unique("serve"), "nvidia/cuda:12.4.1-base-ubuntu22.04"),
    )
    name = created["metadata"]["name"]
    before = _terms(created)
    # `kubectl set image deployment/NAME train=nvidia/cuda:12.8.0-base-ubuntu22.04`: a PATCH.
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "train", "image": "nvidia/cuda:12.8.0-base-ubuntu22.04"}
                    ]
                }
            }
        }
    }
    expected = evaluate(
        {**_merge_image(created, "nvidia/cuda:12.8.0-base-ubuntu22.04")},
        policies,
        webhook_config,
        kind="Deployment",
        namespace=namespace,
        operation="UPDATE",
        old_object=created,
        inventory=inventory,
    )
    updated, shown = call(apps.patch_namespaced_deployment, name, namespace, patch)
    assert not any("kept as is" in line for line in shown), shown
    assert expected.mutated is not None
    assert _terms(updated) == _terms(expected.mutated) != before
    # The mark that tells the webhook these terms are its own, for the next change.
    assert MARK in updated["spec"]["template"]["metadata"]["annotations"]
    # The manual labels for CUDA ≥ 12.8 when no node carries a scheme (no inventory in the
    # expectation: the bare API server has no GPU nodes, the webhook uses its first scheme)
    # or whatever the inventory says: the 12.8 bound is there either way.
    assert any(
        {"key": key, "operator": "Gt", "values": ["7"]} in term["matchExpressions"]
        for term in _terms(updated)
        for key in (MINOR, "nvidia.com/cuda.runtime-version.minor", "nvidia.com/cuda.runtime.minor")
    )


def _merge_image(deployment: dict[str, Any], image: str) -> dict[str, Any]:
    new = copy.deepcopy(deployment)
    new["spec"]["template"]["spec"]["containers"][0]["image"] = image
    return new


@pytest.fixture
def widget(core: Any) -> Iterator[str]:
    """A key no shipped policy governs; the CRL made for it is removed afterwards."""
    from kubernetes.client.exceptions import ApiException

    key = f"example.com/widget{uuid.uuid4().hex[:6]}"
    yield key
    try:
        core.delete_namespaced_config_map(f"cf-crl-e2e-{key.split('/')[1]}", "kube-public")
    except ApiException as exc:
        if exc.status != 404:
            raise


def test_reloader_env_bump_and_rightsizing_after_the_policy_was_tightened(
    core: Any, apps: Any, namespace: str, widget: str, webhook_config: WebhookConfig
) -> None:
    """(c) A Deployment above a policy tightened after it was created: Stakater Reloader's
    env bump and a cpu/memory rightsizing PATCH are allowed untouched; an image change is
    judged (and denied)."""
    deployment = gpu_deployment(unique("app"), {widget: "8", "cpu": "1", "memory": "1Gi"})
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "STAKATER_APP_CONFIG_CONFIGMAP", "value": "a1b2"}]
    created, _ = call(apps.create_namespaced_deployment, namespace, deployment)
    name = created["metadata"]["name"]

    policy = crl_configmap(f"cf-crl-e2e-{widget.split('/')[1]}", widget, max="4")
    call(core.create_namespaced_config_map, "kube-public", policy)
    wait_until_denied(apps, namespace, gpu_deployment(unique("probe"), {widget: "8"}))

    def patched(change: dict[str, Any]) -> list[str]:
        body = {"spec": {"template": {"spec": {"containers": [{"name": "train", **change}]}}}}
        obj, shown = call(apps.patch_namespaced_deployment, name, namespace, body)
        assert obj["metadata"]["name"] == name
        return shown

    # Reloader: the env var whose value is the ConfigMap's hash changes (strategic merge on
    # the env list by name).
    assert patched({"env": [{"name": "STAKATER_APP_CONFIG_CONFIGMAP", "value": "c3d4"}]}) == []
    # Rightsizing (VPA-style recommenders, Goldilocks): cpu/memory only.
    assert patched({"resources": {"limits": {"cpu": "2", "memory": "2Gi"}}}) == []
    # What the evaluation reads is still judged: the image.
    body = {
        "spec": {"template": {"spec": {"containers": [{"name": "train", "image": "busybox:1.37"}]}}}
    }
    message = denial(apps.patch_namespaced_deployment, name, namespace, body)
    assert f"limits.{widget}='8' is above the maximum 4" in message


def test_a_template_with_requests_equal_to_limits_is_admitted_like_its_pods(
    apps: Any, namespace: str
) -> None:
    """(c, related) vcuda-core's shipped policy says `requests: disabled`; a template that
    writes requests = limits makes pods the API server admits (their requests default from
    limits anyway), so the template is admitted too."""
    deployment = gpu_deployment(unique("vgpu"), {"tencent.com/vcuda-core": "50"})
    resources = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]
    resources["requests"] = {"tencent.com/vcuda-core": "50"}
    created, _ = call(apps.create_namespaced_deployment, namespace, deployment, dry_run="All")
    assert created["metadata"]["name"] == deployment["metadata"]["name"]


def test_a_pod_bound_by_node_name_gets_no_affinity_and_its_node_is_checked(
    core: Any,
    namespace: str,
    policies: PolicySet,
    webhook_config: WebhookConfig,
    make_nodes: NodeMaker,
    webhook_inventory: InventoryReader,
) -> None:
    """(e) A pod created with spec.nodeName skips the scheduler; the kubelet would fail it on
    an injected affinity (NodeAffinity). Nothing is injected; its node is checked."""
    (node,) = make_nodes({"old": {MAJOR: "12", MINOR: "2"}})
    inventory, _ = synced_inventory(core, webhook_inventory, webhook_config)
    if inventory is None:
        pytest.skip("the webhook has no node inventory (switched off, or it cannot read Nodes)")
    pod = gpu_pod(unique("bound"), {"nvidia.com/gpu": "1"}, image="nvidia/cuda:12.4.1-base")
    pod["spec"]["nodeName"] = node
    text = f"node {node} supports CUDA 12.2; this pod needs CUDA ≥ 12.4"
    if webhook_config.gpu_access.mode == "enforce":
        # GPU access control denies it first (access/links.py: the kubelet drops a resource
        # the node does not advertise, and the image's NVIDIA_VISIBLE_DEVICES=all would stand).
        message = denial(core.create_namespaced_pod, namespace, pod, dry_run="All")
        assert "requests nvidia.com/gpu with spec.nodeName" in message
        return
    if webhook_config.no_compatible_node == "deny":
        deadline = time.monotonic() + 30
        while True:
            message = denial(core.create_namespaced_pod, namespace, pod, dry_run="All")
            if text in message or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert f"{text}." in message
        return
    deadline = time.monotonic() + 30
    while True:
        returned, shown = call(core.create_namespaced_pod, namespace, pod, dry_run="All")
        if text in shown or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert text in shown
    assert "affinity" not in returned["spec"]
    assert not any("CUDA ≥" in line and "required" in line for line in shown)
