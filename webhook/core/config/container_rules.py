"""The webhook config's rules matched against containers: the compute capability some
workloads need (SPEC §4) and the environment fixes (SPEC §5), with the shipped defaults."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cached_property
from typing import Any

from pydantic import Field, field_validator, model_validator

from webhook.core.base.versions import CudaVersion
from webhook.core.config.fields import ConfigModel, Regex, regex_problem, version_problem


class ComputeCapabilityRule(ConfigModel):
    """Containers matching every given condition need `min_compute_capability` (e.g. "8.0")."""

    # The rule's name, in the note that says where a container's compute capability came from.
    name: str
    # Free text for the admin; not shown to users.
    description: str = ""
    # Regex searched (case-insensitive) in the image repository (the part before tag/digest).
    image: Regex | None = None
    # Regex searched in the container's command and args joined by single spaces.
    args: Regex | None = None
    # Env var name -> regex the variable's value must match in full (case-insensitive).
    env: Mapping[str, str] = Field(default_factory=dict)
    # The compute capability the matching containers need ("major.minor", e.g. "8.0").
    min_compute_capability: str

    @field_validator("env")
    @classmethod
    def _env(cls, value: Mapping[str, str]) -> Mapping[str, str]:
        for name, pattern in value.items():
            problem = regex_problem(pattern)
            if problem:
                raise ValueError(f"env {name}: {problem}")
        return dict(value)

    @field_validator("min_compute_capability")
    @classmethod
    def _version(cls, value: str) -> str:
        problem = version_problem(value, "minComputeCapability")
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _some_condition(self) -> ComputeCapabilityRule:
        if self.args is None and not self.env:
            raise ValueError(f"rule {self.name!r} must match on args or env")
        return self

    @cached_property
    def compiled(self) -> tuple[Any, ...]:
        """(image regex, args regex, ((env name, regex), ...), version), compiled once.

        A cached_property, not an lru_cache keyed by the rule (the dict field makes the model
        unhashable); pydantic (≥ 2.6) leaves it out of equality."""
        flags = re.IGNORECASE
        return (
            re.compile(self.image, flags) if self.image else None,
            re.compile(self.args) if self.args else None,
            tuple((name, re.compile(p, flags)) for name, p in self.env.items()),
            CudaVersion.parse(self.min_compute_capability),
        )


# bfloat16 needs compute capability 8.0 (Ampere); a V100 (7.0) or T4 (7.5) fails at start-up.
# vLLM (`vllm serve --dtype bfloat16`), SGLang (`--dtype bfloat16`) and Hugging Face TGI
# (`--dtype bfloat16`) spell the flag the same; TGI also reads it from env DTYPE.
DEFAULT_COMPUTE_RULES: tuple[ComputeCapabilityRule, ...] = (
    ComputeCapabilityRule(
        name="bfloat16-servers",
        description="bfloat16 inference needs compute capability 8.0 or newer",
        args=r"""--dtype(?:=|\s+)['"]?(?:bfloat16|bf16)\b""",
        min_compute_capability="8.0",
    ),
    ComputeCapabilityRule(
        name="bfloat16-tgi-env",
        description="bfloat16 inference needs compute capability 8.0 or newer",
        image=r"text-generation-inference|/tgi",
        env={"DTYPE": "bfloat16|bf16"},
        min_compute_capability="8.0",
    ),
)


class EnvFixRule(ConfigModel):
    """Set `env` on containers that match every given condition (unset conditions match all)."""

    # The fix's name, in the note and the warning a user sees ("set … (NAME fix)").
    name: str
    # Free text for the admin; not shown to users.
    description: str = ""
    # The container uses at least one of these resource keys (limits or requests).
    resources: tuple[str, ...] = ()
    # Regex searched (case-insensitive) in the image repository (the part before tag/digest).
    image: Regex | None = None
    # Regex matched (full match) against the container name.
    container: Regex | None = None
    # Env var name -> value to set, unless the container already sets that variable.
    env: Mapping[str, str]

    @field_validator("env")
    @classmethod
    def _env(cls, value: Mapping[str, str]) -> Mapping[str, str]:
        if not value:
            raise ValueError("env must set at least one variable")
        for name in value:
            if not re.fullmatch(r"[-._a-zA-Z][-._a-zA-Z0-9]*", name):
                raise ValueError(f"{name!r} is not a valid environment variable name")
        return dict(value)

    @cached_property
    def compiled(self) -> tuple[re.Pattern[str] | None, re.Pattern[str] | None]:
        """(image regex, case-insensitive; container-name regex), compiled once per rule: every
        GPU container's review tests them. (A cached_property, like ComputeCapabilityRule's.)"""
        return (
            re.compile(self.image, re.IGNORECASE) if self.image is not None else None,
            re.compile(self.container) if self.container is not None else None,
        )


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
