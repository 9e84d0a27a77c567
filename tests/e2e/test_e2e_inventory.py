"""Cluster-aware placement through a real API server (issue 11, SPEC §4): the test creates
Node objects (no kubelet needed: a Node is an API object), waits until the webhook's node
inventory has them, and checks what `kubectl apply --dry-run=server` shows.

Works on a bare API server without nodes (E2E_MODE=url) and on kind. The expected objects and
messages come from the webhook's own evaluation core with the inventory built from the
cluster's Nodes, so real GPU nodes in the cluster change the expectation, not the verdict.
The webhook's `noCompatibleNode` is the chart's default (warn) unless E2E_WEBHOOK_CONFIG names
the config file it runs with; the test checks the warning or the denial accordingly.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from webhook.core.base.versions import CudaVersion
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import Decision, evaluate
from webhook.core.placement.inventory import NodeInventory
from webhook.core.policies.policyset import PolicySet

from .conftest import INVENTORY_PROPAGATION_SECONDS, InventoryReader, NodeMaker, synced_inventory
from .test_e2e_admission import (
    admitted_pod,
    denial,
    dry_run_until,
    expected_for,
    gpu_pod,
    unique,
)

pytestmark = pytest.mark.e2e

GFD_MAJOR = "nvidia.com/cuda.runtime-version.major"
GFD_MINOR = "nvidia.com/cuda.runtime-version.minor"
CUDA_ANNOTATION = "features.alauda.io/cuda-version"


def cuda_pod(version: str) -> dict[str, Any]:
    """A one-GPU pod declaring the CUDA version it needs."""
    pod = gpu_pod(unique("cuda"), {"nvidia.com/gpu": "1"}, image="busybox:1.36")
    pod["metadata"]["annotations"] = {CUDA_ANNOTATION: version}
    return pod


def expected_decisions(
    pod: dict[str, Any],
    namespace: str,
    policies: PolicySet,
    config: WebhookConfig,
    inventory: NodeInventory | None,
) -> tuple[Decision, Decision]:
    """What the mutating webhook answers, and what the validating one answers for the pod
    the API server stores after the mutation (re-defaulted)."""
    mutating = expected_for(pod, namespace, policies, config, inventory)
    stored = admitted_pod(dict(mutating.mutated or admitted_pod(pod, namespace)), namespace)
    validating = evaluate(
        stored, policies, config, kind="Pod", namespace=namespace, inventory=inventory
    )
    return mutating, validating


def highest_cuda(inventory: NodeInventory, config: WebhookConfig) -> CudaVersion:
    return max(inventory.facts(config).cuda)


def test_pod_needing_a_newer_cuda_than_any_node_is_warned_or_denied(
    core: Any,
    namespace: str,
    policies: PolicySet,
    webhook_config: WebhookConfig,
    make_nodes: NodeMaker,
    webhook_inventory: InventoryReader,
) -> None:
    make_nodes({"gfd": {GFD_MAJOR: "12", GFD_MINOR: "2"}})
    inventory, confirmed = synced_inventory(core, webhook_inventory, webhook_config)
    if inventory is None:
        pytest.skip("the webhook has no node inventory (switched off, or it cannot read Nodes)")
    top = highest_cuda(inventory, webhook_config)
    assert top >= CudaVersion(12, 2)
    # One minor version above every node in the cluster (ours is 12.2 unless real GPU nodes
    # advertise more): no node can run it.
    needed = CudaVersion(top.major, top.minor + 1)
    pod = cuda_pod(str(needed))
    count = inventory.facts(webhook_config).cuda[top]
    text = (
        f"no node supports CUDA {needed}; "
        f"highest available is {top} ({count} node{'s' if count != 1 else ''})"
    )
    if top == CudaVersion(12, 2) and count == 1:
        # The cluster's only labelled node is ours: the exact sentence users see.
        assert text == "no node supports CUDA 12.3; highest available is 12.2 (1 node)"
    mutating, validating = expected_decisions(pod, namespace, policies, webhook_config, inventory)

    if webhook_config.no_compatible_node == "warn":
        assert mutating.allowed and validating.allowed
        assert text in mutating.warnings
        # The dry runs also wait (bounded) for the webhook to see the node when /inventory
        # could not confirm it.
        returned, shown = dry_run_until(core, namespace, pod, lambda _, shown: text in shown)
        for line in (*mutating.notes, *mutating.warnings):
            assert line in shown
        # The affinity is still required: the pod waits for a suitable node rather than
        # crashing on an old driver.
        assert mutating.mutated is not None
        assert returned["spec"]["affinity"] == mutating.mutated["spec"]["affinity"]
        return

    # noCompatibleNode: deny, by the mutating webhook already (or else the validating one).
    expected = validating if mutating.allowed else mutating
    assert not expected.allowed
    if not confirmed:
        wait_for_denial(core, namespace, pod)
    message = denial(core.create_namespaced_pod, namespace, pod, dry_run="All")
    assert message == expected.denial_message()
    assert f"{text}." in message


def test_pod_affinity_uses_the_label_scheme_the_nodes_carry(
    core: Any,
    namespace: str,
    policies: PolicySet,
    webhook_config: WebhookConfig,
    make_nodes: NodeMaker,
    webhook_inventory: InventoryReader,
) -> None:
    make_nodes({"gfd": {GFD_MAJOR: "12", GFD_MINOR: "4"}})
    inventory, _ = synced_inventory(core, webhook_inventory, webhook_config)
    if inventory is None:
        pytest.skip("the webhook has no node inventory (switched off, or it cannot read Nodes)")
    pod = cuda_pod("12.4")
    mutating, _ = expected_decisions(pod, namespace, policies, webhook_config, inventory)
    assert mutating.allowed and mutating.mutated is not None
    want = mutating.mutated["spec"]["affinity"]
    # Our node carries only GFD's labels, so GFD's keys are among the injected terms (the
    # reference's cuda-major-version too only if some other node of the cluster carries it).
    keys = {
        e["key"]
        for term in want["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        for e in term["matchExpressions"]
    }
    assert GFD_MAJOR in keys

    returned, shown = dry_run_until(
        core, namespace, pod, lambda p, _: p["spec"].get("affinity") == want
    )

    assert returned["spec"].get("affinity") == want
    for line in (*mutating.notes, *mutating.warnings):
        assert line in shown


def wait_for_denial(core: Any, namespace: str, pod: dict[str, Any]) -> None:
    """Dry runs until the webhook denies `pod` (bounded; the caller then checks the message)."""
    from kubernetes.client.exceptions import ApiException

    deadline = time.monotonic() + INVENTORY_PROPAGATION_SECONDS
    while time.monotonic() < deadline:
        try:
            core.create_namespaced_pod(namespace, pod, dry_run="All")
        except ApiException:
            return
        time.sleep(0.5)
