"""The benchmark's workload: a realistic mix of AdmissionReviews and a synthetic policy set."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]


def _review(obj: dict[str, Any], uid: str, group: str = "") -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": "v1", "kind": obj["kind"]},
            "resource": {"group": group, "version": "v1", "resource": obj["kind"].lower() + "s"},
            "namespace": meta["namespace"],
            "name": meta["name"],
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:kube-system:replicaset-controller",
                "groups": ["system:serviceaccounts", "system:authenticated"],
            },
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def _pod(name: str, containers: list[dict[str, Any]]) -> dict[str, Any]:
    # Shaped like what the API server sends: defaulted fields, labels, a service account volume.
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml-team",
            "labels": {"app": name, "pod-template-hash": "7d9f8b6c5"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{name}-7d9f8b6c5"}
            ],
        },
        "spec": {
            "containers": containers,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
            ],
            "volumes": [{"name": "kube-api-access", "projected": {"sources": []}}],
        },
    }


def _container(name: str, image: str, limits: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "resources": {"limits": limits, "requests": {"cpu": "1", "memory": "2Gi"}},
        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
        "terminationMessagePath": "/dev/termination-log",
        "imagePullPolicy": "IfNotPresent",
        **extra,
    }


def workload_mix() -> list[tuple[str, bytes]]:
    """(endpoint, body) pairs in the proportions a GPU cluster's webhook sees."""
    paddle = _pod(
        "paddle-train",
        [
            _container(
                "train",
                "paddlepaddle/paddle:2.6.1-gpu-cuda11.8-cudnn8.6-trt8.5",
                {"tencent.com/vcuda-core": "50", "cpu": "4", "memory": "16Gi"},
            )
        ],
    )
    torch = _pod(
        "torch-infer",
        [
            _container(
                "infer",
                "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime",
                {"nvidia.com/gpu": "1", "cpu": "4", "memory": "16Gi"},
            ),
            _container("sidecar", "envoyproxy/envoy:v1.30.1", {"cpu": "500m", "memory": "256Mi"}),
        ],
    )
    web = _pod("web", [_container("nginx", "nginx:1.27", {"cpu": "1", "memory": "512Mi"})])
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vllm", "namespace": "ml-team"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "vllm"}},
            "template": {
                "metadata": {"labels": {"app": "vllm"}},
                "spec": {
                    "containers": [
                        _container(
                            "vllm",
                            "vllm/vllm-openai:v0.8.5",
                            {"nvidia.com/gpu": "1"},
                            env=[{"name": "CUDA_VERSION", "value": "12.4.1"}],
                        )
                    ]
                },
            },
        },
    }
    objects = [(paddle, "", 4), (torch, "", 3), (web, "", 2), (deployment, "apps", 1)]
    from webhook.core.config import WebhookConfig
    from webhook.core.evaluate import evaluate
    from webhook.sources.files import load_policy_dir

    shipped = load_policy_dir(REPO / "configmaps")
    mix: list[tuple[str, bytes]] = []
    for index, (obj, group, weight) in enumerate(objects):
        # The API server calls the mutating webhook, applies its patch, then calls the
        # validating webhook with the result: /validate sees the mutated object.
        mutated = evaluate(obj, shipped, WebhookConfig()).mutated or obj
        for copy in range(weight):
            for endpoint, sent in (("/mutate", obj), ("/validate", mutated)):
                body = json.dumps(_review(dict(sent), f"bench-{index}-{copy}", group)).encode()
                mix.append((endpoint, body))
    return mix


def generate_policies(directory: Path, total: int) -> Path:
    """The shipped configmaps/ plus synthetic CRLs up to `total` policies."""
    from webhook.core.crl import crl_configmap

    directory.mkdir(parents=True, exist_ok=True)
    shipped = sorted((REPO / "configmaps").glob("*.yaml"))
    for path in shipped:
        shutil.copy(path, directory / path.name)
    for i in range(max(0, total - len(shipped))):
        group = f"bench-{i // 4}"
        name = f"cf-crl-{group}-res{i}"
        cm = crl_configmap(
            name,
            {
                "key": f"bench{i // 4}.example.com/res{i}",
                "dataType": "integer",
                "defaultValue": "1",
                "descriptionEn": f"synthetic benchmark resource {i}",
                "group": group,
                "limits": "optional",
                "requests": "fromLimits",
                "max": "64",
            },
        )
        (directory / f"{name}.yaml").write_text(yaml.safe_dump(cm))
    return directory
