"""Every page reads on the forge without a build: the generated pages are committed and current,
the shipped-policies table lists every ConfigMap, and every relative link of the README and of
docs/ names a file the repository holds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from scripts.docs_reference import generated, stale
from scripts.docs_reference.policies import BEGIN, END, policies_table, with_table

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

# An inline link or image `[text](target "title")`, and a reference definition `[name]: target`.
INLINE = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s|$)", re.MULTILINE)
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
CODE_SPAN = re.compile(r"(`+).*?\1")


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def prose(text: str) -> str:
    """`text` without its fenced code blocks and inline code spans (links there are examples)."""
    kept, fence = [], ""
    for line in text.splitlines():
        match = FENCE.match(line)
        if match and (not fence or match.group(1) == fence):
            fence = "" if fence else match.group(1)
            continue
        kept.append("" if fence else CODE_SPAN.sub("", line))
    return "\n".join(kept)


def relative_links(text: str) -> list[str]:
    """The link targets of `text` that point into the repository (no scheme, no bare anchor)."""
    body = prose(text)
    targets = INLINE.findall(body) + DEFINITION.findall(body)
    return [
        t
        for t in targets
        if not re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", t) and not t.startswith(("#", "//"))
    ]


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """The relative links of `path` whose file is not in `root` (the repository)."""
    broken = []
    for target in relative_links(path.read_text(encoding="utf-8")):
        file = target.split("#", 1)[0].split("?", 1)[0]
        resolved = (path.parent / file).resolve()
        if not resolved.exists() or not resolved.is_relative_to(root):
            broken.append(target)
    return broken


def test_the_committed_generated_pages_are_current() -> None:
    old = [str(p.relative_to(ROOT)) for p in stale(DOCS)]
    assert old == [], f"stale generated pages: {old}; run `make reference` and commit them"


def test_a_changed_source_makes_a_committed_page_stale(tmp_path: Path) -> None:
    """The comparison sees a difference: a tree whose copy lacks the newest table row is stale."""
    docs = tmp_path / "docs"
    for path, text in generated(DOCS).items():
        copy = docs / path.relative_to(DOCS)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(text, encoding="utf-8")
    assert stale(docs) == []
    page = docs / "concepts" / "policies.md"
    page.write_text(
        page.read_text(encoding="utf-8").replace("| `cf-crl-nvidia-gpu` |", "| `cf-crl-x` |"),
        encoding="utf-8",
    )
    (docs / "reference" / "cli.md").write_text("# old\n", encoding="utf-8")
    assert stale(docs) == [docs / "reference" / "cli.md", page]


def test_the_shipped_policies_table_lists_every_configmap() -> None:
    page = (DOCS / "concepts" / "policies.md").read_text(encoding="utf-8")
    table = page[page.index(BEGIN) : page.index(END)]
    listed = re.findall(r"^\| `([^`]+)` \| `([^`]+)` \|", table, flags=re.MULTILINE)
    shipped = []
    for path in sorted((ROOT / "configmaps").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        shipped.append((doc["metadata"]["name"], doc["data"]["key"]))
    assert len(shipped) >= 36
    assert listed == shipped


def test_the_policies_table_shows_each_rule(tmp_path: Path) -> None:
    (tmp_path / "one.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cf-crl-one}\n"
        "data: {key: example.com/one, group: one, limits: required, requests: fromLimits,"
        " defaultValue: '2', min: '1', max: '8', wholeUnit: '4', descriptionEn: 'One | two'}\n",
        encoding="utf-8",
    )
    table = policies_table(tmp_path)
    assert (
        "| `cf-crl-one` | `example.com/one` | one | default 2, limits required, requests "
        "fromLimits, min 1, max 8, wholeUnit 4 | One \\| two |"
    ) in table.splitlines()
    page = f"# P\n\nBefore.\n\n{BEGIN}\nold rows\n{END}\n\nAfter.\n"
    assert with_table(page, table) == f"# P\n\nBefore.\n\n{table}\n\nAfter.\n"
    with pytest.raises(ValueError, match="markers are missing"):
        with_table("# P\n", table)


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_names_a_file_of_the_repository(path: Path) -> None:
    assert broken_links(path) == []


def test_the_link_walk_finds_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# There\n", encoding="utf-8")
    page.write_text(
        "[ok](there.md#a) [gone](gone.md) ![img](img/none.png) [web](https://example.com)\n"
        "[anchor](#local) `[code](code.md)`\n\n```\n[fenced](fenced.md)\n```\n\n"
        "[ref]: missing/ref.md\n",
        encoding="utf-8",
    )
    assert broken_links(page, tmp_path) == ["gone.md", "img/none.png", "missing/ref.md"]
