"""`make docs` is strict: a broken link, a broken anchor or a page in no toctree fails the build,
with the warning naming the page. Each test builds a small copy of docs/index.md and one page,
through the Makefile's own target and docs/conf.py (DOCS_SRC/DOCS_OUT point it elsewhere)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("sphinx") is None or importlib.util.find_spec("myst_parser") is None,
    reason="Sphinx and MyST-Parser are not installed (`make install` installs the docs extra)",
)


def make_docs(src: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """`make docs` on `src`, with this interpreter's environment, never reinstalling it."""
    bin_dir = Path(sys.executable).parent
    return subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-o",
            ".venv/.installed",
            "docs",
            f"BIN={bin_dir}",
            f"DOCS_SRC={src}",
            f"DOCS_OUT={out}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def small_tree(tmp_path: Path, page: str) -> Path:
    """docs/index.md and one concepts page with `page` as its text."""
    src = tmp_path / "src"
    (src / "concepts").mkdir(parents=True)
    shutil.copy(ROOT / "docs" / "index.md", src / "index.md")
    (src / "concepts" / "one.md").write_text(page, encoding="utf-8")
    return src


def test_a_good_page_builds(tmp_path: Path) -> None:
    src = small_tree(
        tmp_path,
        "# One\n\nSee [the CLI](../reference/cli.md#gpu-webhook-review) and [below](#two).\n\n"
        "## Two\n\nText.\n",
    )
    result = make_docs(src, tmp_path / "out")
    assert result.returncode == 0, result.stdout + result.stderr
    html = (tmp_path / "out" / "concepts" / "one.html").read_text(encoding="utf-8")
    assert 'href="../reference/cli.html#gpu-webhook-review"' in html
    # The generated reference pages were written into the tree being built.
    assert (src / "reference" / "config.md").is_file()


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    src = small_tree(tmp_path, "# One\n\nSee [the missing page](missing.md).\n")
    result = make_docs(src, tmp_path / "out")
    assert result.returncode != 0
    assert (
        "concepts/one.md:3: WARNING: 'myst' cross-reference target not found: 'missing.md'"
        in result.stderr
    )


def test_a_broken_anchor_fails_the_build(tmp_path: Path) -> None:
    src = small_tree(tmp_path, "# One\n\nSee [the CLI](../reference/cli.md#no-such-command).\n")
    result = make_docs(src, tmp_path / "out")
    assert result.returncode != 0
    assert (
        "concepts/one.md:3: WARNING: local id not found in doc 'reference/cli': 'no-such-command'"
        in result.stderr
    )


def test_a_page_in_no_toctree_fails_the_build(tmp_path: Path) -> None:
    src = small_tree(tmp_path, "# One\n")
    (src / "elsewhere").mkdir()
    (src / "elsewhere" / "lost.md").write_text("# Lost\n", encoding="utf-8")
    result = make_docs(src, tmp_path / "out")
    assert result.returncode != 0
    assert "elsewhere/lost.md: WARNING: document isn't included in any toctree" in result.stderr
