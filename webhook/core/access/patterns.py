"""The vendors' own documented patterns that set a device variable from what their scheduler
writes (SPEC §12 "The vendors' own patterns pass"): each is admitted only where the scheduler
that writes the value counts the devices it names; the same variable anywhere else stays a
finding. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from webhook.core.base.quantity import parsed
from webhook.core.base.shapes import as_dict, is_mapping
from webhook.core.workloads.devices import access_env
from webhook.core.workloads.pods import ContainerRef, PodSpecRef

# MindCluster + Volcano (Ascend/mind-cluster docs/zh/scheduling/api/ascend_job.md, at ca9ddfe:
# the AscendJob example, `schedulerName: volcano`, and in the NPU container
# `ASCEND_VISIBLE_DEVICES` from `fieldRef: metadata.annotations['huawei.com/Ascend910']`, "the
# value must be the same as resources.requests"; the field table: "only supports the whole-card
# scheduling of the Volcano scheduler"). Ascend's Volcano plugin writes the annotation with the
# NPUs it allocated to the pod, so the variable names exactly the counted cards.
ASCEND_VARIABLE = "ASCEND_VISIBLE_DEVICES"
VOLCANO = "volcano"
_ASCEND_FIELD = re.compile(r"metadata\.annotations\['(huawei\.com/Ascend[0-9A-Za-z]+)'\]\Z")
# Any annotation an env entry reads: the only subscripted form the kubelet resolves
# (kubernetes pkg/fieldpath/fieldpath.go SplitMaybeSubscriptedPath: `<path>['<key>']`).
_ANNOTATION_FIELD = re.compile(r"metadata\.annotations\['(.*)'\]\Z", re.DOTALL)
_ALL_CONTAINERS = ("initContainers", "containers", "ephemeralContainers")

# KAI Scheduler's GPU fractions (NVIDIA/KAI-Scheduler at 72de64f): a pod scheduled by
# `kai-scheduler` (pkg/common/constants DefaultSchedulerName) with a `gpu-fraction` or
# `gpu-memory` annotation (pkg/common/resources/gpu_sharing.go RequestsGPUFraction) gets, in its
# fraction container (the first container, or the one the `gpu-fraction-container-name`
# annotation names: pkg/binder/common/gpu_access.go GetFractionContainerRef), an
# NVIDIA_VISIBLE_DEVICES entry from key NVIDIA_VISIBLE_DEVICES of ConfigMap
# `<runai/shared-gpu-configmap annotation>-<index>` (`-i<index>` for an init container;
# pkg/admission/webhook/v1alpha2/gpusharing Mutate, AddGPUSharingEnvVars,
# gpusharingconfigmap.SetGpuCapabilitiesConfigMapName); KAI's binder writes the GPU it
# accounted the fraction on into that key (SetNvidiaVisibleDevices).
KAI_SCHEDULER = "kai-scheduler"
KAI_FRACTION_ANNOTATIONS = ("gpu-fraction", "gpu-memory")
KAI_CONTAINER_ANNOTATION = "gpu-fraction-container-name"
KAI_CONFIGMAP_ANNOTATION = "runai/shared-gpu-configmap"
NVIDIA_VARIABLE = "NVIDIA_VISIBLE_DEVICES"


def _requests(container: Mapping[str, Any], resource: str) -> bool:
    resources = container.get("resources")
    if not is_mapping(resources):
        return False
    for key in ("limits", "requests"):
        values = resources.get(key)
        if is_mapping(values) and resource in values:
            value = parsed(values[resource])
            if value.error == 0 and value.numerator > 0:
                return True
    return False


def _scheduler(pod: PodSpecRef) -> str:
    name = as_dict(pod.spec).get("schedulerName")
    return name if isinstance(name, str) else ""


def mindcluster_counted(pod: PodSpecRef, c: ContainerRef, entry: Mapping[str, Any]) -> bool:
    """Whether an ASCEND_VISIBLE_DEVICES entry is MindCluster's: from the pod's own
    `huawei.com/<type>` annotation, in a container requesting that type, scheduled by Volcano
    (a workload template's pods are judged again when they are created)."""
    source = entry.get("valueFrom")
    field = source.get("fieldRef") if is_mapping(source) else None
    path = field.get("fieldPath") if is_mapping(field) else None
    if entry.get("name") != ASCEND_VARIABLE or not isinstance(path, str):
        return False
    found = _ASCEND_FIELD.match(path)
    if found is None or not _requests(c.container, found.group(1)):
        return False
    return pod.is_template or _scheduler(pod) == VOLCANO


def kai_fraction_container(pod: PodSpecRef) -> ContainerRef | None:
    """The container KAI's scheduler accounts a GPU fraction to, if the pod is a KAI fraction
    pod."""
    annotations = as_dict(pod.annotations)
    if _scheduler(pod) != KAI_SCHEDULER:
        return None
    if not any(key in annotations for key in KAI_FRACTION_ANNOTATIONS):
        return None
    named = annotations.get(KAI_CONTAINER_ANNOTATION)
    if named is None:
        for c in pod.containers:
            if c.list_name == "containers" and c.index == 0:
                return c
        return None
    for list_name in ("initContainers", "containers"):
        for c in pod.containers:
            if c.list_name == list_name and c.name == named:
                return c
    return None


def kai_counted(pod: PodSpecRef, c: ContainerRef, entry: Mapping[str, Any]) -> bool:
    """Whether an NVIDIA_VISIBLE_DEVICES entry is KAI's, in the fraction container its
    scheduler accounts: from key NVIDIA_VISIBLE_DEVICES of the pod's own sharing ConfigMap."""
    source = entry.get("valueFrom")
    ref = source.get("configMapKeyRef") if is_mapping(source) else None
    if entry.get("name") != NVIDIA_VARIABLE or not is_mapping(ref):
        return False
    fraction = kai_fraction_container(pod)
    if ref.get("key") != NVIDIA_VARIABLE or fraction is None:
        return False
    if (fraction.list_name, fraction.index) != (c.list_name, c.index):
        return False
    prefix = as_dict(pod.annotations).get(KAI_CONFIGMAP_ANNOTATION)
    if not isinstance(prefix, str) or not prefix:
        return False
    index = f"i{c.index}" if c.list_name == "initContainers" else str(c.index)
    return ref.get("name") == f"{prefix}-{index}"


def counted(pod: PodSpecRef, c: ContainerRef, entry: Mapping[str, Any]) -> bool:
    """Whether a device variable's entry is a vendor's documented pattern whose devices its
    scheduler counts."""
    return mindcluster_counted(pod, c, entry) or kai_counted(pod, c, entry)


def annotation_reads(spec: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(container name, variable, annotation key) of every device variable a container of the
    pod spec reads from one of the pod's annotations through a `fieldRef` (MindCluster's
    pattern, and any other): the kubelet resolves it again each time it starts the container,
    so a later change of the annotation changes the devices."""
    found: list[tuple[str, str, str]] = []
    for list_name in _ALL_CONTAINERS:
        items = spec.get(list_name)
        for c in items if isinstance(items, list) else ():
            env = c.get("env") if is_mapping(c) else None
            for entry in env if isinstance(env, list) else ():
                name = entry.get("name") if is_mapping(entry) else None
                if not isinstance(name, str) or not access_env(name):
                    continue
                source = entry.get("valueFrom")
                field = source.get("fieldRef") if is_mapping(source) else None
                path = field.get("fieldPath") if is_mapping(field) else None
                read = _ANNOTATION_FIELD.match(path) if isinstance(path, str) else None
                if read is not None:
                    found.append((str(c.get("name", "")), name, read.group(1)))
    return found
