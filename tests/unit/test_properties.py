"""Property tests: patch == mutated object, idempotence, and no crash on arbitrary JSON."""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import jsonpatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import GPU, GPUCORES, GPUMEM, VCORE, VMEM, standard_policies, workload
from webhook.core.base.errors import WebhookError
from webhook.core.base.patches import diff
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.placement.inventory import NodeInventory

# Bounded so the file runs in a few seconds; no deadline (CI machines vary in speed).
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
POLICIES = standard_policies()
CONFIGS = [
    WebhookConfig(),
    load_config({"mutateTemplates": True}),
    load_config({"mutateTemplates": True, "maxMajorSkew": 0, "noCompatibleNode": "deny"}),
    load_config(
        {
            "cudaLabels": {
                "major": "nvidia.com/cuda.runtime-version.major",
                "minor": "nvidia.com/cuda.runtime-version.minor",
            },
            "gpuResourceNames": ["nvidia.com/gpu", "example.org/npu"],
        }
    ),
]
KEYS = [VCORE, VMEM, GPU, GPUMEM, GPUCORES, "cpu", "memory", "example.org/npu"]
QUANTITIES: list[Any] = [
    "0",
    "1",
    "2",
    "4",
    "50",
    "100",
    "150",
    "200",
    "500m",
    "0.5",
    "1k",
    "1000m",
    "1e2",
    "abc",
    "",
    1,
    2,
    100,
    0.5,
    None,
]
IMAGES = [
    "busybox:1.36",
    "nvidia/cuda:12.4.1-runtime-ubuntu22.04",
    "nvidia/cuda:11.8.0-base",
    "nvidia/cuda:12.0.0",
    "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime",
    "paddlepaddle/paddle:2.6.1-gpu-cuda12.0-cudnn8.9-trt8.6",
    "registry:5000/team/my-paddle:1.0",
    "example.com/torch:cu118",
    "nvcr.io/nvidia/tritonserver:24.06-py3",
]
CUDA_LABEL_KEYS = [
    "cuda-major-version",
    "cuda-minor-version",
    "nvidia.com/cuda.runtime-version.major",
]

env_items = st.one_of(
    st.fixed_dictionaries(
        {
            "name": st.sampled_from(
                ["FLAGS_allocator_strategy", "CUDA_VERSION", "NVIDIA_REQUIRE_CUDA", "A"]
            ),
            "value": st.sampled_from(
                ["naive_best_fit", "auto_growth", "12.2.0", "cuda>=11.4", "x"]
            ),
        }
    ),
    st.fixed_dictionaries(
        {
            "name": st.just("FLAGS_allocator_strategy"),
            "valueFrom": st.just({"fieldRef": {"fieldPath": "a"}}),
        }
    ),
)
quantity_maps = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(QUANTITIES), max_size=4)


@st.composite
def containers(draw: st.DrawFn, name: str) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name}
    image = draw(st.sampled_from([*IMAGES, None]))
    if image is not None:
        c["image"] = image
    resources: dict[str, Any] = {}
    for field in ("limits", "requests"):
        if draw(st.booleans()):
            resources[field] = draw(quantity_maps)
    keep_empty = draw(st.booleans())
    if resources or keep_empty:
        c["resources"] = resources
    if draw(st.booleans()):
        c["env"] = draw(st.lists(env_items, max_size=3))
    return c


expressions = st.fixed_dictionaries(
    {
        "key": st.sampled_from([*CUDA_LABEL_KEYS, "zone", "node.kubernetes.io/instance-type"]),
        "operator": st.sampled_from(["In", "Gt", "Exists"]),
        "values": st.lists(st.sampled_from(["1", "11", "12", "a"]), max_size=2),
    }
)
terms = st.lists(
    st.one_of(
        st.fixed_dictionaries({"matchExpressions": st.lists(expressions, max_size=3)}),
        st.fixed_dictionaries(
            {"matchFields": st.just([{"key": "metadata.name", "operator": "In", "values": ["n"]}])}
        ),
    ),
    max_size=3,
)
affinities = st.one_of(
    st.none(),
    st.builds(
        lambda t: {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": t}
            }
        },
        terms,
    ),
    st.just({"podAntiAffinity": {}}),
)
annotation_maps = st.dictionaries(
    st.sampled_from(
        [
            "features.alauda.io/cuda-version",
            "features.alauda.io/cuda-affinity",
            "features.alauda.io/env-fixes",
            "other",
        ]
    ),
    st.sampled_from(["12.4", "11.8", "12.0", "false", "true", "x"]),
    max_size=3,
)
inventories = st.one_of(
    st.none(),
    st.builds(
        lambda vs: NodeInventory.build(
            {
                f"n{i}": {"cuda-major-version": str(a), "cuda-minor-version": str(b)}
                for i, (a, b) in enumerate(vs)
            }
        ),
        st.lists(st.tuples(st.integers(10, 14), st.integers(0, 9)), max_size=3),
    ),
)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(1, 3))
    spec: dict[str, Any] = {"containers": [draw(containers(f"c{i}")) for i in range(n)]}
    if draw(st.booleans()):
        spec["initContainers"] = [draw(containers("init"))]
    affinity = draw(affinities)
    if affinity is not None:
        spec["affinity"] = affinity
    if draw(st.booleans()):
        spec["nodeSelector"] = {draw(st.sampled_from(["zone", "cuda-major-version"])): "12"}
    meta: dict[str, Any] = {"name": "p", "namespace": "ml"}
    ann = draw(annotation_maps)
    if ann:
        meta["annotations"] = ann
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    kind = draw(st.sampled_from(["Pod", "Pod", "Deployment", "CronJob", "Job"]))
    return obj if kind == "Pod" else workload(kind, obj)


@FAST
@given(pods(), st.sampled_from(CONFIGS), inventories)
def test_patch_gives_mutated_and_evaluation_is_idempotent(
    obj: dict[str, Any], config: WebhookConfig, inventory: NodeInventory | None
) -> None:
    decision = evaluate(obj, POLICIES, config, inventory=inventory)
    if decision.mutated is None:
        assert decision.patch == []
        return
    assert decision.patch != []
    patched = jsonpatch.apply_patch(obj, decision.patch)
    assert patched == decision.mutated
    # The patch is built from the places the draft wrote (Draft.ops): the same object as the
    # full walk of both (diff) once applied.
    assert decision.draft is not None
    assert jsonpatch.apply_patch(obj, diff(obj, decision.mutated)) == patched
    again = evaluate(patched, POLICIES, config, inventory=inventory)
    assert again.patch == []
    assert again.notes == ()
    assert [v.message for v in again.violations] == [v.message for v in decision.violations]


@FAST
@given(pods(), st.sampled_from(CONFIGS), inventories, st.booleans())
def test_violations_only_gives_the_same_violations_as_a_full_evaluation(
    obj: dict[str, Any], config: WebhookConfig, inventory: NodeInventory | None, mutated: bool
) -> None:
    # What /validate computes for the object /mutate saw, and for the object after the patch.
    if mutated:
        obj = jsonpatch.apply_patch(obj, evaluate(obj, POLICIES, config, inventory=inventory).patch)
    full = evaluate(obj, POLICIES, config, inventory=inventory)
    only = evaluate(obj, POLICIES, config, inventory=inventory, violations_only=True)
    assert only.violations == full.violations
    assert (only.notes, only.warnings, only.patch) == ((), (), [])


@FAST
@given(pods(), st.sampled_from(CONFIGS))
def test_the_original_object_is_never_modified(obj: dict[str, Any], config: WebhookConfig) -> None:
    snapshot = jsonpatch.apply_patch(obj, [])  # deep copy
    evaluate(obj, POLICIES, config)
    assert obj == snapshot


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from([*KEYS, *IMAGES, *QUANTITIES[:-1], "containers", "false"]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "containers",
                    "initContainers",
                    "resources",
                    "limits",
                    "requests",
                    "env",
                    "name",
                    "value",
                    "image",
                    "affinity",
                    "nodeAffinity",
                    "metadata",
                    "annotations",
                    "spec",
                    "template",
                    "jobTemplate",
                    *KEYS,
                ]
            )
            | st.text(max_size=5),
            children,
            max_size=4,
        )
    ),
    max_leaves=25,
)


@st.composite
def weird_objects(draw: st.DrawFn) -> Any:
    """Arbitrary JSON, often shaped a little like a pod so the deeper code paths run."""
    if draw(st.booleans()):
        return draw(json_values)
    container = draw(
        st.dictionaries(
            st.sampled_from(["name", "image", "resources", "env"]), json_values, max_size=4
        )
    )
    if draw(st.booleans()):
        container["resources"] = {
            "limits": draw(st.dictionaries(st.sampled_from(KEYS), json_values, max_size=3))
        }
    spec = {"containers": [container], "affinity": draw(json_values)}
    obj = {"kind": "Pod", "metadata": draw(json_values), "spec": spec}
    kind = draw(st.sampled_from(["Pod", "Deployment", "CronJob"]))
    return (
        obj
        if kind == "Pod"
        else {
            "kind": kind,
            "spec": {
                "template": {"spec": spec},
                "jobTemplate": {"spec": {"template": {"spec": copy.deepcopy(spec)}}},
            },
        }
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    weird_objects(),
    st.sampled_from(["Pod", "Deployment", "StatefulSet", "CronJob", "ConfigMap", None]),
    st.sampled_from(CONFIGS),
)
def test_arbitrary_json_never_raises_anything_but_webhook_errors(
    obj: Any, kind: str | None, config: WebhookConfig
) -> None:
    try:
        decision = evaluate(obj, POLICIES, config, kind=kind)
    except WebhookError:
        return
    # whatever came out is usable: the patch applies and the messages render
    if decision.mutated is not None:
        assert jsonpatch.apply_patch(obj, decision.patch) == decision.mutated
    decision.denial_message()


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["kind", "metadata", "data"]), json_values, max_size=3))
def test_arbitrary_configmaps_never_raise(cm: dict[str, Any]) -> None:
    cm["kind"] = "ConfigMap"
    with contextlib.suppress(WebhookError):
        evaluate(cm, POLICIES, WebhookConfig(), namespace="kube-public")
