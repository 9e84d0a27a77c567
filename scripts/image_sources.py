#!/usr/bin/env python3
"""Check the shipped image knowledge against the excerpts it was read from.

Releases of webhook/data/images.yaml whose source was read as a file at a commit keep the lines
they were read from in docs/research/image-sources/*.txt: a header of `# key: value` lines, then
`---` and the source's text, verbatim. The header names

    families: the images.yaml families the excerpt backs (comma-separated)
    cuda:     the version it states (major.minor)
    evidence: the words of the text that state it (`whl/cu118`, `CUDA_VERSION=12.4.0`)
    source:   the link the releases cite

Every release of a named family must cite the source of one of its excerpts and state that
excerpt's version; the text must hold the evidence, and the evidence spell the version. So a
release cannot drift from the text it was read from:

    scripts/image_sources.py            # print each problem, exit 1 when there is one
    scripts/image_sources.py --sources DIR --data FILE

tests/unit/test_image_sources.py runs the same check.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "docs" / "research" / "image-sources"
DATA = ROOT / "webhook" / "data" / "images.yaml"
_KEYS = ("families", "cuda", "evidence", "source")
_HEADER = re.compile(r"^# ([a-z]+): *(.*?) *$", re.M)
# How a text spells a CUDA version: a wheel index or tag (cu118, cu130: the last digit is the
# minor), or a dotted version (12.4.0, cuda>=12.4).
_WHEEL = re.compile(r"cu([0-9]{2})([0-9])(?![0-9])")
_DOTTED = re.compile(r"(?<![0-9.])([0-9]{1,2})\.([0-9]{1,2})(?:\.[0-9]+)?(?![0-9])")


@dataclass(frozen=True)
class Excerpt:
    name: str
    families: tuple[str, ...]
    cuda: str
    evidence: str
    source: str
    text: str


def read_excerpt(path: Path) -> Excerpt:
    """One excerpt file: its `# key: value` header, `---`, then the source's text."""
    head, sep, text = path.read_text(encoding="utf-8").partition("\n---\n")
    meta = dict(_HEADER.findall(head)[::-1])  # the first line of a key wins
    missing = [key for key in _KEYS if not meta.get(key)]
    if not sep or missing:
        what = "no '---' line after the header" if not sep else f"no '# {missing[0]}:' line"
        raise ValueError(f"{path.name}: {what}")
    families = tuple(name.strip() for name in meta["families"].split(",") if name.strip())
    return Excerpt(path.name, families, meta["cuda"], meta["evidence"], meta["source"], text)


def spelled_version(evidence: str) -> str | None:
    """The major.minor version the evidence spells, or None when it spells none."""
    found = _WHEEL.search(evidence) or _DOTTED.search(evidence)
    return None if found is None else f"{int(found.group(1))}.{int(found.group(2))}"


def problems(excerpts: list[Excerpt], data: dict[str, Any]) -> list[str]:
    """What does not hold, one sentence each; empty when every release matches its excerpt."""
    out: list[str] = []
    families = {str(f["name"]): f for f in data.get("families", []) if isinstance(f, dict)}
    backing: dict[str, list[Excerpt]] = {}
    for excerpt in excerpts:
        if excerpt.evidence not in excerpt.text:
            out.append(f"{excerpt.name}: the text does not hold its evidence {excerpt.evidence!r}")
        spelled = spelled_version(excerpt.evidence)
        if spelled != excerpt.cuda:
            out.append(
                f"{excerpt.name}: the evidence {excerpt.evidence!r} spells {spelled}, "
                f"not the stated cuda {excerpt.cuda}"
            )
        for name in excerpt.families:
            if name not in families:
                out.append(f"{excerpt.name}: images.yaml has no family {name!r}")
            backing.setdefault(name, []).append(excerpt)
    used: set[str] = set()
    for name, candidates in backing.items():
        family = families.get(name)
        if family is None:
            continue
        by_source = {e.source: e for e in candidates}
        for entry in family.get("releases", []):
            release = str(entry["release"])
            source = str(entry.get("source") or family.get("source") or "")
            source = source.replace("{release}", release)
            cited = by_source.get(source)
            if cited is None:
                out.append(f"{name} {release}: no excerpt has its source {source}")
                continue
            used.add(cited.name)
            stated = [entry.get("cuda"), *(entry.get("arch") or {}).values()]
            for version in stated:
                if version is not None and str(version) != cited.cuda:
                    out.append(
                        f"{name} {release}: states CUDA {version}, its excerpt "
                        f"{cited.name} states {cited.cuda}"
                    )
    for excerpt in excerpts:
        if excerpt.name not in used and all(n in families for n in excerpt.families):
            out.append(f"{excerpt.name}: no release of {', '.join(excerpt.families)} cites it")
    return out


def check(sources: Path = SOURCES, data: Path = DATA) -> list[str]:
    """The problems of the excerpts in `sources` against the knowledge file `data`."""
    excerpts = [read_excerpt(path) for path in sorted(sources.glob("*.txt"))]
    return problems(excerpts, yaml.safe_load(data.read_text(encoding="utf-8")))


def main(argv: list[str] | None = None) -> int:
    options = argparse.ArgumentParser(description="the shipped image knowledge vs its excerpts")
    options.add_argument("--sources", type=Path, default=SOURCES, help="the excerpts")
    options.add_argument("--data", type=Path, default=DATA, help="the knowledge file")
    args = options.parse_args(argv)
    found = check(args.sources, args.data)
    ok = f"every release of the families {args.sources.name}/ backs matches its excerpt\n"
    sys.stdout.write("".join(f"{line}\n" for line in found) or ok)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
