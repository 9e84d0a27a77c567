"""The webhook's own configuration: YAML file -> frozen, validated pydantic model with defaults."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from webhook.core.errors import ConfigError, ManifestError
from webhook.core.manifests import load_yaml_documents

ANNOTATION_CUDA_VERSION = "features.alauda.io/cuda-version"
ANNOTATION_CUDA_AFFINITY = "features.alauda.io/cuda-affinity"
ANNOTATION_ENV_FIXES = "features.alauda.io/env-fixes"

# Regexes run against the image reference (digest stripped). Each must define the named
# groups `major` and `minor`. Order matters: the first match wins.
DEFAULT_IMAGE_PATTERNS: tuple[str, ...] = (
    # nvidia/cuda:12.4.1-runtime-ubuntu22.04, nvcr.io/nvidia/cuda:11.8.0-base
    # (only repositories named "cuda": other tags like 3.3.9-3.6.1 are not CUDA versions)
    r"(?:^|/)cuda:(?P<major>\d{1,2})\.(?P<minor>\d{1,2})(?:\.\d+)?(?:[-_.]|$)",
    # pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime, paddle:2.6.1-gpu-cuda12.0-cudnn8.9,
    # ...-cuda-11.8-..., ..._cuda11.8
    r":(?:.*[-_.])?cuda[-_]?(?P<major>\d{1,2})\.(?P<minor>\d{1,2})(?:[-_.]|$)",
    # ...:cu121, ...:2.1.0-cu118-py310 (PyTorch wheel-style tags)
    r":(?:.*[-_.])?cu(?P<major>1\d)(?P<minor>\d)(?:[-_.]|$)",
)


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )


class CudaLabels(_Model):
    """Node label keys that carry the highest CUDA version a node's driver supports."""

    major: str = "cuda-major-version"
    minor: str = "cuda-minor-version"


class ImageCudaEntry(_Model):
    """Admin table entry: images matching `image` (shell-style glob) need CUDA `cuda_version`."""

    image: str
    cuda_version: str

    @field_validator("cuda_version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not re.fullmatch(r"\d{1,2}\.\d{1,2}(\.\d+)?", value):
            raise ValueError(f"cudaVersion must look like 12.4 or 12.4.1, got {value!r}")
        return value


class EnvFixRule(_Model):
    """Set `env` on containers that match every given condition (unset conditions match all)."""

    name: str
    description: str = ""
    # The container uses at least one of these resource keys (limits or requests).
    resources: tuple[str, ...] = ()
    # Regex searched (case-insensitive) in the image repository (the part before tag/digest).
    image: str | None = None
    # Regex matched (full match) against the container name.
    container: str | None = None
    env: Mapping[str, str]

    @field_validator("image", "container")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression ({exc}): {value!r}") from exc
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: Mapping[str, str]) -> Mapping[str, str]:
        if not value:
            raise ValueError("env must set at least one variable")
        for name in value:
            if not re.fullmatch(r"[-._a-zA-Z][-._a-zA-Z0-9]*", name):
                raise ValueError(f"{name!r} is not a valid environment variable name")
        return dict(value)


DEFAULT_ENV_FIXES: tuple[EnvFixRule, ...] = (
    EnvFixRule(
        name="paddle-on-gpu-manager",
        description=(
            "PaddlePaddle's auto_growth allocator conflicts with GPU-Manager vGPU memory "
            "virtualization (OOM, random crashes)"
        ),
        resources=("tencent.com/vcuda-core", "tencent.com/vcuda-memory"),
        image=r"paddle",
        env={"FLAGS_allocator_strategy": "naive_best_fit"},
    ),
)


class WebhookConfig(_Model):
    """Everything an admin can tune; every field has a production default."""

    cuda_labels: CudaLabels = CudaLabels()
    # Resources that make a container a GPU container besides every CRL key.
    gpu_resource_names: tuple[str, ...] = ("nvidia.com/gpu",)
    # Resources that mean virtual GPU (stricter CUDA rule: same major as the driver).
    vgpu_resource_names: tuple[str, ...] = ("tencent.com/vcuda-core", "tencent.com/vcuda-memory")
    # GPU-Manager resources: CUDA >= 12.4 is flagged with a warning.
    gpu_manager_resource_names: tuple[str, ...] = (
        "tencent.com/vcuda-core",
        "tencent.com/vcuda-memory",
    )
    # MPS memory limits need CUDA >= 11.4: flagged with a warning.
    mps_memory_resource_names: tuple[str, ...] = ("nvidia.com/mps-memory",)
    max_major_skew: int = Field(default=1, ge=0, le=5)
    cuda_affinity: bool = True
    image_patterns: tuple[str, ...] = DEFAULT_IMAGE_PATTERNS
    image_cuda_table: tuple[ImageCudaEntry, ...] = ()
    env_fixes: tuple[EnvFixRule, ...] = DEFAULT_ENV_FIXES
    # Mutating Deployment/Job/... templates makes GitOps tools see drift: off by default.
    mutate_templates: bool = False
    # Objects in these namespaces are allowed untouched (the chart also excludes them).
    exempt_namespaces: tuple[str, ...] = ("kube-system",)
    # With a node inventory: what to do when no node satisfies the CUDA requirement.
    no_compatible_node: Literal["deny", "warn"] = "warn"

    @property
    def inventory_label_keys(self) -> frozenset[str]:
        """Node label keys the node inventory keeps: everything placement reads, nothing else."""
        return frozenset({self.cuda_labels.major, self.cuda_labels.minor})

    @field_validator("image_patterns")
    @classmethod
    def _patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression ({exc}): {pattern!r}") from exc
            if not {"major", "minor"} <= set(compiled.groupindex):
                raise ValueError(
                    f"image pattern {pattern!r} must define the named groups "
                    "(?P<major>...) and (?P<minor>...)"
                )
        return value


def load_config(source: Path | Mapping[str, Any] | None) -> WebhookConfig:
    """Load the config from a YAML file or mapping; None gives the defaults."""
    if source is None:
        return WebhookConfig()
    # "webhook config /etc/gpu-webhook/config.yaml", or just "webhook config" for a mapping.
    where = "webhook config"
    if isinstance(source, Path):
        where = f"webhook config {source}"
        try:
            # The same reader as manifests: alias bombs, absurd nesting and odd numbers refused.
            documents = load_yaml_documents(source.read_text(encoding="utf-8"), where)
        except OSError as exc:
            raise ConfigError(f"cannot read {where}: {exc.strerror}") from exc
        except UnicodeDecodeError:
            raise ConfigError(f"{where} is not a text file (not UTF-8)") from None
        except ManifestError as exc:
            raise ConfigError(str(exc)) from None
        if len(documents) > 1:
            raise ConfigError(f"{where} holds {len(documents)} YAML documents; expected one")
        data = documents[0] if documents else None
        if data is None:
            data = {}
    else:
        data = source
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a YAML mapping, got {type(data).__name__}")
    try:
        return WebhookConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(f"{where} is invalid: {problems}") from exc
