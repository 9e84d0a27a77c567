"""What a container's resource keys say about GPUs (SPEC §4 "Which containers"): the keys asked
for, whether one is a GPU resource, and those whose name says GPU that no rule knows (one
warning per pod, so a new device plugin is never silently unchecked)."""

from __future__ import annotations

from typing import NamedTuple

from webhook.core.base.wording import Wording
from webhook.core.config.model import WebhookConfig


class GpuKeys(NamedTuple):
    """What a container's resource keys say (SPEC §3, §4 "Which containers")."""

    asked: set[str]  # keys asked for (a key set to zero asks for nothing)
    crl: bool  # uses a CRL group
    gpu: bool  # asks for a GPU resource (config names or patterns)
    unknown: list[str]  # asks for a resource whose name says GPU that no rule knows


def says_gpu(key: str, config: WebhookConfig) -> bool:
    """An extended resource (domain-prefixed) whose name says GPU and that is not ignored."""
    return "gpu" in key.lower() and "/" in key and key not in config.ignored_gpu_resources


def unknown_gpu_warning(keys: list[str]) -> Wording:
    """One warning per pod spec for resources that say GPU but that no rule knows, so a new
    device plugin is never silently unchecked. The names stay whole; the fixed words shorten."""
    names = ", ".join(keys)
    if len(keys) == 1:
        return Wording(
            (
                f"resource {names} is not a known GPU resource: add it to gpuResourceNames "
                "to check it",
                f"unknown GPU resource {names}: add it to gpuResourceNames",
            )
        )
    return Wording(
        (
            f"resources {names} are not known GPU resources: add them to gpuResourceNames "
            "to check them",
            f"unknown GPU resources {names}: add them to gpuResourceNames",
        )
    )
