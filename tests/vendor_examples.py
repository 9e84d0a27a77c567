"""The vendors' own published pods (issue 46 item 4), shared by the unit and e2e tests of GPU
access control: MindCluster's AscendJob pod and KAI Scheduler's GPU-fraction pods, as the
vendors' controllers and webhooks leave them."""

from __future__ import annotations

from typing import Any

KAI_PREFIX = "gpu-sharing-x7k2q9p-shared-gpu"


def _pod(
    name: str, namespace: str | None, containers: list[dict[str, Any]], spec: dict[str, Any]
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": containers, **spec},
    }


def mindcluster_pod(
    name: str = "train", namespace: str | None = "ml", **overrides: Any
) -> dict[str, Any]:
    """Ascend/mind-cluster docs/zh/scheduling/api/ascend_job.md's AscendJob Master pod template
    (pytorch_multinodes_acjob_910b.yaml, at ca9ddfe) as the ascend-operator creates it, with
    `schedulerName: volcano` from the job. `container=` updates the container, any other key
    the pod spec."""
    c: dict[str, Any] = {
        "name": "ascend",
        "image": "pytorch-test:latest",
        "imagePullPolicy": "IfNotPresent",
        "env": [
            {"name": "XDL_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
            {
                "name": "ASCEND_VISIBLE_DEVICES",
                "valueFrom": {
                    "fieldRef": {"fieldPath": "metadata.annotations['huawei.com/Ascend910']"}
                },
            },
        ],
        "command": ["/bin/bash", "-c"],
        "args": ["cd /job/code/scripts; chmod +x train_start.sh; bash train_start.sh"],
        "ports": [{"containerPort": 2222, "name": "ascendjob-port"}],
        "resources": {
            "limits": {"huawei.com/Ascend910": "2"},
            "requests": {"huawei.com/Ascend910": "2"},
        },
        "volumeMounts": [
            {"name": "ascend-driver", "mountPath": "/usr/local/Ascend/driver"},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
    }
    c.update(overrides.pop("container", {}))
    spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "volumes": [
            {"name": "ascend-driver", "hostPath": {"path": "/usr/local/Ascend/driver"}},
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        ],
    }
    spec.update(overrides)
    return _pod(name, namespace, [c], spec)


def kai_pod(
    name: str = "train",
    namespace: str | None = "ml",
    fraction_container: int = 1,
    annotations: dict[str, str] | None = None,
    **spec_changes: Any,
) -> dict[str, Any]:
    """NVIDIA/KAI-Scheduler docs/gpu-sharing/gpu-sharing-non-default-container.yaml (at
    72de64f) as KAI's own admission webhook leaves it (pkg/admission/webhook/v1alpha2/
    gpusharing Mutate): the fraction container gets NVIDIA_VISIBLE_DEVICES, RUNAI_NUM_OF_GPUS
    and GPU_PORTION from the pod's sharing ConfigMap, an envFrom of its `-evar` ConfigMap, and
    the pod a ConfigMap volume and the runai/shared-gpu-configmap annotation. `annotations`
    changes the pod's (an empty value removes one)."""
    notes = {
        "gpu-fraction": "0.5",
        "gpu-fraction-container-name": "gpu-workload",
        "runai/shared-gpu-configmap": KAI_PREFIX,
    }
    notes.update(annotations or {})
    containers: list[dict[str, Any]] = [
        {"name": "sidecar", "image": "busybox", "args": ["sleep", "infinity"]},
        {
            "name": "gpu-workload",
            "image": "nvidia/cuda:13.0.2-base-ubi8",
            "command": ["nvidia-smi"],
            "args": ["-L"],
        },
        {"name": "another-sidecar", "image": "busybox", "args": ["sleep", "infinity"]},
    ]
    configmap = f"{KAI_PREFIX}-{fraction_container}"
    target = containers[fraction_container]
    target["env"] = [
        {"name": key, "valueFrom": {"configMapKeyRef": {"key": key, "name": configmap}}}
        for key in ("NVIDIA_VISIBLE_DEVICES", "RUNAI_NUM_OF_GPUS", "GPU_PORTION")
    ]
    target["envFrom"] = [{"configMapRef": {"name": f"{configmap}-evar", "optional": False}}]
    spec: dict[str, Any] = {
        "schedulerName": "kai-scheduler",
        "volumes": [{"name": f"{configmap}-vol", "configMap": {"name": configmap}}],
    }
    spec.update(spec_changes)
    obj = _pod(name, namespace, containers, spec)
    obj["metadata"]["labels"] = {"kai.scheduler/queue": "default-queue"}
    obj["metadata"]["annotations"] = {k: v for k, v in notes.items() if v}
    return obj
