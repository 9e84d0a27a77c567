"""Webhook config: defaults, YAML loading, and ConfigError messages that say what to fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from webhook.core.base.errors import ConfigError
from webhook.core.config.model import (
    CudaLabels,
    EnvFixRule,
    ImageCudaEntry,
    WebhookConfig,
    load_config,
)


def test_defaults() -> None:
    config = load_config(None)
    assert config == WebhookConfig()
    assert [(s.name, s.major, s.minor) for s in config.schemes] == [
        ("manual", "cuda-major-version", "cuda-minor-version"),
        ("gfd", "nvidia.com/cuda.runtime-version.major", "nvidia.com/cuda.runtime-version.minor"),
        ("gfd-legacy", "nvidia.com/cuda.runtime.major", "nvidia.com/cuda.runtime.minor"),
    ]
    assert config.compute_capability_labels == CudaLabels(
        name="gfd-compute",
        major="nvidia.com/gpu.compute.major",
        minor="nvidia.com/gpu.compute.minor",
    )
    assert [r.name for r in config.compute_capability_rules] == [
        "bfloat16-servers",
        "bfloat16-tgi-env",
    ]
    # Every key placement reads, so the node inventory keeps all of them.
    assert config.inventory_label_keys == {
        "cuda-major-version",
        "cuda-minor-version",
        "nvidia.com/cuda.runtime-version.major",
        "nvidia.com/cuda.runtime-version.minor",
        "nvidia.com/cuda.runtime.major",
        "nvidia.com/cuda.runtime.minor",
        "nvidia.com/gpu.compute.major",
        "nvidia.com/gpu.compute.minor",
        # The image-architecture runtime fix (SPEC §14): the nodes' architectures.
        "kubernetes.io/arch",
        # The ROCm and CANN gates' labels (SPEC §13): admin's first, then the vendors'.
        "amdgpu-driver-release",
        "amd.com/gpu.driver-version",
        "amd.com/gpu.device-id",
        "ascend-driver-version",
        "huawei.com/driver.version",
        "node.kubernetes.io/npu.chip.name",
        "accelerator-type",
        # NVIDIA GPU nodes that advertise no CUDA version are unknown ones (SPEC §13, issue
        # 45): the GPU Operator's and NFD's GPU-node labels.
        "nvidia.com/gpu.present",
        "feature.node.kubernetes.io/pci-10de.present",
    }
    assert (config.unknown_nodes, config.no_compatible_node) == ("allow", "warn")
    # MIG mixed-strategy profiles and time-slicing/MPS renamed resources: pGPU rule (SPEC §4).
    assert config.gpu_resource_names == (
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-*",
    )
    # GPU-Manager's, HAMi's and Volcano's keys are vGPU (and GPU resources too).
    assert config.vgpu_resource_names == (
        "tencent.com/vcuda-core",
        "tencent.com/vcuda-memory",
        "nvidia.com/gpumem*",
        "nvidia.com/gpucores",
        "volcano.sh/vgpu-*",
    )
    assert config.ignored_gpu_resource_names == (
        "amd.com/*",
        "gpu.intel.com/*",
        "mthreads.com/*",
        "birentech.com/*",
        "metax-tech.com/*",
        "iluvatar.ai/*",
    )
    assert config.max_major_skew == 1
    assert config.major_skew == "prefer"  # the reference's "Unstable" is not "Blocked"
    assert config.cuda_affinity is True
    assert config.mutate_templates is False  # GitOps drift: off by default (SPEC §6)
    assert config.exempt_namespaces == ("kube-system",)
    assert config.no_compatible_node == "warn"
    assert config.image_cuda_table == ()
    assert [rule.name for rule in config.env_fixes] == ["paddle-on-gpu-manager"]
    assert config.env_fixes[0].env == {"FLAGS_allocator_strategy": "naive_best_fit"}


def test_yaml_file_with_camel_case_keys(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        """
cudaLabels:
  major: nvidia.com/cuda.runtime-version.major
  minor: nvidia.com/cuda.runtime-version.minor
maxMajorSkew: 2
mutateTemplates: true
noCompatibleNode: deny
gpuResourceNames: [nvidia.com/gpu, amd.com/gpu]
imageCudaTable:
  - image: "nvcr.io/nvidia/tritonserver:24.06*"
    cudaVersion: "12.5"
envFixes:
  - name: nccl
    container: "worker-.*"
    env: {NCCL_DEBUG: WARN}
""",
        encoding="utf-8",
    )
    config = load_config(path)
    # The deprecated single scheme, when set, is the only one.
    assert [s.major for s in config.schemes] == ["nvidia.com/cuda.runtime-version.major"]
    assert config.cuda_labels.major == "nvidia.com/cuda.runtime-version.major"
    assert config.max_major_skew == 2
    assert config.mutate_templates is True
    assert config.no_compatible_node == "deny"
    assert config.gpu_resource_names == ("nvidia.com/gpu", "amd.com/gpu")
    assert config.image_cuda_table == (
        ImageCudaEntry(image="nvcr.io/nvidia/tritonserver:24.06*", cuda_version="12.5"),
    )
    assert config.env_fixes == (
        EnvFixRule(name="nccl", container="worker-.*", env={"NCCL_DEBUG": "WARN"}),
    )


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing\n", encoding="utf-8")
    assert load_config(path) == WebhookConfig()


def test_snake_case_names_are_accepted_too() -> None:
    assert load_config({"max_major_skew": 0}).max_major_skew == 0


def test_config_is_frozen() -> None:
    config = WebhookConfig()
    with pytest.raises(Exception, match="frozen"):
        config.max_major_skew = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            {"imagePatterns": ["("]},
            "webhook config is invalid: imagePatterns: Value error, not a valid regular expression "
            "(missing ), unterminated subpattern at position 0): '('",
        ),
        (
            {"imagePatterns": [r"cuda(\d+)"]},
            r"webhook config is invalid: imagePatterns: Value error, image pattern 'cuda(\\d+)' "
            "must define the named groups (?P<major>...) and (?P<minor>...)",
        ),
        (
            {"imagePatterns": [r"cuda(?P<major>\d+)"]},
            r"webhook config is invalid: imagePatterns: Value error, image pattern "
            r"'cuda(?P<major>\\d+)' must define the named groups (?P<major>...) and (?P<minor>...)",
        ),
        (
            {"imageCudaTable": [{"image": "x:*", "cudaVersion": "0.5"}]},
            "webhook config is invalid: imageCudaTable.0.cudaVersion: Value error, cudaVersion "
            "'0.5' is not plausible (1.0 to 99.x)",
        ),
        (
            {"cudaLabelSchemes": [{"major": "a/b/c", "minor": "x"}]},
            "webhook config is invalid: cudaLabelSchemes.0.major: Value error, 'a/b/c' is not a "
            "valid label key: it may contain one '/' at most",
        ),
        (
            {"cudaLabelSchemes": []},
            "webhook config is invalid: cudaLabelSchemes: Value error, at least one label scheme "
            "is required",
        ),
        (
            {"computeCapabilityLabels": {"major": "x" * 64, "minor": "/m"}},
            "webhook config is invalid: computeCapabilityLabels.major: Value error, "
            f"'{'x' * 64}' is not a valid label key: the name must be at most 63 alphanumerics, "
            "'-', '_' or '.', starting and ending with an alphanumeric; "
            "computeCapabilityLabels.minor: Value error, '/m' is not a valid label key: the "
            "prefix before '/' is empty",
        ),
        (
            {"cudaLabels": {"major": "Example.com/major", "minor": "cuda-minor-"}},
            "webhook config is invalid: cudaLabels.major: Value error, 'Example.com/major' is not "
            "a valid label key: the prefix must be a lowercase DNS subdomain of at most 253 "
            "characters; cudaLabels.minor: Value error, 'cuda-minor-' is not a valid label key: "
            "the name must be at most 63 alphanumerics, '-', '_' or '.', starting and ending "
            "with an alphanumeric",
        ),
        (
            {
                "computeCapabilityRules": [
                    {"name": "r", "args": "(", "minComputeCapability": "100.0"},
                    {"name": "s", "env": {"DTYPE": "["}, "minComputeCapability": "8.0"},
                    {"name": "t", "image": "vllm", "minComputeCapability": "8.0"},
                ]
            },
            "webhook config is invalid: computeCapabilityRules.0.args: Value error, not a valid "
            "regular expression (missing ), unterminated subpattern at position 0): '('; "
            "computeCapabilityRules.0.minComputeCapability: Value error, minComputeCapability "
            "'100.0' is not plausible (1.0 to 99.x); computeCapabilityRules.1.env: Value error, "
            "env DTYPE: not a valid regular expression (unterminated character set at position "
            "0): '['; computeCapabilityRules.2: Value error, rule 't' must match on args or env",
        ),
        (
            {"imageCudaTable": [{"image": "x:*", "cudaVersion": "latest"}]},
            "webhook config is invalid: imageCudaTable.0.cudaVersion: Value error, cudaVersion "
            "must look like 12.4 or 12.4.1, got 'latest'",
        ),
        (
            {"envFixes": [{"name": "a", "image": "(", "env": {"A": "1"}}]},
            "webhook config is invalid: envFixes.0.image: Value error, not a valid regular "
            "expression (missing ), unterminated subpattern at position 0): '('",
        ),
        (
            {"envFixes": [{"name": "a", "container": "[", "env": {"A": "1"}}]},
            "webhook config is invalid: envFixes.0.container: Value error, not a valid regular "
            "expression (unterminated character set at position 0): '['",
        ),
        (
            {"envFixes": [{"name": "a", "env": {}}]},
            "webhook config is invalid: envFixes.0.env: "
            "Value error, env must set at least one variable",
        ),
        (
            {"envFixes": [{"name": "a", "env": {"1A": "x"}}]},
            "webhook config is invalid: envFixes.0.env: Value error, '1A' is not a valid "
            "environment variable name",
        ),
        (
            {"maxMajorSkew": 9},
            "webhook config is invalid: maxMajorSkew: Input should be less than or equal to 5",
        ),
        (
            {"maxMajorSkew": -1},
            "webhook config is invalid: maxMajorSkew: Input should be greater than or equal to 0",
        ),
        ({"colour": 1}, "webhook config is invalid: colour: Extra inputs are not permitted"),
        (
            {"noCompatibleNode": "maybe"},
            "webhook config is invalid: noCompatibleNode: Input should be 'deny' or 'warn'",
        ),
        (
            {"cudaLabels": {"mjr": "a"}},
            "webhook config is invalid: cudaLabels.mjr: Extra inputs are not permitted",
        ),
    ],
)
def test_invalid_config_messages(source: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(source)
    assert str(info.value) == message


def test_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"webhook config {path} must be a YAML mapping, got list"


def test_invalid_yaml_is_one_line_with_position(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("cudaAffinity: [\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (
        f"webhook config {path} is not valid YAML: expected the node content, but found "
        "'<stream end>' (while parsing a flow node) at line 2, column 1"
    )


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"cannot read webhook config {path}: No such file or directory"


def test_label_schemes_list(tmp_path: Path) -> None:
    config = load_config(
        {
            "cudaLabelSchemes": [
                {
                    "name": "corp",
                    "major": "corp.example/cuda-major",
                    "minor": "corp.example/cuda-minor",
                }
            ],
            "computeCapabilityRules": [
                {"name": "fp8", "args": "--quantization fp8", "minComputeCapability": "8.9"}
            ],
        }
    )
    assert [s.label for s in config.schemes] == ["corp"]
    assert config.compute_capability_rules[0].min_compute_capability == "8.9"
    assert "corp.example/cuda-major" in config.inventory_label_keys


def test_image_table_major_only_means_minor_zero() -> None:
    config = load_config({"imageCudaTable": [{"image": "x:*", "cudaVersion": "12"}]})
    assert config.image_cuda_table[0].cuda_version == "12"
