"""Operator workloads and DRA through a real API server (SPEC §6).

A schema-less CRD for Kubeflow's PyTorchJob is enough for the API server to call the webhook
(the chart's `operators` webhook selects kubeflow.org/pytorchjobs); a server-side dry run,
what `kubectl apply --dry-run=server` sends, must be denied naming the replica. The DRA case
runs only where resource.k8s.io/v1 is served. Expected messages come from the webhook's own
evaluation core with the shipped configmaps/, as in test_e2e_admission.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.placement.inventory import NodeInventory
from webhook.core.policies.policyset import PolicySet
from webhook.core.workloads.claims import ClaimIndex
from webhook.sources.files import load_policy_dir

from .conftest import SHIPPED_POLICIES, Cluster
from .test_e2e_admission import admitted_pod, call, denial

pytestmark = pytest.mark.e2e

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"
TORCH_IMAGE = "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime"
# Bounded waits: a CRD becoming Established, a new claim template reaching the webhook's cache.
ESTABLISHED_SECONDS = 30.0
CACHE_SECONDS = 20.0


@pytest.fixture(scope="module")
def shipped() -> PolicySet:
    return load_policy_dir(SHIPPED_POLICIES)


@pytest.fixture(scope="module")
def config(webhook_config: WebhookConfig) -> WebhookConfig:
    return webhook_config  # the chart's defaults unless E2E_WEBHOOK_CONFIG says otherwise


@pytest.fixture(scope="module")
def operators_webhook(webhook_installed: list[str]) -> None:
    if not any(name.startswith("operators.") for name in webhook_installed):
        pytest.skip("the operators webhook is not registered (chart value webhooks.operators)")


@pytest.fixture(scope="module")
def pytorchjob_crd(cluster: Cluster, operators_webhook: None) -> Iterator[None]:
    """A schema-less PyTorchJob CRD, unless the cluster already has one (then it is kept)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    ext = client.ApiextensionsV1Api(cluster.api)
    name = f"{PLURAL}.{GROUP}"
    try:
        ext.read_custom_resource_definition(name)
        exists = True
    except ApiException as exc:
        if exc.status != 404:
            raise
        exists = False
    if exists:
        yield
        return
    crd: Any = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": PLURAL, "singular": "pytorchjob", "kind": "PyTorchJob"},
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    ext.create_custom_resource_definition(crd)
    try:
        deadline = time.monotonic() + ESTABLISHED_SECONDS
        while True:
            status = ext.read_custom_resource_definition(name).status
            conditions = (status.conditions if status else None) or []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                break
            assert time.monotonic() < deadline, f"CRD {name} not Established in time"
            time.sleep(0.5)
        yield
    finally:
        ext.delete_custom_resource_definition(name)


def pytorchjob(name: str, worker_limits: dict[str, str]) -> dict[str, Any]:
    def replica(limits: dict[str, str]) -> dict[str, Any]:
        container = {"name": "pytorch", "image": TORCH_IMAGE, "resources": {"limits": limits}}
        return {"replicas": 1, "template": {"spec": {"containers": [container]}}}

    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": replica({"nvidia.com/gpu": "1"}),
                "Worker": replica(worker_limits),
            }
        },
    }


def test_dry_run_of_a_bad_pytorchjob_is_denied_naming_the_replica(
    cluster: Cluster,
    namespace: str,
    pytorchjob_crd: None,
    shipped: PolicySet,
    config: WebhookConfig,
    placement_inventory: NodeInventory | None,
) -> None:
    from kubernetes import client

    job = pytorchjob(f"bert-{uuid.uuid4().hex[:6]}", {"tencent.com/vcuda-core": "150"})
    expected = evaluate(job, shipped, config, namespace=namespace, inventory=placement_inventory)
    assert not expected.allowed

    custom = client.CustomObjectsApi(cluster.api)
    message = denial(
        custom.create_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, job,
        dry_run="All",
    )  # fmt: skip

    assert message == expected.denial_message()
    assert ', replica Worker, container "pytorch": ' in message


def test_dry_run_of_a_good_pytorchjob_says_what_its_pods_will_get(
    cluster: Cluster,
    namespace: str,
    pytorchjob_crd: None,
    shipped: PolicySet,
    config: WebhookConfig,
    placement_inventory: NodeInventory | None,
) -> None:
    from kubernetes import client

    job = pytorchjob(f"ok-{uuid.uuid4().hex[:6]}", {"nvidia.com/gpu": "2"})
    expected = evaluate(job, shipped, config, namespace=namespace, inventory=placement_inventory)
    assert expected.allowed and expected.notes

    custom = client.CustomObjectsApi(cluster.api)
    returned, shown = call(
        custom.create_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, job,
        dry_run="All",
    )  # fmt: skip

    assert any(n.startswith("will apply to replica Worker pods: ") for n in expected.notes)
    for line in (*expected.notes, *expected.warnings):
        assert line in shown
    assert returned["spec"] == job["spec"]  # never mutated


def _serves_resource_v1(cluster: Cluster) -> bool:
    from kubernetes import client

    groups = client.ApisApi(cluster.api).get_api_versions().groups or []
    return any(
        g.name == "resource.k8s.io" and any(v.version == "v1" for v in g.versions) for g in groups
    )


def test_dra_pod_gets_cuda_placement(
    cluster: Cluster,
    core: Any,
    namespace: str,
    shipped: PolicySet,
    config: WebhookConfig,
    placement_inventory: NodeInventory | None,
) -> None:
    from kubernetes import client

    if not _serves_resource_v1(cluster):
        pytest.skip("resource.k8s.io/v1 (DRA, Kubernetes >= 1.34) is not served by this cluster")
    template: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": f"gpu-{uuid.uuid4().hex[:6]}", "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
                }
            }
        },
    }
    custom = client.CustomObjectsApi(cluster.api)
    custom.create_namespaced_custom_object(
        "resource.k8s.io", "v1", namespace, "resourceclaimtemplates", template
    )
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"dra-{uuid.uuid4().hex[:6]}",
            "annotations": {"features.alauda.io/cuda-version": "12.4"},
        },
        "spec": {
            "containers": [
                {
                    "name": "cuda",
                    "image": "ubuntu:22.04",
                    "command": ["sleep", "3600"],
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
            "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": template["metadata"]["name"]}
            ],
        },
    }
    index = ClaimIndex.from_objects([template])
    expected = evaluate(
        admitted_pod(pod, namespace),
        shipped,
        config,
        claims=index,
        inventory=placement_inventory,
    )
    assert expected.mutated is not None and "cuda-affinity" in expected.mutation_kinds
    # The webhook sees the new template through its watch: retry the dry run until it does.
    deadline = time.monotonic() + CACHE_SECONDS
    while True:
        created, shown = call(core.create_namespaced_pod, namespace, pod, dry_run="All")
        if created["spec"].get("affinity") or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    assert created["spec"].get("affinity") == expected.mutated["spec"]["affinity"], shown
    for line in expected.notes:
        assert line in shown
