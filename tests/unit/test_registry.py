"""The workload registry (SPEC §6): paths with wildcards, roles, wrong shapes, admin-added kinds."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import GPU, VCORE, container, run, standard_policies
from webhook.core.base.errors import ConfigError, ObjectShapeError, WebhookError
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.evaluation.updates import templates_equal
from webhook.core.kinds.builtin import BUILTIN_KINDS
from webhook.core.kinds.registry import parse_path, rule, walk
from webhook.core.workloads.claims import ClaimClasses, ClaimIndex
from webhook.core.workloads.pods import find_pod_specs, lookup, registry_for


def tpl(*containers: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"containers": list(containers)}}


GPU_C = container("c", limits={GPU: "1"})
RUNTIME_JOBS = ("spec", "template", "spec", "replicatedJobs")


def roles(api_version: str, kind: str, spec: Any) -> list[tuple[str, tuple[str | int, ...]]]:
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}, "spec": spec}
    entry = lookup(kind, obj)
    assert entry is not None
    return [(p.role, p.spec_path) for p in find_pod_specs(entry, obj)]


@pytest.mark.parametrize(
    ("api_version", "kind", "spec", "expected"),
    [
        (
            "kubeflow.org/v1",
            "PyTorchJob",
            {"pytorchReplicaSpecs": {"Master": {"template": tpl()}, "Worker": {"template": tpl()}}},
            [
                ("replica Master", ("spec", "pytorchReplicaSpecs", "Master", "template", "spec")),
                ("replica Worker", ("spec", "pytorchReplicaSpecs", "Worker", "template", "spec")),
            ],
        ),
        (
            "kubeflow.org/v1",
            "TFJob",
            {"tfReplicaSpecs": {"PS": {"template": tpl()}, "Chief": {"replicas": 1}}},
            [("replica PS", ("spec", "tfReplicaSpecs", "PS", "template", "spec"))],
        ),
        (
            "kubeflow.org/v2beta1",
            "MPIJob",
            {"mpiReplicaSpecs": {"Launcher": {"template": tpl()}, "Worker": {"template": tpl()}}},
            [
                ("replica Launcher", ("spec", "mpiReplicaSpecs", "Launcher", "template", "spec")),
                ("replica Worker", ("spec", "mpiReplicaSpecs", "Worker", "template", "spec")),
            ],
        ),
        (
            "kubeflow.org/v1",
            "XGBoostJob",
            {"xgbReplicaSpecs": {"Master": {"template": tpl()}}},
            [("replica Master", ("spec", "xgbReplicaSpecs", "Master", "template", "spec"))],
        ),
        (
            "kubeflow.org/v1",
            "JAXJob",
            {"jaxReplicaSpecs": {"Worker": {"template": tpl()}}},
            [("replica Worker", ("spec", "jaxReplicaSpecs", "Worker", "template", "spec"))],
        ),
        (
            "ray.io/v1",
            "RayCluster",
            {
                "headGroupSpec": {"template": tpl()},
                "workerGroupSpecs": [
                    {"groupName": "small", "template": tpl()},
                    {"template": tpl()},  # no groupName: the index names it
                ],
            },
            [
                ("head", ("spec", "headGroupSpec", "template", "spec")),
                ("worker group small", ("spec", "workerGroupSpecs", 0, "template", "spec")),
                ("worker group #1", ("spec", "workerGroupSpecs", 1, "template", "spec")),
            ],
        ),
        (
            "ray.io/v1",
            "RayJob",
            {"rayClusterSpec": {"workerGroupSpecs": [{"groupName": "g", "template": tpl()}]}},
            [
                (
                    "worker group g",
                    ("spec", "rayClusterSpec", "workerGroupSpecs", 0, "template", "spec"),
                )
            ],
        ),
        (
            "ray.io/v1",
            "RayService",
            {"rayClusterConfig": {"headGroupSpec": {"template": tpl()}}},
            [("head", ("spec", "rayClusterConfig", "headGroupSpec", "template", "spec"))],
        ),
        (
            "leaderworkerset.x-k8s.io/v1",
            "LeaderWorkerSet",
            {"leaderWorkerTemplate": {"workerTemplate": tpl()}},  # leaderTemplate is optional
            [("worker", ("spec", "leaderWorkerTemplate", "workerTemplate", "spec"))],
        ),
        (
            "jobset.x-k8s.io/v1alpha2",
            "JobSet",
            {"replicatedJobs": [{"name": "workers", "template": {"spec": {"template": tpl()}}}]},
            [
                (
                    "replicated job workers",
                    ("spec", "replicatedJobs", 0, "template", "spec", "template", "spec"),
                )
            ],
        ),
        (
            "batch.volcano.sh/v1alpha1",
            "Job",
            {"tasks": [{"name": "ps", "template": tpl()}, None, {"name": "w", "template": tpl()}]},
            [
                ("task ps", ("spec", "tasks", 0, "template", "spec")),
                ("task w", ("spec", "tasks", 2, "template", "spec")),
            ],
        ),
        (
            "batch.paddlepaddle.org/v1",
            "PaddleJob",
            {"ps": {"template": tpl()}, "worker": {"template": tpl()}},
            [
                ("ps", ("spec", "ps", "template", "spec")),
                ("worker", ("spec", "worker", "template", "spec")),
            ],
        ),
        (
            "serving.kserve.io/v1beta1",
            "InferenceService",
            {"predictor": {"model": {"resources": {}}}, "transformer": {"containers": []}},
            [("predictor", ("spec", "predictor")), ("transformer", ("spec", "transformer"))],
        ),
        (
            "trainer.kubeflow.org/v1alpha1",
            "TrainingRuntime",
            {
                "template": {
                    "spec": {
                        "replicatedJobs": [
                            {"name": "node", "template": {"spec": {"template": tpl()}}}
                        ]
                    }
                }
            },
            [
                (
                    "replicated job node",
                    # JobSetTemplateSpec.spec -> ReplicatedJob.template (JobTemplateSpec)
                    # .spec.template (PodTemplateSpec).spec
                    (*RUNTIME_JOBS, 0, "template", "spec", "template", "spec"),
                )
            ],
        ),
        (
            "trainer.kubeflow.org/v1alpha1",
            "ClusterTrainingRuntime",
            {
                "template": {
                    "spec": {"replicatedJobs": [{"template": {"spec": {"template": tpl()}}}]}
                }
            },
            [
                (
                    "replicated job #0",
                    (*RUNTIME_JOBS, 0, "template", "spec", "template", "spec"),
                )
            ],
        ),
        (
            "serving.kserve.io/v1alpha1",
            "LLMInferenceService",
            {
                "template": {"containers": []},
                "worker": {"containers": []},
                "prefill": {"template": {"containers": []}, "worker": {"containers": []}},
                "router": {"scheduler": {"template": {"containers": []}}},
            },
            [
                ("main", ("spec", "template")),
                ("worker", ("spec", "worker")),
                ("prefill", ("spec", "prefill", "template")),
                ("prefill worker", ("spec", "prefill", "worker")),
                ("scheduler", ("spec", "router", "scheduler", "template")),
            ],
        ),
        (
            "serving.knative.dev/v1",
            "Service",
            {"template": tpl(), "traffic": [{"percent": 100}]},
            [("", ("spec", "template", "spec"))],
        ),
        # missing or null paths are no template, not an error
        ("kubeflow.org/v1", "PyTorchJob", {"pytorchReplicaSpecs": None}, []),
        ("kubeflow.org/v1", "PyTorchJob", {"pytorchReplicaSpecs": {"Worker": None}}, []),
        ("ray.io/v1", "RayCluster", {}, []),
        ("trainer.kubeflow.org/v1alpha1", "TrainJob", {"runtimeRef": {"name": "torch"}}, []),
        ("serving.kserve.io/v1alpha2", "LLMInferenceService", {"model": {"uri": "hf://x"}}, []),
        ("kubeflow.org/v1", "PyTorchJob", None, []),
    ],
)
def test_templates_and_roles(api_version: str, kind: str, spec: Any, expected: list[Any]) -> None:
    assert roles(api_version, kind, spec) == expected


def test_kserve_model_form_is_a_container_of_the_predictor() -> None:
    obj = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "llm", "annotations": {"features.alauda.io/cuda-version": "12.1"}},
        "spec": {
            "predictor": {
                "annotations": {"team": "a"},
                "model": {"modelFormat": {"name": "huggingface"}, "resources": {}},
                "containers": [{"name": "sidecar"}],
            }
        },
    }
    entry = lookup("InferenceService", obj)
    assert entry is not None
    (predictor,) = find_pod_specs(entry, obj)
    assert [(c.list_name, c.index, c.name) for c in predictor.containers] == [
        ("containers", 0, "sidecar"),
        ("model", -1, "model"),
    ]
    # ComponentExtensionSpec.annotations and the object's own annotations reach the pods.
    assert predictor.annotations == {"features.alauda.io/cuda-version": "12.1", "team": "a"}


def trainjob(**trainer: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "t", "namespace": "ml", "annotations": {"a": "b"}},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": trainer},
    }


def test_trainjob_trainer_is_one_container_of_the_trainer_pods() -> None:
    env = [{"name": "NCCL_DEBUG", "value": "INFO"}]
    obj = trainjob(
        numNodes=4,
        image="pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime",
        env=env,
        resourcesPerNode={"limits": {GPU: 2}},
        command=["torchrun"],
    )
    entry = lookup("TrainJob", obj)
    assert entry is not None
    (trainer,) = find_pod_specs(entry, obj)
    assert (trainer.role, trainer.template_path, trainer.is_template) == (
        "trainer",
        ("spec", "trainer"),
        True,
    )
    # The container the controller fills from spec.trainer: named like the runtime's.
    assert [(c.list_name, c.index, c.name, c.image_from) for c in trainer.containers] == [
        ("containers", 0, "node", "the training runtime")
    ]
    assert trainer.containers[0].container == {
        "name": "node",
        "image": "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime",
        "env": env,
        "resources": {"limits": {GPU: 2}},
    }
    # The TrainJob's own annotations do not reach its pods.
    assert trainer.annotations == {} and not trainer.annotatable
    assert trainer.scratch == {"spec": trainer.spec}


def test_llm_inference_service_pods_get_their_workload_annotations() -> None:
    obj = {
        "apiVersion": "serving.kserve.io/v1alpha2",
        "kind": "LLMInferenceService",
        "metadata": {"name": "q", "annotations": {"features.alauda.io/cuda-version": "11.8"}},
        "spec": {
            "annotations": {"features.alauda.io/cuda-version": "12.4"},
            "template": {"containers": [{"name": "main"}]},
            "prefill": {"template": {"containers": [{"name": "main"}]}},
        },
    }
    entry = lookup("LLMInferenceService", obj)
    assert entry is not None
    main, prefill = find_pod_specs(entry, obj)
    # WorkloadSpec.Annotations go to the pods (not the object's own annotations).
    assert main.annotations == {"features.alauda.io/cuda-version": "12.4"}
    assert prefill.annotations == {}
    assert [c.image_from for c in main.containers] == ["the LLMInferenceServiceConfig"]


def test_lookup_is_by_group_and_kind() -> None:
    volcano = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job"}
    batch = {"apiVersion": "batch/v1", "kind": "Job"}
    v, b = lookup("Job", volcano), lookup("Job", batch)
    assert v is not None and b is not None
    assert (v.group, b.group) == ("batch.volcano.sh", "batch")
    assert lookup("Job", {"apiVersion": "example.com/v1"}) is None
    # the group from the AdmissionReview wins over the object's apiVersion
    assert lookup("Job", batch, group="batch.volcano.sh") is v
    # every built-in kind is registered once
    keys = [(k.group, k.kind) for k in BUILTIN_KINDS]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize(
    ("api_version", "kind", "spec", "message"),
    [
        (
            "kubeflow.org/v1",
            "PyTorchJob",
            {"pytorchReplicaSpecs": ["Worker"]},
            "PyTorchJob.spec.pytorchReplicaSpecs must be an object, got list",
        ),
        (
            "kubeflow.org/v1",
            "PyTorchJob",
            {"pytorchReplicaSpecs": {"Worker": "x"}},
            "PyTorchJob.spec.pytorchReplicaSpecs.Worker must be an object, got str",
        ),
        (
            "ray.io/v1",
            "RayCluster",
            {"workerGroupSpecs": {"groupName": "g"}},
            "RayCluster.spec.workerGroupSpecs must be a list, got dict",
        ),
        (
            "ray.io/v1",
            "RayCluster",
            {"workerGroupSpecs": [{"template": 3}]},
            "RayCluster.spec.workerGroupSpecs[0].template must be an object, got int",
        ),
        (
            "batch.volcano.sh/v1alpha1",
            "Job",
            {"tasks": [{"name": "t", "template": {"spec": {"containers": {"a": 1}}}}]},
            "Job.spec.tasks[0].template.spec.containers must be a list",
        ),
        (
            "serving.kserve.io/v1beta1",
            "InferenceService",
            {"predictor": {"model": ["x"]}},
            "InferenceService.spec.predictor.model must be an object, got list",
        ),
        ("kubeflow.org/v1", "TFJob", "spec", "TFJob.spec must be an object, got str"),
        (
            "trainer.kubeflow.org/v1alpha1",
            "TrainJob",
            {"trainer": {"resourcesPerNode": ["nvidia.com/gpu"]}},
            "TrainJob.spec.trainer.resourcesPerNode must be an object, got list",
        ),
        (
            "trainer.kubeflow.org/v1alpha1",
            "TrainJob",
            {"trainer": "node"},
            "TrainJob.spec.trainer must be an object, got str",
        ),
        (
            "serving.kserve.io/v1alpha1",
            "LLMInferenceService",
            {"annotations": ["a"], "template": {"containers": []}},
            "LLMInferenceService.spec.annotations must be an object, got list",
        ),
    ],
)
def test_wrong_shapes_are_clean_errors(
    api_version: str, kind: str, spec: Any, message: str
) -> None:
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}, "spec": spec}
    with pytest.raises(ObjectShapeError) as info:
        run(obj)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("spec.template", ("spec", "template")),
        ("spec.pytorchReplicaSpecs.*.template", ("spec", "pytorchReplicaSpecs", "*", "template")),
        ("spec.workerGroupSpecs[*].template", ("spec", "workerGroupSpecs", "[*]", "template")),
    ],
)
def test_parse_path(text: str, parsed: tuple[str, ...]) -> None:
    assert parse_path(text) == parsed


@pytest.mark.parametrize("text", ["", "spec..x[", "spec.a b", "spec.[0]", "spec.$x"])
def test_parse_path_refuses_garbage(text: str) -> None:
    with pytest.raises(ValueError, match="path"):
        parse_path(text)


def test_walk_captures_in_order() -> None:
    r = rule("spec.groups.*.members[*].template", "group {0} member {1}")
    obj = {"spec": {"groups": {"a": {"members": [{"name": "m1", "template": {}}]}}}}
    hits = list(walk("X", obj, r))
    assert [(h.role, h.path) for h in hits] == [
        ("group a member m1", ("spec", "groups", "a", "members", 0, "template"))
    ]


ADMIN_KIND = {
    "workloads": [
        {
            "group": "example.com",
            "kind": "TrainJob",
            "templates": [{"path": "spec.roles[*].podTemplate", "role": "role {0}"}],
        }
    ]
}


def test_admin_adds_a_kind_in_the_config() -> None:
    config = load_config(ADMIN_KIND)
    obj = {
        "apiVersion": "example.com/v1",
        "kind": "TrainJob",
        "metadata": {"name": "t", "namespace": "ml"},
        "spec": {
            "roles": [
                {"name": "trainer", "podTemplate": tpl(container("c", limits={VCORE: "150"}))}
            ]
        },
    }
    decision = run(obj, config=config)
    assert decision.handled
    assert [v.message.split(": ")[:2] for v in decision.violations] == [
        [
            'TrainJob ml/t, role trainer, container "c"',
            "limits.tencent.com/vcuda-core='150' is above 100 but not a multiple of 100 "
            "(values up to 100 are fractional shares; above it only whole units 100, 200, "
            "300… are allowed) (wholeUnit",
        ]
    ]
    # the default config does not know it
    assert not run(obj).handled
    assert "TrainJob" in registry_for(config).kind_names


def test_admin_adds_a_kind_whose_gpus_are_not_in_a_container() -> None:
    config = load_config(
        {
            "workloads": [
                {
                    "group": "example.com",
                    "kind": "FineTune",
                    "templates": [
                        {
                            "path": "spec.workers",
                            "role": "workers",
                            "form": "container",
                            "container": {
                                "name": "worker",
                                "resources": "perWorker.resources",
                                "image": "image",
                            },
                            "imageFrom": "the FineTune preset",
                        }
                    ],
                }
            ]
        }
    )
    obj = {
        "apiVersion": "example.com/v1",
        "kind": "FineTune",
        "metadata": {"name": "f", "namespace": "ml"},
        "spec": {"workers": {"perWorker": {"resources": {"limits": {VCORE: "150"}}}}},
    }
    decision = run(obj, config=config)
    assert [v.message.split(": ")[0] for v in decision.violations] == [
        'FineTune ml/f, workers, container "worker"'
    ]
    # no image of its own: it comes from the preset, so no CUDA advice
    assert decision.warnings == ()


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        (
            {"group": "x.io", "kind": "A", "templates": [{"path": "spec.t", "form": "container"}]},
            "form container needs a container",
        ),
        (
            {
                "group": "x.io",
                "kind": "A",
                "templates": [{"path": "spec.t", "container": {"name": "c", "resources": "r"}}],
            },
            "only that form takes one",
        ),
        (
            {
                "group": "x.io",
                "kind": "A",
                "templates": [
                    {
                        "path": "spec.t",
                        "form": "container",
                        "container": {"name": "c", "resources": "r[*].x"},
                    }
                ],
            },
            "no wildcard allowed here",
        ),
        (
            {
                "group": "x.io",
                "kind": "A",
                "templates": [{"path": "spec.t", "annotations": ["spec.*.annotations"]}],
            },
            "no wildcard allowed here",
        ),
        ({"group": "x.io", "kind": "A", "templates": []}, "templates"),
        ({"group": "x.io", "kind": "a", "templates": [{"path": "spec.t"}]}, "kind"),
        ({"group": "x.io", "kind": "A", "templates": [{"path": "spec.$"}]}, "not a key"),
        (
            {"group": "x.io", "kind": "A", "templates": [{"path": "spec.*.t", "role": "{1}"}]},
            "one per wildcard",
        ),
        ({"group": "x.io", "kind": "A", "templates": [{"path": "a", "form": "pod"}]}, "form"),
    ],
)
def test_invalid_admin_kinds_are_config_errors(entry: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config({"workloads": [entry]})
    assert fragment in str(info.value)


def test_templates_equal_covers_every_template() -> None:
    def job(worker_gpu: str, extra_group: bool = False, replicas: int = 1) -> dict[str, Any]:
        groups = [
            {
                "groupName": "g",
                "replicas": replicas,
                "template": tpl(container("c", limits={GPU: worker_gpu})),
            }
        ]
        if extra_group:
            groups.append({"groupName": "h", "template": tpl()})
        return {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "spec": {"headGroupSpec": {"template": tpl()}, "workerGroupSpecs": groups},
        }

    assert templates_equal("ray.io", "RayCluster", job("1"), job("1"))
    # scaling a group changes no template
    assert templates_equal("ray.io", "RayCluster", job("1", replicas=3), job("1"))
    assert not templates_equal("ray.io", "RayCluster", job("2"), job("1"))
    assert not templates_equal("ray.io", "RayCluster", job("1", extra_group=True), job("1"))
    assert not templates_equal("example.com", "RayCluster", job("1"), job("1"))
    assert not templates_equal("ray.io", "RayCluster", job("1"), {"spec": "broken"})


def test_templates_equal_reads_what_the_evaluation_reads() -> None:
    group = "trainer.kubeflow.org"
    old = trainjob(numNodes=2, image="a:1", resourcesPerNode={"limits": {GPU: 1}})
    scaled = trainjob(numNodes=8, image="a:1", resourcesPerNode={"limits": {GPU: 1}})
    scaled["spec"]["suspend"] = False
    assert templates_equal(group, "TrainJob", scaled, old)
    for changed in (
        trainjob(numNodes=2, image="a:2", resourcesPerNode={"limits": {GPU: 1}}),
        trainjob(numNodes=2, image="a:1", resourcesPerNode={"limits": {GPU: 2}}),
        trainjob(
            numNodes=2,
            image="a:1",
            resourcesPerNode={"limits": {GPU: 1}},
            env=[{"name": "CUDA_VERSION", "value": "12.8.0"}],
        ),
    ):
        assert not templates_equal(group, "TrainJob", changed, old)
    # An empty env reads as no env (nothing the evaluation reads was added).
    empty_env = trainjob(numNodes=2, image="a:1", resourcesPerNode={"limits": {GPU: 1}}, env=[])
    assert templates_equal(group, "TrainJob", empty_env, old)

    def llm(replicas: int, cuda: str) -> dict[str, Any]:
        return {
            "apiVersion": "serving.kserve.io/v1alpha2",
            "kind": "LLMInferenceService",
            "spec": {
                "replicas": replicas,
                "annotations": {"features.alauda.io/cuda-version": cuda},
                "template": {"containers": [container("main", None, limits={GPU: "1"})]},
            },
        }

    kserve = "serving.kserve.io"
    assert templates_equal(kserve, "LLMInferenceService", llm(3, "12.4"), llm(1, "12.4"))
    # the pods' annotations are read: changing them is a change
    assert not templates_equal(kserve, "LLMInferenceService", llm(1, "12.8"), llm(1, "12.4"))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(
        st.sampled_from(
            [
                "spec", "template", "containers", "initContainers", "resources", "limits",
                "requests", "claims", "resourceClaims", "name", "Worker", "pytorchReplicaSpecs",
                "workerGroupSpecs", "headGroupSpec", "tasks", "predictor", "model", "metadata",
                "annotations", "replicatedJobs", "leaderWorkerTemplate", "workerTemplate",
                "nvidia.com/gpu", "resourceClaimTemplateName", "rayClusterSpec",
                "trainer", "resourcesPerNode", "image", "env", "prefill", "worker",
            ]
        ),
        children,
        max_size=4,
    ),
    max_leaves=25,
)  # fmt: skip
REGISTERED = [(k.group, k.kind) for k in BUILTIN_KINDS]


CLAIMS = ClaimIndex(
    templates={("ml", "x"): ClaimClasses.of({"gpu": frozenset({"gpu.nvidia.com"})})}
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(REGISTERED),
    spec=JSON,
    old_spec=JSON,
    operation=st.sampled_from(["CREATE", "UPDATE"]),
    with_claims=st.booleans(),
)
def test_arbitrary_shapes_never_raise_anything_but_webhook_errors(
    kind: tuple[str, str], spec: Any, old_spec: Any, operation: str, with_claims: bool
) -> None:
    group, name = kind
    api_version = f"{group}/v1" if group else "v1"
    obj = {"apiVersion": api_version, "kind": name, "metadata": {"namespace": "ml"}, "spec": spec}
    old = {**obj, "spec": old_spec}
    with contextlib.suppress(WebhookError):
        evaluate(
            obj,
            standard_policies(),
            WebhookConfig(),
            operation=operation,
            old_object=old,
            claims=CLAIMS if with_claims else None,
        )


def test_kserve_scaling_fields_are_not_template_changes() -> None:
    def isvc(**predictor: Any) -> dict[str, Any]:
        model = {"modelFormat": {"name": "huggingface"}, "resources": {"limits": {GPU: "1"}}}
        return {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "spec": {"predictor": {"model": model, **predictor}},
        }

    group = "serving.kserve.io"
    assert templates_equal(group, "InferenceService", isvc(minReplicas=3), isvc(minReplicas=1))
    assert templates_equal(group, "InferenceService", isvc(canaryTrafficPercent=10), isvc())
    # A scheduling directive is no reason to re-judge (SPEC §6): the evaluation does not read it.
    assert templates_equal(group, "InferenceService", isvc(nodeSelector={"gpu": "a100"}), isvc())
    changed = isvc()
    changed["spec"]["predictor"]["model"]["resources"]["limits"][GPU] = "2"
    assert not templates_equal(group, "InferenceService", changed, isvc())
