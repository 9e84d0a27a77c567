"""What the server benchmarks send and load: a realistic mix of AdmissionReviews (as bodies, and
as templates for the C load generators), the shipped policies and synthetic CRL policy sets."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml

from bench.harness import REPO


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
            "name": meta.get("name", ""),
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


def _mix_objects() -> list[tuple[dict[str, Any], str, int]]:
    """(object, API group, weight): the proportions a GPU cluster's webhook sees."""
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
    return [(paddle, "", 4), (torch, "", 3), (web, "", 2), (deployment, "apps", 1)]


def workload_mix() -> list[tuple[str, bytes]]:
    """(endpoint, body) pairs in the proportions a GPU cluster's webhook sees."""
    objects = _mix_objects()
    from bench.harness.core import WebhookConfig, evaluate
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
    from bench.harness.core import crl_configmap

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


def policy_configmaps(policies: Path) -> list[dict[str, Any]]:
    """The ConfigMaps of a policy directory, read as the file source reads them."""
    from webhook.sources.files import policy_files, read_documents

    return [
        doc
        for file in policy_files(policies)
        for doc in read_documents(file)
        if isinstance(doc, dict) and doc.get("kind") == "ConfigMap"
    ]


def _mutated(obj: dict[str, Any]) -> dict[str, Any]:
    from bench.harness.core import WebhookConfig, evaluate
    from webhook.sources.files import load_policy_dir

    shipped = load_policy_dir(REPO / "configmaps")
    return dict(evaluate(obj, shipped, WebhookConfig()).mutated or obj)


def _template(endpoint: str, obj: dict[str, Any], group: str, name: str) -> tuple[str, str]:
    review = _review(obj, "@UID@", group)
    review["request"]["name"] = name
    return endpoint, json.dumps(review, separators=(",", ":"))


def server_templates(mix: str) -> list[tuple[str, str]]:
    """Templates for the C load generators (load/wrk.py, load/openloop.py), in the mix's
    proportions.

    distinct: every request carries a different object (a counter in its name and in an env
      value of every container, both read by the evaluation), so no cache can answer it.
    replicas: what a ReplicaSet or Job creating many pods sends. The API server calls mutating
      admission before it generates the name of a `generateName` object, and validating
      admission after (k8s.io/apiserver pkg/endpoints/handlers/create.go: mutatingAdmission.Admit
      runs before requestFunc, whose r.Create calls rest.BeforeCreate, which sets the name from
      GenerateName, then the createValidation func; registry/rest/create.go BeforeCreate). So
      the /mutate bodies of one template's pods are byte-identical but for the request uid, and
      the /validate bodies differ in the generated name too.
    """
    rows: list[tuple[str, str]] = []
    for original, group, weight in _mix_objects():
        obj = json.loads(json.dumps(original))
        meta = obj["metadata"]
        base = meta["name"]
        # The field manager records the request's time before admission (both calls).
        meta["managedFields"] = [_managed_fields(obj["kind"])]
        if mix == "distinct":
            meta["name"] = f"{base}-@SEQ@"
            for container in _containers(obj):
                container.setdefault("env", []).append({"name": "BENCH_SEQ", "value": "@SEQ@"})
            mutated = _created(_mutated(obj))
            for _ in range(weight):
                rows.append(_template("/mutate", obj, group, meta["name"]))
                rows.append(_template("/validate", mutated, group, meta["name"]))
        elif mix == "replicas":
            if obj["kind"] != "Pod":
                continue  # the replicas are the pods a controller creates
            del meta["name"]
            meta["generateName"] = f"{base}-7d9f8b6c5-"
            mutated = _created(_mutated(obj))
            mutated["metadata"]["name"] = f"{base}-7d9f8b6c5-@NAME@"
            for _ in range(weight):
                rows.append(_template("/mutate", obj, group, ""))
                rows.append(_template("/validate", mutated, group, mutated["metadata"]["name"]))
        else:
            raise ValueError(f"unknown mix {mix!r}")
    return rows


def _managed_fields(kind: str) -> dict[str, Any]:
    manager = "kube-controller-manager" if kind == "Pod" else "kubectl-client-side-apply"
    return {
        "manager": manager,
        "operation": "Update",
        "apiVersion": "v1",
        "time": "@TIME@",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {}}, "f:spec": {"f:containers": {}}},
    }


def _created(obj: dict[str, Any]) -> dict[str, Any]:
    """As the validating call sees it: rest.BeforeCreate set the object's uid and
    creationTimestamp (FillObjectMetaSystemFields) before the createValidation func runs."""
    obj = json.loads(json.dumps(obj))
    obj["metadata"]["uid"] = "@PODUID@"
    obj["metadata"]["creationTimestamp"] = "@TIME@"
    return obj


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj["spec"]
    if "template" in spec:
        spec = spec["template"]["spec"]
    containers: list[dict[str, Any]] = spec["containers"]
    return containers
