"""The built-in workload kinds (SPEC §6): where each operator keeps its pod templates, as data.

Every entry cites the Go types its paths come from. The config's `workloads` extends or
replaces these (core/workloads.Registry).
"""

from __future__ import annotations

from webhook.core.kinds.registry import TemplateRule, WorkloadKind, rule, virtual_container


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


# A predictor's `model` (or framework field) and a container named like the runtime's are merged
# into the ServingRuntime's container (kserve/kserve v0.20.0,
# 1fb781055dd1567164358233e1125142ca6ef1fe, pkg/controller/v1beta1/inferenceservice/utils/
# utils.go MergeServingRuntimeAndInferenceServiceSpecs -> MergeRuntimeContainers): without an
# image of its own, the pod runs the runtime's image.
_SERVING_RUNTIME = "the ServingRuntime"


def _kserve_component(
    component: str, frameworks: tuple[str, ...], image_from: str = ""
) -> TemplateRule:
    # PredictorSpec / TransformerSpec / ExplainerSpec inline corev1.PodSpec (`json:",inline"`),
    # so `containers` sit directly under the component; each framework field (and `model`,
    # a ModelSpec) inlines a corev1.Container through PredictorExtensionSpec.
    return rule(
        f"spec.{component}",
        component,
        form="podspec",
        containers=frameworks,
        image_from=image_from,
        not_pod=_KSERVE_EXTENSION,
    )


_PREDICTORS = (
    "model", "sklearn", "xgboost", "tensorflow", "pytorch", "triton", "onnx",
    "huggingface", "pmml", "lightgbm", "paddle",
)  # fmt: skip


def _kserve(group: str) -> WorkloadKind:
    return WorkloadKind(
        group,
        "InferenceService",
        (
            _kserve_component("predictor", _PREDICTORS, _SERVING_RUNTIME),
            # PredictorSpec.WorkerSpec (multi-node serving) inlines a PodSpec too; its
            # containers are merged with the ServingRuntime's workerSpec the same way.
            rule(
                "spec.predictor.workerSpec",
                "predictor worker",
                form="podspec",
                image_from=_SERVING_RUNTIME,
            ),
            _kserve_component("transformer", ()),
            # explainer_art.go Default: Image = config.Explainers.ARTExplainer.ContainerImage
            _kserve_component("explainer", ("art", "alibi"), "the KServe explainer config"),
        ),
        "kserve/kserve pkg/apis/serving/v1beta1 PredictorSpec, TransformerSpec, ExplainerSpec",
    )


# kubeflow/trainer v2.3.0 (658725bdae5c7e3a0854d93ac6ff492e109a22ab), group trainer.kubeflow.org
# v1alpha1 (pkg/apis/trainer/v1alpha1/groupversion_info.go).
_TRAINER = "kubeflow/trainer v2.3.0 pkg/apis/trainer/v1alpha1"
# TrainingRuntimeSpec.Template is a JobSetTemplateSpec{ObjectMeta, Spec jobsetv1alpha2.JobSetSpec}
# (trainingruntime_types.go): the JobSet's replicatedJobs[].template (batchv1.JobTemplateSpec)
# .spec.template (PodTemplateSpec), one level deeper than in a JobSet.
_RUNTIME_TEMPLATES = (
    rule("spec.template.spec.replicatedJobs[*].template.spec.template", "replicated job {0}"),
)
# TrainJobSpec.Trainer (trainjob_types.go Trainer): Image *string, Env []EnvVar and
# ResourcesPerNode *ResourceRequirements, not a container. The controller writes them into the
# container named "node" (constants.Node) of the runtime's replicated job labelled
# trainer.kubeflow.org/trainjob-ancestor-step: trainer (pkg/runtime/framework/plugins/jobset/
# builder.go Trainer: image, command, args, env; pkg/runtime/core/trainingruntime.go: resources,
# merged over the runtime's). Without spec.trainer.image the pods run the runtime's image.
_TRAINJOB = rule(
    "spec.trainer",
    "trainer",
    form="container",
    virtual=virtual_container("node", "resourcesPerNode", image="image", env="env"),
    image_from="the training runtime",
    annotations=(),
)

# kserve/kserve v0.20.0 (1fb781055dd1567164358233e1125142ca6ef1fe) pkg/apis/serving/v1alpha2
# llm_inference_service_types.go (v1alpha1 has the same shape): LLMInferenceServiceSpec inlines
# a WorkloadSpec (Template, Worker *corev1.PodSpec; Annotations "added to the component pod")
# and has Prefill *WorkloadSpec and Router.Scheduler (SchedulerSpec: Template *PodSpec,
# Annotations). The controller copies each WorkloadSpec's annotations into its pods
# (pkg/controller/v1alpha2/llmisvc/workload_single_node.go, workload_multi_node.go
# PropagateMap). Containers without an image (the usual `main`) get it from the
# LLMInferenceServiceConfig presets merged in (config_merge.go).
_LLMISVC_IMAGE = "the LLMInferenceServiceConfig"


def _llm_workload(prefix: str, role: str) -> tuple[TemplateRule, ...]:
    # Roles: "main" (the Go doc's "main pod spec"; the decode pool when there is a prefill
    # pool), "worker" (multi-node), "prefill", "prefill worker".
    annotations = (f"{prefix}annotations",)
    worker = "worker" if role == "main" else f"{role} worker"
    return (
        rule(
            f"{prefix}template",
            role,
            form="podspec",
            image_from=_LLMISVC_IMAGE,
            annotations=annotations,
        ),
        rule(
            f"{prefix}worker",
            worker,
            form="podspec",
            image_from=_LLMISVC_IMAGE,
            annotations=annotations,
        ),
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
    WorkloadKind("trainer.kubeflow.org", "TrainJob", (_TRAINJOB,), f"{_TRAINER} Trainer"),
    WorkloadKind(
        "trainer.kubeflow.org",
        "TrainingRuntime",
        _RUNTIME_TEMPLATES,
        f"{_TRAINER} JobSetTemplateSpec",
    ),
    # The same spec, cluster-scoped (+kubebuilder:resource:scope=Cluster).
    WorkloadKind(
        "trainer.kubeflow.org",
        "ClusterTrainingRuntime",
        _RUNTIME_TEMPLATES,
        f"{_TRAINER} JobSetTemplateSpec",
    ),
    WorkloadKind(
        "serving.kserve.io",
        "LLMInferenceService",
        (
            *_llm_workload("spec.", "main"),
            *_llm_workload("spec.prefill.", "prefill"),
            rule(
                "spec.router.scheduler.template",
                "scheduler",
                form="podspec",
                annotations=("spec.router.scheduler.annotations",),
            ),
        ),
        "kserve/kserve v0.20.0 pkg/apis/serving/v1alpha2 WorkloadSpec, SchedulerSpec",
    ),
    WorkloadKind(
        # knative/serving knative-v1.23.0 (7ed4aa2ab601e3a33c6552285f6e0d910747351d)
        # pkg/apis/serving/v1: ServiceSpec inlines ConfigurationSpec{Template
        # RevisionTemplateSpec{ObjectMeta, Spec RevisionSpec}}, and RevisionSpec inlines
        # corev1.PodSpec: a pod template at spec.template.
        "serving.knative.dev",
        "Service",
        # The revision's pods run the image by digest: pkg/reconciler/revision/resources/
        # deploy.go BuildUserContainers sets container.Image = rev.Status.ContainerStatuses[i].
        # ImageDigest, which resolve.go (digestResolver.Resolve) makes "repository@digest", the
        # tag dropped (unless the registry is in config-deployment's
        # registries-skipping-tag-resolving: kind.local, ko.local, dev.local by default).
        (rule("spec.template", by_digest=True),),
        "knative/serving knative-v1.23.0 pkg/apis/serving/v1 RevisionTemplateSpec",
    ),
)
