"""CUDA node affinity (SPEC §4): version detection, compatibility, injected terms, inventory."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.helpers import (
    GPU,
    GPUCORES,
    GPUMEM,
    PREFERRED_12_4_TERMS,
    VCORE,
    VMEM,
    apply,
    container,
    crl,
    expr,
    node_terms,
    pod,
    policies,
    preferred,
    preferred_terms,
)

# Tests of CUDA node affinity: evaluated without the /dev/shm fix (on by default), whose volume and
# warning would be in every pod here (tests/helpers.py `without_shm`; the rule's own tests:
# test_runtime_fixes.py).
from tests.helpers import (
    assert_idempotent_without_shm as assert_idempotent,
)
from tests.helpers import (
    load_without_shm as load_config,
)
from tests.helpers import (
    run_without_shm as run,
)
from webhook.core.base.errors import ConfigError, ObjectShapeError
from webhook.core.base.wording import after, fit
from webhook.core.config.model import CudaLabels, WebhookConfig
from webhook.core.placement.cuda import (
    CudaVersion,
    Range,
    compatible,
    container_requirement,
    cuda_range,
    detect,
    image_repository,
)
from webhook.core.placement.terms import range_terms

V = CudaVersion
MAJOR, MINOR = "cuda-major-version", "cuda-minor-version"
ANN_VERSION = "features.alauda.io/cuda-version"
UNKNOWN = (
    "CUDA version of busybox:1.36 unknown, no affinity: set features.alauda.io/cuda-version "
    "or imageCudaTable"
)
DIGEST = "sha256:" + "a" * 64


def gpu_pod(
    image: str = "busybox:1.36", env: list[dict[str, Any]] | None = None, **kw: Any
) -> dict[str, Any]:
    """A pod with one nvidia.com/gpu container (requests already equal: no resource notes)."""
    return pod(container(image=image, limits={GPU: "1"}, requests={GPU: "1"}, env=env), **kw)


def terms(*groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"matchExpressions": list(g)} for g in groups]


def major_is(major: int, key: str = MAJOR) -> list[dict[str, Any]]:
    """The driver's major equals `major`: Gt/Lt, so "012" matches too."""
    return [expr(key, "Gt", major - 1), expr(key, "Lt", major + 1)]


def pgpu(major: int, minor: int, skew: int | None = None) -> list[dict[str, Any]]:
    """Required terms for physical GPUs needing CUDA major.minor (minor > 0): any newer driver,
    or (majorSkew: require) a driver at most `skew` majors newer."""
    upper = [] if skew is None else [expr(MAJOR, "Lt", major + skew + 1)]
    return terms(
        [*major_is(major), expr(MINOR, "Gt", minor - 1)],
        [expr(MAJOR, "Gt", major), *upper],
    )


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
        # spelled in the repository path (SPEC §4 step 4)
        ("localhost:5000/cu121/app:latest", V(12, 1)),
        ("example.com/team/train-cuda-11.8-base:v3", V(11, 8)),
        ("example.com/team/app_cuda11.8", V(11, 8)),
        ("example.com/team/app_cuda11.8:2.0", V(11, 8)),
        (
            "us-docker.pkg.dev/deeplearning-platform-release/gcr.io/"
            "huggingface-text-generation-inference-cu124.2-3.ubuntu2204.py311",
            V(12, 4),
        ),
        ("example.com/team/torch-cu118/serve:1.0", V(11, 8)),
        # the tag first, then the path
        ("example.com/team/app-cu118:2.1.0-cu121", V(12, 1)),
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
        "nvcr.io/nvidia/tritonserver:24.09-py3",  # NGC YY.MM with no shipped entry
        "nvcr.io/nvidia/nemo:25.04.01",
        f"nvidia/cuda@{DIGEST}",  # digest only: no tag to read
        "registry:5000/team/trainer",  # port digits are not a version
        "registry:5000/team/trainer:2.1",
        "cuda12-registry.corp:5000/x",  # the registry host is never read
        "cuda-12.4.corp:5000/team/x:1",
        "registry.cu121.example.com/team/x:1",
        "vllm/vllm-openai:v0.11.2",  # linux/amd64 (the default): its x86 build is not known
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
            [{"name": "NVIDIA_REQUIRE_CUDA", "value": "cuda>=12"}],
            V(12, 0),
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


def test_each_config_detects_with_its_own_table_in_turn() -> None:
    # Detection is cached per image and config: a reloaded config with another table (or
    # none) must get its own answer for an image another config already looked at, and a
    # config rebuilt from the same settings the same answer.
    image = {"image": "nvcr.io/nvidia/tritonserver:24.06-py3"}
    other = load_config(
        {"imageCudaTable": [{"image": "nvcr.io/nvidia/tritonserver:*", "cudaVersion": "12.2"}]}
    )
    same = load_config(TABLE.model_dump(by_alias=True))
    for config, version in [
        (TABLE, V(12, 5)),
        (other, V(12, 2)),
        (WebhookConfig(), V(12, 5)),  # the shipped knowledge (Triton 24.06: CUDA 12.5.0)
        (WebhookConfig(shipped_image_knowledge=False), None),
        (TABLE, V(12, 5)),
        (same, V(12, 5)),
        (other, V(12, 2)),
    ]:
        req = container_requirement(image, config)
        assert (req.version if req else None) == version


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
        "required GPU nodes with CUDA ≥ 11.8 "
        "(annotation features.alauda.io/cuda-version), preferably < 13.0",
    )
    assert node_terms(apply(decision)) == pgpu(11, 8)
    assert preferred_terms(apply(decision)) == preferred(12)


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
        ("12", V(12, 0)),  # SPEC §4: "12" means 12.0
        ("012.04", V(12, 4)),
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


@pytest.mark.parametrize(
    ("runtime", "vgpu", "skew", "expected"),
    [
        (V(12, 4), False, 1, Range(V(12, 4), 13)),
        (V(12, 4), False, None, Range(V(12, 4), None)),  # the skew as a preference
        (V(12, 4), False, 0, Range(V(12, 4), 12)),
        (V(12, 4), True, None, Range(V(12, 4), 12)),  # vGPU: the same major, always
        (V(12, 4), True, 3, Range(V(12, 4), 12)),
    ],
)
def test_cuda_range(runtime: CudaVersion, vgpu: bool, skew: int | None, expected: Range) -> None:
    assert cuda_range(runtime, vgpu=vgpu, skew=skew) == expected


@pytest.mark.parametrize(
    ("a", "b", "expected", "empty"),
    [
        (Range(V(11, 8), None), Range(V(12, 4), None), Range(V(12, 4), None), False),
        (Range(V(11, 8), 12), Range(V(12, 4), None), Range(V(12, 4), 12), False),
        (Range(V(11, 8), 12), Range(V(13, 1), 14), Range(V(13, 1), 12), True),
    ],
)
def test_range_intersection(a: Range, b: Range, expected: Range, empty: bool) -> None:
    assert a & b == expected == b & a
    assert expected.empty is empty


@pytest.mark.parametrize(
    ("rng", "text"),
    [(Range(V(12, 4), None), "≥ 12.4"), (Range(V(12, 4), 13), "≥ 12.4 and < 14.0")],
)
def test_range_text(rng: Range, text: str) -> None:
    assert rng.text() == text


LABELS = CudaLabels()


@pytest.mark.parametrize(
    ("low", "max_major", "expected"),
    [
        (
            V(12, 4),
            13,
            [
                [*major_is(12), expr(MINOR, "Gt", 3)],
                [expr(MAJOR, "Gt", 12), expr(MAJOR, "Lt", 14)],
            ],
        ),
        (V(12, 4), 12, [[*major_is(12), expr(MINOR, "Gt", 3)]]),  # vGPU or skew 0
        (V(12, 0), 13, [[expr(MAJOR, "Gt", 11), expr(MAJOR, "Lt", 14)]]),  # no minor for .0
        (V(12, 0), 12, [major_is(12)]),
        (V(8, 0), None, [[expr(MAJOR, "Gt", 7)]]),  # compute capability: no upper bound
        (
            V(7, 5),
            None,
            [[*major_is(7), expr(MINOR, "Gt", 4)], [expr(MAJOR, "Gt", 7)]],
        ),
    ],
)
def test_range_terms(
    low: CudaVersion, max_major: int | None, expected: list[list[dict[str, Any]]]
) -> None:
    assert range_terms(LABELS, low, max_major) == expected


# --- injection through evaluate() --------------------------------------------------------------


def test_pgpu_injection_exact_patch() -> None:
    """Required D ≥ R; the major skew (default 1) as a preference of weight 100 (SPEC §4)."""
    decision = run(gpu_pod("nvidia/cuda:12.4.1-runtime-ubuntu22.04"))
    assert decision.patch == [
        {
            "op": "add",
            "path": "/spec/affinity",
            "value": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    expr(MAJOR, "Gt", 11),
                                    expr(MAJOR, "Lt", 13),
                                    expr(MINOR, "Gt", 3),
                                ]
                            },
                            {"matchExpressions": [expr(MAJOR, "Gt", 12)]},
                        ]
                    },
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "preference": {"matchExpressions": [expr(MAJOR, "Lt", 14)]},
                        }
                    ],
                }
            },
        }
    ]
    assert decision.notes == (
        "required GPU nodes with CUDA ≥ 12.4 "
        "(image nvidia/cuda:12.4.1-runtime-ubuntu22.04), preferably < 14.0",
    )
    assert decision.mutation_kinds == ("cuda-affinity",)
    assert decision.warnings == ()
    assert_idempotent(decision)


def test_vgpu_injection_and_warning_for_12_4() -> None:
    original = pod(container(image="nvidia/cuda:12.4.1", limits={VCORE: "50", VMEM: "4"}))
    decision = run(original)
    assert node_terms(apply(decision)) == terms([*major_is(12), expr(MINOR, "Gt", 3)])
    assert decision.notes == ("required vGPU nodes with CUDA ≥ 12.4 (image nvidia/cuda:12.4.1)",)
    assert decision.warnings == (
        'container "c" needs CUDA 12.4: GPU-Manager vGPU supports CUDA < 12.4',
    )


def test_vgpu_below_12_4_has_no_warning() -> None:
    decision = run(pod(container(image="nvidia/cuda:12.2.0", limits={VCORE: "50", VMEM: "4"})))
    assert decision.warnings == ()
    assert node_terms(apply(decision)) == terms([*major_is(12), expr(MINOR, "Gt", 1)])


WHOLE_UNIT = policies(
    crl(VCORE, "gpu-manager", wholeUnit="100"), crl(VMEM, "gpu-manager", requests="disabled")
)


@pytest.mark.parametrize("cores", ["100", "200", "300"])
def test_gpu_manager_whole_card_mode_follows_the_physical_gpu_rule(cores: str) -> None:
    original = pod(container(image="nvidia/cuda:12.4.1", limits={VCORE: cores, VMEM: "4"}))
    decision = run(original, WHOLE_UNIT)
    assert decision.notes == (
        "required GPU nodes with CUDA ≥ 12.4 (image nvidia/cuda:12.4.1), preferably < 14.0",
    )
    assert node_terms(apply(decision)) == pgpu(12, 4)
    assert preferred_terms(apply(decision)) == PREFERRED_12_4_TERMS
    assert decision.warnings == ()  # whole cards: native CUDA, no "< 12.4" warning


@pytest.mark.parametrize("cores", ["50", "150"])
def test_gpu_manager_fractional_share_stays_vgpu(cores: str) -> None:
    original = pod(container(image="nvidia/cuda:12.2.0", limits={VCORE: cores, VMEM: "4"}))
    decision = run(original, WHOLE_UNIT)
    assert decision.notes == ("required vGPU nodes with CUDA ≥ 12.2 (image nvidia/cuda:12.2.0)",)


@pytest.mark.parametrize("key", [GPUMEM, GPUCORES, "nvidia.com/gpumem-percentage"])
def test_hami_keys_are_vgpu_by_default(key: str) -> None:
    original = pod(
        container(image="nvidia/cuda:12.2.0", limits={GPU: "1", key: "30"}, requests={GPU: "1"})
    )
    decision = run(original, policies())
    assert decision.notes == ("required vGPU nodes with CUDA ≥ 12.2 (image nvidia/cuda:12.2.0)",)
    assert node_terms(apply(decision)) == terms([*major_is(12), expr(MINOR, "Gt", 1)])


def test_vgpu_names_are_configurable() -> None:
    config = load_config({"vgpuResourceNames": ["nvidia.com/gpu"]})
    decision = run(gpu_pod("nvidia/cuda:12.0.0"), config=config)
    assert decision.notes == ("required vGPU nodes with CUDA ≥ 12.0 (image nvidia/cuda:12.0.0)",)
    assert node_terms(apply(decision)) == terms(major_is(12))


@pytest.mark.parametrize("skew", [0, 1, 2])
def test_max_major_skew_is_a_preference_by_default(skew: int) -> None:
    """The reference calls a driver beyond the skew "Unstable", not "Blocked" (SPEC §4)."""
    config = load_config({"maxMajorSkew": skew})
    decision = run(gpu_pod("nvidia/cuda:12.0.0"), config=config)
    mutated = apply(decision)
    assert node_terms(mutated) == terms([expr(MAJOR, "Gt", 11)])
    assert preferred_terms(mutated) == preferred(12 + skew)
    assert decision.notes == (
        "required GPU nodes with CUDA ≥ 12.0 "
        f"(image nvidia/cuda:12.0.0), preferably < {13 + skew}.0",
    )
    assert_idempotent(decision, config=config)


@pytest.mark.parametrize(
    ("skew", "expected"),
    [
        (0, terms(major_is(12))),
        (1, terms([expr(MAJOR, "Gt", 11), expr(MAJOR, "Lt", 14)])),
        (2, terms([expr(MAJOR, "Gt", 11), expr(MAJOR, "Lt", 15)])),
    ],
)
def test_max_major_skew_required_by_config(skew: int, expected: list[dict[str, Any]]) -> None:
    config = load_config({"maxMajorSkew": skew, "majorSkew": "require"})
    decision = run(gpu_pod("nvidia/cuda:12.0.0"), config=config)
    mutated = apply(decision)
    assert node_terms(mutated) == expected
    assert preferred_terms(mutated) is None
    assert decision.notes == ("required GPU nodes with CUDA ≥ 12.0 (image nvidia/cuda:12.0.0)",)
    assert_idempotent(decision, config=config)


def test_required_skew_with_a_minor() -> None:
    config = load_config({"majorSkew": "require"})
    decision = run(gpu_pod("nvidia/cuda:12.4.1"), config=config)
    assert node_terms(apply(decision)) == pgpu(12, 4, skew=1)
    assert decision.warnings == ()


def test_major_skew_setting_is_checked() -> None:
    with pytest.raises(ConfigError) as exc:
        load_config({"majorSkew": "always"})
    assert str(exc.value) == (
        "webhook config is invalid: majorSkew: Input should be 'prefer' or 'require'"
    )


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
    same, newer = (t["matchExpressions"] for t in pgpu(12, 4))
    assert node_terms(mutated) == [
        {"matchExpressions": [inst, *same]},
        {"matchExpressions": [inst, *newer]},
        {"matchFields": fields, "matchExpressions": same},
        {"matchFields": fields, "matchExpressions": newer},
    ]
    # the user's preferred terms are kept, ours follow; everything else is untouched
    affinity = mutated["spec"]["affinity"]
    assert affinity["podAntiAffinity"] == {"x": 1}
    assert preferred_terms(mutated) == [
        {"weight": 1, "preference": {"matchExpressions": [expr("zone", "In", "a")]}},
        *PREFERRED_12_4_TERMS,
    ]
    assert_idempotent(decision)


@pytest.mark.parametrize("empty", [{}, {"matchExpressions": []}, {"matchFields": []}])
def test_an_empty_user_term_stays_empty(empty: dict[str, Any]) -> None:
    """An empty term matches no node; adding CUDA expressions would make it match nodes."""
    zone = {"matchExpressions": [expr("zone", "In", "a")]}
    original = gpu_pod(
        "nvidia/cuda:12.4.1",
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [empty, zone]
                }
            }
        },
    )
    decision = run(original)
    same, newer = (t["matchExpressions"] for t in pgpu(12, 4))
    assert node_terms(apply(decision)) == [
        empty,
        {"matchExpressions": [expr("zone", "In", "a"), *same]},
        {"matchExpressions": [expr("zone", "In", "a"), *newer]},
    ]
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
        "your node affinity on cuda-major-version is kept as is; "
        "this pod needs CUDA ≥ 12.4, preferably < 14.0",
    )


@pytest.mark.parametrize("label", [MAJOR, MINOR, "nvidia.com/cuda.runtime-version.major"])
def test_node_selector_with_a_cuda_label_is_kept(label: str) -> None:
    decision = run(gpu_pod("nvidia/cuda:12.4.1", nodeSelector={label: "12"}))
    assert decision.patch == []
    assert decision.warnings == (
        f"your node affinity on {label} is kept as is; this pod needs CUDA ≥ 12.4, "
        "preferably < 14.0",
    )


@pytest.mark.parametrize("value", ["false", "FALSE", "No", "0", "off", " Off "])
def test_opt_out_annotation(value: str) -> None:
    original = gpu_pod(
        "nvidia/cuda:12.4.1", annotations={"features.alauda.io/cuda-affinity": value}
    )
    decision = run(original)
    assert apply(decision) == original
    assert (decision.patch, decision.notes, decision.warnings) == ([], (), ())


def test_unrecognised_opt_out_value_warns_and_keeps_the_affinity() -> None:
    original = gpu_pod(
        "nvidia/cuda:12.4.1", annotations={"features.alauda.io/cuda-affinity": "nope"}
    )
    decision = run(original)
    expected = copy.deepcopy(original)
    expected["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": pgpu(12, 4)},
            "preferredDuringSchedulingIgnoredDuringExecution": PREFERRED_12_4_TERMS,
        }
    }
    assert apply(decision) == expected
    assert decision.warnings == (
        "annotation features.alauda.io/cuda-affinity='nope' not understood: "
        "use false/no/0/off to opt out",
    )


def test_affinity_switched_off_by_config() -> None:
    decision = run(gpu_pod("nvidia/cuda:12.4.1"), config=WebhookConfig(cuda_affinity=False))
    assert (decision.patch, decision.notes, decision.warnings) == ([], (), ())


def test_single_legacy_label_scheme_by_config() -> None:
    gmaj, gmin = "nvidia.com/cuda.runtime-version.major", "nvidia.com/cuda.runtime-version.minor"
    config = load_config({"cudaLabels": {"major": gmaj, "minor": gmin}})
    decision = run(gpu_pod("nvidia/cuda:12.4.1"), config=config)
    assert node_terms(apply(decision)) == terms(
        [*major_is(12, gmaj), expr(gmin, "Gt", 3)], [expr(gmaj, "Gt", 12)]
    )
    assert preferred_terms(apply(decision)) == preferred(13, gmaj)
    assert_idempotent(decision, config=config)


def test_without_inventory_the_first_scheme_is_used() -> None:
    config = load_config(
        {
            "cudaLabelSchemes": [
                {"name": "corp", "major": "corp.io/cuda-major", "minor": "corp.io/cuda-minor"},
                {"major": MAJOR, "minor": MINOR},
            ]
        }
    )
    decision = run(gpu_pod("nvidia/cuda:12.0.0"), config=config)
    assert node_terms(apply(decision)) == terms([expr("corp.io/cuda-major", "Gt", 11)])
    assert preferred_terms(apply(decision)) == preferred(13, "corp.io/cuda-major")


def test_unknown_version_warns_and_injects_nothing() -> None:
    decision = run(gpu_pod("busybox:1.36"))
    assert decision.patch == []
    assert decision.warnings == (UNKNOWN,)


# Issue 17 item 6: a warning that must be shortened keeps the image reference whole and
# shortens its fixed words; the shortest wording still says what fixes it (SPEC §4).
# As long as a real Vertex AI serving image (the TGI one, 119 characters, whose CUDA the shipped
# knowledge now reads from its repository name), but one nothing knows.
LONG = (
    "us-docker.pkg.dev/example-ml-platform/serving-images/"
    "text-generation-server-nightly-2025.11.20.ubuntu2204.py311-slim"
)


@pytest.mark.parametrize(
    ("image", "warning"),
    [
        # Fits in the longest wording.
        (
            "busybox:1.36",
            "CUDA version of busybox:1.36 unknown, no affinity: set "
            "features.alauda.io/cuda-version or imageCudaTable",
        ),
        # Too long for it: "no affinity" goes first.
        (
            "registry.example.com/team/srv:2024.06",
            "CUDA version of registry.example.com/team/srv:2024.06 unknown: set "
            "features.alauda.io/cuda-version or imageCudaTable",
        ),
        # Then "version" and "or imageCudaTable"; the annotation to set stays.
        (
            "registry.example.com/ml-team/inference-server:2.4.0",
            "CUDA of registry.example.com/ml-team/inference-server:2.4.0 unknown: set "
            "features.alauda.io/cuda-version",
        ),
        # The image alone takes 116 characters: the shortest wording, whole, 169 characters.
        (LONG, f"CUDA of {LONG} unknown: set features.alauda.io/cuda-version"),
    ],
)
def test_unknown_version_warning_keeps_the_image_whole(image: str, warning: str) -> None:
    decision = run(gpu_pod(image))
    assert decision.warnings == (warning,)
    assert decision.patch == []


def test_a_warning_passes_120_characters_only_because_of_the_image() -> None:
    image = "registry.example.com/team/very-long-repository-name-for-serving:2024.06.01-build7"
    (warning,) = run(gpu_pod(image)).warnings
    assert warning == f"CUDA of {image} unknown: set features.alauda.io/cuda-version"
    assert len(warning) == 134
    assert len(warning) - len(image) == 53  # the fixed words, at their shortest


def test_bad_annotation_is_reported_and_image_used() -> None:
    decision = run(gpu_pod("nvidia/cuda:11.8.0", annotations={ANN_VERSION: "latest"}))
    assert decision.warnings == (
        "annotation features.alauda.io/cuda-version='latest' is not a version like 12.4; ignored",
    )
    assert decision.notes == (
        "required GPU nodes with CUDA ≥ 11.8 (image nvidia/cuda:11.8.0), preferably < 13.0",
    )


def test_annotation_major_only_means_minor_zero() -> None:
    decision = run(gpu_pod("busybox:1.36", annotations={ANN_VERSION: "12"}))
    assert decision.notes == (
        "required GPU nodes with CUDA ≥ 12.0 "
        "(annotation features.alauda.io/cuda-version), preferably < 14.0",
    )
    assert node_terms(apply(decision)) == terms([expr(MAJOR, "Gt", 11)])
    assert preferred_terms(apply(decision)) == preferred(13)


@pytest.mark.parametrize("value", ["0.5", "100.0", "123"])
def test_implausible_annotation_is_ignored_with_a_warning(value: str) -> None:
    decision = run(gpu_pod("nvidia/cuda:11.8.0", annotations={ANN_VERSION: value}))
    assert decision.warnings == (
        f"annotation features.alauda.io/cuda-version={value!r} is not plausible (1.0 to 99.x); "
        "ignored",
    )
    assert decision.notes == (
        "required GPU nodes with CUDA ≥ 11.8 (image nvidia/cuda:11.8.0), preferably < 13.0",
    )


def test_implausible_env_version_is_ignored_with_a_warning() -> None:
    c = {"image": "nvidia/cuda:11.8.0", "env": [{"name": "CUDA_VERSION", "value": "0.9"}]}
    detection = detect(c, WebhookConfig())
    assert detection.requirement is not None and detection.requirement.version == V(11, 8)
    assert detection.warnings == (
        "env CUDA_VERSION gives CUDA 0.9, not a plausible CUDA version (1.0 to 99.x); ignored",
    )


def test_image_guess_below_7_is_ignored_with_a_warning() -> None:
    detection = detect({"image": "example.com/app:1.0-cuda-6.5-devel"}, WebhookConfig())
    assert detection.requirement is None
    (warning,) = detection.warnings
    assert fit(warning) == (
        "CUDA 6.5 read from image example.com/app:1.0-cuda-6.5-devel is implausible; ignored"
    )
    # Behind a long container name the image stays whole and the fixed words get shorter.
    assert fit(after(f'container "{"c" * 40}": ', warning)) == (
        f'container "{"c" * 40}": image example.com/app:1.0-cuda-6.5-devel: implausible '
        "CUDA 6.5 ignored"
    )


def test_last_duplicate_env_entry_wins() -> None:
    c: dict[str, Any] = {
        "image": "busybox",
        "env": [
            {"name": "CUDA_VERSION", "value": "11.0"},
            {"name": "CUDA_VERSION", "value": "12.2"},
            {"name": "NVIDIA_REQUIRE_CUDA", "value": "cuda>=10.0"},
        ],
    }
    req = container_requirement(c, WebhookConfig())
    assert req is not None and (req.version, req.source) == (V(12, 2), "env CUDA_VERSION=12.2")
    # a later valueFrom entry replaces an earlier literal: the literal is not what runs
    c["env"].append({"name": "CUDA_VERSION", "valueFrom": {"fieldRef": {}}})
    req = container_requirement(c, WebhookConfig())
    assert req is not None and req.source == "env NVIDIA_REQUIRE_CUDA"


def two_versions_pod() -> dict[str, Any]:
    return pod(
        container("a", "nvidia/cuda:11.8.0", limits={GPU: "1"}, requests={GPU: "1"}),
        container(
            "b",
            "pytorch/pytorch:2.3.0-cuda12.4-cudnn8-runtime",
            limits={GPU: "1"},
            requests={GPU: "1"},
        ),
        container("sidecar", "nvidia/cuda:13.0.0", limits={"cpu": "1"}),  # not a GPU container
    )


def test_requirement_is_the_intersection_over_gpu_containers() -> None:
    """11.8 and 12.4: both need D ≥ 12.4; within the skew of 1 of both is D < 13 (SPEC §4),
    the intersection of their recommended ranges, preferred."""
    decision = run(two_versions_pod())
    assert decision.notes == (
        "required GPU nodes with CUDA ≥ 12.4 "
        "(image pytorch/pytorch:2.3.0-cuda12.4-cudnn8-runtime), preferably < 13.0",
    )
    assert node_terms(apply(decision)) == pgpu(12, 4)
    assert preferred_terms(apply(decision)) == preferred(12)
    assert decision.warnings == ()
    assert_idempotent(decision)


def test_required_skew_intersection_over_gpu_containers() -> None:
    """With majorSkew: require, only 12.4 ≤ D < 13 serves both."""
    config = load_config({"majorSkew": "require"})
    decision = run(two_versions_pod(), config=config)
    assert decision.notes == (
        "required GPU nodes with CUDA ≥ 12.4 and < 13.0 "
        "(image pytorch/pytorch:2.3.0-cuda12.4-cudnn8-runtime)",
    )
    assert node_terms(apply(decision)) == terms([*major_is(12), expr(MINOR, "Gt", 3)])
    assert preferred_terms(apply(decision)) is None
    assert_idempotent(decision, config=config)


def test_containers_more_than_the_skew_apart_are_admitted_with_a_warning() -> None:
    """11.8 and 13.1: every driver that runs 13.1 is 2 majors ahead of 11.8 ("Unstable")."""
    original = pod(
        container("old", "nvidia/cuda:11.8.0", limits={GPU: "1"}, requests={GPU: "1"}),
        container("new", "nvidia/cuda:13.1.0", limits={GPU: "1"}, requests={GPU: "1"}),
    )
    decision = run(original)
    assert decision.allowed
    assert decision.warnings == (
        'container "old" needs CUDA 11.8 and container "new" CUDA 13.1, more than 1 major '
        "apart: the application may malfunction",
    )
    mutated = apply(decision)
    assert node_terms(mutated) == terms(
        [*major_is(13), expr(MINOR, "Gt", 0)], [expr(MAJOR, "Gt", 13)]
    )
    assert preferred_terms(mutated) is None  # no driver is within the skew of both
    assert decision.notes == ("required GPU nodes with CUDA ≥ 13.1 (image nvidia/cuda:13.1.0)",)
    # required: an empty intersection, a violation
    required = run(original, config=load_config({"majorSkew": "require"}))
    assert required.denial_message() == (
        'Pod ml/train: no node driver can run all GPU containers: container "old" needs CUDA '
        '11.8 (driver ≥ 11.8 and < 13.0); container "new" needs CUDA 13.1 (driver ≥ 13.1 and '
        "< 15.0); align their CUDA versions or split them into separate pods."
    )


def test_empty_intersection_is_a_violation_naming_the_containers() -> None:
    original = pod(
        container("old", "nvidia/cuda:11.8.0", limits={VCORE: "50", VMEM: "4"}),
        container("new", "nvidia/cuda:12.2.0", limits={GPU: "1"}, requests={GPU: "1"}),
    )
    decision = run(original)
    assert decision.denial_message() == (
        'Pod ml/train: no node driver can run all GPU containers: container "old" needs CUDA '
        '11.8 on vGPU (driver ≥ 11.8 and < 12.0); container "new" needs CUDA 12.2 (driver ≥ '
        "12.2); align their CUDA versions or split them into separate pods."
    )
    assert decision.patch == []
    # /validate (violations only) denies the same way
    assert run(original, violations_only=True).violations == decision.violations


def test_some_containers_unknown() -> None:
    original = pod(
        container("a", "nvidia/cuda:12.4.1", limits={GPU: "1"}, requests={GPU: "1"}),
        container("b", "busybox", limits={GPU: "1"}, requests={GPU: "1"}),
    )
    decision = run(original)
    assert decision.warnings == (
        "CUDA version of busybox unknown; node affinity uses the other containers",
    )
    assert decision.notes == (
        "required GPU nodes with CUDA ≥ 12.4 (image nvidia/cuda:12.4.1), preferably < 14.0",
    )


def test_gpu_container_by_config_resource_name_without_crl() -> None:
    config = load_config({"gpuResourceNames": ["example.com/npu"]})
    original = pod(container(image="nvidia/cuda:12.0.0", limits={"example.com/npu": "1"}))
    assert run(original, policies(), config).notes == (
        "required GPU nodes with CUDA ≥ 12.0 (image nvidia/cuda:12.0.0), preferably < 14.0",
    )
    # without it in the config, and without a CRL, the container is not a GPU container
    assert run(original, policies()).notes == ()


def test_gpu_container_through_crl_key_without_config() -> None:
    ps = policies(crl("example.com/npu", "npu", name="cf-crl-npu-npu"))
    original = pod(container(image="nvidia/cuda:12.0.0", limits={"example.com/npu": "1"}))
    assert run(original, ps).notes == (
        "required GPU nodes with CUDA ≥ 12.0 (image nvidia/cuda:12.0.0), preferably < 14.0",
    )


def test_mps_memory_below_11_4_warns() -> None:
    ps = policies(crl("nvidia.com/mps-memory", "mps", name="cf-crl-mps-mps-memory"))
    old = pod(container(image="nvidia/cuda:11.2.1", limits={"nvidia.com/mps-memory": "1"}))
    assert run(old, ps).warnings == (
        'container "c" needs CUDA 11.2: MPS memory limits need CUDA ≥ 11.4',
    )
    new = pod(container(image="nvidia/cuda:11.4.0", limits={"nvidia.com/mps-memory": "1"}))
    assert run(new, ps).warnings == ()


def test_a_node_affinity_that_is_not_an_object_is_refused_with_its_place() -> None:
    # Found while building the patch from the draft's writes: this raised AttributeError
    # (an "internal error" denial) before; now the user reads what is wrong, and where.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {
            "affinity": {"nodeAffinity": []},
            "containers": [
                {
                    "name": "c",
                    "image": "nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }
    with pytest.raises(
        ObjectShapeError, match=r"^Pod ml/p: affinity.nodeAffinity must be an object$"
    ):
        run(pod)
