"""`gpu-webhook images`, `review --resolve-images` and the registry flags of `serve`, against
an in-process registry on 127.0.0.1 (TLS with a test CA passed as --registry-ca)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.fakeregistry import FakeRegistry, docker_config, in_thread
from tests.helpers import CONFIGMAPS, GPU, container, node_terms, pod
from tests.ociimages import digest, image
from webhook.cli import main
from webhook.tls.certs import CertPaths, write_certificates


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> CertPaths:
    return write_certificates(tmp_path_factory.mktemp("tls"), ["localhost"], ["127.0.0.1"])


@pytest.fixture
def registry(tls: CertPaths) -> Iterator[FakeRegistry]:
    fake = FakeRegistry(tls, auth="bearer")
    fake.push(
        "public/trainer",
        "v3",
        image({"arm64": ["CUDA_VERSION=12.6.0"], "amd64": ["CUDA_VERSION=12.4.1"]}),
    )
    fake.push("private/trainer", "v3", image(["NVIDIA_REQUIRE_CUDA=cuda>=12.2"]))
    fake.push("public/python", "3.12", image(["LANG=C.UTF-8"]))
    with in_thread(fake):
        yield fake


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def config_for(tmp_path: Path, host: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"registryLookups": {"allowedRegistries": [host]}}))
    return str(path)


def auth_for(tmp_path: Path, host: str) -> str:
    path = tmp_path / "auth.json"
    path.write_text(json.dumps(docker_config(host, "alice", "s3cret")))
    return str(path)


def test_images_prints_versions_origins_and_the_table_entries(
    registry: FakeRegistry, tls: CertPaths, tmp_path: Path
) -> None:
    host = registry.host
    code, out = cli(
        "images",
        "nvidia/cuda:12.4.1-runtime-ubuntu22.04",
        "nvcr.io/nvidia/tritonserver:24.05-py3",
        f"{host}/public/trainer:v3",
        f"{host}/private/trainer:v3",
        "--config",
        config_for(tmp_path, host),
        "--registry-ca",
        str(tls.ca_cert),
        "--registry-auth",
        auth_for(tmp_path, host),
    )
    assert code == 0
    floor_12_4 = "  GPUs with compute capability ≥ 5.0 (architecture floor of CUDA 12.4)\n"
    assert out == (
        "nvidia/cuda:12.4.1-runtime-ubuntu22.04: CUDA 12.4 from the reference\n"
        f"{floor_12_4}"
        "nvcr.io/nvidia/tritonserver:24.05-py3: CUDA 12.4 from the shipped knowledge "
        "(NGC Triton 24.05, NVIDIA release notes)\n"
        f"{floor_12_4}"
        f"{host}/public/trainer:v3: CUDA 12.4 from its registry (CUDA_VERSION=12.4.1)\n"
        f"{floor_12_4}"
        f"{host}/private/trainer:v3: CUDA 12.2 from its registry (NVIDIA_REQUIRE_CUDA)\n"
        "  GPUs with compute capability ≥ 5.0 (architecture floor of CUDA 12.2)\n"
        "\n# webhook config entries that pin the registry answers (for clusters whose webhook "
        "cannot ask the registries):\n"
        "imageCudaTable:\n"
        f"- image: {host}/public/trainer:v3\n"
        "  cudaVersion: '12.4'\n"
        f"- image: {host}/private/trainer:v3\n"
        "  cudaVersion: '12.2'\n"
    )


def test_images_exits_1_when_a_version_stays_unknown(
    registry: FakeRegistry, tls: CertPaths, tmp_path: Path
) -> None:
    host = registry.host
    code, out = cli(
        "images",
        f"{host}/public/python:3.12",
        f"{host}/private/trainer:v3",
        "--arch",
        "amd64",
        "--config",
        config_for(tmp_path, host),
        "--registry-ca",
        str(tls.ca_cert),
        "-o",
        "json",
    )
    assert code == 1
    assert json.loads(out) == [
        {
            "image": f"{host}/public/python:3.12",
            "runtime": None,
            "version": None,
            "devices": [],
            "driverReleases": [],
            "origin": None,
            "source": "its config sets no CUDA_VERSION",
            "digest": digest(registry.manifests[("public/python", "3.12")][1]),
            "cudaVersion": None,
            "minComputeCapability": None,
            "forwardCompatibleDriverBranches": [],
        },
        {
            "image": f"{host}/private/trainer:v3",
            "runtime": None,
            "version": None,
            "devices": [],
            "driverReleases": [],
            "origin": None,
            "source": "401 from the registry: add credentials for it to --registry-auth",
            "digest": None,
            "cudaVersion": None,
            "minComputeCapability": None,
            "forwardCompatibleDriverBranches": [],
        },
    ]


def test_images_never_asks_with_no_lookup(registry: FakeRegistry, tmp_path: Path) -> None:
    code, out = cli(
        "images",
        f"{registry.host}/public/trainer:v3",
        "--no-lookup",
        "--config",
        config_for(tmp_path, registry.host),
    )
    assert code == 1
    assert out == f"{registry.host}/public/trainer:v3: CUDA unknown (nothing offline names it)\n"
    assert registry.hits == []


def _manifest(tmp_path: Path, *images: str) -> str:
    path = tmp_path / "pods.yaml"
    docs = [
        pod(container("main", ref, limits={GPU: "1"}), name=f"p{i}") for i, ref in enumerate(images)
    ]
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return str(path)


def test_review_looks_up_only_when_asked(
    registry: FakeRegistry, tls: CertPaths, tmp_path: Path
) -> None:
    host = registry.host
    manifest = _manifest(tmp_path, f"{host}/public/trainer:v3", f"{host}/private/trainer:v3")
    common = [
        "review",
        "-f",
        manifest,
        "--policies",
        str(CONFIGMAPS),
        "--config",
        config_for(tmp_path, host),
        "-o",
        "json",
    ]
    code, out = cli(*common)
    assert code == 0 and registry.hits == []
    offline = json.loads(out)
    assert all(r["mutated"] is None or "affinity" not in r["mutated"]["spec"] for r in offline)

    code, out = cli(*common, "--resolve-images", "--registry-ca", str(tls.ca_cert))
    assert code == 0
    public, private = json.loads(out)
    terms = public["mutated"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0] == {
        "key": "cuda-major-version",
        "operator": "Gt",
        "values": ["11"],
    }
    assert (
        "required GPU nodes with CUDA ≥ 12.4 (image config CUDA_VERSION=12.4.1), preferably < 14.0"
        in public["changes"]
    )
    assert private["mutated"] is None or "affinity" not in private["mutated"]["spec"]
    assert (
        f"CUDA lookup of {host}/private/trainer:v3: 401 from the registry: add credentials "
        "for it to --registry-auth" in private["warnings"]
    )


def test_review_resolve_images_header_line(
    registry: FakeRegistry, tls: CertPaths, tmp_path: Path
) -> None:
    host = registry.host
    manifest = _manifest(
        tmp_path,
        f"{host}/public/trainer:v3",
        f"{host}/private/trainer:v3",
        f"{host}/public/trainer:v3",
    )
    code, out = cli(
        "review",
        "-f",
        manifest,
        "--policies",
        str(CONFIGMAPS),
        "--config",
        config_for(tmp_path, host),
        "--resolve-images",
        "--registry-ca",
        str(tls.ca_cert),
        "--registry-auth",
        auth_for(tmp_path, host),
    )
    assert code == 0
    assert (
        out.splitlines()[0]
        == "image lookups: 2 image(s) asked their registries, 2 with a CUDA version"
    )
    # One lookup per image, whatever the number of documents naming it.
    # The anonymous try (401), then with the token the index and the amd64 manifest.
    assert registry.manifest_hits("public/trainer") == 3


def test_review_of_a_pod_allowed_on_two_architectures_uses_the_strictest_answer(
    registry: FakeRegistry, tls: CertPaths, tmp_path: Path
) -> None:
    host = registry.host
    both = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
                        ]
                    },
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}
                        ]
                    },
                ]
            }
        }
    }
    docs = [
        pod(container("main", f"{host}/{repo}:v3", limits={GPU: "1"}), name=name, affinity=both)
        for name, repo in (("public", "public/trainer"), ("private", "private/trainer"))
    ]
    manifest = tmp_path / "pods.yaml"
    manifest.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    code, out = cli(
        "review",
        "-f",
        str(manifest),
        "--policies",
        str(CONFIGMAPS),
        "--config",
        config_for(tmp_path, host),
        "--resolve-images",
        "--registry-ca",
        str(tls.ca_cert),
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "image lookups: 2 image(s) asked their registries, 1 with a CUDA version"
    # arm64's 12.6 is stricter than amd64's 12.4; the private image's 401 is said once.
    assert (
        "  - required GPU nodes with CUDA ≥ 12.6 (image config CUDA_VERSION=12.6.0 for "
        "linux/arm64), preferably < 14.0" in lines
    )
    denied = (
        f"  - CUDA lookup of {host}/private/trainer:v3: 401 from the registry: add credentials "
        "for it to --registry-auth"
    )
    assert lines.count(denied) == 1


@pytest.mark.parametrize(
    ("flag", "content", "message"),
    [
        ("--registry-auth", "{}", 'has no "auths" object'),
        ("--registry-ca", "not a certificate", "cannot load CA certificates from"),
    ],
)
def test_serve_refuses_unusable_registry_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, content: str, message: str
) -> None:
    bad = tmp_path / "bad"
    bad.write_text(content)
    code = main(
        [
            "serve",
            "--self-signed",
            "--policies",
            str(CONFIGMAPS),
            "--host",
            "127.0.0.1",
            "--port",
            "1",
            "--log-format",
            "text",
            flag,
            str(bad),
        ]
    )
    assert code == 2
    assert message in capsys.readouterr().err


def test_review_places_an_amd64_only_image_by_its_index_in_a_mixed_cluster(
    registry: FakeRegistry, tls: CertPaths, tmp_path: Path
) -> None:
    # The image-architecture runtime fix (SPEC §14): public/python's index lists linux/amd64
    # only (its config names no CUDA: the lookup still read the index), public/trainer's both.
    host = registry.host
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(
        yaml.safe_dump_all(
            [
                {"kind": "Node", "metadata": {"name": n, "labels": {"kubernetes.io/arch": a}}}
                for n, a in (("x86", "amd64"), ("gh200", "arm64"))
            ]
        )
    )
    manifest = _manifest(tmp_path, f"{host}/public/python:3.12", f"{host}/public/trainer:v3")
    code, out = cli(
        "review", "-f", manifest, "--policies", str(CONFIGMAPS), "--config",
        config_for(tmp_path, host), "--nodes", str(nodes), "-o", "json", "--resolve-images",
        "--registry-ca", str(tls.ca_cert),
    )  # fmt: skip
    assert code == 0
    python, trainer = json.loads(out)
    terms = python["mutated"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}
    ]
    assert (
        f"required nodes of architecture amd64: {host}/public/python:3.12 has no linux/arm64 "
        "(architecture fix)" in python["changes"]
    )
    assert "kubernetes.io/arch" not in json.dumps(trainer["mutated"])


def test_images_and_review_read_rocm_from_the_image_config(
    registry: FakeRegistry, tls: CertPaths, tmp_path: Path
) -> None:
    # SPEC §13: a ROCm image whose tag says nothing; its config names ROCm 6.4.1 and gfx942.
    host = registry.host
    registry.push(
        "team/rocm-train", "v1", image(["ROCM_VERSION=6.4.1", "PYTORCH_ROCM_ARCH=gfx942"])
    )
    ref = f"{host}/team/rocm-train:v1"
    config = config_for(tmp_path, host)
    code, out = cli("images", ref, "--config", config, "--registry-ca", str(tls.ca_cert))
    assert (code, out) == (
        0,
        f"{ref}: ROCm 6.4 from its registry (image config ROCM_VERSION=6.4.1)\n"
        "  built for GPU target gfx942\n"
        "  amdgpu driver releases that run ROCm 6.4: 6.1, 6.2, 6.3, 6.4, 30.10, 30.20, 30.30\n"
        "\n# webhook config entries that pin the registry answers (for clusters whose webhook "
        "cannot ask the registries):\n"
        "accelerators:\n"
        "  rocm:\n"
        "    imageTable:\n"
        f"    - image: {ref}\n"
        "      version: 6.4.1\n"
        "      devices:\n"
        "      - gfx942\n",
    )
    # The entries printed are a config that answers the same without the registry.
    pinned = tmp_path / "pinned.yaml"
    pinned.write_text(out.partition("\n\n")[2], encoding="utf-8")
    code, out = cli("images", ref, "--no-lookup", "--config", str(pinned))
    assert (code, out.splitlines()[0]) == (
        0,
        f"{ref}: ROCm 6.4 from the admin table (image table {ref})",
    )
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(
        yaml.safe_dump_all(
            [
                {"kind": "Node", "metadata": {"name": n, "labels": labels}}
                for n, labels in (
                    (
                        "mi210",
                        {"amd.com/gpu.driver-version": "6.14.14", "amd.com/gpu.device-id": "740f"},
                    ),
                    (
                        "mi300",
                        {"amd.com/gpu.driver-version": "6.14.14", "amd.com/gpu.device-id": "74a1"},
                    ),
                )
            ]
        )
    )
    manifest = tmp_path / "pods.yaml"
    manifest.write_text(yaml.safe_dump(pod(container("main", ref, limits={"amd.com/gpu": "1"}))))
    common = [
        "review",
        "-f",
        str(manifest),
        "--config",
        config,
        "--nodes",
        str(nodes),
        "-o",
        "json",
    ]
    code, out = cli(*common)
    limits = 'set requests.amd.com/gpu=1 from limits in container "main"'
    # An AMD container gets /dev/shm (SPEC §14), with or without its ROCm version.
    shm = 'mounted a 16Gi memory-backed /dev/shm in container "main" (shm fix)'
    assert json.loads(out)[0]["changes"] == [limits, shm]
    # Offline its ROCm version is unknown: counted as a CUDA container's would be.
    assert json.loads(out)[0]["unknownRuntimes"] == [{"runtime": "ROCm", "image": ref}]
    code, out = cli(*common, "--resolve-images", "--registry-ca", str(tls.ca_cert))
    (result,) = json.loads(out)
    assert result["unknownRuntimes"] == []
    assert result["changes"] == [
        limits,
        "required nodes whose amdgpu driver runs ROCm 6.4 on GPU target gfx942 "
        "(image config ROCM_VERSION=6.4.1)",
        shm,
    ]
    assert node_terms(result["mutated"]) == [
        {
            "matchExpressions": [
                {"key": "amdgpu-driver-release", "operator": "DoesNotExist"},
                {"key": "amd.com/gpu.driver-version", "operator": "In", "values": ["6.14.14"]},
                {"key": "amd.com/gpu.device-id", "operator": "In", "values": ["74a1"]},
            ]
        }
    ]
    # The text names what the registries told, per runtime, as for CUDA.
    code, out = cli(*common[:-2], "--resolve-images", "--registry-ca", str(tls.ca_cert))
    assert "image lookups: 1 image(s) asked their registries, 1 with a ROCm version\n" in out
