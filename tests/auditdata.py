"""Workloads as they run in a cluster, for the audit's tests and benchmark: a Deployment with
its ReplicaSet and pods, a PyTorchJob with its worker pods, each pod as the API server stores it
(requests defaulted from limits) after the webhook admitted it (CUDA affinity injected)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.fakekube import FakeKube, node
from tests.helpers import CONFIGMAPS as CONFIGMAPS_DIR
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.placement.inventory import NodeInventory
from webhook.core.policies.policyset import PolicySet
from webhook.sources.files import policy_files, read_documents

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


MANUAL_12_4 = {"cuda-major-version": "12", "cuda-minor-version": "4"}


def shipped_policies() -> list[dict[str, Any]]:
    """The repository's configmaps/, as documents."""
    return [doc for file in policy_files(CONFIGMAPS_DIR) for doc in read_documents(file) if doc]


def proposed_policies(directory: Path, max_gpus: str = "4") -> Path:
    """The shipped CRLs with nvidia.com/gpu capped at `max_gpus`: the change under review."""
    directory.mkdir()
    for doc in shipped_policies():
        if doc["data"]["key"] == GPU:
            doc["data"]["max"] = max_gpus
        (directory / f"{doc['metadata']['name']}.yaml").write_text(yaml.safe_dump(doc))
    return directory


def single_pod(
    namespace: str, name: str, gpus: str, phase: str = "Running", container: str = "main"
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"{namespace}.{name}"},
        "spec": {"containers": [gpu_container(container, gpus)]},
        "status": {"phase": phase},
    }


def populate(kube: FakeKube, config: WebhookConfig | None = None) -> None:
    """Workloads admitted under the shipped policies (no max), on two CUDA 12.4 nodes:
    ml/train (Deployment, 3 pods, 8 GPUs), ml/bert (PyTorchJob, 2 workers, 8 GPUs), ml/small
    (Deployment, 2 pods, 1 GPU), research/old (a pod from before the webhook: no CUDA
    affinity) and ml/done (a finished pod)."""
    config = config or WebhookConfig()
    for doc in shipped_policies():
        kube.put(doc)
    nodes = [node("gpu-1", MANUAL_12_4), node("gpu-2", MANUAL_12_4)]
    for item in nodes:
        kube.put(item)
    policies = PolicySet.from_configmaps(shipped_policies())
    inventory = NodeInventory.from_objects(nodes, config)
    context: dict[str, Any] = {"policies": policies, "config": config, "inventory": inventory}
    made = [
        *deployment_family("ml", "train", gpus="8", replicas=3, **context),
        *pytorchjob_family("ml", "bert", gpus="8", workers=2, **context),
        *deployment_family("ml", "small", gpus="1", replicas=2, **context),
    ]
    old = single_pod("research", "old", "2")
    old["spec"]["containers"][0]["resources"]["requests"] = {
        GPU: "2"
    }  # as the API server stores it
    done = admitted_pod(single_pod("ml", "done", "8", container="c"), policies, config, inventory)
    done["status"] = {"phase": "Succeeded"}
    for obj in [*made, old, done]:
        kube.put(obj)
