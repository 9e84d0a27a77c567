"""docs/development/layout.md names every family of the evaluation core and every module in it,
so the page cannot drift from the tree (a module added, moved or removed fails here)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "webhook" / "core"
PAGE = ROOT / "docs" / "development" / "layout.md"
ROW = re.compile(r"^\| `webhook/core/(\w+)` \| [^|]+ \| (.+) \|$")


def _documented() -> dict[str, set[str]]:
    rows = (ROW.match(line) for line in PAGE.read_text(encoding="utf-8").splitlines())
    return {m.group(1): set(re.findall(r"`(\w+)`", m.group(2))) for m in rows if m}


def _tree() -> dict[str, set[str]]:
    return {
        package.name: {m.stem for m in package.glob("*.py") if m.name != "__init__.py"}
        for package in sorted(CORE.iterdir())
        if (package / "__init__.py").is_file()
    }


def test_every_core_family_and_module_is_on_the_layout_page() -> None:
    assert _documented() == _tree()


def test_the_core_has_no_module_outside_a_family() -> None:
    assert sorted(p.name for p in CORE.glob("*.py")) == ["__init__.py"]
