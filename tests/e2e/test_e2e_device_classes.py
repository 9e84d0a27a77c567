"""DeviceClasses by driver and KEP-5004 names on the real API server (SPEC §13 "DeviceClasses are
watched", issue 47 item 6): a DeviceClass `h100-<run>.example.com` selecting
`device.driver == 'gpu.nvidia.com'`, created here, makes a pod with a claim on it a GPU pod
(the webhook's CUDA placement and access rule, as NVIDIA's); a pod requesting
`deviceclass.resource.kubernetes.io/gpu.nvidia.com` (KEP-5004, the DRAExtendedResource gate:
beta and on by default in Kubernetes 1.36, which accepts the name) is placed as NVIDIA's, gets
no "not a known GPU resource" warning and, under gpuAccess enforce, no void over its devices.

The dry runs go through the webhook the session registered; each waits (bounded) until the
webhook's DeviceClass and claim-template caches have the new objects. With the real scheduler
(KAPI_CONTROLLERS=1), a KEP-5004 pod is also bound by it to the DRA-described node whose
driver runs its CUDA.
"""

from __future__ import annotations

import io
import json
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from webhook.cli import main
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.placement.inventory import NodeInventory
from webhook.core.policies.policyset import PolicySet
from webhook.core.workloads.claims import ClaimIndex
from webhook.sources.files import load_policy_dir

from .conftest import SHIPPED_POLICIES, Cluster, kapi_nodes, real_scheduler
from .test_e2e_admission import admitted_pod, call
from .test_e2e_dra_inventory import _slice
from .test_e2e_operators import _serves_resource_v1

pytestmark = pytest.mark.e2e

RUN = uuid.uuid4().hex[:6]
CLASS = f"h100-{RUN}.example.com"
NVIDIA = "device.driver == 'gpu.nvidia.com'"
IMPLICIT = "deviceclass.resource.kubernetes.io/gpu.nvidia.com"
CACHE_SECONDS = 20.0
CUDA_12_4 = "nvidia/cuda:12.4.1-base-ubuntu22.04"
RESOURCE = ("resource.k8s.io", "v1")


@pytest.fixture(scope="module")
def shipped() -> PolicySet:
    return load_policy_dir(SHIPPED_POLICIES)


def device_class(name: str, expression: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


@pytest.fixture(scope="module")
def custom(cluster: Cluster) -> Any:
    from kubernetes import client

    if not _serves_resource_v1(cluster):
        pytest.skip("resource.k8s.io/v1 (DRA, Kubernetes >= 1.34) is not served by this cluster")
    return client.CustomObjectsApi(cluster.api)


@pytest.fixture(scope="module")
def admin_class(custom: Any) -> Iterator[dict[str, Any]]:
    """An admin's DeviceClass on NVIDIA's driver, with a name no built-in rule knows."""
    body = device_class(CLASS, NVIDIA)
    custom.create_cluster_custom_object(*RESOURCE, "deviceclasses", body)
    try:
        yield body
    finally:
        custom.delete_cluster_custom_object(*RESOURCE, "deviceclasses", CLASS)


def pod(name: str, image: str, **container: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{name}-{uuid.uuid4().hex[:6]}"},
        "spec": {
            "containers": [
                {"name": "cuda", "image": image, "command": ["sleep", "3600"], **container}
            ]
        },
    }


def dry_run_until(core: Any, namespace: str, obj: dict[str, Any], done: Any) -> Any:
    """Dry-run create `obj` until `done(created)` (the webhook's caches caught up) or the
    bounded wait ends; the last (created, warnings)."""
    deadline = time.monotonic() + CACHE_SECONDS
    while True:
        created, shown = call(core.create_namespaced_pod, namespace, obj, dry_run="All")
        if done(created) or time.monotonic() > deadline:
            return created, shown
        time.sleep(1.0)


def stored_env(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The first container's env as the API server stores it (EnvVar.Value is omitempty)."""
    env = obj["spec"]["containers"][0].get("env") or []
    return [{k: v for k, v in e.items() if not (k == "value" and v == "")} for e in env]


def nvidia_void(created: dict[str, Any]) -> bool:
    env = created["spec"]["containers"][0].get("env") or []
    return {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in env


def test_a_claim_on_an_admin_class_of_nvidias_driver_is_a_gpu_claim(
    core: Any,
    custom: Any,
    namespace: str,
    shipped: PolicySet,
    webhook_config: WebhookConfig,
    placement_inventory: NodeInventory | None,
    admin_class: dict[str, Any],
) -> None:
    template: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": f"h100-{RUN}", "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS}}]}
            }
        },
    }
    custom.create_namespaced_custom_object(*RESOURCE, namespace, "resourceclaimtemplates", template)
    obj = pod("h100", CUDA_12_4, resources={"claims": [{"name": "gpu"}]})
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": f"h100-{RUN}"}]
    admitted = admitted_pod(obj, namespace)
    expected = evaluate(
        admitted,
        shipped,
        webhook_config,
        claims=ClaimIndex.from_objects([template, admin_class]),
        inventory=placement_inventory,
    )
    assert expected.mutated is not None and "cuda-affinity" in expected.mutation_kinds
    # By its name alone the class is nobody's: without the DeviceClass, no placement.
    by_name = evaluate(
        admitted,
        shipped,
        webhook_config,
        claims=ClaimIndex.from_objects([template]),
        inventory=placement_inventory,
    )
    assert "cuda-affinity" not in by_name.mutation_kinds
    created, shown = dry_run_until(core, namespace, obj, lambda c: c["spec"].get("affinity"))
    assert created["spec"].get("affinity") == expected.mutated["spec"]["affinity"], shown
    # The access rule as NVIDIA's device container (an empty value is stored as none).
    assert stored_env(created) == stored_env(expected.mutated)
    assert not nvidia_void(created)
    for line in expected.notes:
        assert line in shown


def test_a_kep_5004_name_is_placed_and_not_voided(
    core: Any,
    namespace: str,
    shipped: PolicySet,
    webhook_config: WebhookConfig,
    placement_inventory: NodeInventory | None,
) -> None:
    obj = pod("kep", CUDA_12_4, resources={"limits": {IMPLICIT: "1"}})
    expected = evaluate(
        admitted_pod(obj, namespace), shipped, webhook_config, inventory=placement_inventory
    )
    assert expected.mutated is not None and "cuda-affinity" in expected.mutation_kinds
    # The API server (1.36: DRAExtendedResource beta, on) admits the name; the webhook places
    # the pod as NVIDIA's.
    created, shown = call(core.create_namespaced_pod, namespace, obj, dry_run="All")
    assert created["spec"]["containers"][0]["resources"]["limits"] == {IMPLICIT: "1"}
    assert created["spec"].get("affinity") == expected.mutated["spec"]["affinity"], shown
    assert not any("not a known GPU resource" in w or "unknown GPU resource" in w for w in shown)
    # A device container: no void over the devices DRA hands it, whatever gpuAccess.mode.
    assert not nvidia_void(created)
    if webhook_config.gpu_access.mode == "enforce":
        # ... while a container without them gets NVIDIA's void under enforce.
        plain, _ = call(
            core.create_namespaced_pod,
            namespace,
            pod("plain", CUDA_12_4),
            dry_run="All",
        )
        assert nvidia_void(plain)


def test_the_scheduler_binds_a_kep_5004_pod_where_the_webhook_places_it(
    cluster: Cluster, core: Any, custom: Any, namespace: str
) -> None:
    """NVIDIA's DeviceClass gpu.nvidia.com (k8s-dra-driver-gpu's selector) and two nodes whose
    only GPUs are DRA devices: the scheduler's DRA extended-resource allocation can put the
    pod on either, the webhook's placement keeps it on the one whose driver runs CUDA 12.4."""
    scheduler = real_scheduler(cluster, "binding a KEP-5004 pod")
    expression = (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
    )
    from kubernetes.client.exceptions import ApiException

    try:
        custom.create_cluster_custom_object(
            *RESOURCE, "deviceclasses", device_class("gpu.nvidia.com", expression)
        )
        made_class = True
    except ApiException as exc:
        if exc.status != 409:
            raise
        made_class = False  # the cluster has NVIDIA's class already
    select, taint = "gaw-kep", "gaw-kep-only"
    specs = {"new": ({select: RUN}, "cpu=32"), "old": ({select: RUN}, "cpu=32")}
    slices: list[str] = []
    try:
        with kapi_nodes(
            core,
            cluster,
            scheduler,
            specs,
            prefix=f"gaw-kep-{RUN}",
            taint=f"{taint}={RUN}:NoSchedule",
        ) as names:
            for short, version in (("new", "12.8.0"), ("old", "12.2.0")):
                body = _slice(names[short], version, "9.0.0")
                custom.create_cluster_custom_object(*RESOURCE, "resourceslices", body)
                slices.append(body["metadata"]["name"])
            obj = pod(
                "kep-bind",
                CUDA_12_4,
                resources={"limits": {IMPLICIT: "1"}},
            )
            obj["spec"]["nodeSelector"] = {select: RUN}
            obj["spec"]["tolerations"] = [
                {"key": taint, "operator": "Equal", "value": RUN, "effect": "NoSchedule"}
            ]
            # The webhook's inventory must have the slices: retry the dry run until its
            # placement names the DRA node.
            created, shown = dry_run_until(
                core,
                namespace,
                obj,
                lambda c: names["new"] in str(c["spec"].get("affinity")),
            )
            assert names["new"] in str(created["spec"].get("affinity")), shown
            assert names["old"] not in str(created["spec"].get("affinity"))
            core.create_namespaced_pod(namespace, obj)
            name = obj["metadata"]["name"]
            deadline = time.monotonic() + 60
            bound = None
            while time.monotonic() < deadline and bound is None:
                found = core.read_namespaced_pod(name, namespace)
                bound = found.spec.node_name
                time.sleep(0.5)
            core.delete_namespaced_pod(name, namespace)
            assert bound == names["new"]
            # `gpu-webhook nodes` reads the same cluster the same way.
            out = io.StringIO()
            argv = ["nodes", "--kubeconfig", str(cluster.kubeconfig), "--image", CUDA_12_4]
            assert main([*argv, "-o", "json"], out=out) == 0
            found = {r["node"]: r for r in json.loads(out.getvalue())}
            assert found[names["new"]]["image"]["fit"] == "fit"
            assert found[names["old"]]["image"] == {
                "image": CUDA_12_4,
                "runtime": "CUDA 12.4",
                "fit": "unfit",
                "why": "CUDA 12.2 is not ≥ 12.4",
            }
            assert found[names["new"]]["device"]["product"] == "NVIDIA H100 80GB HBM3"
    finally:
        for sliced in slices:
            custom.delete_cluster_custom_object(*RESOURCE, "resourceslices", sliced)
        if made_class:
            custom.delete_cluster_custom_object(*RESOURCE, "deviceclasses", "gpu.nvidia.com")
