"""`gpu-webhook review` of a workload shows what its pods get: each pod template as the Pod
its controller creates, mutated as the server mutates that Pod (text, json and yaml), while
the workload's own patch stays what the webhook sends for the workload."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import CONFIGMAPS
from tests.unit.test_cli import cli, write

POLICIES = str(CONFIGMAPS)
TORCH = "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime"
PADDLE = "paddlepaddle/paddle:2.6.1-gpu-cuda12.0-cudnn8.9-trt8.6"
PADDLE_ENV = [{"name": "FLAGS_allocator_strategy", "value": "naive_best_fit"}]


def spec(image: str, limits: dict[str, str]) -> dict[str, Any]:
    return {"containers": [{"name": "main", "image": image, "resources": {"limits": limits}}]}


def deployment(pod_spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "infer", "namespace": "ml"},
        "spec": {
            "selector": {"matchLabels": {"app": "infer"}},
            "template": {"metadata": {"labels": {"app": "infer"}}, "spec": pod_spec},
        },
    }


def pytorchjob() -> dict[str, Any]:
    def replica(pod_spec: dict[str, Any]) -> dict[str, Any]:
        return {"replicas": 1, "template": {"spec": pod_spec}}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": replica(spec(TORCH, {"nvidia.com/gpu": "1"})),
                "Worker": replica(spec(PADDLE, {"tencent.com/vcuda-core": "50"})),
            }
        },
    }


def bare_pod(pod_spec: dict[str, Any], name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": f"{name}-", "namespace": "ml"},
        "spec": pod_spec,
    }


def reviewed(tmp_path: Path, *docs: Any, fmt: str = "json") -> Any:
    manifest = write(tmp_path / "manifest.yaml", *docs)
    code, out = cli("review", "-f", str(manifest), "--policies", POLICIES, "-o", fmt)
    assert code == 0, out
    return json.loads(out) if fmt == "json" else out


def test_a_deployments_pods_get_what_the_same_pod_gets(tmp_path: Path) -> None:
    pod_spec = spec(TORCH, {"nvidia.com/gpu": "1"})
    workload, alone = reviewed(tmp_path, deployment(pod_spec), bare_pod(pod_spec, "infer"))
    # The Deployment itself is not changed (templates are mutated only with mutateTemplates).
    assert workload["patch"] == [] and workload["mutated"] is None
    [template] = workload["templates"]
    assert (template["template"], template["role"], template["verdict"]) == (
        "spec.template",
        "",
        "allowed",
    )
    mutated = template["mutated"]
    # What a Pod with this spec gets, the same evaluation: affinity, requests, /dev/shm.
    assert mutated["spec"] == alone["mutated"]["spec"]
    assert template["patch"] == alone["patch"]
    assert mutated["metadata"] == {
        "generateName": "infer-",
        "namespace": "ml",
        "labels": {"app": "infer"},
        # The mark of the webhook's own /dev/shm volume, as on the same pod alone.
        "annotations": {"features.alauda.io/injected-shm": "dshm"},
    }
    assert alone["mutated"]["metadata"]["annotations"] == mutated["metadata"]["annotations"]
    terms = mutated["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert {"key": "cuda-major-version", "operator": "Gt", "values": ["11"]} in terms[
        "nodeSelectorTerms"
    ][0]["matchExpressions"]
    assert mutated["spec"]["containers"][0]["volumeMounts"] == [
        {"name": "dshm", "mountPath": "/dev/shm"}
    ]


def test_the_text_output_prints_the_pods_of_a_deployment(tmp_path: Path) -> None:
    out = reviewed(tmp_path, deployment(spec(PADDLE, {"tencent.com/vcuda-core": "50"})), fmt="text")
    head, pods = out.split("pods of spec.template, as the webhook will mutate them:\n")
    assert "--- Deployment ml/infer" in head and "mutated object:" not in head
    printed = yaml.safe_load(pods.split("\n\n")[0])
    container = printed["spec"]["containers"][0]
    assert container["env"] == PADDLE_ENV
    assert container["resources"]["limits"]["tencent.com/vcuda-memory"] == "4"
    assert "nodeAffinity" in printed["spec"]["affinity"]


def test_a_pytorchjob_shows_each_replica_types_pods(tmp_path: Path) -> None:
    [job] = reviewed(tmp_path, pytorchjob())
    assert job["patch"] == [] and job["mutated"] is None  # operators' objects: never patched
    master, worker = job["templates"]
    assert [(t["template"], t["role"]) for t in job["templates"]] == [
        ("spec.pytorchReplicaSpecs.Master.template", "replica Master"),
        ("spec.pytorchReplicaSpecs.Worker.template", "replica Worker"),
    ]
    on_gpu = master["mutated"]["spec"]["containers"][0]
    assert on_gpu["resources"]["requests"] == {"nvidia.com/gpu": "1"}
    assert "env" not in on_gpu
    vgpu = worker["mutated"]["spec"]["containers"][0]
    assert vgpu["env"] == PADDLE_ENV
    assert vgpu["resources"]["limits"] == {
        "tencent.com/vcuda-core": "50",
        "tencent.com/vcuda-memory": "4",
    }
    assert {"op": "add", "path": "/spec/containers/0/env", "value": PADDLE_ENV} in worker["patch"]

    # Each replica type's own CUDA floor: 12.1 for the PyTorch image, 12.0 for Paddle's.
    def floor(template: dict[str, Any]) -> Any:
        affinity = template["mutated"]["spec"]["affinity"]["nodeAffinity"]
        return affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]

    assert floor(master) != floor(worker)
    single = reviewed(tmp_path, bare_pod(spec(PADDLE, {"tencent.com/vcuda-core": "50"}), "t"))
    assert worker["mutated"]["spec"] == single[0]["mutated"]["spec"]


def test_text_output_names_each_replica_type(tmp_path: Path) -> None:
    out = reviewed(tmp_path, pytorchjob(), fmt="text")
    assert (
        "pods of spec.pytorchReplicaSpecs.Master.template (replica Master), as the webhook will "
        "mutate them:\n"
    ) in out
    worker = out.split("(replica Worker), as the webhook will mutate them:\n")[1]
    printed = yaml.safe_load(worker.split("\n\n")[0])
    assert printed["spec"]["containers"][0]["env"] == PADDLE_ENV


def test_yaml_output_carries_the_same_templates(tmp_path: Path) -> None:
    as_json = reviewed(tmp_path, pytorchjob())
    as_yaml = yaml.safe_load(reviewed(tmp_path, pytorchjob(), fmt="yaml"))
    assert as_yaml[0]["templates"] == as_json[0]["templates"]


def test_with_mutate_templates_the_workload_patch_stays_the_webhooks(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("mutateTemplates: true\n", encoding="utf-8")
    manifest = write(tmp_path / "d.yaml", deployment(spec(TORCH, {"nvidia.com/gpu": "1"})))
    code, out = cli(
        "review", "-f", str(manifest), "--policies", POLICIES, "--config", str(config), "-o", "json"
    )
    assert code == 0
    [workload] = json.loads(out)
    # What the webhook sends for the Deployment: its template, under /spec/template.
    assert workload["patch"] and all(
        p["path"].startswith("/spec/template/") for p in workload["patch"]
    )
    [template] = workload["templates"]
    assert template["mutated"]["spec"] == workload["mutated"]["spec"]["template"]["spec"]


def test_a_daemonsets_pods_get_no_cuda_affinity(tmp_path: Path) -> None:
    daemonset = deployment(spec(TORCH, {"nvidia.com/gpu": "1"}))
    daemonset["kind"] = "DaemonSet"
    [result] = reviewed(tmp_path, daemonset)
    [template] = result["templates"]
    # Its controller pins each pod to a node: an affinity would only leave pods Pending.
    assert "affinity" not in template["mutated"]["spec"]
    assert template["mutated"]["spec"]["containers"][0]["volumeMounts"] == [
        {"name": "dshm", "mountPath": "/dev/shm"}
    ]


def test_a_template_whose_pods_are_denied_shows_no_mutation(tmp_path: Path) -> None:
    manifest = write(
        tmp_path / "d.yaml", deployment(spec(PADDLE, {"tencent.com/vcuda-core": "150"}))
    )
    code, out = cli("review", "-f", str(manifest), "--policies", POLICIES)
    assert code == 1
    assert "pods of spec.template: would be denied (not created)\n" in out
    assert "as the webhook will mutate them" not in out
