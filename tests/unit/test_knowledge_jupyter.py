"""The shipped knowledge of Jupyter's pytorch-notebook cuda12 images: a date tag gets the CUDA
of the PyTorch wheel index its Dockerfile used on main that day (webhook/data/images.yaml), a
day on which that index changed and every tag that is no build date get nothing."""

from __future__ import annotations

import pytest

from webhook.core.base.versions import CudaVersion
from webhook.core.config.model import WebhookConfig
from webhook.core.placement.cuda import container_requirement

V = CudaVersion
REPO = "quay.io/jupyter/pytorch-notebook"


@pytest.mark.parametrize(
    ("tag", "version", "source"),
    [
        ("cuda12-2024-02-26", V(12, 1), "Jupyter pytorch-notebook cuda12 month 2024-02"),
        ("cuda12-2024-10-31", V(12, 1), "Jupyter pytorch-notebook cuda12 month 2024-10"),
        ("cuda12-2024-11-03", V(12, 1), "Jupyter pytorch-notebook cuda12 day 2024-11-03"),
        ("cuda12-2024-11-05", V(12, 4), "Jupyter pytorch-notebook cuda12 day 2024-11-05"),
        ("x86_64-cuda12-2025-02-10", V(12, 4), "Jupyter pytorch-notebook cuda12 month 2025-02"),
        ("cuda12-2025-04-24", V(12, 4), "Jupyter pytorch-notebook cuda12 day 2025-04-24"),
        ("cuda12-2025-04-27", V(12, 8), "Jupyter pytorch-notebook cuda12 day 2025-04-27"),
        ("cuda12-2026-07-20", V(12, 8), "Jupyter pytorch-notebook cuda12 month 2026-07"),
        ("cuda12-2026-08-07", V(12, 8), "Jupyter pytorch-notebook cuda12 day 2026-08-07"),
    ],
)
def test_a_date_tag_gets_its_window_version(tag: str, version: CudaVersion, source: str) -> None:
    req = container_requirement({"image": f"{REPO}:{tag}"}, WebhookConfig())
    assert req is not None
    assert req.version == version
    if source:
        assert req.source.startswith(f"shipped knowledge: {source}, its Dockerfile on main that")


@pytest.mark.parametrize(
    "tag",
    [
        "cuda12-2024-11-04",  # cu121 -> cu124 at 16:57 UTC that day
        "cuda12-2025-04-25",  # cu124 -> cu126
        "cuda12-2025-04-26",  # cu126 -> cu128
        "cuda12-2026-08-08",  # after the newest commit read
        "cuda12-2024-01-15",  # before the variant existed
        "cuda12-latest",
        "cuda12-pytorch-2.5.1",  # built in two windows
        "cuda12-python-3.11",
        "cuda13-2025-05-05",  # another variant
        "2025-05-05",  # the CPU image
    ],
)
def test_other_tags_are_not_known(tag: str) -> None:
    assert container_requirement({"image": f"{REPO}:{tag}"}, WebhookConfig()) is None
