"""Issue 46 item 2 (rest) and the Service-link route through a real API server, in the mode the
webhook runs with (E2E_WEBHOOK_CONFIG's `gpuAccess.mode`; scripts/test-real.sh runs it under
`enforce` too): an AMD device pod's Service links (the API server defaults enableServiceLinks
to true before admission), a GPU pod created with spec.nodeName, a DRA claim whose
`firstAvailable` request may fall back to another class, and a gated pod whose claim is replaced
before its last gate goes."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.policies.policyset import PolicySet
from webhook.core.workloads.claims import ClaimIndex

from .conftest import Cluster
from .test_e2e_admission import admitted_pod, call, denial, expected_for, unique
from .test_e2e_gpu_access import JSON_PATCH, plain_pod
from .test_e2e_operators import _serves_resource_v1

pytestmark = pytest.mark.e2e

CUDA_IMAGE = "nvidia/cuda:12.4.1-runtime-ubuntu22.04"
# How long the webhook's claim cache may take to see a new or replaced claim (its watch).
CACHE_SECONDS = 20.0
LINKS_NOTE = (
    "set enableServiceLinks to false: a Service's DOCKER_RESOURCE_* variables could choose its "
    "AMD GPUs"
)


def _mode(config: WebhookConfig) -> str:
    mode = config.gpu_access.mode
    if mode == "off":
        pytest.skip("the webhook runs with gpuAccess.mode: off")
    return mode


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


@pytest.mark.parametrize("links", [None, True])
def test_an_amd_device_pod_gets_its_service_links_switched_off(
    core: Any,
    namespace: str,
    policies: PolicySet,
    webhook_config: WebhookConfig,
    links: bool | None,
) -> None:
    """A Service named docker-resource-gpu would make DOCKER_RESOURCE_GPU_SERVICE_PORT, which
    AMD's runtime reads after the written void."""
    mode = _mode(webhook_config)
    pod = plain_pod(
        unique("amd-links"), "rocm/pytorch:latest", resources={"limits": {"amd.com/gpu": "1"}}
    )
    if links is not None:
        pod["spec"]["enableServiceLinks"] = links
    expected = expected_for(pod, namespace, policies, webhook_config, None)
    created, shown = call(core.create_namespaced_pod, namespace, pod, dry_run="All")
    if mode == "enforce":
        assert created["spec"]["enableServiceLinks"] is False
        assert LINKS_NOTE in expected.notes and LINKS_NOTE in shown
    else:
        # The API server's default, which `warn` leaves (the audit lists it).
        assert created["spec"]["enableServiceLinks"] is True
        assert LINKS_NOTE not in shown


def test_an_nvidia_pod_keeps_its_service_links(
    core: Any, namespace: str, webhook_config: WebhookConfig
) -> None:
    _mode(webhook_config)
    pod = plain_pod(unique("nv-links"), CUDA_IMAGE, resources={"limits": {"nvidia.com/gpu": "1"}})
    created, _ = call(core.create_namespaced_pod, namespace, pod, dry_run="All")
    assert created["spec"]["enableServiceLinks"] is True


def test_a_gpu_pod_created_with_node_name(
    core: Any, namespace: str, policies: PolicySet, webhook_config: WebhookConfig
) -> None:
    """The kubelet would admit it without the resource its node does not advertise
    (removeMissingExtendedResources) and no plugin would run: denied under enforce."""
    mode = _mode(webhook_config)
    pod = plain_pod(unique("bound"), CUDA_IMAGE, resources={"limits": {"nvidia.com/gpu": "1"}})
    pod["spec"]["nodeName"] = "no-such-node"
    expected = expected_for(pod, namespace, policies, webhook_config, None)
    text = (
        'container "app" requests nvidia.com/gpu with spec.nodeName: use a nodeSelector on '
        "kubernetes.io/hostname instead"
    )
    if mode == "enforce":
        message = denial(core.create_namespaced_pod, namespace, pod, dry_run="All")
        assert message == expected.denial_message()
        assert text in message
        return
    assert expected.allowed
    created, shown = call(core.create_namespaced_pod, namespace, pod, dry_run="All")
    assert created["spec"]["nodeName"] == "no-such-node"
    assert not [w for w in shown if "spec.nodeName" in w]


def _until(probe: Callable[[], tuple[dict[str, Any], list[str]]], done: Callable[..., bool]) -> Any:
    """Dry-run `probe` until `done(created)` (the webhook learns of claims through its watch)."""
    deadline = time.monotonic() + CACHE_SECONDS
    while True:
        created, shown = probe()
        if done(created) or time.monotonic() > deadline:
            return created, shown
        time.sleep(1.0)


def test_a_first_available_claim_that_may_fall_back_gets_the_void(
    cluster: Cluster, core: Any, namespace: str, policies: PolicySet, webhook_config: WebhookConfig
) -> None:
    from kubernetes import client

    mode = _mode(webhook_config)
    if not _serves_resource_v1(cluster):
        pytest.skip("resource.k8s.io/v1 (DRA) is not served by this cluster")
    template: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": unique("fallback"), "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "firstAvailable": [
                                {"name": "gpu", "deviceClassName": "gpu.nvidia.com"},
                                {"name": "cpu", "deviceClassName": "cpu.example.com"},
                            ],
                        }
                    ]
                }
            }
        },
    }
    custom = client.CustomObjectsApi(cluster.api)
    custom.create_namespaced_custom_object(
        "resource.k8s.io", "v1", namespace, "resourceclaimtemplates", template
    )
    pod = plain_pod(unique("fallback"), CUDA_IMAGE, resources={"claims": [{"name": "dev"}]})
    pod["spec"]["resourceClaims"] = [
        {"name": "dev", "resourceClaimTemplateName": template["metadata"]["name"]}
    ]
    expected = evaluate(
        admitted_pod(pod, namespace),
        policies,
        webhook_config,
        claims=ClaimIndex.from_objects([template]),
    )
    # Until the webhook's cache has the template it judges the container without its claim
    # (void written either way): wait for the template's warning to go, so that the void below
    # is the fallback's.
    deadline = time.monotonic() + CACHE_SECONDS
    created, shown = call(core.create_namespaced_pod, namespace, pod, dry_run="All")
    while any("DRA cache" in w for w in shown) and time.monotonic() < deadline:
        time.sleep(1.0)
        created, shown = call(core.create_namespaced_pod, namespace, pod, dry_run="All")
    assert not [w for w in shown if "DRA cache" in w]
    env = _env(created["spec"]["containers"][0])
    if mode == "enforce":
        assert env.get("NVIDIA_VISIBLE_DEVICES") == "void", shown
        assert expected.mutated is not None
        # (the API server drops an empty value: compared as name -> value)
        assert env == _env(expected.mutated["spec"]["containers"][0])
    else:
        assert "NVIDIA_VISIBLE_DEVICES" not in env


def _claim(namespace: str, name: str, device_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]}
        },
    }


def test_removing_the_last_gate_after_the_claim_was_replaced(
    cluster: Cluster, core: Any, namespace: str, policies: PolicySet, webhook_config: WebhookConfig
) -> None:
    """Created gated with a GPU claim (no NVIDIA void: a GPU container); the claim is deleted
    and made again on another class; the last gate's removal is judged again: denied under
    enforce (env cannot change on an UPDATE)."""
    from kubernetes import client

    mode = _mode(webhook_config)
    if not _serves_resource_v1(cluster):
        pytest.skip("resource.k8s.io/v1 (DRA) is not served by this cluster")
    custom = client.CustomObjectsApi(cluster.api)
    name = unique("mine")
    args = ("resource.k8s.io", "v1", namespace, "resourceclaims")
    custom.create_namespaced_custom_object(*args, _claim(namespace, name, "gpu.nvidia.com"))
    pod = plain_pod(
        unique("gated"),
        CUDA_IMAGE,
        command=["sleep", "3600"],
        resources={"claims": [{"name": "dev"}]},
    )
    pod["spec"]["resourceClaims"] = [{"name": "dev", "resourceClaimName": name}]
    pod["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
    # Wait until the webhook knows the claim (its container is then a GPU container: no
    # NVIDIA void), then create it for real.
    _until(
        lambda: call(core.create_namespaced_pod, namespace, pod, dry_run="All"),
        lambda p: "NVIDIA_VISIBLE_DEVICES" not in _env(p["spec"]["containers"][0]),
    )
    old, _ = call(core.create_namespaced_pod, namespace, pod)
    assert "NVIDIA_VISIBLE_DEVICES" not in _env(old["spec"]["containers"][0])
    # The claim replaced by one on another class.
    custom.delete_namespaced_custom_object(*args, name)
    custom.create_namespaced_custom_object(*args, _claim(namespace, name, "cpu.example.com"))
    probe = json.loads(json.dumps(pod))
    probe["metadata"]["name"] = unique("probe")
    _until(
        lambda: call(core.create_namespaced_pod, namespace, probe, dry_run="All"),
        lambda p: (
            _env(p["spec"]["containers"][0]).get("NVIDIA_VISIBLE_DEVICES") == "void"
            or mode != "enforce"
        ),
    )
    new = json.loads(json.dumps(old))
    del new["spec"]["schedulingGates"]
    expected = evaluate(
        new,
        policies,
        webhook_config,
        kind="Pod",
        namespace=namespace,
        operation="UPDATE",
        old_object=old,
        claims=ClaimIndex.from_objects([_claim(namespace, name, "cpu.example.com")]),
    )
    patch = [{"op": "remove", "path": "/spec/schedulingGates"}]
    pod_name = old["metadata"]["name"]
    if mode == "enforce":
        message = denial(
            core.patch_namespaced_pod, pod_name, namespace, patch, _content_type=JSON_PATCH
        )
        assert message == expected.denial_message()
        assert (
            'container "app" may get no device from its claims now, and its device variables '
            "are not void: recreate the pod"
        ) in message
        stored = core.read_namespaced_pod(pod_name, namespace)
        assert stored.spec.scheduling_gates
        return
    assert expected.allowed
    updated, _ = call(
        core.patch_namespaced_pod, pod_name, namespace, patch, _content_type=JSON_PATCH
    )
    assert not updated["spec"].get("schedulingGates")
