"""Workload registry as data: (API group, kind) -> where pod templates live, plus a path walker.

A path is dot-separated keys with two wildcards: `*` visits every value of a map (the key is
captured, e.g. a Kubeflow replica type) and `[*]` visits every item of a list (the item's
name field is captured, e.g. a Volcano task name). A role is a format string over the
captures (`replica {0}`). Walking never raises anything but ObjectShapeError.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from webhook.core.errors import ObjectShapeError
from webhook.core.shapes import is_mapping

# template: a PodTemplateSpec (metadata + spec); podspec: an object with PodSpec fields inlined
# (KServe components). `containers` of a rule name extra keys of the pod spec that hold one
# container-like object with `resources` which the operator turns into a container (KServe's
# `model` and framework fields).
Form = Literal["template", "podspec"]
MAP_WILDCARD = "*"
LIST_WILDCARD = "[*]"
_KEY = re.compile(r"[A-Za-z0-9_.-]+|\*|\[\*\]")


@dataclass(frozen=True, slots=True)
class TemplateRule:
    path: tuple[str, ...]
    role: str = ""
    form: Form = "template"
    name_field: str = "name"  # what a list wildcard captures from each item
    containers: tuple[str, ...] = ()
    wildcards: bool = False
    # Keys of a podspec-form object that are not pod fields (scaling, traffic): an UPDATE
    # changing only these leaves the template unchanged (SPEC §6 update rules).
    not_pod: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class WorkloadKind:
    group: str
    kind: str
    rules: tuple[TemplateRule, ...]
    source: str = ""  # the Go type the paths come from, for /policies and the README


class Found(NamedTuple):
    """One template reached by a rule: its concrete path, role label and the object there.

    A NamedTuple: built for every template of every review, and a frozen dataclass's __init__
    costs several times more."""

    path: tuple[str | int, ...]
    role: str
    form: Form
    node: Any


def parse_path(text: str) -> tuple[str, ...]:
    """`spec.workerGroupSpecs[*].template` -> ("spec", "workerGroupSpecs", "[*]", "template")."""
    parts: list[str] = []
    for raw in text.replace("[*]", ".[*]").split("."):
        if not raw:
            continue
        if not _KEY.fullmatch(raw):
            raise ValueError(f"path {text!r}: {raw!r} is not a key, '*' or '[*]'")
        parts.append(raw)
    if not parts:
        raise ValueError("path must not be empty")
    return tuple(parts)


def rule(
    path: str,
    role: str = "",
    form: Form = "template",
    name_field: str = "name",
    containers: tuple[str, ...] = (),
) -> TemplateRule:
    parsed = parse_path(path) if path else ()
    wildcards = sum(p in (MAP_WILDCARD, LIST_WILDCARD) for p in parsed)
    try:
        role.format(*([""] * wildcards))
    except (IndexError, KeyError, ValueError) as exc:
        raise ValueError(
            f"role {role!r} of path {path!r} may only use {{0}}..{{{wildcards - 1}}} "
            f"(one per wildcard)"
        ) from exc
    return TemplateRule(parsed, role, form, name_field, containers, wildcards > 0)


def _where(kind: str, path: tuple[str | int, ...]) -> str:
    text = kind
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def walk(kind: str, obj: Mapping[str, Any], tpl: TemplateRule) -> list[Found]:
    """Every object at the rule's path, in document order; a missing key or null is no
    template, not an error.

    A list, not a generator: a review walks every rule of its kind to the end, and resuming a
    generator costs more than the list it would save."""
    found: list[Found] = []
    _descend(kind, tpl, obj, 0, (), (), found)
    return found


def _descend(
    kind: str,
    tpl: TemplateRule,
    node: Any,
    depth: int,
    at: tuple[str | int, ...],
    captures: tuple[str, ...],
    found: list[Found],
) -> None:
    """Follow plain keys in a loop and recurse only at a wildcard, once per child: the plain
    steps (most of every path) cost no stack entry and no tuple of their own."""
    path = tpl.path
    while depth < len(path):
        part = path[depth]
        if part == LIST_WILDCARD:
            if not isinstance(node, list):
                raise ObjectShapeError(
                    f"{_where(kind, at)} must be a list, got {type(node).__name__}"
                )
            for index, item in enumerate(node):
                if item is None:
                    continue
                label = item.get(tpl.name_field) if is_mapping(item) else None
                label = label if isinstance(label, str) and label else f"#{index}"
                _descend(kind, tpl, item, depth + 1, (*at, index), (*captures, label), found)
            return
        if not is_mapping(node):
            raise ObjectShapeError(
                f"{_where(kind, at)} must be an object, got {type(node).__name__}"
            )
        if part == MAP_WILDCARD:
            for key, value in node.items():
                if value is not None:
                    name = str(key)
                    _descend(kind, tpl, value, depth + 1, (*at, name), (*captures, name), found)
            return
        node = node.get(part)
        if node is None:
            return
        at = (*at, part)
        depth += 1
    # Built-in kinds have no wildcard, hence no captures: no role formatting for them.
    found.append(Found(at, tpl.role.format(*captures) if captures else tpl.role, tpl.form, node))


def _kubeflow(kind: str, field: str, source: str) -> WorkloadKind:
    # map[ReplicaType]*ReplicaSpec; ReplicaSpec.Template is a corev1.PodTemplateSpec
    return WorkloadKind(
        "kubeflow.org", kind, (rule(f"spec.{field}.*.template", "replica {0}"),), source
    )


_TRAINING = "kubeflow/training-operator pkg/apis/kubeflow.org/v1"
_RAY = "ray-project/kuberay ray-operator/apis/ray/v1 RayClusterSpec"


def _ray(prefix: str) -> tuple[TemplateRule, ...]:
    # RayClusterSpec.HeadGroupSpec.Template, WorkerGroupSpecs[].Template (role: GroupName)
    return (
        rule(f"{prefix}headGroupSpec.template", "head"),
        rule(f"{prefix}workerGroupSpecs[*].template", "worker group {0}", name_field="groupName"),
    )


# kserve/kserve pkg/apis/serving/v1beta1 ComponentExtensionSpec, inlined next to the PodSpec
# fields of every component: deployment and autoscaling settings, not what a pod gets.
_KSERVE_EXTENSION = frozenset(
    {
        "minReplicas", "maxReplicas", "scaleTarget", "scaleMetric", "scaleMetricType",
        "autoScaling", "containerConcurrency", "timeout", "canaryTrafficPercent", "logger",
        "batcher", "deploymentStrategy", "parallelism",
    }
)  # fmt: skip


def _kserve_component(component: str, frameworks: tuple[str, ...]) -> TemplateRule:
    # PredictorSpec / TransformerSpec / ExplainerSpec inline corev1.PodSpec (`json:",inline"`),
    # so `containers` sit directly under the component; each framework field (and `model`,
    # a ModelSpec) inlines a corev1.Container through PredictorExtensionSpec.
    tpl = rule(f"spec.{component}", component, form="podspec", containers=frameworks)
    return dataclasses.replace(tpl, not_pod=_KSERVE_EXTENSION)


_PREDICTORS = (
    "model", "sklearn", "xgboost", "tensorflow", "pytorch", "triton", "onnx",
    "huggingface", "pmml", "lightgbm", "paddle",
)  # fmt: skip


def _kserve(group: str) -> WorkloadKind:
    return WorkloadKind(
        group,
        "InferenceService",
        (
            _kserve_component("predictor", _PREDICTORS),
            # PredictorSpec.WorkerSpec (multi-node serving) inlines a PodSpec too.
            rule("spec.predictor.workerSpec", "predictor worker", form="podspec"),
            _kserve_component("transformer", ()),
            _kserve_component("explainer", ("art", "alibi")),
        ),
        "kserve/kserve pkg/apis/serving/v1beta1 PredictorSpec, TransformerSpec, ExplainerSpec",
    )


BUILTIN_KINDS: tuple[WorkloadKind, ...] = (
    # k8s.io/api core/v1 Pod; apps/v1 and batch/v1 *Spec.Template (PodTemplateSpec);
    # batch/v1 CronJobSpec.JobTemplate (JobTemplateSpec).Spec.Template.
    WorkloadKind("", "Pod", (rule("", ""),), "k8s.io/api core/v1 Pod"),
    *(
        WorkloadKind("apps", k, (rule("spec.template"),), f"k8s.io/api apps/v1 {k}Spec")
        for k in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet")
    ),
    WorkloadKind("batch", "Job", (rule("spec.template"),), "k8s.io/api batch/v1 JobSpec"),
    WorkloadKind(
        "batch",
        "CronJob",
        (rule("spec.jobTemplate.spec.template"),),
        "k8s.io/api batch/v1 CronJobSpec",
    ),
    _kubeflow("PyTorchJob", "pytorchReplicaSpecs", f"{_TRAINING} PyTorchJobSpec"),
    _kubeflow("TFJob", "tfReplicaSpecs", f"{_TRAINING} TFJobSpec"),
    # MPIJob: kubeflow.org/v1 (training-operator MPIJobSpec) and v2beta1 (kubeflow/mpi-operator
    # pkg/apis/kubeflow/v2beta1 MPIJobSpec) both keep mpiReplicaSpecs (Launcher, Worker).
    _kubeflow("MPIJob", "mpiReplicaSpecs", f"{_TRAINING} MPIJobSpec; mpi-operator v2beta1"),
    _kubeflow("PaddleJob", "paddleReplicaSpecs", f"{_TRAINING} PaddleJobSpec"),
    _kubeflow("XGBoostJob", "xgbReplicaSpecs", f"{_TRAINING} XGBoostJobSpec"),
    _kubeflow("JAXJob", "jaxReplicaSpecs", f"{_TRAINING} JAXJobSpec"),
    # MXJob was removed from training-operator v1.7 but its CRD is still in clusters.
    _kubeflow("MXJob", "mxReplicaSpecs", f"{_TRAINING} MXJobSpec (v1.6)"),
    WorkloadKind(
        # PaddlePaddle/paddle-operator api/v1 PaddleJobSpec: PS, Worker, Heter *ResourceSpec
        # (Template corev1.PodTemplateSpec); the repo's heter sample uses tasks[] (name,
        # template) from the operator's later API.
        "batch.paddlepaddle.org",
        "PaddleJob",
        (
            rule("spec.ps.template", "ps"),
            rule("spec.worker.template", "worker"),
            rule("spec.heter.template", "heter"),
            rule("spec.tasks[*].template", "task {0}"),
        ),
        "PaddlePaddle/paddle-operator api/v1 PaddleJobSpec",
    ),
    WorkloadKind("ray.io", "RayCluster", _ray("spec."), _RAY),
    # RayJobSpec.RayClusterSpec `json:"rayClusterSpec"`
    WorkloadKind("ray.io", "RayJob", _ray("spec.rayClusterSpec."), f"{_RAY} via RayJobSpec"),
    # RayServiceSpec.RayClusterSpec `json:"rayClusterConfig"`
    WorkloadKind(
        "ray.io", "RayService", _ray("spec.rayClusterConfig."), f"{_RAY} via RayServiceSpec"
    ),
    WorkloadKind(
        # kubernetes-sigs/lws api/leaderworkerset/v1 LeaderWorkerTemplate: LeaderTemplate
        # *PodTemplateSpec (optional: without it the leader uses the worker template), and
        # WorkerTemplate PodTemplateSpec.
        "leaderworkerset.x-k8s.io",
        "LeaderWorkerSet",
        (
            rule("spec.leaderWorkerTemplate.leaderTemplate", "leader"),
            rule("spec.leaderWorkerTemplate.workerTemplate", "worker"),
        ),
        "kubernetes-sigs/lws api/leaderworkerset/v1 LeaderWorkerTemplate",
    ),
    WorkloadKind(
        # kubernetes-sigs/jobset api/jobset/v1alpha2 ReplicatedJob{Name, Template
        # batchv1.JobTemplateSpec}: the pod template is template.spec.template.
        "jobset.x-k8s.io",
        "JobSet",
        (rule("spec.replicatedJobs[*].template.spec.template", "replicated job {0}"),),
        "kubernetes-sigs/jobset api/jobset/v1alpha2 ReplicatedJob",
    ),
    WorkloadKind(
        # volcano-sh/apis pkg/apis/batch/v1alpha1 JobSpec.Tasks []TaskSpec{Name, Template
        # v1.PodTemplateSpec}. Group batch.volcano.sh: not the batch/v1 Job.
        "batch.volcano.sh",
        "Job",
        (rule("spec.tasks[*].template", "task {0}"),),
        "volcano-sh/apis pkg/apis/batch/v1alpha1 TaskSpec",
    ),
    _kserve("serving.kserve.io"),
    # KFServing, KServe's former name, used the same v1beta1 shape under this group.
    _kserve("serving.kubeflow.org"),
)
