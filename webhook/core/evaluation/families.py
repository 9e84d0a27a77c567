"""Which device families GPU access control counts a container as requesting (SPEC §12): its
extended resources', a KEP-5004 name's class vendor, and the families its DRA claims surely give
it (a `firstAvailable` request that may fall back to another class gives none)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.access.control import container_families
from webhook.core.workloads.claims import DeviceClasses, PodClaims

NVIDIA_ONLY = frozenset({"nvidia"})


def claimed_families(
    claims: PodClaims, container: Mapping[str, Any], known: DeviceClasses
) -> frozenset[str]:
    """The families whose DRA device classes (by their driver, workloads.claims
    DeviceClasses) the container gets devices of through its claims."""
    return frozenset(known.families[c] for c in claims.classes_used(container))


def sure_families(
    dra: PodClaims,
    vendor_claims: PodClaims,
    container: Mapping[str, Any],
    known: DeviceClasses,
    nvidia: frozenset[str],
) -> frozenset[str]:
    """The families whose devices a container surely gets through its DRA claims (a
    `firstAvailable` request that may fall back to another class gives none: claims.py); a
    class's family is its driver's (workloads.claims DeviceClasses), the config's GPU classes
    NVIDIA's."""
    if not dra.gpu and not vendor_claims.gpu:
        return frozenset()

    def family(device_class: str) -> str | None:
        return "nvidia" if device_class in nvidia else known.families.get(device_class)

    return dra.sure_families(container, family) | vendor_claims.sure_families(container, family)


def access_families(
    container: Mapping[str, Any],
    gpu: bool,
    drawn: Mapping[str, str],
    dra: PodClaims,
    vendor: PodClaims,
    known: DeviceClasses,
    nvidia: frozenset[str],
) -> frozenset[str]:
    """The device families GPU access control counts a container as requesting: its extended
    resources' (NVIDIA for the config's GPU resources, `gpu`; a KEP-5004 name's class vendor,
    `drawn`) and its claims' sure ones."""
    families = container_families(container)
    if drawn:
        families |= frozenset(f for f in drawn.values() if f != "nvidia")
    if not families and (gpu or "nvidia" in drawn.values()):
        families = NVIDIA_ONLY
    return families | sure_families(dra, vendor, container, known, nvidia)
