"""Image references (SPEC §4 step 3): normalisation, and matching that a hostile reference
cannot stall (issue 10: `":-" * 24000` took 9.5 s with the old backtracking patterns)."""

from __future__ import annotations

import re

import pytest

from tests.helpers import GPU, apply, container, node_terms, pod, run
from webhook.core.base.versions import CudaVersion
from webhook.core.config.model import DEFAULT_IMAGE_PATTERNS, WebhookConfig, load_config
from webhook.core.images.references import MAX_REFERENCE_LENGTH, normalize
from webhook.core.placement.cuda import container_requirement

DIGEST = "sha256:" + "b" * 64


@pytest.mark.parametrize(
    ("image", "normal"),
    [
        ("docker.io/nvidia/cuda:12.4.1-base", "nvidia/cuda:12.4.1-base"),
        ("index.docker.io/nvidia/cuda:12.4.1-base", "nvidia/cuda:12.4.1-base"),
        ("docker.io/library/ubuntu:22.04", "ubuntu:22.04"),
        ("library/ubuntu:22.04", "ubuntu:22.04"),
        (f"nvidia/cuda:12.4.1@{DIGEST}", "nvidia/cuda:12.4.1"),
        (f"docker.io/vllm/vllm-openai@{DIGEST}", "vllm/vllm-openai"),
        ("nvcr.io/nvidia/cuda:12.4.1", "nvcr.io/nvidia/cuda:12.4.1"),  # other registries kept
    ],
)
def test_normalize(image: str, normal: str) -> None:
    assert normalize(image) == normal


@pytest.mark.parametrize(
    "image",
    [
        "docker.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04",
        "index.docker.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04",
        f"docker.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04@{DIGEST}",
    ],
)
def test_docker_hub_spellings_give_the_same_answer(image: str) -> None:
    req = container_requirement({"image": image}, WebhookConfig())
    assert req is not None
    assert (req.version, req.source) == (
        CudaVersion(12, 4),
        "image nvidia/cuda:12.4.1-runtime-ubuntu22.04",
    )


TABLE = load_config(
    {
        "imageCudaTable": [
            {"image": "docker.io/library/serving*", "cudaVersion": "12.2"},
            {"image": "vllm/vllm-openai*", "cudaVersion": "12.4"},
        ]
    }
)


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("serving:1.0", CudaVersion(12, 2)),  # the table's docker.io/library/ is normalised too
        ("docker.io/serving:1.0", CudaVersion(12, 2)),
        (f"vllm/vllm-openai@{DIGEST}", CudaVersion(12, 4)),  # digest only: matched by name
        (f"index.docker.io/vllm/vllm-openai:v0.6.3@{DIGEST}", CudaVersion(12, 4)),
    ],
)
def test_admin_table_sees_normalised_references(image: str, version: CudaVersion) -> None:
    req = container_requirement({"image": image}, TABLE)
    assert req is not None and req.version == version


def test_max_reference_length_is_the_longest_valid_reference() -> None:
    # host (DNS name) : port / path (distribution/reference: 255) : tag (128) @ sha512 digest
    longest = "h" * 253 + ":65535/" + "p" * 255 + ":" + "t" * 128 + "@sha512:" + "f" * 128
    assert len(longest) == MAX_REFERENCE_LENGTH


def test_a_reference_longer_than_any_valid_one_is_not_matched() -> None:
    image = "nvidia/cuda:12.4.1-base-" + "x" * MAX_REFERENCE_LENGTH
    assert container_requirement({"image": image}, WebhookConfig()) is None
    fits = image[:MAX_REFERENCE_LENGTH]
    req = container_requirement({"image": fits}, WebhookConfig())
    assert req is not None and req.version == CudaVersion(12, 4)


@pytest.mark.parametrize(
    "image",
    [
        ":-" * 24000,  # the 48 KB reproducer
        "nvidia/cuda:12.4.1" + "-x" * 500_000,  # 1 MB
        ":-" * 389,  # just under the length cap
        "a:" + "-" * 700 + "cuda",
        "a:" + "_cu1" * 190,
        "/cuda:1" * 110,
        "a" + "/_cuda1" * 110,  # the repository path patterns' worst cases
        "a/" + "-cu1" * 190,
        "a/" + "x-cuda-1." * 85,
    ],
)
def test_pathological_references_review_without_affinity(image: str) -> None:
    decision = run(pod(container(image=image, limits={GPU: "1"}, requests={GPU: "1"})))
    assert decision.allowed
    assert node_terms(apply(decision)) is None
    (warning,) = decision.warnings
    if len(image) <= MAX_REFERENCE_LENGTH:
        # As long as a valid reference may be: named whole (SPEC §4), the fixed words shortest.
        assert warning == f"CUDA of {image} unknown: set features.alauda.io/cuda-version"
    else:
        # Longer than any valid reference: no image, shown cut, and the warning fits.
        assert warning == (
            f"CUDA of {image[:40]}… ({len(image)} characters) unknown: set "
            "features.alauda.io/cuda-version"
        )
        assert len(warning) <= 120


def test_default_patterns_cannot_backtrack_across_segments() -> None:
    """Linear by construction: after its literal start (`:`, `/` or `/cuda:`) a default
    pattern only spans characters of one `:`/`/`-free segment with bounded repetition, never
    `.`, so the segments scanned from two starts never overlap."""
    for pattern in DEFAULT_IMAGE_PATTERNS:
        assert "." not in re.sub(r"\\.|\[[^]]*\]", "", pattern), pattern
        assert re.match(r"^(\(\?:\^\|/\)cuda:|:|/\(\?:\[\^:/\]\*)", pattern), pattern


# SPEC §4 step 4: every example it gives, with the exact version; the tag or the path.
@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("nvidia/cuda:12.4.1-runtime-ubuntu22.04", CudaVersion(12, 4)),
        ("pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime", CudaVersion(12, 1)),
        ("paddlepaddle/paddle:2.6.1-gpu-cuda12.0-cudnn8.9-trt8.6", CudaVersion(12, 0)),
        ("example.com/team/app:cu121", CudaVersion(12, 1)),
        ("example.com/team/app:2.1-cuda-11.8-devel", CudaVersion(11, 8)),
        ("example.com/team/app-cuda-11.8-devel:2.1", CudaVersion(11, 8)),
        ("example.com/team/app:torch2_cuda11.8", CudaVersion(11, 8)),
        ("example.com/team/torch2_cuda11.8:v1", CudaVersion(11, 8)),
        (
            "us-docker.pkg.dev/deeplearning-platform-release/gcr.io/"
            "huggingface-text-generation-inference-cu124.2-3.ubuntu2204",
            CudaVersion(12, 4),
        ),
        (
            "us-docker.pkg.dev/deeplearning-platform-release/gcr.io/"
            "huggingface-text-generation-inference-cu124.2-3.ubuntu2204.py311",
            CudaVersion(12, 4),
        ),
    ],
)
def test_spec_examples_spelled_in_the_reference(image: str, version: CudaVersion) -> None:
    req = container_requirement({"image": image}, WebhookConfig(shipped_image_knowledge=False))
    assert req is not None
    assert (req.version, req.source) == (version, f"image {image}")


@pytest.mark.parametrize(
    "image",
    [
        "cuda12-registry.corp:5000/x",  # SPEC: the registry host is not CUDA 12
        "cuda12-registry.corp:5000/x:latest",
        "cu121.example.com/x:1",
        "localhost:5000/x:1",
        "example.com/team/cuda-tools:1.0",  # "cuda" without a version
        "example.com/team/cu12x/app:1",
        "example.com/team/scu121/app:1",  # not a separate word
    ],
)
def test_no_version_spelled(image: str) -> None:
    assert container_requirement({"image": image}, WebhookConfig()) is None
