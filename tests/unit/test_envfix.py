"""Environment fixes (SPEC §5): Paddle on GPU-Manager vGPU, user values kept, custom rules."""

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
    pod,
    run,
)
from webhook.core.config import WebhookConfig, load_config

NO_CUDA = WebhookConfig(cuda_affinity=False)
PADDLE = "paddlepaddle/paddle:2.6.1-gpu-cuda12.0-cudnn8.9-trt8.6"
FLAG = {"name": "FLAGS_allocator_strategy", "value": "naive_best_fit"}
NOTE = 'set FLAGS_allocator_strategy=naive_best_fit in container "c" (paddle-on-gpu-manager fix)'


def vgpu_pod(
    image: str = PADDLE, env: list[dict[str, Any]] | None = None, **kw: Any
) -> dict[str, Any]:
    return pod(container(image=image, limits={VCORE: "50", VMEM: "4"}, env=env), **kw)


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
    decision = run(pod(container(image=PADDLE, limits={VMEM: "4", VCORE: "10"})), config=NO_CUDA)
    assert NOTE in decision.notes


@pytest.mark.parametrize(
    "limits",
    [{GPU: "1"}, {"nvidia.com/gpumem": "1000"}, {"cpu": "1"}],
)
def test_not_without_vcuda_keys(limits: dict[str, str]) -> None:
    decision = run(pod(container(image=PADDLE, limits=limits, requests=limits)), config=NO_CUDA)
    assert "env" not in apply(decision)["spec"]["containers"][0]
    assert all("FLAGS_allocator_strategy" not in n for n in decision.notes)


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
    decision = run(vgpu_pod(image), config=NO_CUDA)
    assert "env" not in apply(decision)["spec"]["containers"][0]


def test_user_value_equal_is_left_alone() -> None:
    decision = run(vgpu_pod(env=[FLAG]), config=NO_CUDA)
    assert decision.patch == []
    assert (decision.notes, decision.warnings) == ((), ())


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
    decision = run(vgpu_pod(annotations={"features.alauda.io/env-fixes": "false"}), config=NO_CUDA)
    assert "env" not in apply(decision)["spec"]["containers"][0]
    assert all("FLAGS" not in n for n in decision.notes)


def test_env_fixes_off_by_empty_config_list() -> None:
    config = load_config({"cudaAffinity": False, "envFixes": []})
    decision = run(vgpu_pod(), config=config)
    assert "env" not in apply(decision)["spec"]["containers"][0]


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
        ("worker-1", {VCORE: "50"}),  # resources condition not met
    ],
)
def test_custom_rule_does_not_match(name: str, limits: dict[str, str]) -> None:
    decision = run(
        pod(container(name, "img", limits=limits, requests=limits if GPU in limits else None)),
        config=CUSTOM,
    )
    assert "env" not in apply(decision)["spec"]["containers"][0]


def test_first_rule_wins_for_the_same_variable() -> None:
    original = pod(container("trainer", "img", limits={GPU: "1"}, requests={GPU: "1"}))
    decision = run(original, config=CUSTOM)
    assert apply(decision)["spec"]["containers"][0]["env"] == [
        {"name": "NCCL_DEBUG", "value": "INFO"},
        {"name": "OMP_NUM_THREADS", "value": "1"},
    ]


def test_env_fixes_only_for_gpu_containers() -> None:
    # A rule without a resources condition still only applies to GPU containers.
    decision = run(pod(container("trainer", "img", limits={"cpu": "1"})), config=CUSTOM)
    assert decision.patch == []


def test_env_fix_in_init_container() -> None:
    original = pod(
        container("main", "busybox", limits={"cpu": "1"}),
        init=[container("c", PADDLE, limits={VCORE: "50", VMEM: "4"})],
    )
    decision = run(original, config=NO_CUDA)
    assert apply(decision)["spec"]["initContainers"][0]["env"] == [FLAG]
    assert decision.notes == (
        "set FLAGS_allocator_strategy=naive_best_fit in "
        'init container "c" (paddle-on-gpu-manager fix)',
    )


# --- envFrom, duplicates, registry hosts (SPEC §5) ----------------------------------------------

ENV_FROM = [{"configMapRef": {"name": "paddle-env"}}]


def test_env_from_container_gets_nothing_and_a_warning_naming_the_variable() -> None:
    original = pod(container(image=PADDLE, limits={VCORE: "50", VMEM: "4"}, envFrom=ENV_FROM))
    decision = run(original, config=NO_CUDA)
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
    decision = run(original, config=NO_CUDA)
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
    decision = run(vgpu_pod(env=env), config=NO_CUDA)
    assert decision.patch == []
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
    decision = run(vgpu_pod(image), config=NO_CUDA)
    env = apply(decision)["spec"]["containers"][0].get("env")
    assert env == ([FLAG] if fixed else None)


# --- the opt-out annotation (shared reading: webhook/core/annotations.py) ----------------------

OPT = "features.alauda.io/env-fixes"


@pytest.mark.parametrize("value", ["false", "FALSE", "No", "0", "off", "Off", " false "])
def test_opt_out_values(value: str) -> None:
    decision = run(vgpu_pod(annotations={OPT: value}), config=NO_CUDA)
    assert decision.patch == []
    assert decision.warnings == ()


@pytest.mark.parametrize("value", ["true", "Yes", "1", "ON"])
def test_opt_in_values_keep_the_fix_silently(value: str) -> None:
    decision = run(vgpu_pod(annotations={OPT: value}), config=NO_CUDA)
    assert apply(decision)["spec"]["containers"][0]["env"] == [FLAG]
    assert decision.warnings == ()


@pytest.mark.parametrize("value", ["disabled", "", "nope"])
def test_unrecognised_opt_out_value_warns_and_keeps_the_fix(value: str) -> None:
    decision = run(vgpu_pod(annotations={OPT: value}), config=NO_CUDA)
    assert apply(decision)["spec"]["containers"][0]["env"] == [FLAG]
    assert decision.warnings == (
        f"annotation {OPT}={value!r} not understood: use false/no/0/off to opt out",
    )
