"""CUDA node affinity (SPEC §4): version detection, compatibility, injected terms, inventory."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import (
    GPU,
    VCORE,
    VMEM,
    apply,
    assert_idempotent,
    container,
    crl,
    expr,
    node_terms,
    pod,
    policies,
    run,
)
from webhook.core.config import CudaLabels, WebhookConfig, load_config
from webhook.core.rules.cuda import (
    CudaVersion,
    NodeInventory,
    compatible,
    container_requirement,
    image_repository,
    injected_terms,
)

V = CudaVersion
MAJOR, MINOR = "cuda-major-version", "cuda-minor-version"
ANN_VERSION = "features.alauda.io/cuda-version"
UNKNOWN = (
    "CUDA version unknown, no node affinity added: set annotation "
    'features.alauda.io/cuda-version (e.g. "12.4") or env CUDA_VERSION'
)
DIGEST = "sha256:" + "a" * 64


def gpu_pod(
    image: str = "busybox:1.36", env: list[dict[str, Any]] | None = None, **kw: Any
) -> dict[str, Any]:
    """A pod with one nvidia.com/gpu container (requests already equal: no resource notes)."""
    return pod(container(image=image, limits={GPU: "1"}, requests={GPU: "1"}, env=env), **kw)


def terms(*groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"matchExpressions": list(g)} for g in groups]


# --- version detection --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("nvidia/cuda:12.4.1-runtime-ubuntu22.04", V(12, 4)),
        ("nvidia/cuda:11.6.2-cudnn8-runtime-ubuntu20.04", V(11, 6)),
        ("nvcr.io/nvidia/cuda:11.8.0-base", V(11, 8)),
        ("nvidia/cuda:12.4.1", V(12, 4)),
        ("pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime", V(12, 1)),
        ("paddlepaddle/paddle:2.6.1-gpu-cuda12.0-cudnn8.9-trt8.6", V(12, 0)),
        (
            "registry.baidubce.com/paddlepaddle/paddle:2.4.0rc0-gpu-cuda11.2-cudnn8.1-trt8.0",
            V(11, 2),
        ),
        ("pytorch/pytorch:cu121", V(12, 1)),
        ("example.com/torch:2.1.0-cu118-py310", V(11, 8)),
        ("example.com/app:1.0-cuda-11.8-devel", V(11, 8)),
        ("example.com/app:v1_cuda11.8", V(11, 8)),
        ("example.com/app:1.0_cuda11.8", V(11, 8)),
        (f"nvidia/cuda:12.4.1-base@{DIGEST}", V(12, 4)),  # tag and digest
        ("registry:5000/nvidia/cuda:11.8.0-base", V(11, 8)),  # registry with port
        ("registry.local:5000/cuda:12.2.0-devel", V(12, 2)),
    ],
)
def test_version_from_image(image: str, version: CudaVersion) -> None:
    req = container_requirement({"image": image}, WebhookConfig())
    assert req is not None
    assert req.version == version
    assert req.source == f"image {image.split('@', 1)[0]}"


@pytest.mark.parametrize(
    "image",
    [
        "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04",  # DCGM versions, not CUDA
        "nvcr.io/nvidia/tritonserver:24.06-py3",  # NGC YY.MM
        "nvcr.io/nvidia/tritonserver:24.06-py3-sdk",
        "nvcr.io/nvidia/nemo:25.04.01",
        f"nvidia/cuda@{DIGEST}",  # digest only: no tag to read
        "registry:5000/team/trainer",  # port digits are not a version
        "registry:5000/team/trainer:2.1",
        "localhost:5000/cu121/app:latest",  # cu121 in the path, not the tag
        "vllm/vllm-openai:v0.11.0",
        "k8s.gcr.io/cuda-vector-add:v0.1",
        "example.com/cuda-app:12.1",  # a repository that mentions cuda, tag is the app version
        "ubuntu:22.04",
        "",
    ],
)
def test_no_version_from_image(image: str) -> None:
    assert container_requirement({"image": image}, WebhookConfig()) is None


def test_no_image_at_all() -> None:
    assert container_requirement({"name": "x"}, WebhookConfig()) is None


@pytest.mark.parametrize(
    ("env", "version", "source"),
    [
        ([{"name": "CUDA_VERSION", "value": "12.4.1"}], V(12, 4), "env CUDA_VERSION=12.4.1"),
        ([{"name": "CUDA_VERSION", "value": "11.8"}], V(11, 8), "env CUDA_VERSION=11.8"),
        (
            [{"name": "NVIDIA_REQUIRE_CUDA", "value": "cuda>=12.2 brand=tesla,driver>=470"}],
            V(12, 2),
            "env NVIDIA_REQUIRE_CUDA",
        ),
        (
            # CUDA_VERSION before NVIDIA_REQUIRE_CUDA, whatever the order in the list
            [
                {"name": "NVIDIA_REQUIRE_CUDA", "value": "cuda>=11.0"},
                {"name": "CUDA_VERSION", "value": "12.1.0"},
            ],
            V(12, 1),
            "env CUDA_VERSION=12.1.0",
        ),
        (
            # an unparseable CUDA_VERSION falls through to the next source
            [
                {"name": "CUDA_VERSION", "value": "latest"},
                {"name": "NVIDIA_REQUIRE_CUDA", "value": "cuda>=11.4"},
            ],
            V(11, 4),
            "env NVIDIA_REQUIRE_CUDA",
        ),
    ],
)
def test_version_from_env_beats_image(
    env: list[dict[str, Any]], version: CudaVersion, source: str
) -> None:
    req = container_requirement({"image": "nvidia/cuda:10.2-base", "env": env}, WebhookConfig())
    assert req is not None
    assert (req.version, req.source) == (version, source)


def test_env_value_from_is_not_a_version() -> None:
    c = {
        "image": "nvidia/cuda:11.8.0-base",
        "env": [{"name": "CUDA_VERSION", "valueFrom": {"configMapKeyRef": {}}}],
    }
    req = container_requirement(c, WebhookConfig())
    assert req is not None and req.version == V(11, 8)


TABLE = load_config(
    {
        "imageCudaTable": [
            {"image": "nvcr.io/nvidia/tritonserver:24.06*", "cudaVersion": "12.5"},
            {"image": "nvidia/cuda:12.4*", "cudaVersion": "12.6.1"},
        ]
    }
)


def test_admin_table_for_images_without_a_cuda_tag() -> None:
    req = container_requirement({"image": "nvcr.io/nvidia/tritonserver:24.06-py3"}, TABLE)
    assert req is not None
    assert (req.version, req.source) == (
        V(12, 5),
        "image table entry for nvcr.io/nvidia/tritonserver:24.06-py3",
    )


def test_admin_table_beats_image_patterns_and_matches_without_digest() -> None:
    req = container_requirement({"image": f"nvidia/cuda:12.4.1-base@{DIGEST}"}, TABLE)
    assert req is not None and req.version == V(12, 6)


def test_env_beats_admin_table() -> None:
    c = {
        "image": "nvcr.io/nvidia/tritonserver:24.06-py3",
        "env": [{"name": "CUDA_VERSION", "value": "11.0"}],
    }
    req = container_requirement(c, TABLE)
    assert req is not None and req.version == V(11, 0)


def test_annotation_beats_env_and_image() -> None:
    original = gpu_pod(
        "nvidia/cuda:12.4.1",
        env=[{"name": "CUDA_VERSION", "value": "12.2"}],
        annotations={ANN_VERSION: "11.8"},
    )
    decision = run(original)
    assert decision.notes == (
        "required GPU nodes with CUDA ≥ 11.8 (annotation features.alauda.io/cuda-version)",
    )
    assert node_terms(apply(decision)) == terms(
        [expr(MAJOR, "In", 11), expr(MINOR, "Gt", 7)], [expr(MAJOR, "In", 12)]
    )


def test_custom_image_pattern() -> None:
    config = load_config({"imagePatterns": [r"myorg/.*:.*-c(?P<major>\d+)\.(?P<minor>\d+)$"]})
    req = container_requirement({"image": "myorg/train:3-c12.2"}, config)
    assert req is not None and req.version == V(12, 2)
    # the defaults are replaced, not extended
    assert container_requirement({"image": "nvidia/cuda:12.4.1"}, config) is None


def test_image_repository() -> None:
    assert image_repository("registry:5000/team/paddle:2.6") == "registry:5000/team/paddle"
    assert image_repository("registry:5000/team/paddle") == "registry:5000/team/paddle"
    assert image_repository(f"paddle@{DIGEST}") == "paddle"


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("12.4", V(12, 4)),
        ("12.4.1", V(12, 4)),
        ("v11.8", V(11, 8)),
        (" 12.0 ", V(12, 0)),
        ("12", None),
        ("abc", None),
        (12.4, None),
    ],
)
def test_cuda_version_parse(text: object, version: CudaVersion | None) -> None:
    assert CudaVersion.parse(text) == version


# --- compatibility rule --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("driver", "runtime", "vgpu", "skew", "ok"),
    [
        (V(12, 4), V(12, 4), False, 1, True),
        (V(12, 6), V(12, 4), False, 1, True),
        (V(12, 3), V(12, 4), False, 1, False),
        (V(13, 0), V(12, 4), False, 1, True),
        (V(14, 0), V(12, 4), False, 1, False),
        (V(14, 0), V(12, 4), False, 2, True),
        (V(15, 0), V(12, 4), False, 2, False),
        (V(13, 0), V(12, 4), False, 0, False),
        (V(12, 9), V(12, 4), False, 0, True),
        (V(11, 8), V(12, 0), False, 5, False),
        (V(12, 4), V(12, 4), True, 1, True),
        (V(12, 8), V(12, 4), True, 1, True),
        (V(13, 0), V(12, 4), True, 1, False),  # vGPU: same major only
        (V(13, 0), V(12, 4), True, 2, False),
        (V(12, 2), V(12, 4), True, 1, False),
    ],
)
def test_compatible(
    driver: CudaVersion, runtime: CudaVersion, vgpu: bool, skew: int, ok: bool
) -> None:
    assert compatible(driver, runtime, vgpu=vgpu, skew=skew) is ok


LABELS = CudaLabels()


@pytest.mark.parametrize(
    ("runtime", "vgpu", "skew", "expected"),
    [
        (
            V(12, 4),
            False,
            1,
            [[expr(MAJOR, "In", 12), expr(MINOR, "Gt", 3)], [expr(MAJOR, "In", 13)]],
        ),
        (V(12, 4), False, 0, [[expr(MAJOR, "In", 12), expr(MINOR, "Gt", 3)]]),
        (
            V(12, 4),
            False,
            2,
            [[expr(MAJOR, "In", 12), expr(MINOR, "Gt", 3)], [expr(MAJOR, "In", 13, 14)]],
        ),
        (V(12, 0), False, 1, [[expr(MAJOR, "In", 12, 13)]]),  # no minor expression for .0
        (V(12, 0), False, 0, [[expr(MAJOR, "In", 12)]]),
        (V(12, 0), True, 1, [[expr(MAJOR, "In", 12)]]),
        (V(12, 4), True, 1, [[expr(MAJOR, "In", 12), expr(MINOR, "Gt", 3)]]),
        (V(11, 8), True, 2, [[expr(MAJOR, "In", 11), expr(MINOR, "Gt", 7)]]),
    ],
)
def test_injected_terms(
    runtime: CudaVersion, vgpu: bool, skew: int, expected: list[list[dict[str, Any]]]
) -> None:
    assert injected_terms(runtime, vgpu=vgpu, skew=skew, labels=LABELS) == expected


@pytest.mark.parametrize("skew", [0, 1, 2])
@pytest.mark.parametrize("runtime", [V(11, 8), V(12, 0), V(12, 4)])
@pytest.mark.parametrize("vgpu", [False, True])
def test_injected_terms_select_exactly_the_compatible_drivers(
    runtime: CudaVersion, vgpu: bool, skew: int
) -> None:
    """The node-selector semantics of the injected terms equal compatible() for every driver."""
    injected = injected_terms(runtime, vgpu=vgpu, skew=skew, labels=LABELS)

    def selects(driver: CudaVersion, label_minor: str) -> bool:
        labels = {MAJOR: str(driver.major), MINOR: label_minor}
        for term in injected:
            ok = True
            for e in term:
                value = labels[e["key"]]
                if e["operator"] == "In":
                    ok &= value in e["values"]
                else:  # Gt compares integers, so "06" works
                    ok &= int(value) > int(e["values"][0])
            if ok:
                return True
        return False

    for major in range(10, 16):
        for minor in range(10):
            driver = V(major, minor)
            want = compatible(driver, runtime, vgpu=vgpu, skew=skew)
            assert selects(driver, str(minor)) is want, driver
            assert selects(driver, f"{minor:02d}") is want, driver


# --- injection through evaluate() --------------------------------------------------------------


def test_pgpu_injection_exact_patch() -> None:
    decision = run(gpu_pod("nvidia/cuda:12.4.1-runtime-ubuntu22.04"))
    assert decision.patch == [
        {
            "op": "add",
            "path": "/spec/affinity",
            "value": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": terms(
                            [expr(MAJOR, "In", 12), expr(MINOR, "Gt", 3)], [expr(MAJOR, "In", 13)]
                        )
                    }
                }
            },
        }
    ]
    assert decision.notes == (
        "required GPU nodes with CUDA ≥ 12.4 (image nvidia/cuda:12.4.1-runtime-ubuntu22.04)",
    )
    assert decision.mutation_kinds == ("cuda-affinity",)
    assert decision.warnings == ()
    assert_idempotent(decision)


def test_vgpu_injection_and_warning_for_12_4() -> None:
    original = pod(container(image="nvidia/cuda:12.4.1", limits={VCORE: "50", VMEM: "4"}))
    decision = run(original)
    assert node_terms(apply(decision)) == terms([expr(MAJOR, "In", 12), expr(MINOR, "Gt", 3)])
    assert decision.notes == ("required vGPU nodes with CUDA ≥ 12.4 (image nvidia/cuda:12.4.1)",)
    assert decision.warnings == (
        'container "c" needs CUDA 12.4: GPU-Manager vGPU supports CUDA < 12.4',
    )


def test_vgpu_below_12_4_has_no_warning() -> None:
    decision = run(pod(container(image="nvidia/cuda:12.2.0", limits={VCORE: "50", VMEM: "4"})))
    assert decision.warnings == ()
    assert node_terms(apply(decision)) == terms([expr(MAJOR, "In", 12), expr(MINOR, "Gt", 1)])


def test_vgpu_names_are_configurable() -> None:
    config = load_config({"vgpuResourceNames": ["nvidia.com/gpu"]})
    decision = run(gpu_pod("nvidia/cuda:12.0.0"), config=config)
    assert decision.notes == ("required vGPU nodes with CUDA ≥ 12.0 (image nvidia/cuda:12.0.0)",)
    assert node_terms(apply(decision)) == terms([expr(MAJOR, "In", 12)])


@pytest.mark.parametrize(
    ("skew", "expected"),
    [
        (0, terms([expr(MAJOR, "In", 12)])),
        (1, terms([expr(MAJOR, "In", 12, 13)])),
        (2, terms([expr(MAJOR, "In", 12, 13, 14)])),
    ],
)
def test_max_major_skew_from_config(skew: int, expected: list[dict[str, Any]]) -> None:
    decision = run(gpu_pod("nvidia/cuda:12.0.0"), config=load_config({"maxMajorSkew": skew}))
    assert node_terms(apply(decision)) == expected


def test_cross_product_with_user_terms_keeps_match_fields() -> None:
    user_terms = [
        {"matchExpressions": [expr("node.kubernetes.io/instance-type", "In", "g5.xlarge")]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
    ]
    original = gpu_pod(
        "nvidia/cuda:12.4.1",
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": user_terms},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [expr("zone", "In", "a")]}}
                ],
            },
            "podAntiAffinity": {"x": 1},
        },
    )
    decision = run(original)
    mutated = apply(decision)
    inst = expr("node.kubernetes.io/instance-type", "In", "g5.xlarge")
    fields = [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]
    assert node_terms(mutated) == [
        {"matchExpressions": [inst, expr(MAJOR, "In", 12), expr(MINOR, "Gt", 3)]},
        {"matchExpressions": [inst, expr(MAJOR, "In", 13)]},
        {"matchFields": fields, "matchExpressions": [expr(MAJOR, "In", 12), expr(MINOR, "Gt", 3)]},
        {"matchFields": fields, "matchExpressions": [expr(MAJOR, "In", 13)]},
    ]
    # everything else in the affinity is untouched
    affinity = mutated["spec"]["affinity"]
    assert affinity["podAntiAffinity"] == {"x": 1}
    assert (
        affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        == (
            original["spec"]["affinity"]["nodeAffinity"][
                "preferredDuringSchedulingIgnoredDuringExecution"
            ]
        )
    )
    assert_idempotent(decision)


def test_user_affinity_mentioning_cuda_labels_is_kept_with_a_warning() -> None:
    user = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": terms([expr(MAJOR, "In", 12)])
            }
        }
    }
    decision = run(gpu_pod("nvidia/cuda:12.4.1", affinity=user))
    assert decision.patch == []
    assert decision.notes == ()
    assert decision.warnings == (
        "your cuda-major-version/cuda-minor-version node "
        "affinity is kept as is; this pod needs CUDA ≥ 12.4",
    )


@pytest.mark.parametrize("label", [MAJOR, MINOR])
def test_node_selector_with_cuda_label_is_kept(label: str) -> None:
    decision = run(gpu_pod("nvidia/cuda:12.4.1", nodeSelector={label: "12"}))
    assert decision.patch == []
    assert decision.warnings == (
        "your cuda-major-version/cuda-minor-version node "
        "affinity is kept as is; this pod needs CUDA ≥ 12.4",
    )


def test_opt_out_annotation() -> None:
    decision = run(
        gpu_pod("nvidia/cuda:12.4.1", annotations={"features.alauda.io/cuda-affinity": "false"})
    )
    assert decision.patch == []
    assert decision.notes == ()
    assert decision.warnings == ()


def test_affinity_switched_off_by_config() -> None:
    decision = run(gpu_pod("nvidia/cuda:12.4.1"), config=WebhookConfig(cuda_affinity=False))
    assert (decision.patch, decision.notes, decision.warnings) == ([], (), ())


def test_gpu_feature_discovery_labels_by_config_alone() -> None:
    config = load_config(
        {
            "cudaLabels": {
                "major": "nvidia.com/cuda.runtime-version.major",
                "minor": "nvidia.com/cuda.runtime-version.minor",
            }
        }
    )
    decision = run(gpu_pod("nvidia/cuda:12.4.1"), config=config)
    gmaj, gmin = "nvidia.com/cuda.runtime-version.major", "nvidia.com/cuda.runtime-version.minor"
    assert node_terms(apply(decision)) == terms(
        [expr(gmaj, "In", 12), expr(gmin, "Gt", 3)], [expr(gmaj, "In", 13)]
    )
    # JSON-pointer escaping is not needed here (label keys are values, not paths), and the
    # GFD-labelled pod is idempotent too
    assert_idempotent(decision, config=config)


def test_unknown_version_warns_and_injects_nothing() -> None:
    decision = run(gpu_pod("busybox:1.36"))
    assert decision.patch == []
    assert decision.warnings == (UNKNOWN,)


def test_bad_annotation_is_reported_and_image_used() -> None:
    decision = run(gpu_pod("nvidia/cuda:11.8.0", annotations={ANN_VERSION: "latest"}))
    assert decision.warnings == (
        "annotation features.alauda.io/cuda-version='latest' is not a version like 12.4; ignored",
    )
    assert decision.notes == ("required GPU nodes with CUDA ≥ 11.8 (image nvidia/cuda:11.8.0)",)


def test_requirement_is_the_max_over_gpu_containers() -> None:
    original = pod(
        container("a", "nvidia/cuda:11.8.0", limits={GPU: "1"}, requests={GPU: "1"}),
        container(
            "b",
            "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime",
            limits={GPU: "1"},
            requests={GPU: "1"},
        ),
        container("c", "nvidia/cuda:12.0.0", limits={GPU: "1"}, requests={GPU: "1"}),
        container("sidecar", "nvidia/cuda:13.0.0", limits={"cpu": "1"}),  # not a GPU container
    )
    decision = run(original)
    assert decision.notes == (
        "required GPU nodes with CUDA ≥ 12.1 (image pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime)",
    )


def test_some_containers_unknown() -> None:
    original = pod(
        container("a", "nvidia/cuda:12.4.1", limits={GPU: "1"}, requests={GPU: "1"}),
        container("b", "busybox", limits={GPU: "1"}, requests={GPU: "1"}),
    )
    decision = run(original)
    assert decision.warnings == ("CUDA version unknown for b; affinity uses the other containers",)
    assert decision.notes == ("required GPU nodes with CUDA ≥ 12.4 (image nvidia/cuda:12.4.1)",)


def test_gpu_container_by_config_resource_name_without_crl() -> None:
    config = load_config({"gpuResourceNames": ["example.com/npu"]})
    original = pod(container(image="nvidia/cuda:12.0.0", limits={"example.com/npu": "1"}))
    assert run(original, policies(), config).notes == (
        "required GPU nodes with CUDA ≥ 12.0 (image nvidia/cuda:12.0.0)",
    )
    # without it in the config, and without a CRL, the container is not a GPU container
    assert run(original, policies()).notes == ()


def test_gpu_container_through_crl_key_without_config() -> None:
    ps = policies(crl("example.com/npu", "npu", name="cf-crl-npu-npu"))
    original = pod(container(image="nvidia/cuda:12.0.0", limits={"example.com/npu": "1"}))
    assert run(original, ps).notes == (
        "required GPU nodes with CUDA ≥ 12.0 (image nvidia/cuda:12.0.0)",
    )


def test_mps_memory_below_11_4_warns() -> None:
    ps = policies(crl("nvidia.com/mps-memory", "mps", name="cf-crl-mps-mps-memory"))
    old = pod(container(image="nvidia/cuda:11.2.1", limits={"nvidia.com/mps-memory": "1"}))
    assert run(old, ps).warnings == (
        'container "c" needs CUDA 11.2: MPS memory limits need CUDA ≥ 11.4',
    )
    new = pod(container(image="nvidia/cuda:11.4.0", limits={"nvidia.com/mps-memory": "1"}))
    assert run(new, ps).warnings == ()


# --- node inventory ------------------------------------------------------------------------------


def test_inventory_without_labelled_nodes_injects_nothing() -> None:
    decision = run(gpu_pod("nvidia/cuda:12.4.1"), inventory=NodeInventory(frozenset()))
    assert decision.patch == []
    assert decision.warnings == (
        "no node carries the cuda-major-version/cuda-minor-version "
        "labels: no CUDA node affinity added",
    )


def test_inventory_with_a_satisfying_node_injects_silently() -> None:
    inventory = NodeInventory(frozenset({V(12, 4), V(11, 8)}))
    decision = run(gpu_pod("nvidia/cuda:12.4.1"), inventory=inventory)
    assert decision.warnings == ()
    assert decision.allowed
    assert node_terms(apply(decision)) == terms(
        [expr(MAJOR, "In", 12), expr(MINOR, "Gt", 3)], [expr(MAJOR, "In", 13)]
    )


def test_no_compatible_node_warns_by_default() -> None:
    inventory = NodeInventory(frozenset({V(12, 4), V(11, 8)}))
    decision = run(gpu_pod("nvidia/cuda:12.6.1"), inventory=inventory)
    assert decision.allowed
    assert decision.warnings == ("no node supports CUDA 12.6; highest available is 12.4",)


def test_no_compatible_node_denies_by_config() -> None:
    inventory = NodeInventory(frozenset({V(12, 4), V(11, 8)}))
    config = load_config({"noCompatibleNode": "deny"})
    decision = run(gpu_pod("nvidia/cuda:12.6.1"), config=config, inventory=inventory)
    assert decision.denial_message() == (
        "Pod ml/train: no node supports CUDA 12.6; highest "
        "available is 12.4 (image nvidia/cuda:12.6.1)."
    )
    assert decision.patch == []
    # /validate evaluates with violations_only: this rule can deny, so it still runs.
    only = run(
        gpu_pod("nvidia/cuda:12.6.1"), config=config, inventory=inventory, violations_only=True
    )
    assert only.violations == decision.violations


def test_no_compatible_vgpu_node() -> None:
    inventory = NodeInventory(frozenset({V(13, 4), V(11, 8)}))
    config = load_config({"noCompatibleNode": "deny"})
    decision = run(
        pod(container(image="nvidia/cuda:12.2.0", limits={VCORE: "50", VMEM: "4"})),
        config=config,
        inventory=inventory,
    )
    assert [v.message for v in decision.violations] == [
        "Pod ml/train: no node supports CUDA 12.2 on vGPU; "
        "highest available is 13.4 (image nvidia/cuda:12.2.0)."
    ]


def test_inventory_is_ignored_for_non_gpu_pods() -> None:
    decision = run(pod(container(limits={"cpu": "1"})), inventory=NodeInventory(frozenset()))
    assert (decision.patch, decision.warnings) == ([], ())
