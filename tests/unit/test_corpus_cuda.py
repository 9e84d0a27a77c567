"""bench/corpus_cuda.py on the real-manifest corpus: every container it decides is decided
right (each expected version checked against the image's source), and it skips cleanly when
the corpus is absent."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from bench.corpus_cuda import main, measure, summary
from tests.helpers import CORPUS

MANIFESTS = CORPUS / "manifests"

# image -> CUDA version, each read at its source.
EXPECTED = {
    # NVIDIA Triton release notes, 24.06 and 22.01 (the SDK image is built on 24.06-py3-min)
    "nvcr.io/nvidia/tritonserver:24.06-py3-sdk": "12.5",
    "nvcr.io/nvidia/tritonserver:22.01-py3": "11.6",
    # triton-inference-server/server docs/introduction/compatibility.md: 12.8.0.038
    "nvcr.io/nvidia/tritonserver:25.01-trtllm-python-py3": "12.8",
    # text-generation-inference v2.0.4 Dockerfile: nvidia/cuda:12.1.0 base, pytorch-cuda=12.1
    "ghcr.io/huggingface/text-generation-inference:2.0.4": "12.1",
    # spelled in the tag
    "nvidia/cuda:11.6.2-cudnn8-runtime-ubuntu20.04": "11.6",
    "nvidia/cuda:11.8.0-base-ubuntu22.04": "11.8",
    "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04": "12.5",
    "nvcr.io/nvidia/k8s/cuda-sample:nbody-cuda11.7.1-ubuntu18.04": "11.7",
    "registry.baidubce.com/paddlepaddle/paddle:2.4.0rc0-gpu-cuda11.2-cudnn8.1-trt8.0": "11.2",
    "hiyouga/verl:ngc-th2.6.0-cu126-vllm0.8.4-flashinfer0.2.2-cxx11abi0": "12.6",
    # vLLM's release pipeline built v0.8.5's image with CUDA_VERSION=12.4.0 (vllm PR 16859)
    "vllm/vllm-openai:v0.8.5": "12.4",
    # v0.11.0's x86 image was built with CUDA_VERSION=12.8.1 (its arm64 one with 12.9.1); the
    # manifest pins no architecture, so linux/amd64's
    "vllm/vllm-openai:v0.11.0": "12.8",
}


@pytest.mark.skipif(not MANIFESTS.is_dir(), reason=f"corpus not found at {CORPUS}")
def test_every_container_decided_on_the_corpus_is_decided_right() -> None:
    rows = measure(MANIFESTS)
    decided = {r.image: r.version for r in rows if r.version}
    assert decided == EXPECTED
    result = summary(rows)
    assert result["decided"] == 13  # two containers run vllm/vllm-openai:v0.8.5
    assert result["bySource"] == {"reference": 6, "shipped": 7}


def test_skips_cleanly_without_the_corpus(tmp_path: Path) -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["--corpus", str(tmp_path / "absent")])
    assert code == 0
    assert out.getvalue() == f"corpus not found at {tmp_path / 'absent'}: skipped\n"
