"""The webhook config's runtime fixes (SPEC §14): /dev/shm, RDMA's IPC_LOCK and the image
architecture, each a rule that matches accelerator containers and can be switched off."""

from __future__ import annotations

import re
from functools import cached_property
from typing import Literal

from pydantic import Field, field_validator

from webhook.core.base.errors import QuantityError
from webhook.core.base.names import ResourceNames, name_problem
from webhook.core.base.quantity import parse_quantity
from webhook.core.config.fields import ConfigModel, Regex

# The per-pod opt-out (SPEC §14): false/no/0/off switches every runtime fix off for the pod.
ANNOTATION_RUNTIME_FIXES = "features.alauda.io/runtime-fixes"
# Written by the webhook beside the kubernetes.io/arch expression it wrote into a pod template
# (and so on the pods made from it), never read as a setting: the architectures it required,
# so that a later evaluation (the template's image switched to another build) recomputes its
# own expression instead of taking it for the user's (SPEC §4 "The webhook's own terms").
ANNOTATION_INJECTED_ARCHITECTURE = "features.alauda.io/injected-architecture"
# Written by the webhook beside the /dev/shm volume it adds (its name), never read as a setting:
# that volume is the webhook's, sized again when the pod's memory limit changes (a reinvocation,
# a template's new limit); every other volume at /dev/shm is the user's and left alone.
ANNOTATION_INJECTED_SHM = "features.alauda.io/injected-shm"

# Pod Security levels (k8s.io/pod-security-admission api: LevelPrivileged, LevelBaseline,
# LevelRestricted), the values of the namespace label pod-security.kubernetes.io/enforce.
PodSecurityLevel = Literal["privileged", "baseline", "restricted"]


def _resource_names(value: tuple[str, ...]) -> tuple[str, ...]:
    for name in value:
        problem = name_problem(name)
        if problem:
            raise ValueError(problem)
    return value


class FixMatch(ConfigModel):
    """Which accelerator containers a runtime fix applies to: every condition given must hold
    (none given: every accelerator container — every device family's, SPEC §14)."""

    # The rule is in force (config and chart switch).
    enabled: bool = True
    # The container uses one of these resources (exact names or glob patterns).
    resources: tuple[str, ...] = ()
    # The container has devices of one of these families: a families-catalog name (nvidia,
    # amd, ascend, intel, cambricon, hygon, iluvatar, metax, enflame, kunlunxin, mthreads,
    # neuron: by its resources or DRA claims), or the group label of a CRL policy it uses.
    families: tuple[str, ...] = ()
    # Regex searched (case-insensitive) in the image repository (the part before tag/digest).
    image: Regex | None = None

    @field_validator("resources")
    @classmethod
    def _names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _resource_names(value)

    @cached_property
    def resource_names(self) -> ResourceNames:
        return ResourceNames(self.resources)

    @cached_property
    def image_regex(self) -> re.Pattern[str] | None:
        return re.compile(self.image, re.IGNORECASE) if self.image is not None else None


class ShmFix(FixMatch):
    """A memory-backed emptyDir at /dev/shm for accelerator pods that mount nothing there."""

    # On by default (issue 39: with the shipped config a PyTorch DDP pod must get its /dev/shm).
    # Switched off with `enabled: false` (config, chart value runtimeFixes.shm.enabled) or per
    # pod with the runtime-fixes opt-out annotation; docs/concepts/runtime-fixes.md says what
    # changes for existing pods on upgrade.
    enabled: bool = True

    # The largest sizeLimit written. A memory-backed emptyDir is tmpfs, and its pages count
    # against the pod's memory (Kubernetes API, EmptyDirVolumeSource.sizeLimit: "The maximum
    # usage on memory medium EmptyDir would be the minimum value between the SizeLimit
    # specified here and the sum of memory limits of all containers in a pod"; KEP-1967).
    size_limit: str = "16Gi"
    # When every container of the pod has a memory limit: this fraction of their sum, if
    # smaller than sizeLimit, so shared memory alone cannot use the whole limit.
    memory_fraction: float = Field(default=0.5, gt=0, le=1)

    @field_validator("size_limit")
    @classmethod
    def _quantity(cls, value: str) -> str:
        try:
            amount = parse_quantity(value)
        except QuantityError as exc:
            raise ValueError(f"sizeLimit: {exc}") from None
        if amount < 64 * 1024 * 1024:
            # A container runtime's own /dev/shm is 64 MiB (runtimefix/shm.py RUNTIME_SHM):
            # a smaller volume would make the fix shrink what the pod has without it.
            raise ValueError(
                f"sizeLimit must be at least 64Mi (the runtime's /dev/shm), got {value!r}"
            )
        return value


class RdmaFix(FixMatch):
    """IPC_LOCK for containers that request an RDMA resource, where Pod Security allows it."""

    # RDMA device plugins' resources: the Mellanox/NVIDIA k8s-rdma-shared-dev-plugin's
    # default resourcePrefix is "rdma" (README, "resourcePrefix": rdma/<resourceName>).
    resources: tuple[str, ...] = ("rdma/*",)
    # The enforce level assumed for a namespace without the pod-security.kubernetes.io/enforce
    # label: the API server's own default (its AdmissionConfiguration) is not visible to a
    # webhook, so by default such a namespace gets a warning, not a capability Pod Security
    # might deny. Set "privileged" when the cluster's default is privileged (Kubernetes' own).
    unlabelled_namespace_level: PodSecurityLevel = "baseline"


class ArchitectureImages(ConfigModel):
    """Images (regex searched in the repository) and the architectures they are built for."""

    image: Regex
    architectures: tuple[str, ...] = Field(min_length=1)

    @field_validator("architectures")
    @classmethod
    def _archs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for arch in value:
            if not re.fullmatch(r"[a-z0-9]{1,16}", arch):
                raise ValueError(f"{arch!r} is not an architecture as kubernetes.io/arch names it")
        return tuple(sorted(set(value)))

    @cached_property
    def regex(self) -> re.Pattern[str]:
        return re.compile(self.image, re.IGNORECASE)


class ArchitectureFix(FixMatch):
    """Required node affinity on the architectures an accelerator pod's images are built for,
    when the node inventory holds nodes of another architecture."""

    # The admin's table: image pattern -> architectures (first match wins).
    images: tuple[ArchitectureImages, ...] = ()

    @cached_property
    def memo(self) -> dict[tuple[str, bool], tuple[str, ...] | None]:
        """What the evaluation found for an image under this rule (runtimefix/arch.py): one
        dict per loaded config, so a new config starts afresh; bounded there."""
        return {}


class RuntimeFixes(ConfigModel):
    """SPEC §14: each rule switchable (`enabled`), each pod may opt out (annotation)."""

    shm: ShmFix = ShmFix()
    rdma: RdmaFix = RdmaFix()
    architecture: ArchitectureFix = ArchitectureFix()
    # Read namespaces' pod-security.kubernetes.io/enforce label from a metadata-only watch
    # (needs RBAC on namespaces) so the RDMA fix knows where IPC_LOCK is allowed. Off, or not
    # readable: the capability is never added, only warned about.
    namespace_levels: bool = True

    @property
    def any_enabled(self) -> bool:
        return self.shm.enabled or self.rdma.enabled or self.architecture.enabled
