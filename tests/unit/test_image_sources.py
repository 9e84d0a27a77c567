"""Shipped image knowledge read from a file at a commit keeps the lines it was read from
(docs/research/image-sources/*.txt, checked by scripts/image_sources.py): every release of an
excerpted family cites one excerpt and states its version, and the excerpt's text holds the
words that spell it. Also the Jupyter pytorch-notebook cuda11 and cuda13 images (issue 48 item
5) as `gpu-webhook images` prints them and as a reviewed pod is placed."""

from __future__ import annotations

import importlib.util
import io
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.helpers import CONFIGMAPS, GPU, container, expr, node_terms, pod
from webhook.cli import main

ROOT = Path(__file__).resolve().parents[2]
REPO = "quay.io/jupyter/pytorch-notebook"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "image_sources", ROOT / "scripts/image_sources.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["image_sources"] = module
    spec.loader.exec_module(module)
    return module


image_sources = _script()


def _copy(tmp_path: Path) -> tuple[Path, Path]:
    sources = tmp_path / "image-sources"
    shutil.copytree(image_sources.SOURCES, sources)
    data = tmp_path / "images.yaml"
    shutil.copy(image_sources.DATA, data)
    return sources, data


def _check(sources: Path, data: Path) -> tuple[int, str]:
    return _capture(lambda: image_sources.main(["--sources", str(sources), "--data", str(data)]))


def _capture(run: Any) -> tuple[int, str]:
    saved = sys.stdout
    sys.stdout = buffer = io.StringIO()
    try:
        code = run()
    finally:
        sys.stdout = saved
    return code, buffer.getvalue()


def test_every_excerpted_release_matches_its_excerpt() -> None:
    code, text = _capture(lambda: image_sources.main([]))
    assert (code, text) == (0, "5 excerpts, every release of their families matches\n")


def test_a_release_that_drifts_from_its_excerpt_is_named(tmp_path: Path) -> None:
    sources, data = _copy(tmp_path)
    text = data.read_text(encoding="utf-8")
    data.write_text(
        text.replace("{release: 'cuda11', cuda: '11.8'", "{release: 'cuda11', cuda: '12.8'"),
        encoding="utf-8",
    )
    code, out = _check(sources, data)
    assert code == 1
    assert out == (
        "Jupyter pytorch-notebook cuda11: states CUDA 12.8, its excerpt "
        "jupyter-pytorch-cuda11.txt states 11.8\n"
    )


def test_an_excerpt_whose_text_does_not_spell_its_version_is_named(tmp_path: Path) -> None:
    sources, data = _copy(tmp_path)
    excerpt = sources / "jupyter-pytorch-cuda13.txt"
    excerpt.write_text(
        excerpt.read_text(encoding="utf-8").replace(
            "# evidence: whl/cu130", "# evidence: whl/cu131"
        ),
        encoding="utf-8",
    )
    code, out = _check(sources, data)
    assert code == 1
    assert out == (
        "jupyter-pytorch-cuda13.txt: the text does not hold its evidence 'whl/cu131'\n"
        "jupyter-pytorch-cuda13.txt: the evidence 'whl/cu131' spells 13.1, not the stated "
        "cuda 13.0\n"
    )


def test_a_release_citing_a_source_no_excerpt_has_is_named(tmp_path: Path) -> None:
    sources, data = _copy(tmp_path)
    (sources / "jupyter-pytorch-cuda12-cu124.txt").unlink()
    code, out = _check(sources, data)
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == (
        "Jupyter pytorch-notebook cuda12 day 2024-11-05: no excerpt has its source "
        "https://github.com/jupyter/docker-stacks/blob/2c525aff70edc2cff2dc8f664facceb6a48a6179"
        "/images/pytorch-notebook/cuda12/Dockerfile"
    )
    assert all("no excerpt has its source" in line for line in lines)


@pytest.mark.parametrize(
    ("evidence", "version"),
    [
        ("whl/cu118", "11.8"),
        ("whl/cu130", "13.0"),
        ("CUDA_VERSION=12.4.0", "12.4"),
        ("cuda>=12.1", "12.1"),
        ("torch", None),
    ],
)
def test_the_evidence_spells_a_version(evidence: str, version: str | None) -> None:
    assert image_sources.spelled_version(evidence) == version


# --- what a user sees --------------------------------------------------------------------------

CUDA11 = "CUDA 11.8 from the shipped knowledge (Jupyter pytorch-notebook cuda11, its Dockerfile "
CUDA11 += "in every build)\n  GPUs with compute capability ≥ 3.5 (architecture floor of CUDA 11.8)"
FLOOR_13 = "  GPUs with compute capability ≥ 7.5 (architecture floor of CUDA 13.0)"


@pytest.mark.parametrize(
    ("tag", "arch", "text"),
    [
        ("cuda11-latest", "amd64", CUDA11),
        ("cuda11-2024-05-06", "amd64", CUDA11),
        ("x86_64-cuda11-pytorch-2.5.1", "amd64", CUDA11),
        ("cuda11-python-3.11", "amd64", CUDA11),
        (
            "cuda13-2025-12-31",
            "amd64",
            "CUDA 13.0 from the shipped knowledge (Jupyter pytorch-notebook cuda13 day "
            "2025-12-31, its Dockerfile on main that day)\n" + FLOOR_13,
        ),
        (
            "aarch64-cuda13-2026-03-02",
            "arm64",
            "CUDA 13.0 from the shipped knowledge (Jupyter pytorch-notebook cuda13 month "
            "2026-03, its Dockerfile on main that month)\n" + FLOOR_13,
        ),
        (
            "cuda13-2026-08-07",
            "arm64",
            "CUDA 13.0 from the shipped knowledge (Jupyter pytorch-notebook cuda13 day "
            "2026-08-07, its Dockerfile on main that day)\n" + FLOOR_13,
        ),
        (
            "aarch64-cuda12-2026-02-02",
            "arm64",
            "CUDA 12.8 from the shipped knowledge (Jupyter pytorch-notebook cuda12 month "
            "2026-02, its Dockerfile on main that month)\n"
            "  GPUs with compute capability ≥ 5.0 (architecture floor of CUDA 12.8)",
        ),
    ],
)
def test_the_images_command_prints_the_jupyter_cuda_variants(
    tag: str, arch: str, text: str
) -> None:
    out = io.StringIO()
    code = main(["images", f"{REPO}:{tag}", "--no-lookup", "--arch", arch], out=out)
    assert (code, out.getvalue()) == (0, f"{REPO}:{tag}: {text}\n")


@pytest.mark.parametrize(
    "tag",
    [
        "cuda13-latest",  # moves with every build: a later index change would move it
        "cuda13-pytorch-2.9.1",
        "cuda13-2026-08-08",  # after the newest commit read
        "aarch64-cuda11-latest",  # cuda11 was never built for aarch64
        "cuda11",  # no such tag: the variant's tags all carry a suffix
    ],
)
def test_jupyter_tags_no_source_covers_stay_unknown(tag: str) -> None:
    out = io.StringIO()
    code = main(["images", f"{REPO}:{tag}", "--no-lookup"], out=out)
    assert (code, out.getvalue()) == (1, f"{REPO}:{tag}: CUDA unknown (nothing offline names it)\n")


def test_a_reviewed_cuda11_notebook_pod_is_placed_on_cuda_11_8_nodes(tmp_path: Path) -> None:
    manifest = tmp_path / "notebook.yaml"
    image = f"{REPO}:cuda11-latest"
    the_pod = pod(container("notebook", image, limits={GPU: "1"}, requests={GPU: "1"}))
    manifest.write_text(yaml.safe_dump(the_pod, sort_keys=False), encoding="utf-8")
    out = io.StringIO()
    code = main(
        ["review", "-f", str(manifest), "--policies", str(CONFIGMAPS), "-o", "json"], out=out
    )
    assert code == 0
    [review] = json.loads(out.getvalue())
    assert review["verdict"] == "allowed"
    assert review["warnings"] == []
    assert review["changes"][0] == (
        "required GPU nodes with CUDA ≥ 11.8 (shipped knowledge: Jupyter pytorch-notebook "
        "cuda11, its Dockerfile in every build)"
    )
    assert node_terms(review["mutated"]) == [
        {
            "matchExpressions": [
                expr("cuda-major-version", "Gt", 10),
                expr("cuda-major-version", "Lt", 12),
                expr("cuda-minor-version", "Gt", 7),
            ]
        },
        {"matchExpressions": [expr("cuda-major-version", "Gt", 11)]},
    ]
