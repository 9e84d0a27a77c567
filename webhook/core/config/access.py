"""The webhook config's `gpuAccess` part: who may reach GPUs without requesting them (SPEC §12)."""

from __future__ import annotations

from functools import cached_property
from typing import Literal

from pydantic import field_validator

from webhook.core.config.fields import ConfigModel

# DNS-1123 label (apimachinery IsDNS1123Label): what a namespace name is.
_MAX_NAMESPACE = 63


class GpuAccess(ConfigModel):
    """GPU access control: devices only through the resources and claims that count them.

    `mode`: `off` checks nothing at admission; `warn` answers each finding with a warning;
    `enforce` denies it, and adds NVIDIA_VISIBLE_DEVICES=void where an image's own
    configuration would hand a container that requests no GPU every GPU of its node.
    The audit and policy reports list the findings in every mode.
    """

    # `off`: no checks at admission; `warn`: a warning per finding; `enforce`: a denial, and
    # NVIDIA_VISIBLE_DEVICES=void as voidImageDevices says.
    mode: Literal["off", "warn", "enforce"] = "warn"
    # Namespaces whose pods may reach GPUs without requesting them: the GPU Operator's own
    # (its device plugin, dcgm-exporter, validators read every GPU of their node) under the
    # names its chart and OperatorHub install it in. Tenants must not be able to create these.
    exempt_namespaces: tuple[str, ...] = ("gpu-operator", "nvidia-gpu-operator")
    # Under `enforce`, containers that request no GPU and set no NVIDIA_VISIBLE_DEVICES get
    # NVIDIA_VISIBLE_DEVICES=void when: `known` their image is one the webhook knows to be built
    # on NVIDIA's CUDA images (a CUDA version from the image table, the reference or shipped
    # knowledge); `all` every such container (nothing to know, every pod patched); `off` never.
    void_image_devices: Literal["off", "known", "all"] = "known"
    # RuntimeClasses whose handler is NVIDIA's runtime: the GPU Operator's (`nvidia`, and
    # `nvidia-cdi`/`nvidia-legacy` it creates beside it). A pod that requests no GPU and runs
    # with one of them gets whatever its image's NVIDIA_VISIBLE_DEVICES says.
    runtime_classes: tuple[str, ...] = ("nvidia", "nvidia-cdi", "nvidia-legacy")

    @cached_property
    def runtime_class_names(self) -> frozenset[str]:
        return frozenset(self.runtime_classes)

    @field_validator("exempt_namespaces")
    @classmethod
    def _namespaces(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not name or len(name) > _MAX_NAMESPACE or not _is_label(name):
                raise ValueError(f"{name!r} is not a namespace name (a DNS-1123 label)")
        return value

    @property
    def checks(self) -> bool:
        """Whether admission checks anything."""
        return self.mode != "off"


def _is_label(name: str) -> bool:
    ok = all(c.isascii() and (c.islower() or c.isdigit() or c == "-") for c in name)
    return ok and name[0] != "-" and name[-1] != "-"
