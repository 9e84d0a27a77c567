"""Environment fixes (SPEC §5): Paddle on GPU-Manager vGPU, user values kept, custom rules."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.helpers import (
    GPU,
    VCORE,
    VMEM,
    apply,
    container,
    expr,
    pod,
)

# Tests of environment fixes: evaluated without the /dev/shm fix (on by default), whose volume and
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
from webhook.core.config.model import WebhookConfig

NO_CUDA = WebhookConfig(cuda_affinity=False)
# GPU access control judges envFrom in a device container (SPEC §12): off where only env fixes
# are under test.
NO_CUDA_NO_ACCESS = WebhookConfig.model_validate(
    {"cudaAffinity": False, "gpuAccess": {"mode": "off"}}
)
PADDLE = "paddlepaddle/paddle:2.6.1-gpu-cuda12.0-cudnn8.9-trt8.6"
FLAG = {"name": "FLAGS_allocator_strategy", "value": "naive_best_fit"}
NOTE = 'set FLAGS_allocator_strategy=naive_best_fit in container "c" (paddle-on-gpu-manager fix)'


def vgpu_pod(
    image: str = PADDLE, env: list[dict[str, Any]] | None = None, **kw: Any
) -> dict[str, Any]:
    return pod(container(image=image, limits={VCORE: "50", VMEM: "4"}, env=env), **kw)


def with_env(original: dict[str, Any], *env: dict[str, Any], index: int = 0) -> dict[str, Any]:
    """`original` with `env` as the env of its container `index`: what a fix should produce."""
    expected = copy.deepcopy(original)
    expected["spec"]["containers"][index]["env"] = list(env)
    return expected


def assert_untouched(decision: Any, original: dict[str, Any]) -> None:
    """Nothing changed: the object after the (empty) patch is the original, and nothing is said."""
    assert apply(decision) == original
    assert (decision.patch, decision.notes, decision.warnings) == ([], (), ())


@pytest.mark.parametrize(
    "image",
    [
        PADDLE,
        "paddlepaddle/paddle:latest",
        "registry.baidubce.com/paddlepaddle/paddle:2.4.0rc0-gpu-cuda11.2-cudnn8.1-trt8.0",
        "registry:5000/team/my-paddle-ocr:1.0",  # any repository whose name contains "paddle"
        "example.com/PaddleNLP:3",  # case-insensitive
        f"paddlepaddle/paddle@sha256:{'b' * 64}",
    ],
)
def test_paddle_on_vcuda_gets_the_allocator_flag(image: str) -> None:
    decision = run(vgpu_pod(image), config=NO_CUDA)
    mutated = apply(decision)
    assert mutated["spec"]["containers"][0]["env"] == [FLAG]
    assert decision.notes == (NOTE,)
    assert decision.mutation_kinds == ("env-fix",)
    assert decision.warnings == ()
    assert_idempotent(decision, config=NO_CUDA)


def test_flag_appended_after_existing_env() -> None:
    env: list[dict[str, Any]] = [
        {"name": "A", "value": "1"},
        {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    decision = run(vgpu_pod(env=env), config=NO_CUDA)
    assert apply(decision)["spec"]["containers"][0]["env"] == [*env, FLAG]
    assert decision.patch == [{"op": "add", "path": "/spec/containers/0/env/2", "value": FLAG}]


def test_vcuda_memory_alone_is_enough() -> None:
    original = pod(container(image=PADDLE, limits={VMEM: "4"}))
    decision = run(original, config=NO_CUDA)
    # vcuda-core gets its default (10) as well; the fix needs any GPU-Manager vGPU key.
    expected = with_env(original, FLAG)
    expected["spec"]["containers"][0]["resources"]["limits"][VCORE] = "10"
    assert apply(decision) == expected
    assert decision.notes == ('defaulted tencent.com/vcuda-core=10 in container "c"', NOTE)


@pytest.mark.parametrize(
    "limits",
    [{GPU: "1"}, {"nvidia.com/gpumem": "1000"}, {"cpu": "1"}],
)
def test_not_without_vcuda_keys(limits: dict[str, str]) -> None:
    original = pod(container(image=PADDLE, limits=limits, requests=limits))
    assert_untouched(run(original, config=NO_CUDA), original)


@pytest.mark.parametrize(
    "image",
    [
        "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime",
        "nvidia/cuda:12.0.0-base",
        "example.com/apps:paddle",
    ],
)
def test_not_for_non_paddle_images(image: str) -> None:
    # The tag ("paddle") is not the repository: only the repository name counts.
    original = vgpu_pod(image)
    assert_untouched(run(original, config=NO_CUDA), original)


def test_user_value_equal_is_left_alone() -> None:
    original = vgpu_pod(env=[FLAG])
    assert_untouched(run(original, config=NO_CUDA), original)


def test_user_conflicting_value_is_kept_with_a_warning() -> None:
    env = [{"name": "FLAGS_allocator_strategy", "value": "auto_growth"}]
    decision = run(vgpu_pod(env=env), config=NO_CUDA)
    assert decision.patch == []
    assert decision.warnings == (
        "container \"c\": FLAGS_allocator_strategy='auto_growth' kept; the paddle-on-gpu-manager "
        "fix recommends naive_best_fit",
    )


def test_user_value_from_is_kept_with_a_warning() -> None:
    env = [
        {
            "name": "FLAGS_allocator_strategy",
            "valueFrom": {"configMapKeyRef": {"name": "a", "key": "b"}},
        }
    ]
    decision = run(vgpu_pod(env=env), config=NO_CUDA)
    assert decision.patch == []
    assert decision.warnings == (
        'container "c": FLAGS_allocator_strategy=valueFrom kept; the paddle-on-gpu-manager fix '
        "recommends naive_best_fit",
    )


def test_opt_out_annotation() -> None:
    original = vgpu_pod(annotations={"features.alauda.io/env-fixes": "false"})
    assert_untouched(run(original, config=NO_CUDA), original)


def test_opt_out_keeps_the_other_mutations() -> None:
    # The annotation switches off the env fixes only: the CUDA affinity is still added.
    original = vgpu_pod(annotations={"features.alauda.io/env-fixes": "false"})
    decision = run(original)
    expected = copy.deepcopy(original)
    expected["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                # vGPU (vcuda-core 50, a share of a card): the driver's major must be 12.
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            expr("cuda-major-version", "Gt", 11),
                            expr("cuda-major-version", "Lt", 13),
                        ]
                    }
                ]
            }
        }
    }
    assert apply(decision) == expected
    assert decision.notes == (f"required vGPU nodes with CUDA ≥ 12.0 (image {PADDLE})",)


def test_env_fixes_off_by_empty_config_list() -> None:
    config = load_config({"cudaAffinity": False, "envFixes": []})
    original = vgpu_pod()
    assert_untouched(run(original, config=config), original)


CUSTOM = load_config(
    {
        "cudaAffinity": False,
        "envFixes": [
            {
                "name": "nccl-on-gpu",
                "resources": ["nvidia.com/gpu"],
                "container": "worker-[0-9]+",
                "env": {"NCCL_DEBUG": "WARN", "NCCL_IB_DISABLE": "1"},
            },
            {
                "name": "any-trainer",
                "container": "trainer",
                "env": {"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "1"},
            },
        ],
    }
)


def test_custom_rule_matches_container_name_and_resources() -> None:
    original = pod(container("worker-1", "img", limits={GPU: "1"}, requests={GPU: "1"}))
    decision = run(original, config=CUSTOM)
    assert apply(decision)["spec"]["containers"][0]["env"] == [
        {"name": "NCCL_DEBUG", "value": "WARN"},
        {"name": "NCCL_IB_DISABLE", "value": "1"},
    ]
    assert decision.notes == (
        'set NCCL_DEBUG=WARN in container "worker-1" (nccl-on-gpu fix)',
        'set NCCL_IB_DISABLE=1 in container "worker-1" (nccl-on-gpu fix)',
    )
    assert_idempotent(decision, config=CUSTOM)


@pytest.mark.parametrize(
    ("name", "limits"),
    [
        ("worker-x", {GPU: "1"}),  # regex is a full match
        ("my-worker-1", {GPU: "1"}),
        ("worker-1", {VCORE: "50", VMEM: "4"}),  # resources condition not met
    ],
)
def test_custom_rule_does_not_match(name: str, limits: dict[str, str]) -> None:
    original = pod(
        container(name, "img", limits=limits, requests=limits if GPU in limits else None)
    )
    decision = run(original, config=CUSTOM)
    assert apply(decision) == original
    assert decision.notes == ()


def test_first_rule_wins_for_the_same_variable() -> None:
    original = pod(container("trainer", "img", limits={GPU: "1"}, requests={GPU: "1"}))
    decision = run(original, config=CUSTOM)
    assert apply(decision) == with_env(
        original,
        {"name": "NCCL_DEBUG", "value": "INFO"},
        {"name": "OMP_NUM_THREADS", "value": "1"},
    )


def test_env_fixes_only_for_gpu_containers() -> None:
    # A rule without a resources condition still only applies to GPU containers.
    original = pod(container("trainer", "img", limits={"cpu": "1"}))
    assert_untouched(run(original, config=CUSTOM), original)


def test_env_fix_in_init_container() -> None:
    original = pod(
        container("main", "busybox", limits={"cpu": "1"}),
        init=[container("c", PADDLE, limits={VCORE: "50", VMEM: "4"})],
    )
    decision = run(original, config=NO_CUDA)
    expected = copy.deepcopy(original)
    expected["spec"]["initContainers"][0]["env"] = [FLAG]
    assert apply(decision) == expected
    assert decision.notes == (
        "set FLAGS_allocator_strategy=naive_best_fit in "
        'init container "c" (paddle-on-gpu-manager fix)',
    )


# --- envFrom, duplicates, registry hosts (SPEC §5) ----------------------------------------------

ENV_FROM = [{"configMapRef": {"name": "paddle-env"}}]


def test_env_from_container_gets_nothing_and_a_warning_naming_the_variable() -> None:
    original = pod(container(image=PADDLE, limits={VCORE: "50", VMEM: "4"}, envFrom=ENV_FROM))
    decision = run(original, config=NO_CUDA_NO_ACCESS)
    assert apply(decision)["spec"]["containers"][0] == {
        **original["spec"]["containers"][0],
        "resources": {"limits": {VCORE: "50", VMEM: "4"}},
    }
    assert decision.patch == []
    assert decision.warnings == (
        'container "c": did not set FLAGS_allocator_strategy=naive_best_fit because of envFrom; '
        "add it to env",
    )
    assert all(len(w) <= 120 for w in decision.warnings)


def test_env_from_with_the_variable_in_env_is_judged_by_env() -> None:
    # An explicit env entry wins over envFrom in the kubelet, so that value is the one in force.
    env = [FLAG]
    original = pod(
        container(image=PADDLE, limits={VCORE: "50", VMEM: "4"}, env=env, envFrom=ENV_FROM)
    )
    decision = run(original, config=NO_CUDA_NO_ACCESS)
    assert (decision.patch, decision.warnings) == ([], ())


@pytest.mark.parametrize(
    ("env", "warnings"),
    [
        # The last entry of a name is the one in force (kubelet makeEnvironmentVariables).
        (
            [
                {"name": "FLAGS_allocator_strategy", "value": "naive_best_fit"},
                {"name": "FLAGS_allocator_strategy", "value": "auto_growth"},
            ],
            (
                "container \"c\": FLAGS_allocator_strategy='auto_growth' kept; the "
                "paddle-on-gpu-manager fix recommends naive_best_fit",
            ),
        ),
        (
            [
                {"name": "FLAGS_allocator_strategy", "value": "auto_growth"},
                {"name": "FLAGS_allocator_strategy", "value": "naive_best_fit"},
            ],
            (),
        ),
    ],
)
def test_last_duplicate_env_entry_wins(
    env: list[dict[str, Any]], warnings: tuple[str, ...]
) -> None:
    original = vgpu_pod(env=env)
    decision = run(original, config=NO_CUDA)
    assert apply(decision) == original
    assert decision.warnings == warnings


@pytest.mark.parametrize(
    ("image", "fixed"),
    [
        ("paddle-registry.corp:5000/ml/pytorch:2.1", False),  # the host is not the image
        ("paddle.example.com/team/torch", False),
        ("localhost/paddle:1", True),
        ("localhost:5000/ml/paddle-ocr:1", True),
        ("paddle/train:1", True),  # Docker Hub user "paddle": no dot or colon, not a host
        (f"registry.corp/paddlepaddle/paddle@sha256:{'a' * 64}", True),
    ],
)
def test_image_patterns_match_the_repository_path(image: str, fixed: bool) -> None:
    original = vgpu_pod(image)
    decision = run(original, config=NO_CUDA)
    assert apply(decision) == (with_env(original, FLAG) if fixed else original)


# --- the opt-out annotation (shared reading: webhook/core/base/annotations.py) ---

OPT = "features.alauda.io/env-fixes"


@pytest.mark.parametrize("value", ["false", "FALSE", "No", "0", "off", "Off", " false "])
def test_opt_out_values(value: str) -> None:
    original = vgpu_pod(annotations={OPT: value})
    assert_untouched(run(original, config=NO_CUDA), original)


@pytest.mark.parametrize("value", ["true", "Yes", "1", "ON"])
def test_opt_in_values_keep_the_fix_silently(value: str) -> None:
    original = vgpu_pod(annotations={OPT: value})
    decision = run(original, config=NO_CUDA)
    assert apply(decision) == with_env(original, FLAG)
    assert (decision.notes, decision.warnings) == ((NOTE,), ())


@pytest.mark.parametrize("value", ["disabled", "", "nope"])
def test_unrecognised_opt_out_value_warns_and_keeps_the_fix(value: str) -> None:
    original = vgpu_pod(annotations={OPT: value})
    decision = run(original, config=NO_CUDA)
    assert apply(decision) == with_env(original, FLAG)
    assert decision.warnings == (
        f"annotation {OPT}={value!r} not understood: use false/no/0/off to opt out",
    )
