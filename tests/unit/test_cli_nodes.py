"""`gpu-webhook nodes` (issue 47 item 5): per node of a mixed cluster — NVIDIA nodes labelled by
GPU Feature Discovery and one described only by its DRA ResourceSlice, AMD nodes labelled by the
AMD labeller, Ascend nodes labelled by mind-cluster before v26.1 (a chip label only) and after
(huawei.com/driver.version), a CPU node — the vendor, the driver release as read, the device,
the table row, fit/unfit/unknown for an image, and the label that makes an unknown node known."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakekube import FakeKube, node
from webhook.cli import main

MIXED = Path(__file__).parent.parent / "data" / "nodes" / "mixed.yaml"
ROCM_64 = "rocm/pytorch:rocm6.4_ubuntu24.04_py3.12_pytorch_release_2.6.0"
CUDA_12_4 = "nvidia/cuda:12.4.1-runtime-ubuntu22.04"
VLLM_ASCEND = "quay.io/ascend/vllm-ascend:v0.23.0"
GFD = "nvidia.com/cuda.runtime-version.major, nvidia.com/cuda.runtime-version.minor"


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["nodes", *argv], out=out)
    return code, out.getvalue()


def reports(*argv: str) -> dict[str, dict[str, Any]]:
    code, out = cli("--nodes", str(MIXED), "-o", "json", *argv)
    assert code == 0
    return {r["node"]: r for r in json.loads(out)}


def fits(image: str) -> dict[str, tuple[str, str]]:
    return {
        name: (r["image"]["fit"], r["image"]["why"])
        for name, r in reports("--image", image).items()
    }


def test_each_node_as_the_webhook_reads_it() -> None:
    code, text = cli("--nodes", str(MIXED))
    assert code == 0
    assert text.startswith(f"9 node(s) from {MIXED}\ncpu-1: no accelerator labels")
    assert (
        "dra-1: NVIDIA GPU\n"
        "  driver: CUDA 12.8 (from ResourceSlice gpu.nvidia.com cudaDriverVersion)\n"
        "  driver version (ResourceSlice): 570.124.6\n"
        "  device: compute capability 9.0\n"
        "  product (ResourceSlice): NVIDIA H100 80GB HBM3\n"
        "  row: CUDA backward compatibility\n"
    ) in text
    assert (
        "gpu-new: NVIDIA GPU\n"
        "  driver: unknown (no CUDA version label)\n"
        "  to make it known: label cuda-major-version=<major> cuda-minor-version=<minor>\n"
    ) in text
    assert f"h100-1: NVIDIA GPU\n  driver: CUDA 12.8 (from {GFD})\n" in text
    assert (
        "mi300-1: AMD GPU\n"
        "  driver: amd.com/gpu.driver-version=6.14.14 -> release 30.10\n"
        "  device: amd.com/gpu.device-id=74a1 -> gfx942\n"
        "  row: 30.10 runs 6.2, 6.3, 6.4, 7.0, 7.1, 7.2, 7.14, 10.0\n"
    ) in text
    assert (
        "mi300-2: AMD GPU\n"
        "  driver: unknown (amd.com/gpu.driver-version=6.16.13 has no table row)\n"
        "  device: amd.com/gpu.device-id=74a1 -> gfx942\n"
        "  to make it known: label amdgpu-driver-release=<amdgpu driver release>\n"
    ) in text
    # mind-cluster after v26.1: huawei.com/driver.version, read through the CANN x HDK table.
    assert (
        "npu-new: Ascend\n"
        "  driver: huawei.com/driver.version=26.1.0 -> release 26.1.0\n"
        "  device: node.kubernetes.io/npu.chip.name=910B3 -> 910b\n"
        "  row: 26.1.0 runs 9.1, 9.0, 8.5.2\n"
    ) in text
    # ... and before: the chip only; the admin's label makes its HDK known.
    assert (
        "npu-old: Ascend\n"
        "  driver: unknown (no driver label)\n"
        "  device: accelerator-type=module-910b-8 -> 910b\n"
        "  to make it known: label ascend-driver-version=<Ascend HDK release>\n"
    ) in text


def test_json_names_the_row_and_its_source() -> None:
    found = reports()
    assert found["mi300-1"]["row"]["release"] == "30.10"
    assert "compatibility-matrix.rst" in found["mi300-1"]["row"]["source"]
    assert found["npu-new"]["row"]["source"].startswith("hicann/release-management")
    assert found["cpu-1"]["vendor"] is None
    assert found["dra-1"]["device"]["product"] == "NVIDIA H100 80GB HBM3"
    assert found["mi300-2"]["hint"] == "amdgpu-driver-release=<amdgpu driver release>"


def test_a_cuda_image_fits_nvidia_nodes_by_their_cuda_version() -> None:
    found = fits(CUDA_12_4)
    assert found["h100-1"] == ("fit", "CUDA 12.8 ≥ 12.4")
    assert found["dra-1"] == ("fit", "CUDA 12.8 ≥ 12.4")
    assert found["v100-1"] == ("unfit", "CUDA 11.8 is not ≥ 12.4")
    assert found["gpu-new"] == ("unknown", "its CUDA version is not labelled")
    assert found["mi300-1"] == ("unfit", "AMD GPU node; the image needs CUDA 12.4")
    assert found["cpu-1"] == ("unfit", "no accelerator this webhook knows")


def test_a_rocm_image_fits_by_the_amdgpu_release() -> None:
    found = fits(ROCM_64)
    assert found["mi300-1"] == ("fit", "amdgpu driver 30.10 runs it")
    assert found["mi300-2"] == ("unknown", "amd.com/gpu.driver-version=6.16.13 has no table row")
    assert found["h100-1"] == ("unfit", "NVIDIA GPU node; the image needs ROCm 6.4")
    # The unknown node's hint stays, the others' (known or another vendor's) is none.
    hints = {n: r["hint"] for n, r in reports("--image", ROCM_64).items() if r["hint"]}
    assert hints == {"mi300-2": "amdgpu-driver-release=<amdgpu driver release>"}


def test_a_cann_image_fits_the_ascend_node_after_v26_1_only() -> None:
    found = fits(VLLM_ASCEND)
    assert found["npu-new"] == ("fit", "Ascend HDK 26.1.0 runs it")
    assert found["npu-old"] == ("unknown", "no driver label")
    _, text = cli("--nodes", str(MIXED), "--image", VLLM_ASCEND)
    assert f"  {VLLM_ASCEND}: unknown (no driver label)\n" in text


def test_an_image_no_table_knows_is_unknown_everywhere_but_cpu_nodes() -> None:
    found = fits("registry.example/team/app:1")
    assert found["h100-1"] == ("unknown", "no table or tag tells the image's runtime version")
    assert found["npu-new"][0] == "unknown"


def test_slices_from_their_own_file(tmp_path: Path) -> None:
    docs = yaml.safe_load(MIXED.read_text(encoding="utf-8"))["items"]
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump_all([d for d in docs if d["kind"] == "Node"]), "utf-8")
    slices = tmp_path / "slices.yaml"
    slices.write_text(
        yaml.safe_dump(
            {"apiVersion": "v1", "kind": "List", "items": [d for d in docs if d["kind"] != "Node"]}
        ),
        "utf-8",
    )
    code, out = cli("--nodes", str(nodes), "--slices", str(slices), "-o", "json")
    assert code == 0
    (dra,) = [r for r in json.loads(out) if r["node"] == "dra-1"]
    assert dra["driver"]["release"] == "CUDA 12.8"
    code, out = cli("--nodes", str(nodes), "-o", "json")
    (dra,) = [r for r in json.loads(out) if r["node"] == "dra-1"]
    assert dra["vendor"] is None


def test_a_slices_file_of_something_else_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", "utf-8")
    code, _ = cli("--nodes", str(MIXED), "--slices", str(bad))
    assert code == 2
    assert capsys.readouterr().err == (
        f"gpu-webhook nodes: {bad}: item 1 is a Pod, not a ResourceSlice; pass the output of "
        "`kubectl get resourceslices -o yaml`\n"
    )


async def test_the_clusters_nodes_through_a_kubeconfig(kube: FakeKube, tmp_path: Path) -> None:
    docs = yaml.safe_load(MIXED.read_text(encoding="utf-8"))["items"]
    for doc in docs:
        if doc["kind"] == "Node":
            kube.put(node(doc["metadata"]["name"], doc["metadata"].get("labels")))
        else:
            kube.put(doc)
    kubeconfig = kube.write_kubeconfig(tmp_path)
    code, text = await asyncio.to_thread(cli, "--kubeconfig", str(kubeconfig), "--image", ROCM_64)
    assert code == 0
    assert text.startswith(f"9 node(s) from the cluster at {kube.url}\n")
    assert f"  {ROCM_64}: fit (amdgpu driver 30.10 runs it)\n" in text
    assert "  driver: CUDA 12.8 (from ResourceSlice gpu.nvidia.com cudaDriverVersion)\n" in text
