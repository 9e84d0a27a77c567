#!/usr/bin/env python3
"""The vendor tables derived from their excerpts, and the diff against the shipped data.

Every row of webhook/data/accelerators.yaml is read from a vendor's document; the part of the
document it is read from is kept in docs/research/vendor-sources/*.txt (a header of `# key:
value` lines naming the source, its URL, commit or date, then `---` and the vendor's text).
This script parses the excerpts into rows and compares them with the shipped file:

    scripts/vendor_tables.py            # print the difference, exit 1 when there is one
    scripts/vendor_tables.py --sources DIR --data FILE

To take a vendor's newer table: replace the excerpt's text (and its header's commit/date) with
the new one, run this script, and edit accelerators.yaml by the lines it prints (`+` a row the
excerpt has and the data lacks, `-` a data row no excerpt states, `~` a row whose values
differ, `!` a pairing the data does not run). tests/unit/test_vendor_sources.py runs the same
comparison, so a row can never drift from its excerpt.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from webhook.core.placement.vendors import Vendor, covers, load_vendors, version_key

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "docs" / "research" / "vendor-sources"
DATA = ROOT / "webhook" / "data" / "accelerators.yaml"

# Rows shipped from sources not kept as excerpts (read in earlier rounds, their source cited on
# the row): (vendor, table, key). Each one says why it is not derived.
CARRIED: dict[tuple[str, str, str], str] = {
    ("cann", "releases", "25.5.1"): "the 9.0.0-beta.x, 8.5.0 and 8.5.0-beta.1 release notes",
    ("cann", "releases", "25.5.0"): "the 8.5.0 release notes (HDK 25.5.0)",
    ("cann", "releases", "25.3.rc1"): "hiascend.com's CANN 8.3.RC1 download page",
    ("cann", "releases", "25.2.0"): "the CANN 8.2.RC1 release note on hiascend.com",
    ("cann", "devices", "910b1"): "vllm-ascend setup.py soc_to_device (an older version)",
    ("cann", "devices", "910b2"): "vllm-ascend setup.py soc_to_device (an older version)",
    ("cann", "devices", "910b2c"): "vllm-ascend setup.py soc_to_device (an older version)",
    ("cann", "devices", "910b3"): "vllm-ascend setup.py soc_to_device (an older version)",
    ("cann", "devices", "910b4"): "vllm-ascend setup.py soc_to_device (an older version)",
    ("cann", "devices", "card-910b-2"): "mind-cluster Card910bx2AcceleratorType (an older version)",
    **{
        ("rocm", "devices", pci): "amdgpu.ids (amd-device-ids.txt) names the product; its gfx "
        "target is from rocm.docs.amd.com gpu-specs.html, not in the stored corpora"
        for pci in ("738c", "7408", "740c", "740f", "74a0", "74a1", "74a5", "74a9", "75a0", "75a3")
    },
}


@dataclass
class Derived:
    """Rows read from the excerpts, keyed as the data keys them (version_key, lower case)."""

    # (vendor, release) -> runtimes; rows every device runs.
    releases: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    # (vendor, release, runtime) -> devices: the runtime holds on those devices only.
    qualified: dict[tuple[str, str, str], tuple[str, ...]] = field(default_factory=dict)
    # (vendor, HDK, CANN) pairs a release note lists: the data must run them (any row).
    pairs: set[tuple[str, str, str]] = field(default_factory=set)
    # (vendor, HDK, CANN, devices): pairs a note states for those devices only (the Ascend 950
    # HDKs); the data must run them there (a row for every device, or one for these).
    device_pairs: set[tuple[str, str, str, tuple[str, ...]]] = field(default_factory=set)
    # (vendor, kernel module) -> release.
    modules: dict[tuple[str, str], str] = field(default_factory=dict)
    # (vendor, label value without an "ascend" prefix, lower case) -> device.
    devices: dict[tuple[str, str], str] = field(default_factory=dict)
    # (vendor, text) -> device: every label value holding the text is that device (vllm-ascend:
    # any SoC name holding "ascend950" is an Ascend 950).
    device_rules: dict[tuple[str, str], str] = field(default_factory=dict)
    # (vendor, image release) -> runtime version.
    images: dict[tuple[str, str], str] = field(default_factory=dict)
    # Which excerpt each row came from (for the messages).
    origin: dict[tuple[str, ...], str] = field(default_factory=dict)


def read_excerpt(path: Path) -> tuple[dict[str, str], str]:
    """(header fields, the vendor's text) of one excerpt file."""
    head, sep, body = path.read_text(encoding="utf-8").partition("\n---\n")
    if not sep:
        raise ValueError(f"{path}: no '---' line between the header and the excerpt")
    meta: dict[str, str] = {}
    for line in head.splitlines():
        key, colon, value = line.removeprefix("# ").partition(":")
        if colon:
            meta[key.strip()] = value.strip()
    for key in ("vendor", "table", "source"):
        if key not in meta:
            raise ValueError(f"{path}: the header has no '# {key}:' line")
    return meta, body


def _runtime(cell: str) -> str:
    """'7.0.x' -> '7.0', '10.0.0' -> '10.0.0', '9.0.X' -> '9.0' (a column of patch releases)."""
    cell = cell.strip()
    return version_key(cell[:-2] if cell.lower().endswith(".x") else cell)


def _amd_matrix(derived: Derived, name: str, body: str) -> None:
    for release, runtimes in re.findall(r'^\s*"(\d+\.\d+)\.x",\s*"([^"]+)"', body, re.M):
        key = ("rocm", version_key(release))
        derived.releases[key] = tuple(_runtime(r) for r in runtimes.split(","))
        derived.origin[("releases", *key)] = name


def _amd_narrowing(derived: Derived, name: str, body: str) -> None:
    for release, runtime, devices in re.findall(r"^narrow: (\S+) (\S+) (.+)$", body, re.M):
        key = ("rocm", version_key(release))
        derived.releases[key] = tuple(r for r in derived.releases.get(key, ()) if r != runtime)
        derived.qualified[(*key, version_key(runtime))] = tuple(devices.split())
        derived.origin[("qualified", *key, runtime)] = name


def _amd_modules(derived: Derived, name: str, body: str) -> None:
    found: list[tuple[str, str]] = []
    found += re.findall(r"amdgpu driver `(\d[\d.]*)` \(packaged release `(\d[\d.]*)`\)", body)
    found += [
        (m, r) for r, m in re.findall(r"^\|\s*(\d+\.\d+)\.x\s*\|\s*(\d[\d.]*)\s*\|", body, re.M)
    ]
    # An AMD engineer's issue in ROCm/rocm-install-on-linux: "the release version (30.20.1) VS
    # the actual amdgpu version (6.16.6)".
    found += [
        (m, r)
        for r, m in re.findall(
            r"release version \((\d[\d.]*)\) VS the actual amdgpu version \((\d[\d.]*)\)", body
        )
    ]
    for section in body.split("\n== ")[1:]:
        named = re.search(r"^release: (\S+)$", section, re.M)
        dkms = re.search(r"amdgpu/(\d+\.\d+\.\d+)-", section)
        if named and dkms:
            found.append((dkms[1], named[1]))
    for module, release in found:
        derived.modules[("rocm", version_key(module))] = version_key(release)
        derived.origin[("modules", "rocm", module)] = name


def _hdk_columns(cell: str) -> list[str]:
    """'26.0.RC1/25.7.RC1' -> ['26.0.rc1', '25.7.rc1']; '25.5.X' -> ['25.5']."""
    return [_runtime(part) for part in cell.split("/")]


def _cann_grid(derived: Derived, name: str, body: str) -> None:
    lines = [[c.strip() for c in line.split("|")] for line in body.splitlines() if "|" in line]
    header, rows = lines[0], lines[1:]
    for column, cell in enumerate(header[1:], start=1):
        runtimes = tuple(_runtime(row[0]) for row in rows if row[column] == "Y")
        for release in _hdk_columns(cell):
            key = ("cann", release)
            derived.releases[key] = tuple(
                dict.fromkeys((*runtimes, *derived.releases.get(key, ())))
            )
            derived.origin[("releases", *key)] = name


def _cann_pairing(derived: Derived, name: str, body: str) -> None:
    for cann, hdks in re.findall(r"^\|\s*CANN (\S+)\s*\|(.*)\|\s*$", body, re.M):
        for hdk in re.findall(r"Ascend HDK (\S+)", hdks):
            derived.pairs.add(("cann", version_key(hdk), version_key(cann)))
            derived.origin[("pairs", "cann", version_key(hdk))] = name


def _mind_cluster_pairing(derived: Derived, name: str, body: str) -> None:
    """MindCluster's release notes: the HDK each product runs with the CANN of that release
    (表 1), and which HDKs are the Ascend 950 series' (表 3): those pairs hold on 950 only."""
    header = re.search(r"Ascend 950 系列产品HDK版本</th>.*?<th>([^<]+)</th>", body, re.S)
    on_950 = {version_key(h) for h in header[1].split("/")} if header else set()
    for cann, hdks in re.findall(r"^\|[\d.]+\|([\d.]+)\|(.*?<ul>.*?</ul>)", body, re.M):
        for hdk in re.findall(r"<li>[^<：]+：([^<]+)</li>", hdks):
            key = ("cann", version_key(hdk.strip()))
            if key[1] in on_950:
                derived.device_pairs.add((*key, version_key(cann), ("950",)))
            else:
                derived.pairs.add((*key, version_key(cann)))
            derived.origin[("pairs", *key)] = name


_FAMILIES = {"A2": "910b", "A3": "a3", "_310P": "310p"}


def _plain_chip(value: str) -> str:
    value = value.lower()
    return value.removeprefix("ascend")


def _ascend_socs(derived: Derived, name: str, body: str) -> None:
    for soc, family in re.findall(
        r'^\s*"(ascend[0-9a-z_-]+)": AscendDeviceType\.(\w+),', body, re.M
    ):
        if "vir" in soc:  # a vNPU's virtual SoC: never a node's chip label
            continue
        key = ("cann", _plain_chip(soc))
        derived.devices[key] = _FAMILIES[family]
        derived.origin[("devices", *key)] = name
    if re.search(r'if "ascend950" in normalized:\s+return AscendDeviceType\.A5', body):
        derived.device_rules[("cann", _plain_chip("ascend950"))] = "950"


def _mind_cluster(derived: Derived, name: str, body: str) -> None:
    for value in re.findall(r'= "((?:module|card)-[a-z0-9-]+)"', body):
        family = "a3" if "-a3-" in value else "910b" if "-910b-" in value else None
        if family is not None:
            derived.devices[("cann", value)] = family
            derived.origin[("devices", "cann", value)] = name
    if re.search(r"label value is card type, eg\. 910A", body):
        derived.devices[("cann", "910a")] = "910"
        derived.origin[("devices", "cann", "910a")] = name


def _vllm_ascend(derived: Derived, name: str, body: str) -> None:
    for release, cann in re.findall(
        r"^\|\s*(v\d[^|\s]*)\s*\|[^|]*\|[^|]*\|\s*([^|\s]+)\s*\|", body, re.M
    ):
        derived.images[("cann", release)] = version_key(cann)
        derived.origin[("images", "cann", release)] = name


_PARSERS = {
    "amd-kmd-rocm-matrix.txt": _amd_matrix,
    "amd-rocm-7.2-per-gpu.txt": _amd_narrowing,
    "amd-modules.txt": _amd_modules,
    "cann-9.1.0-compat.txt": _cann_grid,
    "cann-9.1.1-compat.txt": _cann_grid,
    "cann-9.0.1-pairing.txt": _cann_pairing,
    "ascend-mind-cluster-26.1.0-pairing.txt": _mind_cluster_pairing,
    "ascend-socs.txt": _ascend_socs,
    "ascend-mind-cluster-labels.txt": _mind_cluster,
    "vllm-ascend-matrix.txt": _vllm_ascend,
}
# Kept to show where vendor pages disagree; no row is read from them.
REFERENCE_ONLY = {"amd-kmd-rocm-matrix-install-on-linux.txt", "amd-device-ids.txt"}


def derive(sources: Path = SOURCES) -> Derived:
    """Every row the excerpts state (in a fixed order: the matrix before its narrowing)."""
    derived = Derived()
    names = sorted(p.name for p in sources.glob("*.txt"))
    unknown = [n for n in names if n not in _PARSERS and n not in REFERENCE_ONLY]
    if unknown:
        raise ValueError(f"no parser for the excerpt(s) {', '.join(unknown)} in {sources}")
    for name, parse in _PARSERS.items():
        if name in names:
            parse(derived, name, read_excerpt(sources / name)[1])
    return derived


def _runs(vendor: Vendor, release: str, runtime: str) -> bool:
    row = vendor.release_row(release)
    return row is not None and any(covers(rt, runtime) for rt in row.runtimes)


def _runs_on(vendor: Vendor, release: str, runtime: str, devices: tuple[str, ...]) -> bool:
    row = vendor.release_row(release)
    return row is not None and (
        any(covers(rt, runtime) for rt in row.runtimes)
        or any(covers(q.runtime, runtime) and set(devices) <= set(q.devices) for q in row.qualified)
    )


def differences(derived: Derived, vendors: tuple[Vendor, ...]) -> list[str]:
    """The lines a reader acts on: empty when the data says what the excerpts say."""
    lines: list[str] = []
    by_name = {v.name: v for v in vendors}
    explained: set[tuple[str, str, str]] = set(CARRIED)
    for (vendor, release), runtimes in sorted(derived.releases.items()):
        explained.add((vendor, "releases", release))
        row = next((r for r in by_name[vendor].releases if r.release == release), None)
        origin = derived.origin[("releases", vendor, release)]
        if row is None:
            lines.append(f"+ {vendor} releases {release}: {', '.join(runtimes)}  ({origin})")
        elif set(row.runtimes) != set(runtimes):
            lines.append(
                f"~ {vendor} releases {release}: {', '.join(row.runtimes)} -> "
                f"{', '.join(runtimes)}  ({origin})"
            )
    for (vendor, release, runtime), devices in sorted(derived.qualified.items()):
        row = next((r for r in by_name[vendor].releases if r.release == release), None)
        listed = [q for q in (row.qualified if row else ()) if q.runtime == runtime]
        if not listed or set(listed[0].devices) != set(devices):
            lines.append(f"~ {vendor} releases {release} {runtime} on {', '.join(devices)} only")
    for vendor, hdk, cann in sorted(derived.pairs):
        explained.add((vendor, "releases", hdk))
        if not _runs(by_name[vendor], hdk, cann):
            lines.append(f"! {vendor} releases {hdk} does not run {cann}")
    for vendor, hdk, cann, devices in sorted(derived.device_pairs):
        explained.add((vendor, "releases", hdk))
        if not _runs_on(by_name[vendor], hdk, cann, devices):
            lines.append(f"! {vendor} releases {hdk} does not run {cann} on {', '.join(devices)}")
    for (vendor, module), release in sorted(derived.modules.items()):
        explained.add((vendor, "modules", module))
        target = next((r.target for r in by_name[vendor].modules if r.value == module), None)
        if target != release:
            lines.append(f"{'+' if target is None else '~'} {vendor} modules {module}: {release}")
    for (vendor, value), device in sorted(derived.devices.items()):
        explained.add((vendor, "devices", value))
        rows = {_plain_chip(k): r for k, r in by_name[vendor].devices.items()}
        shipped = rows.get(value)
        if shipped is None or shipped.target != device:
            lines.append(f"{'+' if shipped is None else '~'} {vendor} devices {value}: {device}")
    for (vendor, text), device in sorted(derived.device_rules.items()):
        for key, chip in by_name[vendor].devices.items():
            if text in _plain_chip(key):
                explained.add((vendor, "devices", _plain_chip(key)))
                if chip.target != device:
                    lines.append(f"~ {vendor} devices {_plain_chip(key)}: {device}")
    for (vendor, release), version in sorted(derived.images.items()):
        explained.add((vendor, "images", release))
        known = {r: v for i in by_name[vendor].images for r, v in i.releases.items()}
        if known.get(release) != version:
            lines.append(
                f"{'+' if release not in known else '~'} {vendor} images {release}: {version}"
            )
    for data in vendors:
        shipped_rows = [
            *(("releases", r.release) for r in data.releases if r.runtimes),
            *(("modules", r.value) for r in data.modules),
            *(("devices", _plain_chip(k)) for k in data.devices),
            *(("images", r) for i in data.images for r in i.releases),
        ]
        for table, key in shipped_rows:
            if (data.name, table, key) not in explained:
                lines.append(f"- {data.name} {table} {key}: no excerpt states this row")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sources", type=Path, default=SOURCES, help="the excerpts directory")
    parser.add_argument("--data", type=Path, default=DATA, help="the vendor data file")
    args = parser.parse_args(argv)
    vendors = load_vendors(args.data.read_text(encoding="utf-8"), str(args.data))
    lines = differences(derive(args.sources), vendors)
    for line in lines:
        print(line)
    if not lines:
        print(f"{args.data.name} says what the excerpts in {args.sources} say")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
