"""Shipped image knowledge (SPEC §4 step 5): the data file, its loader's checks, the lookups and
where they stand among the other ways to know an image's CUDA version."""

from __future__ import annotations

import re

import pytest

# Tests of the shipped image knowledge: evaluated without the /dev/shm fix (on by default), whose
# volume and warning would be in every pod here (tests/helpers.py `without_shm`; the rule's own
# tests: test_runtime_fixes.py).
from tests.helpers import (
    GPU,
    container,
    pod,
)
from tests.helpers import (
    load_without_shm as load_config,
)
from tests.helpers import (
    run_without_shm as run,
)
from webhook.core.base.versions import CudaVersion
from webhook.core.config.model import DEFAULT_IMAGE_PATTERNS, WebhookConfig
from webhook.core.images.knowledge import (
    ImageKnowledge,
    KnowledgeError,
    shipped_knowledge,
)
from webhook.core.images.references import image_version
from webhook.core.placement.cuda import container_requirement

V = CudaVersion
DIGEST = "sha256:" + "c" * 64


def test_the_shipped_file_loads_and_every_entry_has_a_source_and_a_plausible_version() -> None:
    knowledge = shipped_knowledge()
    assert len(knowledge) >= 200
    names = [f.name for f in knowledge.families]
    assert len(names) == len(set(names))
    for family in knowledge.families:
        for entry in family.releases:
            source = (entry.source or family.source or "").replace("{release}", entry.release)
            assert re.fullmatch(r"https://\S+", source), (family.name, entry.release)
            versions = [entry.cuda] if entry.cuda is not None else []
            versions += entry.arch.values()
            assert versions, entry
            for text in versions:
                version = CudaVersion.parse(text)
                assert version is not None and V(7, 0) <= version < V(20, 0), entry
                assert re.fullmatch(r"[0-9]+\.[0-9]+", text), entry


def test_the_knowledge_is_loaded_once_and_shared_by_every_config() -> None:
    assert shipped_knowledge() is shipped_knowledge()
    assert WebhookConfig().image_rules.knowledge is load_config({}).image_rules.knowledge
    assert WebhookConfig(shipped_image_knowledge=False).image_rules.knowledge is None


@pytest.mark.parametrize(
    ("image", "version", "source"),
    [
        (
            "nvcr.io/nvidia/tritonserver:24.05-py3",
            V(12, 4),
            "shipped knowledge: NGC Triton 24.05, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/tritonserver:22.01-py3",
            V(11, 6),
            "shipped knowledge: NGC Triton 22.01, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/tritonserver:24.06-py3-sdk",
            V(12, 5),
            "shipped knowledge: NGC Triton 24.06, NVIDIA release notes",
        ),
        (
            f"nvcr.io/nvidia/tritonserver:25.08-py3-min@{DIGEST}",
            V(13, 0),
            "shipped knowledge: NGC Triton 25.08, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/tritonserver:24.12-py3",
            V(12, 6),
            "shipped knowledge: NGC Triton 24.12, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/tritonserver:20.09-py3",
            V(11, 0),
            "shipped knowledge: NGC Triton 20.09, NVIDIA release notes",
        ),
        # 21.02 and 21.03's SDK images were built on nvidia/cuda:11.1 (Dockerfile.sdk at
        # v2.7.0 and v2.8.0), not on the release's -py3-min (11.2): that came in 21.04 (#2762)
        (
            "nvcr.io/nvidia/tritonserver:21.02-py3-sdk",
            V(11, 1),
            "shipped knowledge: NGC Triton SDK 21.02, the release's Dockerfile.sdk",
        ),
        (
            "nvcr.io/nvidia/tritonserver:21.03-py3-sdk",
            V(11, 1),
            "shipped knowledge: NGC Triton SDK 21.03, the release's Dockerfile.sdk",
        ),
        (
            "nvcr.io/nvidia/tritonserver:21.03-py3",
            V(11, 2),
            "shipped knowledge: NGC Triton 21.03, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/tritonserver:21.04-py3-sdk",
            V(11, 3),
            "shipped knowledge: NGC Triton 21.04, NVIDIA release notes",
        ),
        # the TensorRT-LLM and vLLM containers have their own CUDA (24.05: 12.3, not 12.4)
        (
            "nvcr.io/nvidia/tritonserver:25.01-trtllm-python-py3",
            V(12, 8),
            "shipped knowledge: NGC Triton TRT-LLM 25.01, Triton compatibility matrix",
        ),
        (
            "nvcr.io/nvidia/tritonserver:24.05-trtllm-python-py3",
            V(12, 3),
            "shipped knowledge: NGC Triton TRT-LLM 24.05, Triton compatibility matrix",
        ),
        (
            "nvcr.io/nvidia/tritonserver:24.05-vllm-python-py3",
            V(12, 4),
            "shipped knowledge: NGC Triton vLLM 24.05, Triton compatibility matrix",
        ),
        (
            "nvcr.io/nvidia/pytorch:25.12-py3",
            V(13, 1),
            "shipped knowledge: NGC PyTorch 25.12, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/tensorflow:21.05-tf2-py3",
            V(11, 3),
            "shipped knowledge: NGC TensorFlow 21.05, NVIDIA release notes",
        ),
        (
            "tensorflow/serving:2.13.1-gpu",
            V(11, 8),
            "shipped knowledge: TF Serving 2.13.1, release Dockerfile",
        ),
        (
            "docker.io/tensorflow/serving:2.20.0-devel-gpu",
            V(12, 5),
            "shipped knowledge: TF Serving 2.20.0, release Dockerfile",
        ),
        (
            "ghcr.io/huggingface/text-generation-inference:2.0.4",
            V(12, 1),
            "shipped knowledge: TGI 2.0.4, release Dockerfile",
        ),
        (
            "ghcr.io/huggingface/text-generation-inference:1.1.0",
            V(11, 8),
            "shipped knowledge: TGI 1.1.0, release Dockerfile",
        ),
        (
            "ghcr.io/huggingface/text-generation-inference:3.0.1",
            V(12, 4),
            "shipped knowledge: TGI 3.0.1, release Dockerfile",
        ),
        # 3.3.1+: `uv sync --extra torch` installs torch 2.7.0+cu128 on the 12.4 base
        (
            "ghcr.io/huggingface/text-generation-inference:3.3.1",
            V(12, 8),
            "shipped knowledge: TGI 3.3.1, release Dockerfile",
        ),
        (
            "ghcr.io/huggingface/text-generation-inference:3.3.7",
            V(12, 8),
            "shipped knowledge: TGI 3.3.7, release Dockerfile",
        ),
        (
            "ghcr.io/huggingface/text-generation-inference:3.3.0",
            V(12, 4),
            "shipped knowledge: TGI 3.3.0, release Dockerfile",
        ),
        (
            "nvcr.io/nvidia/tensorflow:23.01-tf2-py3",
            V(12, 0),
            "shipped knowledge: NGC TensorFlow 23.01, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/tensorflow:22.06-tf1-py3",
            V(11, 7),
            "shipped knowledge: NGC TensorFlow 22.06, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/pytorch:19.11-py3",
            V(10, 2),
            "shipped knowledge: NGC PyTorch 19.11, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/mxnet:24.06-py3",
            V(12, 4),
            "shipped knowledge: NGC MXNet 24.06, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/paddlepaddle:22.10-py3",
            V(11, 8),
            "shipped knowledge: NGC PaddlePaddle 22.10, NVIDIA release notes",
        ),
        # Ray: `-gpu` aliases one `-cuXYZ` build; a `-cuXYZ` tag is read from the reference
        (
            "rayproject/ray:2.47.1-py310-gpu",
            V(12, 1),
            "shipped knowledge: Ray 2.47.1, Ray maintainers",
        ),
        # Ray 2.3.0: a maintainer on the release branch's default image (cu116)
        (
            "rayproject/ray:2.3.0-py38-gpu",
            V(11, 6),
            "shipped knowledge: Ray 2.3.0, Ray maintainers",
        ),
        (
            "rayproject/ray-ml:2.3.0-gpu",
            V(11, 6),
            "shipped knowledge: Ray ML 2.3.0, Ray maintainers",
        ),
        # vLLM v0.6.6-v0.7.3: a 12.1 base under PyPI's torch 2.5.1 (12.4): the newest runtime
        (
            "vllm/vllm-openai:v0.7.2",
            V(12, 4),
            "shipped knowledge: vLLM 0.7.2, vLLM release pipeline",
        ),
        (
            "vllm/vllm-openai:v0.6.6",
            V(12, 4),
            "shipped knowledge: vLLM 0.6.6, vLLM release pipeline",
        ),
        (
            "rayproject/ray:2.47.1-py310-cu128",
            V(12, 8),
            "image rayproject/ray:2.47.1-py310-cu128",
        ),
        (
            "vllm/vllm-openai:v0.9.0",
            V(12, 8),
            "shipped knowledge: vLLM 0.9.0, vLLM release notes/issues",
        ),
        # NVIDIA's own vLLM and SGLang containers, from their release notes
        (
            "nvcr.io/nvidia/vllm:25.10-py3",
            V(13, 0),
            "shipped knowledge: NGC vLLM 25.10, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/vllm:26.10-py3",
            V(13, 4),
            "shipped knowledge: NGC vLLM 26.10, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/sglang:26.05-py3",
            V(13, 2),
            "shipped knowledge: NGC SGLang 26.05, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/mxnet:22.05-py3",
            V(11, 7),
            "shipped knowledge: NGC MXNet 22.05, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/dgl:23.07-py3",
            V(12, 1),
            "shipped knowledge: NGC DGL 23.07, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/tensorrt:19.02-py3",
            V(10, 0),
            "shipped knowledge: NGC TensorRT 19.02, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/tensorrt:19.05-py3",
            V(10, 1),
            "shipped knowledge: NGC TensorRT 19.05, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/tensorrt:18.10-py3",
            V(10, 0),
            "shipped knowledge: NGC TensorRT 18.10, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/mxnet:20.01-py3",
            V(10, 2),
            "shipped knowledge: NGC MXNet 20.01, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/mxnet:20.10-py3",
            V(11, 1),
            "shipped knowledge: NGC MXNet 20.10, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/mxnet:18.09-py3",
            V(10, 0),
            "shipped knowledge: NGC MXNet 18.09, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/mxnet:19.08-py3",
            V(10, 1),
            "shipped knowledge: NGC MXNet 19.08, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/mxnet:19.11-py3",
            V(10, 2),
            "shipped knowledge: NGC MXNet 19.11, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/mxnet:21.09-py3",
            V(11, 4),
            "shipped knowledge: NGC MXNet 21.09, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/tensorflow:19.12-tf1-py3",
            V(10, 2),
            "shipped knowledge: NGC TensorFlow 19.12, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/tensorflow:20.06-tf2-py3",
            V(11, 0),
            "shipped knowledge: NGC TensorFlow 20.06, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/tensorflow:18.05-py3",
            V(9, 0),
            "shipped knowledge: NGC TensorFlow py2/py3 18.05, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/tensorflow:18.08-py2",
            V(9, 0),
            "shipped knowledge: NGC TensorFlow py2/py3 18.08, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/tensorflow:19.02-py3",
            V(10, 0),
            "shipped knowledge: NGC TensorFlow py2/py3 19.02, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/tensorflow:19.10-py3",
            V(10, 1),
            "shipped knowledge: NGC TensorFlow py2/py3 19.10, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/paddlepaddle:22.05-py3",
            V(11, 7),
            "shipped knowledge: NGC PaddlePaddle 22.05, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/paddlepaddle:23.04-py3",
            V(12, 1),
            "shipped knowledge: NGC PaddlePaddle 23.04, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/paddlepaddle:23.11-py3",
            V(12, 3),
            "shipped knowledge: NGC PaddlePaddle 23.11, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/paddlepaddle:24.05-py3",
            V(12, 4),
            "shipped knowledge: NGC PaddlePaddle 24.05, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/digits:19.04-tensorflow",
            V(10, 1),
            "shipped knowledge: NGC DIGITS 19.04, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/digits:19.06-caffe",
            V(10, 1),
            "shipped knowledge: NGC DIGITS 19.06, NVIDIA release notes",
        ),
        # NGC PyTorch from the notes read as quoted, NVIDIA's build files, the image's env
        (
            "nvcr.io/nvidia/pytorch:24.05-py3",
            V(12, 4),
            "shipped knowledge: NGC PyTorch 24.05, NVIDIA release notes",
        ),
        (
            "nvcr.io/nvidia/pytorch:25.04-py3",
            V(12, 9),
            "shipped knowledge: NGC PyTorch 25.04, the image's own report",
        ),
        (  # each release names where it was read, when not the family's kind of source
            "nvcr.io/nvidia/pytorch:25.01-py3",
            V(12, 8),
            "shipped knowledge: NGC PyTorch 25.01, NVIDIA build files",
        ),
        (
            "nvcr.io/nvidia/pytorch:26.05-py3",
            V(13, 2),
            "shipped knowledge: NGC PyTorch 26.05, NVIDIA CI",
        ),
        (
            "nvcr.io/nvidia/pytorch:21.12-py3",
            V(11, 5),
            "shipped knowledge: NGC PyTorch 21.12, the image's env",
        ),
        (
            "nvcr.io/nvidia/nemo:25.09",
            V(12, 9),
            "shipped knowledge: NGC NeMo 25.09, NVIDIA software component versions",
        ),
        (
            "nvcr.io/nvidia/nemo:26.06",
            V(13, 2),
            "shipped knowledge: NGC NeMo 26.06, NVIDIA software component versions",
        ),
        # vLLM's release image, by the release pipeline's CUDA_VERSION at the release
        (
            "vllm/vllm-openai:v0.8.5",
            V(12, 4),
            "shipped knowledge: vLLM 0.8.5, vLLM release pipeline",
        ),
        (
            "vllm/vllm-openai:v0.10.1.1",
            V(12, 8),
            "shipped knowledge: vLLM 0.10.1.1, vLLM release pipeline",
        ),
        (
            "vllm/vllm-openai:v0.11.1",
            V(12, 9),
            "shipped knowledge: vLLM 0.11.1, vLLM release pipeline",
        ),
        # releases of the 2025-10-22 to 2026-04-21 window: both images CUDA_VERSION=12.9.1
        (
            "vllm/vllm-openai:v0.13.0",
            V(12, 9),
            "shipped knowledge: vLLM 0.13.0, vLLM release pipeline",
        ),
        (
            "vllm/vllm-openai:v0.16.0",
            V(12, 9),
            "shipped knowledge: vLLM 0.16.0, vLLM release pipeline",
        ),
        (
            "vllm/vllm-openai:v0.19.0",
            V(12, 9),
            "shipped knowledge: vLLM 0.19.0, vLLM release pipeline",
        ),
        # a single-architecture tag: its architecture decides, not the pod's
        (
            "vllm/vllm-openai:v0.11.0-aarch64",
            V(12, 9),
            "shipped knowledge: vLLM 0.11.0 for linux/arm64, vLLM release pipeline",
        ),
        (
            "vllm/vllm-openai:v0.11.0-x86_64",
            V(12, 8),
            "shipped knowledge: vLLM 0.11.0 for linux/amd64, vLLM release pipeline",
        ),
        (
            "vllm/vllm-openai:v0.16.0-aarch64",
            V(12, 9),
            "shipped knowledge: vLLM 0.16.0, vLLM release pipeline",
        ),
        # a multi-platform tag whose images differ: linux/amd64 unless the pod says otherwise
        (
            "vllm/vllm-openai:v0.11.0",
            V(12, 8),
            "shipped knowledge: vLLM 0.11.0 for linux/amd64, vLLM release pipeline",
        ),
        (
            "lmsysorg/sglang:v0.5.4.post2",
            V(12, 9),
            "shipped knowledge: SGLang 0.5.4.post2, release workflow",
        ),
        # NIM: only releases whose notes state the container's CUDA
        (
            "nvcr.io/nim/nvidia/llm-nim:1.12.0",
            V(12, 9),
            "shipped knowledge: NIM for LLMs 1.12.0, NVIDIA NIM release notes",
        ),
        (
            "nvcr.io/nim/nvidia/llama-3.2-nv-rerankqa-1b-v2:1.9.0",
            V(13, 0),
            "shipped knowledge: NIM rerankqa-1b-v2 1.9.0, NVIDIA NIM release notes",
        ),
        (  # tag-built from 2025-12-29; `-runtime` is the same build's runtime stage
            "lmsysorg/sglang:v0.5.8.post1",
            V(12, 9),
            "shipped knowledge: SGLang 0.5.8.post1, release workflow",
        ),
        (
            "lmsysorg/sglang:v0.5.7-runtime",
            V(12, 9),
            "shipped knowledge: SGLang 0.5.7, release workflow",
        ),
        (
            "lmsysorg/sglang:v0.5.3rc0",
            V(12, 9),
            "shipped knowledge: SGLang 0.5.3rc0, release workflow",
        ),
    ],
)
def test_shipped_knowledge(image: str, version: CudaVersion, source: str) -> None:
    req = container_requirement({"image": image}, WebhookConfig())
    assert req is not None
    assert (req.version, req.source) == (version, source)


@pytest.mark.parametrize(
    "image",
    [
        "nvcr.io/nvidia/tritonserver:24.09-py3",  # a release whose notes were not read
        "nvcr.io/nvidia/tritonserver:24.05-py3-igpu",  # a variant not listed
        f"nvcr.io/nvidia/tritonserver@{DIGEST}",  # no tag: no release to look up
        "nvcr.io/nvidia/tritonserver",
        "nvcr.io/nvidia/pytorch:24.04-py3",  # no source read for this release
        "nvcr.io/nvidia/nemo:25.04.01",  # patch tags are not assumed to share the base
        "nvcr.io/nvidia/nemo:25.04",  # not in NVIDIA's component table
        "tensorflow/serving:2.13.1",  # the CPU image
        "tensorflow/serving:latest-gpu",
        "ghcr.io/huggingface/text-generation-inference:3.0.1-rocm",
        "ghcr.io/huggingface/text-generation-inference:latest",
        "ghcr.io/huggingface/text-generation-inference:3.3.8",  # no such release read
        "ghcr.io/huggingface/text-generation-inference:3.3",  # a moving minor tag
        "nvcr.io/nvidia/mxnet:24.04-py3",  # notes not read
        "nvcr.io/nvidia/paddlepaddle:23.10-py3",
        "nvcr.io/nvidia/tensorflow:23.01-py3",  # NGC TensorFlow tags name tf1/tf2
        "nvcr.io/nvidia/tensorflow:19.11-py3",  # py2/py3 tags only up to 19.10
        "nvcr.io/nvidia/tensorflow:19.11-tf1-py2",  # the Python 2 image of the tf1/tf2 era
        "nvcr.io/nvidia/digits:19.04",  # DIGITS 19.04 tags name the framework
        "vllm/vllm-openai:v0.11.2",  # linux/amd64's image: its release branch was not read
        "vllm/vllm-openai:v0.11.2-x86_64",
        "vllm/vllm-openai:v0.8.5.post1",  # its release branch was not read
        "vllm/vllm-openai:v0.19.1",  # out after the pipeline history read here ends
        "vllm/vllm-openai:v0.11.0-arm64",  # vLLM spells it aarch64
        "vllm/vllm-openai:latest",
        "lmsysorg/sglang:latest",
        "lmsysorg/sglang:v0.5.1",  # not pushed by the release workflow
        "lmsysorg/sglang:v0.5.3",  # the workflow pushed only -cu129 and latest then
        "lmsysorg/sglang:v0.5.9",  # not in the release index read here
        "nvcr.io/nim/nvidia/llm-nim:1.13.0",  # no CUDA line in its notes
        "nvcr.io/nim/nvidia/llama-3.2-nv-rerankqa-1b-v2:1.9.1",  # a patch: not restated
        "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.12.0",  # a model NIM's own release line
        "lmsysorg/sglang:v0.5.8-dev",
        "rayproject/ray:2.37.0-gpu",  # the alias target of this release was not read
        "rayproject/ray:2.47.1",  # the CPU image
        "rayproject/ray:2.46.0.0e19ea-py39-gpu",  # a release-branch build, not the release
        "rayproject/ray-ml:2.47.1-gpu",  # ray's 2.47.1 statement says nothing of ray-ml
        "rayproject/ray:2.3.1-gpu",  # the 2.3.0 statement names its release branch only
        "rayproject/ray-ml:2.3.0",  # no -gpu: not the tag the statement is about
        "vllm/vllm-openai:v0.7.1",  # no date or commit ties it to the 12.1-base window
        "vllm/vllm-openai:v0.6.5",  # no lower bound ties it to the window
        "vllm/vllm-openai:v0.6.6.post1",
        "vllm/vllm-openai:v0.6.4",  # built by hand: its build arguments were not recorded
        "vllm/vllm-openai:0.9.0",  # vLLM tags carry the v
        "nvcr.io/nvidia/vllm:25.11-py3",  # NGC vLLM notes not read for this release
        "nvcr.io/nvidia/vllm:v0.9.0",  # an upstream vLLM tag on NVIDIA's repository
        "nvcr.io/nvidia/sglang:26.01-py3",
        "example.com/mirror/nvidia/tritonserver:24.05-py3",  # another registry: not the same
        "nvcr.io/nvidia/tritonserver:" + "24.05-" * 20 + "py3",  # a long tag, no match
    ],
)
def test_not_in_the_shipped_knowledge(image: str) -> None:
    assert container_requirement({"image": image}, WebhookConfig()) is None


def test_the_note_says_where_the_version_came_from() -> None:
    triton = "nvcr.io/nvidia/tritonserver:24.05-py3"
    decision = run(pod(container(image=triton, limits={GPU: "1"}, requests={GPU: "1"})))
    assert decision.notes == (
        "required GPU nodes with CUDA ≥ 12.4 "
        "(shipped knowledge: NGC Triton 24.05, NVIDIA release notes), preferably < 14.0",
    )
    assert decision.warnings == ()


# --- precedence: annotation, env, admin table, spelled in the reference, shipped ------------


def test_admin_table_overrides_the_shipped_knowledge() -> None:
    config = load_config(
        {"imageCudaTable": [{"image": "nvcr.io/nvidia/tritonserver:24.05*", "cudaVersion": "12.2"}]}
    )
    req = container_requirement({"image": "nvcr.io/nvidia/tritonserver:24.05-py3"}, config)
    assert req is not None
    assert (req.version, req.source) == (
        V(12, 2),
        "image table entry for nvcr.io/nvidia/tritonserver:24.05-py3",
    )


def test_env_overrides_the_shipped_knowledge() -> None:
    c = {
        "image": "nvcr.io/nvidia/tritonserver:24.05-py3",
        "env": [{"name": "CUDA_VERSION", "value": "12.6.1"}],
    }
    req = container_requirement(c, WebhookConfig())
    assert req is not None and (req.version, req.source) == (V(12, 6), "env CUDA_VERSION=12.6.1")


def test_a_version_spelled_in_the_reference_comes_before_the_shipped_knowledge() -> None:
    knowledge = ImageKnowledge.from_yaml(
        """
families:
- name: Team app
  cite: team notes
  repositories: [example.com/team/app]
  tag: '(?P<release>[0-9.]+)(?:-cu[0-9]+)?'
  source: https://example.com/notes/{release}
  releases:
  - {release: '1.0', cuda: '11.8'}
""",
        "test knowledge",
    )
    spelled = image_version("example.com/team/app:1.0-cu121", DEFAULT_IMAGE_PATTERNS, (), knowledge)
    assert spelled is not None
    assert (spelled.version, spelled.source) == (V(12, 1), "image example.com/team/app:1.0-cu121")
    shipped = image_version("example.com/team/app:1.0", DEFAULT_IMAGE_PATTERNS, (), knowledge)
    assert shipped is not None
    assert (shipped.version, shipped.source) == (
        V(11, 8),
        "shipped knowledge: Team app 1.0, team notes",
    )


def test_switched_off_by_config() -> None:
    config = load_config({"shippedImageKnowledge": False})
    assert container_requirement({"image": "nvcr.io/nvidia/tritonserver:24.05-py3"}, config) is None


# --- the loader refuses what must not ship ---------------------------------------------------

GOOD = """
families:
- name: Fam
  cite: notes
  repositories: [example.com/fam]
  tag: 'v(?P<release>[0-9.]+)'
  releases:
  - {release: '1.0', cuda: '12.4', source: 'https://example.com/1.0'}
"""
# GOOD whose tags may also name one architecture's image (`v1.0-aarch64`), without `arches`.
ARCH_GROUP = GOOD.replace("[0-9.]+)'", "[0-9.]+)(?:-(?P<arch>x86_64|aarch64))?'")


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        (
            GOOD.replace(", source: 'https://example.com/1.0'", ""),
            "families[0] (Fam): Value error, release 1.0 has no source (nor has the family)",
        ),
        (
            GOOD.replace("https://example.com/1.0", "see the wiki"),
            "families[0] (Fam): Value error, release 1.0: source must be an https:// link",
        ),
        (
            GOOD.replace("cuda: '12.4'", "cuda: '6.5'"),
            "families[0] (Fam): releases.0.cuda: Value error, cuda '6.5' is not a plausible",
        ),
        (
            GOOD.replace("cuda: '12.4'", "cuda: '12'"),
            "families[0] (Fam): releases.0.cuda: Value error, cuda must look like 12.4, got '12'",
        ),
        (
            GOOD.replace("cuda: '12.4'", "cuda: 12.4"),  # a YAML number: 12.10 would be 12.1
            "families[0] (Fam): releases.0.cuda: Input should be a valid string",
        ),
        (
            GOOD.replace("release: '1.0'", "release: 1.0"),
            "families[0] (Fam): releases.0.release: Input should be a valid string",
        ),
        (
            GOOD + "  - {release: '1.0', cuda: '12.6', source: 'https://example.com/b'}\n",
            "families[0] (Fam): Value error, release 1.0 is listed twice",
        ),
        (
            GOOD.replace("v(?P<release>[0-9.]+)", "v([0-9.]+)"),
            "families[0] (Fam): tag: Value error, tag must define the named group",
        ),
        (
            GOOD.replace("v(?P<release>[0-9.]+)", "v(?P<release>[0-9.+)"),
            "families[0] (Fam): tag: Value error, tag is not a valid regular expression",
        ),
        (
            GOOD.replace("[example.com/fam]", "[docker.io/fam/app]"),
            "families[0] (Fam): repositories: Value error, repository 'docker.io/fam/app' must",
        ),
        (
            GOOD.replace("cuda: '12.4',", "cuda: '12.4', cite: '',"),
            "families[0] (Fam): releases.0.cite: String should have at least 1 character",
        ),
        (
            GOOD.replace("cuda: '12.4',", ""),
            "families[0] (Fam): releases.0: Value error, release 1.0 needs cuda, arch, or both",
        ),
        (
            GOOD.replace("cuda: '12.4',", "cuda: '12.4', arch: {aarch64: '12.9'},"),
            "releases.0.arch: Value error, arch 'aarch64' is not an architecture as "
            "kubernetes.io/arch names it (386, amd64, arm, arm64, ppc64le, riscv64, s390x)",
        ),
        (
            GOOD.replace("cuda: '12.4',", "arch: {arm64: '12.10.1'},"),
            "releases.0.arch: Value error, arch arm64 must look like 12.4, got '12.10.1'",
        ),
        (
            GOOD.replace("cuda: '12.4',", "arch: {arm64: 12.9},"),
            "releases.0.arch.arm64: Input should be a valid string",
        ),
        (
            ARCH_GROUP,
            "families[0] (Fam): Value error, a tag group (?P<arch>...) and `arches` go together",
        ),
        (
            GOOD.replace("  releases:", "  arches: {aarch64: arm64}\n  releases:"),
            "families[0] (Fam): Value error, a tag group (?P<arch>...) and `arches` go together",
        ),
        (
            ARCH_GROUP.replace("  releases:", "  arches: {aarch64: aarch64}\n  releases:"),
            "families[0] (Fam): arches: Value error, arches 'aarch64': 'aarch64' is not an "
            "architecture as kubernetes.io/arch names it (386, amd64, arm, arm64, ppc64le, "
            "riscv64, s390x)",
        ),
        (GOOD.replace("families:", "family:"), "test file is invalid: families: Field required"),
        ("- a\n- b\n", "test file must be a YAML mapping with a `families` list"),
    ],
)
def test_the_loader_refuses_a_bad_entry(broken: str, message: str) -> None:
    with pytest.raises(KnowledgeError) as info:
        ImageKnowledge.from_yaml(broken, "test file")
    assert message in str(info.value)


def test_a_good_file_loads() -> None:
    known = ImageKnowledge.from_yaml(GOOD, "test file").lookup("example.com/fam", "v1.0")
    assert known is not None
    assert (known.version, known.text, known.source) == (
        V(12, 4),
        "shipped knowledge: Fam 1.0, notes",
        "https://example.com/1.0",
    )


def test_shipped_tag_patterns_have_only_bounded_repetition() -> None:
    """A tag is matched on every review of an unknown image of a known repository: the shipped
    patterns repeat nothing unboundedly (no `*`, `+`), so a match costs O(tag length)."""
    for family in shipped_knowledge().families:
        assert not re.search(r"(?<!\\)[*+]", family.tag), (family.name, family.tag)
