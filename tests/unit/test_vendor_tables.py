"""Vendor tables as the vendors publish them (SPEC §13, issue 47 items 1-3, issue 45's partial
configs): every shipped row derived from its excerpt, the labeller's four-field module version,
the rows an admin adds in the config (added, never instead of the shipped ones), `lint
--config` on those rows, and `gpu-webhook tables`."""

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

from tests.helpers import apply, pod, run
from tests.unit.test_vendor_gate import (
    CHIP,
    DEVICE,
    HDK,
    HDK_ADMIN,
    MODULE,
    RELEASE,
    absent,
    amd,
    among,
    notin,
    npu,
    required,
    term,
)
from webhook.cli import main
from webhook.core.base.errors import ConfigError
from webhook.core.config.accelerators import DEFAULT_CANN, DEFAULT_ROCM
from webhook.core.config.model import load_config
from webhook.core.placement.inventory import NodeInventory
from webhook.core.placement.vendors import shipped_vendors

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "docs" / "research" / "vendor-sources"
ROCM_72 = "rocm/dev-ubuntu-24.04:7.2.1"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "vendor_tables", ROOT / "scripts/vendor_tables.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["vendor_tables"] = module
    spec.loader.exec_module(module)
    return module


vendor_tables = _script()


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


# --- rows that cannot drift ------------------------------------------------------------------


def test_every_shipped_row_is_what_its_excerpt_says() -> None:
    derived = vendor_tables.derive(SOURCES)
    assert vendor_tables.differences(derived, shipped_vendors()) == []
    # The excerpts hold the tables the issue names, row by row.
    assert derived.releases[("rocm", "31.50")] == ("7.0", "7.1", "7.2", "7.14", "10.0.0")
    assert derived.releases[("rocm", "5.3")] == ("5.1", "5.2", "5.3", "5.4", "5.5")
    assert derived.modules[("rocm", "6.19.14")] == "31.40"
    # MindCluster 26.1.0's notes: CANN 9.1.0 on the Ascend 950 series HDKs, on 950 only.
    assert ("cann", "25.1.rc1", "9.1.0", ("950",)) in derived.device_pairs
    assert ("cann", "25.6.rc1", "9.1.0", ("950",)) in derived.device_pairs
    # AMD's Yan Sun in ROCm/rocm-install-on-linux#684: release 30.20.1 is amdgpu 6.16.6.
    assert derived.modules[("rocm", "6.16.6")] == "30.20.1"
    assert derived.releases[("cann", "25.0")] == ("8.5.2", "9.0")  # 9.1.X: N on 25.0.X
    assert derived.images[("cann", "v0.23.0")] == "9.1.0"
    assert derived.devices[("cann", "910_9391")] == "a3"


def test_each_excerpt_names_its_source() -> None:
    for path in sorted(SOURCES.glob("*.txt")):
        meta, body = vendor_tables.read_excerpt(path)
        assert meta["source"] and meta["vendor"] in ("rocm", "cann"), path.name
        assert "commit" in meta or "version" in meta or "url" in meta, path.name
        assert body.strip(), path.name


def test_a_newer_excerpt_becomes_the_table_diff(tmp_path: Path) -> None:
    newer = tmp_path / "sources"
    shutil.copytree(SOURCES, newer)
    matrix = newer / "amd-kmd-rocm-matrix.txt"
    text = matrix.read_text(encoding="utf-8")
    text = text.replace(
        '    "31.50.x"', '    "32.10.x", "7.2.x, 7.14.x, 10.0.0, 10.1.0"\n    "31.50.x"'
    )
    text = text.replace('"5.3.x", "5.1.x, 5.2.x, 5.3.x, 5.4.x, 5.5.x"', '"5.3.x", "5.3.x"')
    matrix.write_text(text, encoding="utf-8")
    lines = vendor_tables.differences(vendor_tables.derive(newer), shipped_vendors())
    assert lines == [
        "+ rocm releases 32.10: 7.2, 7.14, 10.0.0, 10.1.0  (amd-kmd-rocm-matrix.txt)",
        "~ rocm releases 5.3: 5.1, 5.2, 5.3, 5.4, 5.5 -> 5.3  (amd-kmd-rocm-matrix.txt)",
    ]
    # The script prints the same lines and fails, so CI and a reader see the drift.
    data = ROOT / "webhook" / "data" / "accelerators.yaml"
    out = io.StringIO()
    stdout, sys.stdout = sys.stdout, out
    try:
        code = vendor_tables.main(["--sources", str(newer), "--data", str(data)])
    finally:
        sys.stdout = stdout
    assert code == 1
    assert out.getvalue().splitlines() == lines


def test_a_shipped_row_no_excerpt_states_is_reported(tmp_path: Path) -> None:
    data = (ROOT / "webhook" / "data" / "accelerators.yaml").read_text(encoding="utf-8")
    data = data.replace(
        "  modules:\n  - value: '6.19.14'",
        "  modules:\n  - value: '6.16.13'\n    release: '30.20'\n    source: 'a guess'\n"
        "  - value: '6.19.14'",
    )
    file = tmp_path / "accelerators.yaml"
    file.write_text(data, encoding="utf-8")
    code = vendor_tables.main(["--data", str(file)])
    assert code == 1


# --- the labeller's versions --------------------------------------------------------------------


def test_the_four_field_module_version_is_its_release() -> None:
    # The out-of-tree amdgpu module reports 6.19.14.31400000 (31.40: ROCm 7.0 .. 10.0.0).
    nodes = NodeInventory.build(
        {
            "new": {MODULE: "6.19.14.31400000", DEVICE: "75a3"},
            "dkms": {MODULE: "6.14.14-2204008", DEVICE: "75a3"},
            "unknown": {MODULE: "6.16.13", DEVICE: "75a3"},
        }
    )
    decision = run(pod(amd(ROCM_72)), inventory=nodes)
    assert required(apply(decision)) == [
        term(absent(RELEASE), among(MODULE, "6.14.14-2204008", "6.19.14.31400000")),
    ]
    # amdgpu 6.16.6 is release 30.20.1, whose 30.20 row runs ROCm 6.3 to 7.2, 7.14 and 10.0.0.
    nodes = NodeInventory.build(
        {
            "30.20": {MODULE: "6.16.6", DEVICE: "75a3"},
            "unknown": {MODULE: "6.16.13", DEVICE: "75a3"},
        }
    )
    assert required(apply(run(pod(amd(ROCM_72)), inventory=nodes))) == [
        term(absent(RELEASE), among(MODULE, "6.16.6")),
    ]
    # ROCm 6.2 is not in its row: kept off that node, never stranded (the unknown one may run it).
    older = run(pod(amd("rocm/dev-ubuntu-24.04:6.2.4")), inventory=nodes)
    assert required(apply(older))[-1] == term(absent(RELEASE), notin(MODULE, "6.16.6"))
    # The label to set is never cut (SPEC §13): the reason gives way to it.
    assert decision.warnings == (
        "1 AMD GPU node not used, its amdgpu driver is unknown: "
        "label amdgpu-driver-release=<amdgpu driver release>",
    )


def test_the_ascend_950_hdks_run_cann_9_1_0_on_the_950_chip_only() -> None:
    # MindCluster 26.1.0: CANN 9.1.0 with HDK 25.1.RC1 (Atlas 950 SuperPoD) and 25.6.RC1 (Atlas
    # 850), both Ascend 950 series HDKs; a 910B node reporting one of them is not placed by it.
    nodes = NodeInventory.build(
        {
            "superpod": {HDK: "25.1.RC1", CHIP: "Ascend950DT"},
            "atlas-850": {HDK: "25.6.RC1", CHIP: "Ascend950PR"},
            "a2": {HDK: "25.1.RC1", CHIP: "910B3"},
        }
    )
    decision = run(pod(npu("quay.io/ascend/cann:9.1.0-950-ubuntu22.04-py3.12")), inventory=nodes)
    # One term per HDK, each with the chips it runs on: never the 910B3 on 25.1.RC1.
    assert required(apply(decision)) == [
        term(absent(HDK_ADMIN), among(HDK, "25.1.RC1"), among(CHIP, "Ascend950DT")),
        term(absent(HDK_ADMIN), among(HDK, "25.6.RC1"), among(CHIP, "Ascend950PR")),
    ]
    assert decision.warnings == ()
    # CANN 9.0.0 is not what the notes pair with them: no node is known to run it.
    older = run(pod(npu("quay.io/ascend/cann:9.0.0-950-ubuntu22.04-py3.11")), inventory=nodes)
    assert older.warnings == (
        "no node's Ascend HDK supports CANN 9.0.0; newest is 25.6.RC1 (1 node)",
    )


# --- admin rows -----------------------------------------------------------------------------


def test_a_partial_vendor_section_keeps_the_shipped_label_settings() -> None:
    # What a Helm override of accelerators.rocm.imageTable alone renders (issue 45).
    table = [{"image": "registry.corp/ml/*", "version": "6.4"}]
    for key in ("imageTable", "image_table"):
        config = load_config({"accelerators": {"rocm": {key: table}}})
        assert config.accelerators.rocm.driver_labels == DEFAULT_ROCM.driver_labels
        assert config.accelerators.rocm.device_labels == DEFAULT_ROCM.device_labels
        assert config.accelerators.rocm.enabled
        assert config.accelerators.cann == DEFAULT_CANN
        assert [i.image for i in config.accelerators.rocm.image_table] == ["registry.corp/ml/*"]
    nodes = NodeInventory.build({"a": {MODULE: "6.12.12"}, "b": {MODULE: "6.14.14"}})
    decision = run(pod(amd("registry.corp/ml/train:3")), config=config, inventory=nodes)
    # Gated as before the override: placed by the labeller's label.
    assert required(apply(decision)) == [
        term(absent(RELEASE), among(MODULE, "6.12.12", "6.14.14")),
    ]
    # A key the section sets replaces the default of that key only.
    labels = load_config({"accelerators": {"rocm": {"deviceLabels": ["gpu.example/id"]}}})
    assert labels.accelerators.rocm.device_labels == ("gpu.example/id",)
    assert labels.accelerators.rocm.driver_labels == DEFAULT_ROCM.driver_labels


def test_admin_rows_are_added_to_the_shipped_ones() -> None:
    config = load_config(
        {
            "accelerators": {
                "rocm": {
                    "modules": [
                        {"value": "6.16.13", "release": "30.20", "source": "dkms on our nodes"},
                        {"value": "6.20.1", "release": "32.10"},
                    ],
                    "releases": [{"release": "32.10", "runtimes": ["7.2", "7.14"]}],
                }
            }
        }
    )
    nodes = NodeInventory.build(
        {
            "shipped": {MODULE: "6.12.12"},
            "admin-module": {MODULE: "6.16.13"},
            "admin-release": {MODULE: "6.20.1"},
        }
    )
    newer = run(pod(amd("rocm/vllm:rocm7.14.0_vllm_0.10.2")), config=config, inventory=nodes)
    assert required(apply(newer)) == [
        term(absent(RELEASE), among(MODULE, "6.16.13", "6.20.1")),
    ]
    assert newer.warnings == ()
    # The shipped rows stay: ROCm 6.4 on 6.12.12 (6.4) and 6.16.13 (30.20), not on 32.10.
    older = run(pod(amd("rocm/dev-ubuntu-24.04:6.4.1")), config=config, inventory=nodes)
    assert required(apply(older)) == [term(absent(RELEASE), among(MODULE, "6.12.12", "6.16.13"))]


def test_an_admin_release_row_adds_runtimes_and_a_device_row_names_a_chip() -> None:
    config = load_config(
        {
            "accelerators": {
                "cann": {
                    "releases": [{"release": "25.3.RC1", "runtimes": ["8.3.RC2"]}],
                    "devices": [{"value": "910X1", "device": "910b"}],
                }
            }
        }
    )
    nodes = NodeInventory.build(
        {"odd-chip": {HDK: "25.3.RC1.2", CHIP: "910X1"}, "a2": {HDK: "25.3.RC1", CHIP: "910B3"}}
    )
    # vllm-ascend v0.11.0 is CANN 8.3.RC2 (its matrix): no shipped HDK row pairs 8.3.RC2.
    image = "quay.io/ascend/vllm-ascend:v0.11.0"
    shipped = run(pod(npu(image)), inventory=nodes)
    assert shipped.warnings == (
        "no Ascend HDK release the webhook knows lists CANN 8.3.RC2: no affinity",
    )
    added = run(pod(npu(image)), config=config, inventory=nodes)
    assert required(apply(added)) == [
        term(absent(HDK_ADMIN), among(HDK, "25.3.RC1", "25.3.RC1.2"), among(CHIP, "910B3", "910X1"))
    ]
    # The shipped 8.3.RC1 row of 25.3.RC1 is still there.
    rc1 = run(
        pod(npu("ascendai/cann:8.3.rc1-910b-ubuntu22.04-py3.11")), config=config, inventory=nodes
    )
    assert required(apply(rc1)) == required(apply(added))


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            {"modules": [{"value": "6.16.13", "release": "thirty"}]},
            "modules[].release must be a version like 30.20, 6.19.14, 25.3.RC1 or 9.0.0-beta.1, "
            "got 'thirty'",
        ),
        (
            {"releases": [{"release": "32.10", "runtimes": []}]},
            "releases[].runtimes must list at least one runtime version",
        ),
        (
            {"releases": [{"release": "32.10", "runtime": ["7.2"]}]},
            "Extra inputs are not permitted",
        ),
    ],
)
def test_bad_admin_rows_are_refused(section: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=r"accelerators\.rocm") as caught:
        load_config({"accelerators": {"rocm": section}})
    assert message in str(caught.value)


def test_lint_checks_the_admin_rows(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "accelerators:\n  rocm:\n    modules:\n    - {value: '6.16.13', release: 'thirty'}\n"
        "    releases:\n    - {release: '32.10', runtime: ['7.2']}\n",
        encoding="utf-8",
    )
    code, out = cli("lint", "--config", str(bad))
    assert code == 1
    assert out.splitlines() == [
        f"ERROR {bad}: accelerators.rocm.modules[0].release: modules[].release must be a version "
        "like 30.20, 6.19.14, 25.3.RC1 or 9.0.0-beta.1, got 'thirty'",
        f"ERROR {bad}: accelerators.rocm.releases[0].runtimes: required field missing",
        f"ERROR {bad}: accelerators.rocm.releases[0].runtime: unknown field (the fields are "
        "release, runtimes, devices, source)",
        "",
        "webhook config, 3 error(s)",
    ]
    good = tmp_path / "good.yaml"
    good.write_text(
        "accelerators:\n  rocm:\n    modules:\n    - {value: '6.16.13', release: '30.20'}\n",
        encoding="utf-8",
    )
    code, out = cli("lint", "--config", str(good))
    assert code == 0
    assert out.splitlines()[0] == (
        f"OK    {good}: webhook config (accelerators: rocm 1 module, 0 release, 0 device, "
        "0 image row(s); cann 0 module, 0 release, 0 device, 0 image row(s))"
    )
    code, out = cli("lint")
    assert code == 2


# --- images and chips -----------------------------------------------------------------------


def test_the_2026_ascend_images_and_chips_are_read() -> None:
    nodes = NodeInventory.build(
        {
            "a3": {HDK: "26.1.0", CHIP: "Ascend910_9391"},
            "a5": {HDK: "26.1.0", CHIP: "Ascend950PR"},
            "a2": {HDK: "26.1.0", CHIP: "910B3"},
        }
    )
    # vllm-ascend v0.23.0 is CANN 9.1.0; -a5 is the Ascend 950 build, -a3 the A3 one.
    for image, chip in [
        ("quay.io/ascend/vllm-ascend:v0.23.0-a5", "Ascend950PR"),
        ("quay.io/ascend/vllm-ascend:v0.23.0-a3-openeuler", "Ascend910_9391"),
        ("quay.io/ascend/vllm-ascend:v0.23.0", "910B3"),
        ("quay.io/ascend/cann:9.0.0-beta.1-a3-openeuler24.03-py3.11", "Ascend910_9391"),
        ("quay.io/ascend/cann:9.1.0-950-ubuntu22.04-py3.12", "Ascend950PR"),
    ]:
        decision = run(pod(npu(image)), inventory=nodes)
        assert required(apply(decision)) == [
            term(absent(HDK_ADMIN), among(HDK, "26.1.0"), among(CHIP, chip))
        ], image


# --- gpu-webhook tables -----------------------------------------------------------------------


def test_tables_prints_the_rows_in_force_with_their_sources(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "accelerators:\n  rocm:\n    modules:\n"
        "    - {value: '6.16.13', release: '30.20', source: 'dkms status on our nodes'}\n",
        encoding="utf-8",
    )
    code, out = cli("tables", "--config", str(config), "--vendor", "rocm")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "rocm: ROCm on the amdgpu driver"
    assert lines[1] == "  modules (kernel module -> amdgpu driver release): 7 row(s)"
    assert "    6.16.13 -> 30.20  [config: dkms status on our nodes]" in lines
    assert any(
        line.startswith("    6.16.6 -> 30.20.1  [shipped: ROCm/rocm-install-on-linux issue #684")
        for line in lines
    )
    assert (
        "    6.19.14 -> 31.40  [shipped: ROCm/gpu-operator docs/releasenotes.md at 6df13c1 "
        '(2026-08-06): "amdgpu driver 6.19.14 (packaged release 31.40)"]'
    ) in lines
    assert any(
        line.startswith("    31.50: 7.0, 7.1, 7.2, 7.14, 10.0.0  [shipped: ") for line in lines
    )
    assert any(line.startswith("    6.4 on gfx942, gfx90a, gfx908 only: 7.2  [") for line in lines)
    code, out = cli("tables", "-o", "json", "--config", str(config))
    assert code == 0
    tables = {t["vendor"]: t for t in json.loads(out)}
    assert set(tables) == {"rocm", "cann"}
    assert tables["rocm"]["modules"][-1] == {
        "value": "6.16.13",
        "release": "30.20",
        "origin": "config",
        "source": "dkms status on our nodes",
    }
    assert {"release": "26.1.0", "runtimes": ["9.1", "9.0", "8.5.2"]}.items() <= tables["cann"][
        "releases"
    ][1].items()
    code, _ = cli("tables", "--vendor", "nvidia")
    assert code == 2


def test_review_counts_the_nodes_by_the_rows_in_force(tmp_path: Path) -> None:
    # The inventory line and the placement both read the admin's module row.
    nodes = tmp_path / "nodes.yaml"
    labels = {MODULE: "6.16.13", DEVICE: "75a3"}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "mi355", "labels": labels}}
    nodes.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [node]}))
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(json.dumps(pod(amd(ROCM_72))), encoding="utf-8")
    config = tmp_path / "config.yaml"
    config.write_text(
        "accelerators:\n  rocm:\n    modules: [{value: '6.16.13', release: '30.20'}]\n",
        encoding="utf-8",
    )
    code, text = cli("review", "-f", str(manifest), "--nodes", str(nodes))
    assert code == 0
    assert "1 AMD GPU node (amdgpu driver unknown: 1)" in text.splitlines()[0]
    code, text = cli(
        "review", "-f", str(manifest), "--nodes", str(nodes), "--config", str(config), "-o", "json"
    )
    assert code == 0
    [result] = json.loads(text)
    assert result["changes"][-2:] == [
        f"required nodes whose amdgpu driver runs ROCm 7.2 (image {ROCM_72})",
        'mounted a 16Gi memory-backed /dev/shm in container "c" (shm fix)',
    ]
    code, text = cli("review", "-f", str(manifest), "--nodes", str(nodes), "--config", str(config))
    assert "1 AMD GPU node (amdgpu driver 30.20: 1)" in text.splitlines()[0]
