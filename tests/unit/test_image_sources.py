"""Shipped image knowledge read from a file at a commit keeps the lines it was read from
(docs/research/image-sources/*.txt, checked by scripts/image_sources.py): every release of an
excerpted family cites one excerpt and states its version, and the excerpt's text holds the
words that spell it. Also the Jupyter pytorch-notebook cuda11 and cuda13 images (issue 48 item
5) as `gpu-webhook images` prints them and as a reviewed pod is placed."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
import yaml

from scripts import image_sources
from tests.helpers import CONFIGMAPS, GPU, container, expr, node_terms, pod
from webhook.cli import main

REPO = "quay.io/jupyter/pytorch-notebook"


def test_every_excerpted_release_matches_its_excerpt(capsys: pytest.CaptureFixture[str]) -> None:
    assert image_sources.check() == []
    assert image_sources.main([]) == 0
    assert capsys.readouterr().out == (
        "every release of the families image-sources/ backs matches its excerpt\n"
    )


CU124 = "jupyter-pytorch-cuda12-cu124.txt"
CU124_SOURCE = (
    "https://github.com/jupyter/docker-stacks/blob/2c525aff70edc2cff2dc8f664facceb6a48a6179"
    "/images/pytorch-notebook/cuda12/Dockerfile"
)


@pytest.mark.parametrize(
    ("edited", "old", "new", "first", "count"),
    [
        (  # a release that drifts from its excerpt
            "images.yaml",
            "{release: 'cuda11', cuda: '11.8'",
            "{release: 'cuda11', cuda: '12.8'",
            "Jupyter pytorch-notebook cuda11: states CUDA 12.8, its excerpt "
            "jupyter-pytorch-cuda11.txt states 11.8",
            1,
        ),
        (  # an excerpt whose text does not hold the words it claims
            "jupyter-pytorch-cuda13.txt",
            "# evidence: whl/cu130",
            "# evidence: whl/cu131",
            "jupyter-pytorch-cuda13.txt: the text does not hold its evidence 'whl/cu131'",
            2,  # and those words spell 13.1, not the stated 13.0
        ),
        (  # releases citing a link no excerpt has (one line for each)
            CU124,
            f"# source: {CU124_SOURCE}",
            f"# source: {CU124_SOURCE}?moved",
            "Jupyter pytorch-notebook cuda12 day 2024-11-05: no excerpt has its source "
            + CU124_SOURCE,
            50 + 4 + 1,  # 50 days, 4 months, and the excerpt no release cites
        ),
    ],
)
def test_a_release_or_excerpt_that_does_not_hold_is_named(
    tmp_path: Path, edited: str, old: str, new: str, first: str, count: int
) -> None:
    sources = tmp_path / "image-sources"
    shutil.copytree(image_sources.SOURCES, sources)
    data = tmp_path / "images.yaml"
    shutil.copy(image_sources.DATA, data)
    path = data if edited == "images.yaml" else sources / edited
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new), encoding="utf-8")
    found = image_sources.check(sources, data)
    assert (found[0], len(found)) == (first, count)


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


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "# families: A\n# cuda: 11.8\n# evidence: cu118\n# source: https://x\ncu118\n",
            "no '---'",
        ),
        ("# families: A\n# cuda: 11.8\n# source: https://x\n---\ncu118\n", "no '# evidence:'"),
    ],
)
def test_an_excerpt_without_its_header_is_refused(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=f"^bad.txt: {message}"):
        image_sources.read_excerpt(path)
