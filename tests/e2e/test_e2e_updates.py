"""Updates after a policy was tightened (SPEC §6): users and controllers are never wedged.

Runs in either E2E mode, including `url` on a bare API server without nodes or a controller
manager: the ReplicaSet the Deployment controller would make is created by the test itself,
with the same controller ownerReference, and scaled down the way the controller does it (an
UPDATE of spec.replicas) and the way `kubectl scale` does it (the scale subresource).
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

from .test_e2e_admission import (
    POLICY_PROPAGATION_SECONDS,
    call,
    crl_configmap,
    denial,
    gpu_deployment,
    unique,
)

pytestmark = pytest.mark.e2e


@pytest.fixture
def widget(core: Any) -> Iterator[str]:
    """A key no shipped policy governs; the CRL made for it is removed afterwards."""
    from kubernetes.client.exceptions import ApiException

    key = f"example.com/widget{uuid.uuid4().hex[:6]}"
    yield key
    name = f"cf-crl-e2e-{key.split('/')[1]}"
    try:
        core.delete_namespaced_config_map(name, "kube-public")
    except ApiException as exc:
        if exc.status != 404:
            raise


def owned_replicaset(deployment: dict[str, Any], replicas: int) -> dict[str, Any]:
    """The ReplicaSet the Deployment controller would create for `deployment`."""
    meta = deployment["metadata"]
    labels = {**deployment["spec"]["selector"]["matchLabels"], "pod-template-hash": "e2e"}
    template = copy.deepcopy(deployment["spec"]["template"])
    template["metadata"]["labels"] = labels
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{meta['name']}-e2e",
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": template},
    }


def wait_until_denied(apps: Any, namespace: str, probe: dict[str, Any]) -> str:
    """Dry-run creates of `probe` until the webhook's watch has the tightened policy."""
    from kubernetes.client.exceptions import ApiException

    deadline = time.monotonic() + POLICY_PROPAGATION_SECONDS
    while time.monotonic() < deadline:
        try:
            apps.create_namespaced_deployment(namespace, probe, dry_run="All")
        except ApiException:
            return denial(apps.create_namespaced_deployment, namespace, probe, dry_run="All")
        time.sleep(0.5)
    raise AssertionError(
        f"the tightened policy was not enforced within {POLICY_PROPAGATION_SECONDS:.0f}s"
    )


def test_label_and_scale_down_still_work_after_the_policy_is_tightened(
    core: Any, apps: Any, namespace: str, widget: str, webhook_config: WebhookConfig
) -> None:
    # Created while nothing limits the widget: 8 per pod.
    deployment, _ = call(
        apps.create_namespaced_deployment, namespace, gpu_deployment(unique("train"), {widget: "8"})
    )
    name = deployment["metadata"]["name"]
    replicaset, _ = call(
        apps.create_namespaced_replica_set, namespace, owned_replicaset(deployment, replicas=2)
    )

    # The admin tightens the policy: at most 4.
    policy = crl_configmap(f"cf-crl-e2e-{widget.split('/')[1]}", widget, max="4")
    call(core.create_namespaced_config_map, "kube-public", policy)
    tightened = PolicySet.from_configmaps([policy])
    probe = gpu_deployment(unique("probe"), {widget: "8"})
    expected = evaluate(
        {**probe, "metadata": {**probe["metadata"], "namespace": namespace}},
        tightened,
        webhook_config,
        kind="Deployment",
        namespace=namespace,
    )
    assert not expected.allowed
    assert wait_until_denied(apps, namespace, probe) == expected.denial_message()

    # `kubectl label deployment NAME team=ml` is this PATCH (an UPDATE for admission).
    labelled, shown = call(
        apps.patch_namespaced_deployment, name, namespace, {"metadata": {"labels": {"team": "ml"}}}
    )
    assert labelled["metadata"]["labels"] == {"team": "ml"}
    assert shown == []

    # The Deployment controller scales an old ReplicaSet down with an UPDATE of spec.replicas
    # (pkg/controller/deployment/sync.go, scaleReplicaSet) ...
    rs_name = replicaset["metadata"]["name"]
    scaled, shown = call(
        apps.patch_namespaced_replica_set, rs_name, namespace, {"spec": {"replicas": 1}}
    )
    assert scaled["spec"]["replicas"] == 1
    assert shown == []
    # ... and `kubectl scale` goes through the scale subresource.
    scale, shown = call(
        apps.patch_namespaced_replica_set_scale, rs_name, namespace, {"spec": {"replicas": 0}}
    )
    # autoscaling/v1 ScaleSpec.Replicas is `json:"replicas,omitempty"`: 0 is left out.
    assert scale["spec"].get("replicas", 0) == 0
    assert shown == []

    # A change of what the evaluation reads (an env variable an env fix sets) is checked
    # against the tightened policy; a foreign annotation or an unrelated variable alone would
    # not be (SPEC §6; evaluation/updates.py).
    container = labelled["spec"]["template"]["spec"]["containers"][0]
    env = [{"name": "FLAGS_allocator_strategy", "value": "auto_growth"}]
    changed = {
        "spec": {"template": {"spec": {"containers": [{"name": container["name"], "env": env}]}}}
    }
    new_template = copy.deepcopy(labelled)
    new_template["spec"]["template"]["spec"]["containers"][0]["env"] = env
    expected_update = evaluate(
        new_template,
        tightened,
        webhook_config,
        kind="Deployment",
        namespace=namespace,
        operation="UPDATE",
        old_object=labelled,
    )
    assert not expected_update.allowed
    message = denial(apps.patch_namespaced_deployment, name, namespace, changed)
    assert message == expected_update.denial_message()


def suspended_job(name: str, limits: dict[str, str]) -> dict[str, Any]:
    """A Job queued by Kueue: created suspended (kueue sets spec.suspend on create)."""
    pod = gpu_deployment(name, limits)["spec"]["template"]
    pod["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "gpu"}},
        "spec": {"suspend": True, "template": pod},
    }


def test_kueue_starts_and_evicts_a_queued_job_after_the_policy_is_tightened(
    core: Any, namespace: str, widget: str, webhook_config: WebhookConfig
) -> None:
    """Issue 18, defect 1: Kueue starts an admitted Job with one UPDATE (suspend: false and
    its ResourceFlavor's nodeSelector/tolerations in the template: kueue pkg/podset/podset.go
    Merge) and restores the template on eviction. The API server accepts that change for a
    suspended Job that never started (pkg/apis/batch/validation, validatePodTemplateUpdate);
    the webhook must not deny it because a policy was tightened since the Job was created."""
    from kubernetes import client

    batch = client.BatchV1Api(core.api_client)
    name = unique("queued")
    call(batch.create_namespaced_job, namespace, suspended_job(name, {widget: "8"}))

    policy = crl_configmap(f"cf-crl-e2e-{widget.split('/')[1]}", widget, max="4")
    call(core.create_namespaced_config_map, "kube-public", policy)
    apps = client.AppsV1Api(core.api_client)
    probe = gpu_deployment(unique("probe"), {widget: "8"})
    wait_until_denied(apps, namespace, probe)  # the webhook has the tightened policy now

    start = {
        "spec": {
            "suspend": False,
            "template": {
                "metadata": {"labels": {"kueue.x-k8s.io/podset": "main"}},
                "spec": {
                    "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                },
            },
        }
    }
    started, shown = call(batch.patch_namespaced_job, name, namespace, start)
    assert started["spec"]["suspend"] is False
    assert started["spec"]["template"]["spec"]["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-h100-80gb"
    }
    assert shown == []

    # Eviction: Kueue suspends the Job, then restores the template's scheduling fields. Two
    # UPDATEs: the API server allows scheduling changes only when the *old* Job is suspended
    # and never started (pkg/registry/batch/job/strategy.go, validationOptionsForJob).
    suspended, shown = call(
        batch.patch_namespaced_job, name, namespace, {"spec": {"suspend": True}}
    )
    assert suspended["spec"]["suspend"] is True
    assert shown == []
    # A JSON merge patch: null removes the entries.
    restore = {
        "spec": {
            "template": {
                "metadata": {"labels": {"kueue.x-k8s.io/podset": None}},
                "spec": {"nodeSelector": None, "tolerations": None},
            },
        }
    }
    restored, shown = call(
        batch.patch_namespaced_job,
        name,
        namespace,
        restore,
        _content_type="application/merge-patch+json",
    )
    assert "nodeSelector" not in restored["spec"]["template"]["spec"]
    assert shown == []
