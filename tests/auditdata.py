"""Workloads as they run in a cluster, for the audit's tests and benchmark: a Deployment with
its ReplicaSet and pods, a PyTorchJob with its worker pods, each pod as the API server stores it
(requests defaulted from limits) after the webhook admitted it (CUDA affinity injected)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from webhook.core.config import WebhookConfig
from webhook.core.evaluate import evaluate
from webhook.core.inventory import NodeInventory
from webhook.core.policyset import PolicySet

IMAGE = "nvidia/cuda:12.4.1-runtime-ubuntu22.04"
GPU = "nvidia.com/gpu"


def controlled_by(owner: Mapping[str, Any]) -> list[dict[str, Any]]:
    """ownerReferences naming `owner` as controller, as its controller writes them."""
    meta = owner["metadata"]
    return [
        {
            "apiVersion": owner["apiVersion"],
            "kind": owner["kind"],
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def gpu_container(name: str, gpus: str, image: str = IMAGE) -> dict[str, Any]:
    return {"name": name, "image": image, "resources": {"limits": {GPU: gpus}}}


def template(name: str, gpus: str, labels: Mapping[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"labels": dict(labels)},
        "spec": {"containers": [gpu_container(name, gpus)]},
    }


def admitted_pod(
    pod: dict[str, Any],
    policies: PolicySet,
    config: WebhookConfig,
    inventory: NodeInventory | None,
) -> dict[str, Any]:
    """The pod as stored: the API server defaults a container's requests from its limits
    (k8s.io/kubernetes pkg/apis/core/v1/defaults.go SetDefaults_Pod, before admission), then
    the webhook's patch of that time is applied."""
    for c in pod["spec"]["containers"]:
        resources = c.setdefault("resources", {})
        resources.setdefault("requests", dict(resources.get("limits") or {}))
    decision = evaluate(pod, policies, config, kind="Pod", group="", inventory=inventory)
    return copy.deepcopy(dict(decision.mutated)) if decision.mutated is not None else pod


def deployment_family(
    namespace: str,
    name: str,
    *,
    gpus: str,
    replicas: int,
    policies: PolicySet,
    config: WebhookConfig,
    inventory: NodeInventory | None = None,
) -> list[dict[str, Any]]:
    """A Deployment, the ReplicaSet its controller made and `replicas` running pods."""
    labels = {"app": name}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "uid": f"{namespace}.{name}.deploy"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": template("train", gpus, labels),
        },
    }
    hashed = {**labels, "pod-template-hash": "5d8f9c"}
    replicaset = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{name}-5d8f9c",
            "namespace": namespace,
            "uid": f"{namespace}.{name}.rs",
            "labels": hashed,
            "ownerReferences": controlled_by(deployment),
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": hashed},
            "template": template("train", gpus, hashed),
        },
    }
    pods = []
    for index in range(replicas):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-5d8f9c-{index:05d}",
                "namespace": namespace,
                "uid": f"{namespace}.{name}.pod.{index}",
                "labels": hashed,
                "ownerReferences": controlled_by(replicaset),
            },
            "spec": {"containers": [gpu_container("train", gpus)]},
            "status": {"phase": "Running"},
        }
        pods.append(admitted_pod(pod, policies, config, inventory))
    return [deployment, replicaset, *pods]


def pytorchjob_family(
    namespace: str,
    name: str,
    *,
    gpus: str,
    workers: int,
    policies: PolicySet,
    config: WebhookConfig,
    inventory: NodeInventory | None = None,
) -> list[dict[str, Any]]:
    """A kubeflow.org/v1 PyTorchJob and the worker pods its operator created, controlled by the
    job itself (kubeflow/common pkg/controller.v1/common JobController.GenOwnerReference:
    Controller: true, the job's kind and uid)."""
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace, "uid": f"{namespace}.{name}.job"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": workers,
                    "template": {"spec": {"containers": [gpu_container("pytorch", gpus)]}},
                }
            }
        },
    }
    pods = []
    for index in range(workers):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-worker-{index}",
                "namespace": namespace,
                "uid": f"{namespace}.{name}.worker.{index}",
                "ownerReferences": controlled_by(job),
            },
            "spec": {"containers": [gpu_container("pytorch", gpus)]},
            "status": {"phase": "Running"},
        }
        pods.append(admitted_pod(pod, policies, config, inventory))
    return [job, *pods]
