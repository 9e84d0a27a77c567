"""Sphinx configuration of the documentation site (`make docs`; docs/development/docs.md).

Markdown pages through MyST-Parser, the Furo theme. Nothing here reaches the network: no
intersphinx, no linkcheck, no remote images, so the strict build runs offline inside `make test`.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.util import logging as sphinx_logging

ROOT = Path(__file__).resolve().parent.parent
# The reference generator (scripts/docs_reference/) imports the project and its scripts.
sys.path.insert(0, str(ROOT))

from scripts.docs_reference import stale, write_references  # noqa: E402

project = "gpu-admission-webhook"
author = "the gpu-admission-webhook authors"
copyright = "the gpu-admission-webhook authors, Apache-2.0"

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# `#section` links within and across pages resolve to headings down to level 3 (GitHub's slugs).
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

html_theme = "furo"
html_title = "gpu-admission-webhook"
html_static_path: list[str] = []
# Furo's "edit this page" and view-source links would point at a host: none.
html_show_sourcelink = False


class _TolerateEmptyGlob(logging.Filter):
    """The toctrees of index.md read each folder through a glob, so a folder with no page yet
    (or a page that has moved away) is tolerated: its "didn't match any documents" warning is
    dropped. Every other warning (a broken link, a missing page, a page in no toctree) fails
    the strict build. (`suppress_warnings` cannot name it: Sphinx logs it with a subtype,
    `empty_glob`, but no type, sphinx/directives/other.py.)"""

    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, "subtype", None) != "empty_glob"


def _check_references(app: Sphinx) -> None:
    """The generated pages (scripts/docs_reference/: the CLI from its argparse parsers, the
    config from its pydantic model, the chart's values from values.schema.json and values.yaml,
    the shipped-policies table from configmaps/) are committed in docs/. The build of docs/
    never rewrites them: a stale one is a warning naming `make reference`, which fails the
    strict build. Another tree (tests/docs builds small ones) without a reference/ folder gets
    the pages written into it."""
    src = Path(app.srcdir).resolve()
    if src == ROOT / "docs":
        old = stale(src)
        if old:
            names = ", ".join(str(p.relative_to(ROOT)) for p in old)
            # A warning, so the strict build (-W) fails, naming the pages and the fix.
            sphinx_logging.getLogger(__name__).warning(
                "stale generated pages: %s; run `make reference` and commit them", names
            )
    elif not (src / "reference").exists():
        write_references(src / "reference")


def setup(app: Sphinx) -> None:
    for handler in logging.getLogger("sphinx").handlers:
        handler.filters.insert(0, _TolerateEmptyGlob())
    app.connect("builder-inited", _check_references)
