"""The webhook's own configuration: YAML file -> frozen, validated pydantic model with defaults."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    ValidationError,
    field_validator,
)

from webhook.core.base.errors import ConfigError, ManifestError
from webhook.core.base.manifests import load_yaml_documents
from webhook.core.base.names import ResourceNames, name_problem
from webhook.core.config.accelerators import Accelerators
from webhook.core.config.access import GpuAccess
from webhook.core.config.container_rules import (
    DEFAULT_COMPUTE_RULES,
    DEFAULT_ENV_FIXES,
    ComputeCapabilityRule,
    EnvFixRule,
)
from webhook.core.config.fields import ConfigModel, label_key_problem, regex_problem
from webhook.core.config.image_rules import (
    DEFAULT_IMAGE_PATTERNS,
    ImageCudaEntry,
    ImageRules,
    ImageTableConfigMap,
)
from webhook.core.config.labels import (
    ANNOTATION_CUDA_AFFINITY,
    ANNOTATION_CUDA_COMPATIBILITY,
    ANNOTATION_CUDA_VERSION,
    ANNOTATION_ENV_FIXES,
    ANNOTATION_INJECTED_AFFINITY,
    ANNOTATION_MIN_COMPUTE,
    DEFAULT_COMPUTE_LABELS,
    DEFAULT_CUDA_SCHEMES,
    DRIVER_VERSION_LABELS,
    CudaLabels,
    NodeSelectorTerm,
)
from webhook.core.config.registry import PUBLIC_REGISTRIES, RegistryLookups
from webhook.core.config.runtime_fixes import RuntimeFixes
from webhook.core.config.workload_kinds import WorkloadEntry, WorkloadTemplate
from webhook.core.images.knowledge import shipped_knowledge

__all__ = [
    "ANNOTATION_CUDA_AFFINITY",
    "ANNOTATION_CUDA_COMPATIBILITY",
    "ANNOTATION_CUDA_VERSION",
    "ANNOTATION_ENV_FIXES",
    "ANNOTATION_INJECTED_AFFINITY",
    "ANNOTATION_MIN_COMPUTE",
    "DEFAULT_COMPUTE_LABELS",
    "DEFAULT_COMPUTE_RULES",
    "DEFAULT_CUDA_SCHEMES",
    "DEFAULT_ENV_FIXES",
    "DEFAULT_IMAGE_PATTERNS",
    "PUBLIC_REGISTRIES",
    "ComputeCapabilityRule",
    "CudaLabels",
    "EnvFixRule",
    "GpuAccess",
    "ImageCudaEntry",
    "ImageRules",
    "ImageTableConfigMap",
    "NodeSelectorTerm",
    "RegistryLookups",
    "WebhookConfig",
    "WorkloadEntry",
    "WorkloadTemplate",
    "label_key_problem",
    "load_config",
]


class WebhookConfig(ConfigModel):
    """Everything an admin can tune; every field has a production default."""

    # Ordered label schemes nodes may advertise their CUDA version with (SPEC §4).
    cuda_label_schemes: tuple[CudaLabels, ...] = DEFAULT_CUDA_SCHEMES
    # Deprecated single scheme: when set, it is the only scheme (configs written before the
    # schemes list keep their meaning).
    cuda_labels: CudaLabels = CudaLabels()
    compute_capability_labels: CudaLabels = DEFAULT_COMPUTE_LABELS
    compute_capability_rules: tuple[ComputeCapabilityRule, ...] = DEFAULT_COMPUTE_RULES
    # Resources that make a container a GPU container besides every CRL key and the vGPU names
    # below: exact names or glob patterns (`*`, `?`), SPEC §4 "Which containers".
    # - nvidia.com/gpu: NVIDIA's device plugin;
    # - nvidia.com/gpu.shared: time-slicing or MPS sharing with renameByDefault (the plugin
    #   appends ".shared", NVIDIA/k8s-device-plugin api/config/v1 resources.go
    #   DefaultSharedRename and consts.go DefaultSharedResourceNameSuffix);
    # - nvidia.com/mig-*: MIG mixed strategy, one resource per profile (nvidia.com/mig-1g.5gb).
    # A MIG instance or a shared GPU runs on the node's driver like a whole GPU: pGPU rule.
    gpu_resource_names: tuple[str, ...] = (
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-*",
    )
    # Resources that mean virtual GPU (stricter CUDA rule: same major as the driver), GPU
    # containers too: GPU-Manager's, HAMi's (charts/hami/values.yaml resourceMem
    # nvidia.com/gpumem, resourceMemPercentage nvidia.com/gpumem-percentage, resourceCores
    # nvidia.com/gpucores) and Volcano's vGPU plugin's (volcano-sh/volcano
    # pkg/scheduler/api/devices/config/vgpu.go: volcano.sh/vgpu-number, vgpu-memory,
    # vgpu-memory-percentage, vgpu-cores; volcano-sh/devices --resource-name default).
    vgpu_resource_names: tuple[str, ...] = (
        "tencent.com/vcuda-core",
        "tencent.com/vcuda-memory",
        "nvidia.com/gpumem*",
        "nvidia.com/gpucores",
        "volcano.sh/vgpu-*",
    )
    # Resources whose name says GPU but that are no CUDA device: neither checked nor warned
    # about. Any other unknown `*gpu*` resource gets one warning per pod. AMD's device plugin
    # (amd.com/gpu) and Intel's (gpu.intel.com/i915, gpu.intel.com/xe); the other vendors
    # HAMi schedules (charts/hami/values.yaml devices: amd.com/gpumem, mthreads.com/vgpu,
    # birentech.com/gpu, metax-tech.com/sgpu, iluvatar.ai/BI-V100-vgpu, ...).
    ignored_gpu_resource_names: tuple[str, ...] = (
        "amd.com/*",
        "gpu.intel.com/*",
        "mthreads.com/*",
        "birentech.com/*",
        "metax-tech.com/*",
        "iluvatar.ai/*",
    )
    # GPU-Manager resources: CUDA >= 12.4 is flagged with a warning.
    gpu_manager_resource_names: tuple[str, ...] = (
        "tencent.com/vcuda-core",
        "tencent.com/vcuda-memory",
    )
    # MPS memory limits need CUDA >= 11.4: flagged with a warning.
    mps_memory_resource_names: tuple[str, ...] = ("nvidia.com/mps-memory",)
    max_major_skew: int = Field(default=1, ge=0, le=5)
    # The reference calls a driver more than maxMajorSkew majors ahead "Unstable", not
    # "Blocked": by default the bound is a scheduling preference (a CUDA 11 image still runs
    # on a cluster upgraded to CUDA 13 drivers); "require" makes it a hard bound.
    major_skew: Literal["prefer", "require"] = "prefer"
    # Which of NVIDIA's rules places a physical-GPU container needing CUDA R (SPEC §4):
    # "backward" requires a driver D ≥ R; "minorVersion" (NVIDIA's minor-version compatibility,
    # CUDA ≥ 11 only: "applications compiled with a CUDA Toolkit release from within a CUDA
    # major release family can run, with limited feature-set, on systems having at least the
    # minimum required driver version", docs.nvidia.com/deploy/cuda-compatibility/
    # minor-version-compatibility.html) requires "same major, or D ≥ R" and prefers D ≥ R.
    # A pod annotation (features.alauda.io/cuda-compatibility: backward) may only be stricter.
    cuda_compatibility: Literal["backward", "minorVersion"] = "backward"
    # Forward compatibility (SPEC §4): the nodes where NVIDIA's CUDA forward compatibility is
    # supported (NVIDIA's CUDA Compatibility guide, "Forward Compatibility": data-center GPUs,
    # not GeForce), as a node selector term, e.g. GFD's
    # nvidia.com/gpu.product In [...] or a pool label. There, the driver branches an image
    # declares in NVIDIA_REQUIRE_CUDA (`brand=…,driver>=B,driver<B+1`) are compatible too, on
    # `driverBranchLabel`. Unset: no forward compatibility.
    forward_compatible_nodes: NodeSelectorTerm | None = None
    # GFD's label for the driver's major version, i.e. its branch (gpu-feature-discovery
    # internal/lm: "nvidia.com/cuda.driver-version.major": driverMajor).
    driver_branch_label: str = "nvidia.com/cuda.driver-version.major"
    cuda_affinity: bool = True
    image_patterns: tuple[str, ...] = DEFAULT_IMAGE_PATTERNS
    image_cuda_table: tuple[ImageCudaEntry, ...] = ()
    # More table entries in a ConfigMap, watched (in a cluster) so they change without a
    # restart; they come before this file's entries.
    image_cuda_table_config_map: ImageTableConfigMap | None = None
    # The CUDA runtime of widely used GPU images shipped with the webhook (webhook/data/
    # images.yaml, each entry with its source); consulted after the table and the reference.
    shipped_image_knowledge: bool = True
    env_fixes: tuple[EnvFixRule, ...] = DEFAULT_ENV_FIXES
    # Mutating Deployment/Job/... templates makes GitOps tools see drift: off by default.
    mutate_templates: bool = False
    # Objects in these namespaces are allowed untouched (the chart also excludes them).
    exempt_namespaces: tuple[str, ...] = ("kube-system",)
    # With a node inventory: what to do when no node satisfies the CUDA requirement.
    no_compatible_node: Literal["deny", "warn"] = "warn"
    # With a node inventory: what to do with a vendor's nodes whose driver is unknown (no
    # label, an empty one, or a value no table row maps) when no node is known to run the pod
    # (SPEC §13 "Never strand a pod"). `allow` (default): the pod is kept off the nodes known
    # not to run it only, so it may land on an unknown one, with a warning naming the label an
    # admin sets to make them known; `exclude`: as if the unknown nodes could not run it
    # (noCompatibleNode applies, the pod waits for a known node: Pending rather than a
    # gamble). When some node is known to run it, the pod is required onto those either way.
    unknown_nodes: Literal["allow", "exclude"] = "allow"
    # Node labels that mark an NVIDIA GPU node even when it advertises no CUDA version: such a
    # node is an unknown one to CUDA placement (counted in warnings, used by `unknownNodes:
    # allow`). Defaults: the GPU Operator's common GPU label and the NFD PCI label it selects
    # GPU nodes by (NVIDIA/gpu-operator controllers/state_manager.go commonGPULabelKey,
    # gpuNodeLabels).
    gpu_node_labels: tuple[str, ...] = (
        "nvidia.com/gpu.present",
        "feature.node.kubernetes.io/pci-10de.present",
    )
    # Extra workload kinds (or replacements of built-in ones, by group and kind), SPEC §6.
    workloads: tuple[WorkloadEntry, ...] = ()
    # DRA device classes that mean a GPU: a container referencing a claim on one of them is a
    # GPU container (SPEC §6).
    gpu_device_classes: tuple[str, ...] = ("gpu.nvidia.com", "mig.nvidia.com")
    # In a cluster: keep a node inventory from a metadata-only watch of Nodes (needs RBAC on
    # nodes), and the DRA claim cache: ResourceClaimTemplates and ResourceClaims (needs RBAC on
    # resourceclaimtemplates and resourceclaims; one switch, the name kept for compatibility).
    node_inventory: bool = True
    claim_template_cache: bool = True
    # Read an image's CUDA version from its registry when nothing else tells it (SPEC §4).
    registry_lookups: RegistryLookups = RegistryLookups()
    # GPU access control (SPEC §12): GPUs only through the resources and claims that count them.
    gpu_access: GpuAccess = GpuAccess()
    # Runtime fixes (SPEC §14): /dev/shm, IPC_LOCK for RDMA, image architecture.
    runtime_fixes: RuntimeFixes = RuntimeFixes()
    # Accelerators beyond NVIDIA (SPEC §13): the driver-release gates of AMD ROCm and Huawei
    # Ascend CANN, the node labels each reads, and the admin's image tables.
    accelerators: Accelerators = Accelerators()

    # cached_property: derived once per config, read by every GPU pod's review (a pydantic
    # private attribute would go through BaseModel.__getattr__ on every read).
    @cached_property
    def schemes(self) -> tuple[CudaLabels, ...]:
        """The CUDA label schemes in force, in order (the first one is used without inventory)."""
        if "cuda_labels" in self.model_fields_set:
            return (self.cuda_labels,)
        return self.cuda_label_schemes

    @cached_property
    def image_rules(self) -> ImageRules:
        """image_patterns, image_cuda_table and the shipped knowledge as one identity-hashed
        key (see ImageRules). The knowledge is read and indexed once per process."""
        knowledge = shipped_knowledge() if self.shipped_image_knowledge else None
        return ImageRules(self.image_patterns, self.image_cuda_table, knowledge)

    @cached_property
    def inventory_label_keys(self) -> frozenset[str]:
        """Node label keys the node inventory keeps: everything placement reads, nothing else."""
        keys = self.cuda_label_keys | self.compute_label_keys | self.forward_label_keys
        keys |= self.accelerators.keys
        arch = self.runtime_fixes.architecture
        if arch.enabled and (arch.images or self.shipped_image_knowledge):
            # When some image's architectures can be known (the fix's table, the shipped
            # knowledge's single-architecture tags): kubernetes.io/arch (k8s.io/api core/v1
            # well_known_labels.go LabelArchStable).
            keys |= {"kubernetes.io/arch"}
        return keys | self.driver_version_keys | frozenset(self.gpu_node_labels)

    @cached_property
    def driver_version_keys(self) -> frozenset[str]:
        """GFD's driver version labels, read under minorVersion (a CUDA 11.0 node runs 11.x
        only with driver ≥ 450.80.02: placement/cuda.py); none under backward."""
        if self.cuda_compatibility != "minorVersion":
            return frozenset()
        return frozenset(DRIVER_VERSION_LABELS)

    @cached_property
    def forward_label_keys(self) -> frozenset[str]:
        """The keys forward-compatibility terms use: forwardCompatibleNodes' and the driver
        branch label (none when forward compatibility is off)."""
        term = self.forward_compatible_nodes
        return frozenset() if term is None else term.keys | {self.driver_branch_label}

    @cached_property
    def cuda_label_keys(self) -> frozenset[str]:
        """CUDA label keys: a pod whose nodeSelector or affinity names one keeps its CUDA
        placement as the user wrote it."""
        return frozenset(k for s in self.schemes for k in (s.major, s.minor))

    @cached_property
    def compute_label_keys(self) -> frozenset[str]:
        """Compute-capability label keys: naming one leaves only the compute part alone."""
        labels = self.compute_capability_labels
        return frozenset((labels.major, labels.minor))

    @cached_property
    def gpu_resources(self) -> ResourceNames:
        """Names and patterns that make a GPU container besides CRL keys: GPU and vGPU names."""
        return ResourceNames((*self.gpu_resource_names, *self.vgpu_resource_names))

    @cached_property
    def gpu_request_advice(self) -> str:
        """The resource a message advises requesting: the first exact GPU resource name."""
        exact = [n for n in self.gpu_resource_names if "*" not in n and "?" not in n]
        return exact[0] if exact else "a GPU resource"

    @cached_property
    def vgpu_resources(self) -> ResourceNames:
        return ResourceNames(self.vgpu_resource_names)

    @cached_property
    def gpu_manager_resources(self) -> ResourceNames:
        return ResourceNames(self.gpu_manager_resource_names)

    @cached_property
    def mps_memory_resources(self) -> ResourceNames:
        return ResourceNames(self.mps_memory_resource_names)

    @cached_property
    def ignored_gpu_resources(self) -> ResourceNames:
        return ResourceNames(self.ignored_gpu_resource_names)

    @field_validator(
        "gpu_resource_names",
        "vgpu_resource_names",
        "ignored_gpu_resource_names",
        "gpu_manager_resource_names",
        "mps_memory_resource_names",
    )
    @classmethod
    def _resource_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            problem = name_problem(name)
            if problem:
                raise ValueError(problem)
        return value

    def with_image_table(self, entries: tuple[ImageCudaEntry, ...]) -> WebhookConfig:
        """This config with `entries` (a watched ConfigMap's) before its own table entries.

        Rebuilt from the settings that were set, not copied: derived properties (image rules,
        label keys) must be computed afresh, and unset fields keep their defaults' meaning."""
        data = self.model_dump(by_alias=True, exclude_unset=True)
        data["imageCudaTable"] = [
            e.model_dump(by_alias=True) for e in (*entries, *self.image_cuda_table)
        ]
        return WebhookConfig.model_validate(data)

    @field_validator("driver_branch_label")
    @classmethod
    def _driver_label(cls, value: str) -> str:
        problem = label_key_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("gpu_node_labels")
    @classmethod
    def _gpu_node_labels(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for key in value:
            problem = label_key_problem(key)
            if problem:
                raise ValueError(problem)
        return value

    @field_validator("cuda_label_schemes")
    @classmethod
    def _nonempty_schemes(cls, value: tuple[CudaLabels, ...]) -> tuple[CudaLabels, ...]:
        if not value:
            raise ValueError("at least one label scheme is required")
        return value

    @field_validator("image_patterns")
    @classmethod
    def _patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            problem = regex_problem(pattern)
            if problem:
                raise ValueError(problem)
            if not {"major", "minor"} <= set(re.compile(pattern).groupindex):
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
