"""`review` and `images` show ROCm and CANN like CUDA (SPEC §13): the inventory line counts
each vendor's nodes by driver release, `images` names an image's ROCm or CANN version."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import container, pod
from webhook.cli import main

ROCM_714 = "rocm/vllm:rocm7.14.0_vllm_0.10.2_20251006"


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def test_review_places_an_amd_pod_and_counts_the_vendors_nodes(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(
        yaml.safe_dump_all(
            [
                node("mi300-new", **{"amd.com/gpu.driver-version": "6.14.14"}),
                node("mi210-old", **{"amd.com/gpu.driver-version": "6.12.12"}),
                node("empty", **{"amd.com/gpu.driver-version": ""}),
                node("a2", **{"huawei.com/driver.version": "25.5.1"}),
            ]
        ),
        encoding="utf-8",
    )
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(
        yaml.safe_dump(pod(container(image=ROCM_714, limits={"amd.com/gpu": "1"}))),
        encoding="utf-8",
    )
    code, out = cli("review", "-f", str(manifest), "--nodes", str(nodes), "-o", "json")
    assert code == 0
    [result] = json.loads(out)
    assert result["changes"] == [
        # The shipped CRL cf-crl-amd-gpu (requests: fromLimits), then the ROCm gate.
        'set requests.amd.com/gpu=1 from limits in container "c"',
        f"required nodes whose amdgpu driver runs ROCm 7.14 (image {ROCM_714})",
        # Every vendor's accelerator pod gets /dev/shm (SPEC §14).
        'mounted a 16Gi memory-backed /dev/shm in container "c" (shm fix)',
    ]
    assert result["mutated"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"] == [
        {
            "matchExpressions": [
                {"key": "amdgpu-driver-release", "operator": "DoesNotExist"},
                {"key": "amd.com/gpu.driver-version", "operator": "In", "values": ["6.14.14"]},
            ]
        }
    ]
    code, text = cli("review", "-f", str(manifest), "--nodes", str(nodes))
    assert text.splitlines()[0] == (
        f"node inventory: 4 node(s) from {nodes} (0 with CUDA labels; scheme(s): no known "
        "scheme); 3 AMD GPU nodes (amdgpu driver 30.10: 1, 6.4: 1, unknown: 1); "
        "1 Ascend node (Ascend HDK 25.5.1: 1)"
    )


def test_images_names_rocm_and_cann_versions() -> None:
    code, out = cli(
        "images",
        "--no-lookup",
        ROCM_714,
        "ascendai/cann:8.3.rc1-910b-ubuntu22.04-py3.11",
        "quay.io/ascend/vllm-ascend:v0.11.0rc1-310p",
    )
    assert code == 0
    assert out.splitlines() == [
        f"{ROCM_714}: ROCm 7.14 from the reference",
        "  amdgpu driver releases that run ROCm 7.14: 30.10, 30.20, 30.30, 31.40, 31.50",
        "ascendai/cann:8.3.rc1-910b-ubuntu22.04-py3.11: CANN 8.3.RC1 from the reference",
        "  built for Ascend chip 910b",
        "  Ascend HDK releases that run CANN 8.3.RC1: 25.3.RC1",
        "quay.io/ascend/vllm-ascend:v0.11.0rc1-310p: CANN 8.3.RC1 from the shipped knowledge "
        "(vllm-project/vllm-ascend docs/source/community/versioning_policy.md at 182b75e, "
        "Release compatibility matrix (Stable CANN))",
        "  built for Ascend chip 310p",
        "  Ascend HDK releases that run CANN 8.3.RC1: 25.3.RC1",
    ]


# One image of each family, as `images` shows it: the same line and the same JSON fields,
# with what placement reads of it (compute capability floor; devices and driver releases).
FAMILY_IMAGES = [
    (
        "nvcr.io/nvidia/pytorch:24.05-py3",
        [
            "nvcr.io/nvidia/pytorch:24.05-py3: CUDA 12.4 from the shipped knowledge "
            "(NGC PyTorch 24.05, NVIDIA release notes)",
            "  GPUs with compute capability ≥ 5.0 (architecture floor of CUDA 12.4)",
        ],
        {"runtime": "CUDA", "version": "12.4", "devices": [], "driverReleases": []},
    ),
    (
        ROCM_714,
        [
            f"{ROCM_714}: ROCm 7.14 from the reference",
            "  amdgpu driver releases that run ROCm 7.14: 30.10, 30.20, 30.30, 31.40, 31.50",
        ],
        {
            "runtime": "ROCm",
            "version": "7.14",
            "devices": [],
            "driverReleases": ["30.10", "30.20", "30.30", "31.40", "31.50"],
        },
    ),
    (
        "ascendai/cann:8.5.0-910b-ubuntu22.04-py3.10",
        [
            "ascendai/cann:8.5.0-910b-ubuntu22.04-py3.10: CANN 8.5.0 from the reference",
            "  built for Ascend chip 910b",
            "  Ascend HDK releases that run CANN 8.5.0: 25.5.0, 25.5.1",
        ],
        {
            "runtime": "CANN",
            "version": "8.5.0",
            "devices": ["910b"],
            "driverReleases": ["25.5.0", "25.5.1"],
        },
    ),
]


@pytest.mark.parametrize(("image", "lines", "fields"), FAMILY_IMAGES)
def test_images_shows_every_family_the_same_way(
    image: str, lines: list[str], fields: dict[str, Any]
) -> None:
    code, out = cli("images", "--no-lookup", image)
    assert (code, out.splitlines()) == (0, lines)
    code, out = cli("images", "--no-lookup", "-o", "json", image)
    (answer,) = json.loads(out)
    assert {k: answer[k] for k in fields} == fields
    # Every family's answer has the same fields (the CUDA-only facts empty for the others).
    assert list(answer) == [
        "image",
        "runtime",
        "version",
        "devices",
        "driverReleases",
        "origin",
        "source",
        "digest",
        "cudaVersion",
        "minComputeCapability",
        "forwardCompatibleDriverBranches",
    ]


def test_images_says_when_no_driver_release_lists_the_version() -> None:
    code, out = cli("images", "--no-lookup", "rocm/dev-ubuntu-24.04:9.9.1")
    assert (code, out.splitlines()) == (
        0,
        [
            "rocm/dev-ubuntu-24.04:9.9.1: ROCm 9.9 from the reference",
            "  no amdgpu driver release the webhook knows lists ROCm 9.9: no affinity",
        ],
    )


def test_review_json_lists_unknown_runtimes_the_same_way_for_every_family(
    tmp_path: Path,
) -> None:
    manifest = tmp_path / "pods.yaml"
    manifest.write_text(
        yaml.safe_dump_all(
            [
                pod(container("c", "registry.example/team/cuda-app:1", limits={res: "1"}))
                for res in ("nvidia.com/gpu", "amd.com/gpu", "huawei.com/npu")
            ]
            + [pod(container("k", ROCM_714, limits={"amd.com/gpu": "1"}))]
        )
    )
    code, out = cli("review", "-f", str(manifest), "-o", "json")
    assert code == 0
    assert [d["unknownRuntimes"] for d in json.loads(out)] == [
        [{"runtime": runtime, "image": "registry.example/team/cuda-app:1"}]
        for runtime in ("CUDA", "ROCm", "CANN")
    ] + [[]]
