"""The chart's webhook matchConditions (CEL), evaluated on real manifests and odd objects.

The API server applies the webhook's failurePolicy when a match condition errors, so the
expressions must be false (never an error) for objects missing optional fields, and true
exactly when some container asks for an extended resource.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cel
import pytest
import yaml

from tests.helpers import CORPUS, CORPUS_MISSING, DATA
from webhook.core.workloads.pods import find_pod_specs, lookup

from .conftest import Render

# The repository's own manifests, and the external corpus of upstream ones when it is there.
MANIFESTS = {"repository": DATA / "manifests", "corpus": CORPUS / "manifests"}
POD_SPEC_PATHS = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}


def expressions(render: Render) -> dict[tuple[str, str], str]:
    """(configuration kind, webhook purpose) -> its single match condition expression."""
    found: dict[tuple[str, str], str] = {}
    for obj in render(kube_version="v1.30.0"):
        if obj["kind"].endswith("WebhookConfiguration"):
            for hook in obj["webhooks"]:
                if "matchConditions" not in hook:
                    continue  # the GPU access entry: no condition (every pod is sent)
                (condition,) = hook["matchConditions"]
                found[(obj["kind"], hook["name"].split(".", 1)[0])] = condition["expression"]
    return found


def uses_extended_resource(pod_spec: dict[str, Any]) -> bool:
    """Reference answer, written independently of the CEL (DRA claims count: SPEC §6)."""
    if pod_spec.get("resourceClaims"):
        return True
    for group in ("containers", "initContainers"):
        for container in pod_spec.get(group) or []:
            resources = container.get("resources") or {}
            for field in ("limits", "requests"):
                if any("/" in key for key in resources.get(field) or {}):
                    return True
    return False


DEVICE_ENV = {
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_MIG_CONFIG_DEVICES",
    "NVIDIA_MIG_MONITOR_DEVICES",
    "NVIDIA_IMEX_CHANNELS",
}


def may_reach_gpus(parent: dict[str, Any], pod_spec: dict[str, Any]) -> bool:
    """Reference answer for the GPU access condition (SPEC §12), written independently of the
    CEL: a superset of what the webhook finds (it only chooses what is sent)."""
    containers = [*(pod_spec.get("containers") or []), *(pod_spec.get("initContainers") or [])]
    for c in containers:
        if any(e.get("name") in DEVICE_ENV for e in c.get("env") or []):
            return True
        if (c.get("securityContext") or {}).get("privileged") is True:
            return True
        if any("nvidia-container-devices" in m["mountPath"] for m in c.get("volumeMounts") or []):
            return True
    for volume in pod_spec.get("volumes") or []:
        path = (volume.get("hostPath") or {}).get("path")
        if path is not None and ("dev" in path or "/." in path or set(path) <= {"/"}):
            return True
    if "nvidia" in (pod_spec.get("runtimeClassName") or ""):
        return True
    annotations = (parent.get("metadata") or {}).get("annotations") or {}
    return any(k.startswith(("cdi.k8s.io/", "nvidia.cdi.k8s.io")) for k in annotations)


def template_parent(obj: dict[str, Any]) -> dict[str, Any]:
    """The object (Pod) or the template holding the pod spec's metadata."""
    node: dict[str, Any] = obj
    for key in POD_SPEC_PATHS[obj["kind"]][:-1]:
        node = node[key]
    return node


@pytest.fixture(params=sorted(MANIFESTS))
def manifests(request: pytest.FixtureRequest) -> Path:
    """A folder of manifests: the repository's (always there) or the external corpus."""
    folder = MANIFESTS[request.param]
    if not folder.is_dir():
        pytest.skip(CORPUS_MISSING)
    return folder


def corpus_objects(folder: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every Pod and workload of the folder's manifests, with an id naming its file."""
    found = []
    for path in sorted(folder.glob("*.yaml")):
        for index, doc in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8"))):
            # Only the built-in kinds the webhook rules select (a volcano "Job" is not one).
            if (
                isinstance(doc, dict)
                and doc.get("kind") in POD_SPEC_PATHS
                and doc.get("apiVersion") in {"v1", "apps/v1", "batch/v1"}
            ):
                found.append((f"{path.stem}#{index}", doc))
    return found


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    node: dict[str, Any] = obj
    for key in POD_SPEC_PATHS[obj["kind"]]:
        node = node[key]
    return node


def matches(expression: str, obj: dict[str, Any], operation: str = "CREATE") -> bool:
    """The condition on `obj` in a request of `operation` (the pods entries' condition reads
    request.operation under `warn`: test_chart_reviews.py)."""
    result = cel.evaluate(expression, {"object": obj, "request": {"operation": operation}})
    assert isinstance(result, bool), f"{expression!r} gave {result!r}, not a bool"
    return result


def test_manifests_have_gpu_and_non_gpu_workloads(manifests: Path) -> None:
    objects = corpus_objects(manifests)
    kinds = {obj["kind"] for _, obj in objects}
    assert {"Pod", "Deployment", "Job", "CronJob", "StatefulSet", "DaemonSet"} <= kinds
    answers = {uses_extended_resource(pod_spec(obj)) for _, obj in objects}
    assert answers == {True, False}


@pytest.mark.parametrize(
    "configuration", ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
)
def test_conditions_select_exactly_the_objects_asking_for_extended_resources(
    render: Render, configuration: str, manifests: Path
) -> None:
    exprs = expressions(render)
    for name, obj in corpus_objects(manifests):
        purpose = "pods" if obj["kind"] == "Pod" else "workloads"
        expected = uses_extended_resource(pod_spec(obj))
        if purpose == "workloads":
            # With GPU access control on (the default, warn), templates that could reach GPUs
            # without a request are sent too, so `kubectl apply` shows the finding at once.
            expected = expected or may_reach_gpus(template_parent(obj), pod_spec(obj))
        assert matches(exprs[(configuration, purpose)], obj) is expected, name


# (No explicit nulls: the API server serialises the typed object, so an empty map is omitted.)
ODD_POD_SPECS: list[dict[str, Any]] = [
    {},
    {"containers": []},
    {"containers": [{"name": "a"}]},
    {"containers": [{"name": "a", "resources": {}}]},
    {"containers": [{"name": "a", "resources": {"limits": {"cpu": "1"}}}]},
    {"initContainers": [{"name": "i", "resources": {"requests": {"memory": "1Gi"}}}]},
]
# Workloads cut short somewhere on the way to the pod spec.
PARTIAL_WORKLOADS: list[dict[str, Any]] = [
    {},
    {"spec": {}},
    {"spec": {"template": {}}},
    {"spec": {"template": {"metadata": {}}}},
    {"spec": {"jobTemplate": {}}},
    {"spec": {"jobTemplate": {"spec": {}}}},
    {"spec": {"jobTemplate": {"spec": {"template": {}}}}},
]


def wrap(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """An object of `kind` whose pod spec is `spec`."""
    obj = spec
    for key in reversed(POD_SPEC_PATHS[kind]):
        obj = {key: obj}
    return obj


def test_objects_missing_optional_fields_do_not_match_and_do_not_error(render: Render) -> None:
    exprs = expressions(render)
    cases: list[tuple[str, dict[str, Any]]] = [("pods", {})] + [
        ("workloads", obj) for obj in PARTIAL_WORKLOADS
    ]
    for kind in ("Pod", "Deployment", "CronJob"):
        purpose = "pods" if kind == "Pod" else "workloads"
        cases += [(purpose, wrap(kind, spec)) for spec in ODD_POD_SPECS]
    for configuration in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for purpose, obj in cases:
            assert matches(exprs[(configuration, purpose)], obj) is False, (purpose, obj)


@pytest.mark.parametrize(
    ("where", "limits_or_requests"),
    [("containers", "limits"), ("containers", "requests"), ("initContainers", "requests")],
)
def test_an_extended_resource_anywhere_in_the_pod_spec_matches(
    render: Render, where: str, limits_or_requests: str
) -> None:
    exprs = expressions(render)
    spec = {
        "containers": [{"name": "app"}],
        where: [{"name": "gpu", "resources": {limits_or_requests: {"nvidia.com/gpu": "1"}}}],
    }
    pod = {"spec": spec}
    deployment = {"spec": {"template": {"spec": spec}}}
    cronjob = {"spec": {"jobTemplate": {"spec": {"template": {"spec": spec}}}}}
    assert matches(exprs[("ValidatingWebhookConfiguration", "pods")], pod)
    assert matches(exprs[("ValidatingWebhookConfiguration", "workloads")], deployment)
    assert matches(exprs[("ValidatingWebhookConfiguration", "workloads")], cronjob)


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ({"name": "cf-crl-gpu-manager-vcuda-core"}, True),
        (
            {
                "name": "team-quota",
                "labels": {"features.alauda.io/type": "CustomResourceLimitation"},
            },
            True,
        ),
        ({"name": "cluster-info"}, False),
        ({"name": "cluster-info", "labels": {"app": "x"}}, False),
        ({"generateName": "cf-crl-"}, False),
        ({}, False),
    ],
)
def test_crl_condition_selects_crl_candidates_only(
    render: Render, metadata: dict[str, Any], expected: bool
) -> None:
    exprs = expressions(render)
    expression = exprs[("ValidatingWebhookConfiguration", "crl-configmaps")]
    assert matches(expression, {"metadata": metadata, "data": {}}) is expected


# --- operator workloads (SPEC §6) ----------------------------------------------------------------


def operator_objects(folder: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every document of a kind in the webhook's registry that is not a built-in kind."""
    found = []
    for path in sorted(folder.glob("*.yaml")):
        for index, doc in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8"))):
            if not isinstance(doc, dict) or not isinstance(doc.get("kind"), str):
                continue
            entry = lookup(doc["kind"], doc)
            if entry is not None and entry.group not in ("", "apps", "batch"):
                found.append((f"{path.stem}#{index}", doc))
    return found


def operator_asks(obj: dict[str, Any]) -> bool:
    """Reference answer from the webhook's own registry (Python), not from the chart's CEL."""
    entry = lookup(obj["kind"], obj)
    assert entry is not None
    for spec_ref in find_pod_specs(entry, obj):
        if uses_extended_resource(dict(spec_ref.spec)):
            return True
        for c in spec_ref.containers:  # KServe's container-like fields
            resources = c.container.get("resources") or {}
            if any("/" in k for f in ("limits", "requests") for k in resources.get(f) or {}):
                return True
    return False


def test_manifests_have_gpu_and_non_gpu_operator_workloads(manifests: Path) -> None:
    objects = operator_objects(manifests)
    kinds = {obj["kind"] for _, obj in objects}
    assert {"PyTorchJob", "MPIJob", "RayCluster", "RayJob", "RayService"} <= kinds
    assert {"LeaderWorkerSet", "Job", "InferenceService", "PaddleJob"} <= kinds
    assert {operator_asks(obj) for _, obj in objects} == {True, False}


@pytest.mark.parametrize(
    "configuration", ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
)
def test_operator_condition_matches_the_registry_on_every_manifest(
    render: Render, configuration: str, manifests: Path
) -> None:
    expression = expressions(render)[(configuration, "operators")]
    for name, obj in operator_objects(manifests):
        assert matches(expression, obj) is operator_asks(obj), name


GPU_LIMITS = {"resources": {"limits": {"nvidia.com/gpu": "1"}}}
GPU_TEMPLATE = {"spec": {"containers": [{"name": "c", **GPU_LIMITS}]}}
CLAIM_TEMPLATE = {"spec": {"containers": [{"name": "c"}], "resourceClaims": [{"name": "g"}]}}
GPU_POD_SPEC = GPU_TEMPLATE["spec"]
RUNTIME_SPEC = {
    "template": {
        "spec": {
            "replicatedJobs": [{"name": "node", "template": {"spec": {"template": GPU_TEMPLATE}}}]
        }
    }
}


@pytest.mark.parametrize(
    ("api_version", "kind", "spec"),
    [
        ("kubeflow.org/v1", "TFJob", {"tfReplicaSpecs": {"PS": {"template": GPU_TEMPLATE}}}),
        (
            "kubeflow.org/v1",
            "JAXJob",
            {"jaxReplicaSpecs": {"Worker": {"template": CLAIM_TEMPLATE}}},
        ),
        (
            "kubeflow.org/v1",
            "XGBoostJob",
            {"xgbReplicaSpecs": {"Master": {"template": GPU_TEMPLATE}}},
        ),
        ("ray.io/v1", "RayJob", {"rayClusterSpec": {"headGroupSpec": {"template": GPU_TEMPLATE}}}),
        (
            "jobset.x-k8s.io/v1alpha2",
            "JobSet",
            {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": GPU_TEMPLATE}}}]},
        ),
        (
            "leaderworkerset.x-k8s.io/v1",
            "LeaderWorkerSet",
            {"leaderWorkerTemplate": {"leaderTemplate": GPU_TEMPLATE}},
        ),
        ("batch.paddlepaddle.org/v1", "PaddleJob", {"worker": {"template": GPU_TEMPLATE}}),
        ("serving.kserve.io/v1beta1", "InferenceService", {"predictor": {"model": GPU_LIMITS}}),
        (
            "serving.kserve.io/v1beta1",
            "InferenceService",
            {"explainer": {"containers": [GPU_LIMITS]}},
        ),
        (
            "serving.kserve.io/v1beta1",
            "InferenceService",
            {"predictor": {"workerSpec": {"containers": [GPU_LIMITS]}}},
        ),
        (
            "trainer.kubeflow.org/v1alpha1",
            "TrainJob",
            {
                "runtimeRef": {"name": "torch"},
                "trainer": {"resourcesPerNode": GPU_LIMITS["resources"]},
            },
        ),
        (
            "trainer.kubeflow.org/v1alpha1",
            "TrainJob",
            {"trainer": {"resourcesPerNode": {"requests": {"nvidia.com/gpu": "1"}}}},
        ),
        ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime", RUNTIME_SPEC),
        ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime", RUNTIME_SPEC),
        ("serving.kserve.io/v1alpha2", "LLMInferenceService", {"template": GPU_POD_SPEC}),
        ("serving.kserve.io/v1alpha1", "LLMInferenceService", {"worker": GPU_POD_SPEC}),
        (
            "serving.kserve.io/v1alpha2",
            "LLMInferenceService",
            {"prefill": {"template": GPU_POD_SPEC}},
        ),
        (
            "serving.kserve.io/v1alpha2",
            "LLMInferenceService",
            {"prefill": {"worker": GPU_POD_SPEC}},
        ),
        (
            "serving.kserve.io/v1alpha2",
            "LLMInferenceService",
            {"router": {"scheduler": {"template": GPU_POD_SPEC}}},
        ),
        ("serving.knative.dev/v1", "Service", {"template": GPU_TEMPLATE}),
    ],
)
def test_operator_condition_sees_every_registered_place(
    render: Render, api_version: str, kind: str, spec: dict[str, Any]
) -> None:
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}, "spec": spec}
    assert operator_asks(obj)
    assert matches(expressions(render)[("ValidatingWebhookConfiguration", "operators")], obj)


@pytest.mark.parametrize(
    ("api_version", "kind", "spec"),
    [
        ("kubeflow.org/v1", "PyTorchJob", None),
        ("kubeflow.org/v1", "PyTorchJob", {}),
        ("kubeflow.org/v1", "PyTorchJob", {"pytorchReplicaSpecs": {}}),
        ("kubeflow.org/v1", "PyTorchJob", {"pytorchReplicaSpecs": {"Worker": {}}}),
        ("kubeflow.org/v1", "PyTorchJob", {"pytorchReplicaSpecs": {"Worker": {"template": {}}}}),
        ("kubeflow.org/v1", "PyTorchJob", {"runPolicy": {"cleanPodPolicy": "None"}}),
        ("ray.io/v1", "RayCluster", {"workerGroupSpecs": [{"groupName": "g"}]}),
        ("ray.io/v1", "RayService", {"rayClusterConfig": {}}),
        ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", {"leaderWorkerTemplate": {}}),
        ("jobset.x-k8s.io/v1alpha2", "JobSet", {"replicatedJobs": [{"name": "w", "template": {}}]}),
        ("batch.volcano.sh/v1alpha1", "Job", {"tasks": [{"name": "t"}]}),
        ("batch.paddlepaddle.org/v1", "PaddleJob", {"ps": {"replicas": 1}}),
        ("serving.kserve.io/v1beta1", "InferenceService", {"predictor": {"model": {}}}),
        ("serving.kserve.io/v1beta1", "InferenceService", {"predictor": {"minReplicas": 1}}),
        ("trainer.kubeflow.org/v1alpha1", "TrainJob", {"runtimeRef": {"name": "torch"}}),
        ("trainer.kubeflow.org/v1alpha1", "TrainJob", {"trainer": {"numNodes": 2}}),
        ("trainer.kubeflow.org/v1alpha1", "TrainJob", {"trainer": {"resourcesPerNode": {}}}),
        (
            "trainer.kubeflow.org/v1alpha1",
            "TrainJob",
            {"trainer": {"resourcesPerNode": {"limits": {"cpu": "4"}}}},
        ),
        ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime", {"mlPolicy": {"numNodes": 1}}),
        ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime", {"template": {}}),
        ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime", {"template": {"spec": {}}}),
        (
            "trainer.kubeflow.org/v1alpha1",
            "TrainingRuntime",
            {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {}}]}}},
        ),
        ("serving.kserve.io/v1alpha2", "LLMInferenceService", {"model": {"uri": "hf://x"}}),
        ("serving.kserve.io/v1alpha2", "LLMInferenceService", {"prefill": {"replicas": 2}}),
        ("serving.kserve.io/v1alpha2", "LLMInferenceService", {"router": {"scheduler": {}}}),
        ("serving.kserve.io/v1alpha2", "LLMInferenceService", {"template": {"containers": []}}),
        ("serving.knative.dev/v1", "Service", {"traffic": [{"percent": 100}]}),
        ("serving.knative.dev/v1", "Service", {"template": {"metadata": {}}}),
    ],
)
def test_partial_operator_objects_do_not_match_and_do_not_error(
    render: Render, api_version: str, kind: str, spec: Any
) -> None:
    obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}}
    if spec is not None:
        obj["spec"] = spec
    for configuration in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        assert matches(expressions(render)[(configuration, "operators")], obj) is False


@pytest.mark.parametrize(
    "api_version", ["example.com/v1", "serving.example.com/v1", "trainer.example.com/v1alpha1"]
)
@pytest.mark.parametrize("kind", ["TrainJob", "Service", "Job", "FineTune"])
def test_kinds_the_condition_does_not_know_are_sent(
    render: Render, api_version: str, kind: str
) -> None:
    # A kind added in config.workloads (and in webhooks.operators.rules): the CEL cannot know
    # where its templates are, so the webhook decides. Known by (group, kind): a registered
    # kind's name in another group is another kind.
    obj = {"apiVersion": api_version, "kind": kind, "spec": {}}
    assert matches(expressions(render)[("ValidatingWebhookConfiguration", "operators")], obj)


DATA = Path(__file__).resolve().parents[1] / "data" / "operators"


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.yaml")))
def test_operator_condition_matches_the_registry_on_the_test_data(
    render: Render, name: str
) -> None:
    expression = expressions(render)[("ValidatingWebhookConfiguration", "operators")]
    for obj in yaml.safe_load_all((DATA / name).read_text(encoding="utf-8")):
        if isinstance(obj, dict):
            assert matches(expression, obj) is operator_asks(obj)


def test_pods_and_templates_with_dra_claims_are_sent(render: Render) -> None:
    exprs = expressions(render)
    spec = {"containers": [{"name": "c", "resources": {"claims": [{"name": "g"}]}}],
            "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "gpu"}]}  # fmt: skip
    assert matches(exprs[("ValidatingWebhookConfiguration", "pods")], {"spec": spec})
    deployment = {"spec": {"template": {"spec": spec}}}
    assert matches(exprs[("ValidatingWebhookConfiguration", "workloads")], deployment)
    assert not matches(
        exprs[("ValidatingWebhookConfiguration", "pods")], {"spec": {**spec, "resourceClaims": []}}
    )


BYPASSES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("env", {"containers": [{"name": "a", "env": [{"name": "NVIDIA_VISIBLE_DEVICES"}]}]}, {}),
    (
        "init env",
        {
            "containers": [{"name": "a"}],
            "initContainers": [{"name": "i", "env": [{"name": "NVIDIA_IMEX_CHANNELS"}]}],
        },
        {},
    ),
    ("privileged", {"containers": [{"name": "a", "securityContext": {"privileged": True}}]}, {}),
    (
        "device-list mount",
        {
            "containers": [
                {
                    "name": "a",
                    "volumeMounts": [
                        {"name": "n", "mountPath": "/var/run/nvidia-container-devices/all"}
                    ],
                }
            ]
        },
        {},
    ),
    (
        "hostPath /dev",
        {"containers": [{"name": "a"}], "volumes": [{"name": "d", "hostPath": {"path": "/dev"}}]},
        {},
    ),
    (
        "hostPath /",
        {"containers": [{"name": "a"}], "volumes": [{"name": "d", "hostPath": {"path": "/"}}]},
        {},
    ),
    ("runtime class", {"containers": [{"name": "a"}], "runtimeClassName": "nvidia"}, {}),
    ("cdi annotation", {"containers": [{"name": "a"}]}, {"cdi.k8s.io/x": "nvidia.com/gpu=0"}),
    ("nri annotation", {"containers": [{"name": "a"}]}, {"nvidia.cdi.k8s.io/pod": "x"}),
]


@pytest.mark.parametrize(("case", "spec", "annotations"), BYPASSES, ids=[b[0] for b in BYPASSES])
def test_templates_with_a_bypass_and_no_gpu_request_are_sent_to_the_workloads_entry(
    render: Render, case: str, spec: dict[str, Any], annotations: dict[str, str]
) -> None:
    """Early feedback on `kubectl apply` of a template; their pods reach the access entry,
    which has no condition at all."""
    exprs = expressions(render)
    meta = {"name": "p", "annotations": annotations} if annotations else {"name": "p"}
    deployment = {"spec": {"template": {"metadata": meta, "spec": spec}}}
    assert matches(exprs[("ValidatingWebhookConfiguration", "workloads")], deployment), case
    plain = {"spec": {"template": {"metadata": {"name": "p"}, "spec": {"containers": [{}]}}}}
    assert not matches(exprs[("ValidatingWebhookConfiguration", "workloads")], plain)


def test_the_workloads_entry_sends_exactly_the_configured_runtime_classes(
    render: Render,
) -> None:
    """config.gpuAccess.runtimeClasses is what the CEL compares with, not a name pattern."""

    def sent(values: dict[str, Any], runtime_class: str) -> bool:
        for obj in render(values, kube_version="v1.30.0"):
            if obj["kind"] != "ValidatingWebhookConfiguration":
                continue
            for hook in obj["webhooks"]:
                if hook["name"].startswith("workloads."):
                    (condition,) = hook["matchConditions"]
                    spec = {"containers": [{"name": "a"}], "runtimeClassName": runtime_class}
                    deployment = {"spec": {"template": {"spec": spec}}}
                    return matches(condition["expression"], deployment)
        raise AssertionError("no workloads entry")

    assert sent({}, "nvidia-cdi")
    assert not sent({}, "my-nvidia-test")  # the old contains('nvidia') sent it
    custom = {"config": {"gpuAccess": {"runtimeClasses": ["kata-gpu", "ascend"]}}}
    assert sent(custom, "kata-gpu")
    assert sent(custom, "ascend")
    assert not sent(custom, "nvidia")
    assert not sent({"config": {"gpuAccess": {"runtimeClasses": []}}}, "nvidia")
    vendors = {"config": {"gpuAccess": {"vendorRuntimeClasses": {"ascend": ["ascend-910"]}}}}
    assert sent(vendors, "ascend-910")
    assert sent(vendors, "nvidia")


def test_gpu_access_off_removes_its_entry(render: Render) -> None:
    names = {
        hook["name"].split(".", 1)[0]
        for obj in render({"config": {"gpuAccess": {"mode": "off"}}}, kube_version="v1.30.0")
        if obj["kind"].endswith("WebhookConfiguration")
        for hook in obj["webhooks"]
    }
    assert "gpu-access" not in names
    assert "pods" in names
