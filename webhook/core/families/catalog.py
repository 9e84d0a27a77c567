"""The accelerator device families the webhook knows (SPEC §13), as data, each fact with its
source. GPU access control (core/access) reads the variables, void values, device nodes and
limiter controls; placement (core/placement) the `placement` rule; both find a container's
families through `family_of` on its resource names.

A row whose source could not be read is left out rather than guessed: `device_env` is empty
where no runtime of the vendor was found to read a device-selection variable, and `void` is
None where the runtime has no value that selects no device.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Literal

Placement = Literal["cuda", "rocm", "cann", "none"]


@dataclass(frozen=True, slots=True)
class Family:
    """One vendor's devices.

    `resources`: extended resource names that count its devices, exact or ending in `*` (a
    prefix). `device_env`: environment variables a node runtime reads as the container's
    device selection; `device_env_prefixes`: the same, by name prefix. `void`: the value of
    those variables that selects no device (None: the runtime has none). `device_paths`: host
    path prefixes of its device nodes (a hostPath volume at or under one reaches them).
    `limiter_env`: a sharing limiter's controls the device plugin sets in a shared device's
    container (exact, or ending in `*`); a user who sets one raises or switches off the limit.
    `placement`: the correctness rule placement applies (cuda, rocm, cann, none). `noun` is
    what its devices are called in messages, `request` the resource a message advises.
    `device_classes`: the DRA device classes whose claims hand out the family's devices.
    `void_env`: the device variables GPU access control sets to `void` in a container with no
    device of the family (those whose void is safe in every container: NVIDIA's MIG variables
    make the hook refuse an unprivileged container, so they are never written).
    `selection`: how the family's runtime reads its device variables (a key of
    core/families/visible.py PARSERS). `void_in_devices`: no device plugin or DRA driver of the
    family sets its variable, so the family's own device containers get the void too (their
    devices come as device nodes, and an image's value would otherwise stand).
    `share_resources`/`share_env`: a sharing limiter's resources, and the (variable, safe value)
    pairs written in a container requesting one of them that sets no value itself (an image's
    value would otherwise switch the limiter off).
    `first_entry_env`: device variables some builds of the family's runtime read from the FIRST
    entry of the name in the OCI spec, where containerd puts an image config's entry before the
    pod's (core/families/visible.py): there no written void closes the image's value.
    """

    name: str
    vendor: str
    resources: tuple[str, ...]
    noun: str = "GPU"
    request: str = ""
    device_env: tuple[str, ...] = ()
    device_env_prefixes: tuple[str, ...] = ()
    void: str | None = None
    void_env: tuple[str, ...] = ()
    device_paths: tuple[str, ...] = ()
    limiter_env: tuple[str, ...] = ()
    placement: Placement = "none"
    # DRA DeviceClass names the vendor's DRA driver ships: a container that gets a device of
    # one through its resource claims has the family's devices, as one requesting its resources
    # (NVIDIA's classes are the config's gpuDeviceClasses instead: they also make GPU
    # containers for the CUDA rules, SPEC §6).
    device_classes: tuple[str, ...] = ()
    selection: str = "any"
    void_in_devices: bool = False
    share_resources: tuple[str, ...] = ()
    share_env: tuple[tuple[str, str], ...] = ()
    first_entry_env: tuple[str, ...] = ()

    def counts(self, resource: str) -> bool:
        """Whether `resource` counts this family's devices."""
        return any(_matches(p, resource) for p in self.resources)

    def is_device_env(self, name: str) -> bool:
        return name in self.device_env or name.startswith(self.device_env_prefixes)

    def is_limiter_env(self, name: str) -> bool:
        return any(_matches(p, name) for p in self.limiter_env)

    def shares(self, resource: str) -> bool:
        """Whether `resource` is one of the family's sharing limiter's resources."""
        return any(_matches(p, resource) for p in self.share_resources)


def _matches(pattern: str, name: str) -> bool:
    if pattern.endswith("*"):
        return name.startswith(pattern[:-1])
    return name == pattern


# HAMi-core (Project-HAMi/HAMi-core src/include/memory_limit.h, src/multiprocess/
# multiprocess_memory_limit.c): CUDA_DEVICE_MEMORY_LIMIT and CUDA_DEVICE_MEMORY_LIMIT_<i>,
# CUDA_DEVICE_SM_LIMIT and CUDA_DEVICE_SM_LIMIT_<i> are the limits HAMi's device plugin sets;
# GPU_CORE_UTILIZATION_POLICY=disable ignores the core limit, CUDA_DEVICE_MEMORY_SHARED_CACHE
# moves the shared accounting region, ACTIVE_OOM_KILLER changes what exceeding the limit does.
# CUDA_DISABLE_CONTROL: HAMi's NVIDIA device plugin does not mount /etc/ld.so.preload (which
# loads libvgpu.so) into a container that sets it (Project-HAMi/HAMi pkg/device-plugin/
# nvidiadevice/nvinternal/plugin/server.go Allocate; HAMi-core docs: "no resource isolation and
# limitation in that container"). CUDA_OVERSUBSCRIBE lets HAMi-core spill device memory to host.
_HAMI_CORE_ENV = (
    "CUDA_DISABLE_CONTROL",
    "CUDA_DEVICE_MEMORY_LIMIT*",
    "CUDA_DEVICE_SM_LIMIT*",
    "CUDA_DEVICE_MEMORY_SHARED_CACHE",
    "CUDA_OVERSUBSCRIBE",
    "GPU_CORE_UTILIZATION_POLICY",
    "ACTIVE_OOM_KILLER",
)

FAMILIES: tuple[Family, ...] = (
    Family(
        name="nvidia",
        vendor="NVIDIA",
        # k8s-device-plugin: nvidia.com/gpu, its sharing rename nvidia.com/gpu.shared and the
        # MIG mixed strategy's nvidia.com/mig-<profile>; HAMi (charts/hami/values.yaml:
        # resourceMem nvidia.com/gpumem, resourceMemPercentage, resourceCores
        # nvidia.com/gpucores); GPU-Manager tencent.com/vcuda-*; Volcano's vGPU
        # (volcano-sh/volcano pkg/scheduler/api/devices/config/vgpu.go) volcano.sh/vgpu-*;
        # MPS memory limits nvidia.com/mps-memory.
        resources=(
            "nvidia.com/gpu",
            "nvidia.com/gpu.shared",
            "nvidia.com/mig-*",
            "nvidia.com/gpumem*",
            "nvidia.com/gpucores",
            "nvidia.com/mps-memory",
            "tencent.com/vcuda-*",
            "volcano.sh/vgpu-*",
        ),
        noun="GPU",
        request="nvidia.com/gpu",
        # nvidia-container-toolkit internal/config/image/envvars.go: NVIDIA_VISIBLE_DEVICES,
        # NVIDIA_MIG_CONFIG_DEVICES, NVIDIA_MIG_MONITOR_DEVICES, NVIDIA_IMEX_CHANNELS (read by
        # cmd/nvidia-container-runtime-hook/container_config.go and cuda_image.go
        # ImexChannelRequests).
        device_env=(
            "NVIDIA_VISIBLE_DEVICES",
            "NVIDIA_MIG_CONFIG_DEVICES",
            "NVIDIA_MIG_MONITOR_DEVICES",
            "NVIDIA_IMEX_CHANNELS",
        ),
        # internal/config/image/cuda_image.go devicesFromEnvvars: "void" (or empty) selects no
        # device, and "void" among several values wins; "none" keeps the driver, no device.
        void="void",
        void_env=("NVIDIA_VISIBLE_DEVICES",),
        selection="nvidia",
        # HAMi's shares: HAMi-core reads GPU_CORE_UTILIZATION_POLICY from the process env
        # (src/multiprocess/multiprocess_memory_limit.c set_env_utilization_switch: "disable"
        # switches the core limiter off, anything but "force"/"disable" is the default, which
        # leaves the limiter to HAMi's monitor). HAMi's own webhook writes a non-default
        # policy into the container's env (pkg/device/nvidia/device.go MutateAdmission) and its
        # plugin "disable" where the admin turns the core limit off (server.go Allocate,
        # DisableCoreLimit); an image's "disable" stands only where neither does. The container's
        # env comes after the plugin's: an explicit default overrides an admin's
        # disableCoreLimit too, which keeps the limit the share was counted with.
        share_resources=("nvidia.com/gpucores", "nvidia.com/gpumem*"),
        share_env=(("GPU_CORE_UTILIZATION_POLICY", "default"),),
        # /dev/nvidia0.., /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-caps/..,
        # /dev/nvidia-caps-imex-channels/..: the nodes the toolkit injects (libnvidia-container
        # src/nvc_mount.c; docs "docker-specialized.md").
        device_paths=("/dev/nvidia",),
        limiter_env=_HAMI_CORE_ENV,
        placement="cuda",
    ),
    Family(
        name="amd",
        vendor="AMD",
        # ROCm/k8s-device-plugin: amd.com/gpu (resource naming strategy "single") and one
        # resource per partition type under "mixed" (amd.com/cpx_nps4, amd.com/spx_nps1, ...;
        # docs "Resource naming strategy"); HAMi's AMD device (charts/hami device-configmap:
        # amd.com/gpucores, amd.com/gpumem).
        resources=(
            "amd.com/gpu",
            "amd.com/gpucores",
            "amd.com/gpumem",
            "amd.com/spx_nps*",
            "amd.com/dpx_nps*",
            "amd.com/qpx_nps*",
            "amd.com/cpx_nps*",
        ),
        noun="AMD GPU",
        request="amd.com/gpu",
        # ROCm/container-toolkit internal/oci/oci.go getAMDEnv: AMD_VISIBLE_DEVICES, and any
        # DOCKER_RESOURCE_* variable (Docker Swarm's generic resources), the last one wins.
        device_env=("AMD_VISIBLE_DEVICES",),
        device_env_prefixes=("DOCKER_RESOURCE_",),
        # No dedicated word: internal/gpu-tracker/gpu-tracker.go parseGPUsList takes "all",
        # indexes, ranges and unique ids, and ignores anything else ("Ignoring ... GPUs as they
        # are invalid"), so "void" alone names no GPU and the runtime adds none (isAddNoGPUs);
        # beside an index or a range it is ignored (core/families/visible.py amd_selects).
        void="void",
        void_env=("AMD_VISIBLE_DEVICES",),
        selection="amd",
        # ROCm/k8s-device-plugin internal/pkg/plugin/plugin.go Allocate (at ed76468) answers
        # with device nodes only (/dev/kfd, /dev/dri/card<N>, /dev/dri/renderD<N>), no env; the
        # DRA driver hands devices through CDI: an AMD device container's AMD_VISIBLE_DEVICES is
        # its image's (`all` in ROCm's images) unless written. HAMi's AMD support sets none
        # either (Project-HAMi/HAMi pkg/, at 4707fb0).
        void_in_devices=True,
        # /dev/kfd and the GPU's /dev/dri render and card nodes (container-toolkit README,
        # "Explicit Paths"; internal/oci/oci.go addGPUDevices).
        device_paths=("/dev/kfd", "/dev/dri"),
        placement="rocm",
        # ROCm/k8s-gpu-dra-driver deployments/helm/k8s-gpu-dra-driver/templates/deviceclass.yaml
        # (at 4482249): DeviceClass gpu.amd.com, `device.driver == 'gpu.amd.com'`.
        device_classes=("gpu.amd.com",),
    ),
    Family(
        name="ascend",
        vendor="Ascend",
        # Ascend device plugin (Ascend/mind-cluster): huawei.com/Ascend910, Ascend910B..,
        # Ascend310P, Ascend310, huawei.com/npu, and the vNPU templates
        # huawei.com/Ascend910-<template> (Ascend310P-<template>); HAMi's
        # (charts/hami device-configmap: huawei.com/Ascend910B3, -memory, -core, ...).
        resources=("huawei.com/Ascend*", "huawei.com/npu*"),
        noun="NPU",
        request="huawei.com/Ascend910",
        # Ascend/ascend-docker-runtime hook/main.go doPrestartHook: ASCEND_VISIBLE_DEVICES names
        # the NPUs the hook mounts (ASCEND_RUNTIME_OPTIONS/ASCEND_RUNTIME_MOUNTS only qualify it).
        device_env=("ASCEND_VISIBLE_DEVICES",),
        # The hook returns without mounting any device when the value is empty; any other word
        # ("void") fails its parseDevices and with it the container's start. HAMi writes the
        # same empty value into containers without an NPU (pkg/device/ascend/device.go
        # MutateAdmission, overwriteEnv).
        void="",
        void_env=("ASCEND_VISIBLE_DEVICES",),
        selection="ascend",
        # Ascend/ascend-docker-runtime up to v5.0.0-RC3.2 reads the first ASCEND_VISIBLE_DEVICES
        # entry (hook/main.go doPrestartHook up to v3.0.0, runtime/main.go addDevice from
        # e9b3dbd: getValueByKey), v5.0.0 the first naming `Ascend` (runtime/main.go
        # getValueByDeviceKey, a478742); MindCluster from v6.0.0-RC3 the last (Ascend/mind-cluster
        # component/ascend-docker-runtime/runtime/process/process.go getValueByDeviceKey).
        # ASCEND_RUNTIME_OPTIONS and ASCEND_RUNTIME_MOUNTS (above) select no NPU.
        # docs/concepts/gpu-access.md "Ascend runtime builds" names the builds.
        first_entry_env=("ASCEND_VISIBLE_DEVICES",),
        # /dev/davinci<N>, /dev/davinci_manager, /dev/devmm_svm, /dev/hisi_hdc (the nodes the
        # hook mounts; ascend-docker-runtime README and cli/src/u_mount.c); MindCluster's
        # runtime adds /dev/vdavinci<N> (vNPUs), /dev/dvpp_cmdlist, and every node under
        # /dev/uburma and /dev/ummu (Ascend/mind-cluster component/ascend-docker-runtime/runtime/
        # process/process.go getMountPath, addManagerDevice, addUBDevice).
        device_paths=(
            "/dev/davinci",
            "/dev/vdavinci",
            "/dev/devmm_svm",
            "/dev/hisi_hdc",
            "/dev/dvpp_cmdlist",
            "/dev/uburma",
            "/dev/ummu",
        ),
        placement="cann",
    ),
    Family(
        name="intel",
        vendor="Intel",
        # intel/intel-device-plugins-for-kubernetes GPU plugin: gpu.intel.com/i915,
        # gpu.intel.com/xe, and its shared-dev resources gpu.intel.com/millicores,
        # gpu.intel.com/memory.max, gpu.intel.com/tiles. The plugin hands the device nodes to
        # the kubelet itself: no runtime reads a device variable.
        resources=("gpu.intel.com/*",),
        noun="Intel GPU",
        request="gpu.intel.com/i915",
        device_paths=("/dev/dri",),
        # intel/intel-resource-drivers-for-kubernetes deployments/gpu/base/device-class.yaml (at
        # 7a4d31b): DeviceClasses gpu.intel.com and gpu-vfio.intel.com (GPUs bound to vfio-pci
        # for VMs), both `device.driver == "gpu.intel.com"`.
        device_classes=("gpu.intel.com", "gpu-vfio.intel.com"),
    ),
    Family(
        name="cambricon",
        vendor="Cambricon",
        # Cambricon device plugin: cambricon.com/mlu (and per-model names); HAMi's
        # (charts/hami values.yaml mluResourceName cambricon.com/vmlu,
        # cambricon.com/mlu.smlu.vmemory, mlu.smlu.vcore).
        resources=("cambricon.com/*",),
        noun="Cambricon MLU",
        request="cambricon.com/mlu",
        # /dev/cambricon_dev<N>, /dev/cambricon_ctl, /dev/cambricon_ipcm<N>: the nodes
        # Cambricon's run instructions pass with --device.
        device_paths=("/dev/cambricon",),
    ),
    Family(
        name="hygon",
        vendor="Hygon",
        # HAMi's Hygon DCU (charts/hami values.yaml dcuResourceName hygon.com/dcunum,
        # hygon.com/dcumem, hygon.com/dcucores).
        resources=("hygon.com/*",),
        noun="Hygon DCU",
        request="hygon.com/dcunum",
        # DCUs are driven through ROCm-derived nodes: /dev/kfd, /dev/mkfd, /dev/dri.
        device_paths=("/dev/kfd", "/dev/mkfd", "/dev/dri"),
    ),
    Family(
        name="iluvatar",
        vendor="Iluvatar CoreX",
        # Iluvatar's device plugin (iluvatar.ai/gpu) and HAMi's per-chip names
        # (charts/hami device-configmap: iluvatar.ai/BI-V150-vgpu, .vMem, .vCore, ...).
        resources=("iluvatar.ai/*",),
        noun="Iluvatar GPU",
        request="iluvatar.ai/gpu",
    ),
    Family(
        name="metax",
        vendor="MetaX",
        # HAMi (charts/hami device-configmap: metax-tech.com/gpu, metax-tech.com/sgpu,
        # metax-tech.com/vcore, metax-tech.com/vmemory).
        resources=("metax-tech.com/*",),
        noun="MetaX GPU",
        request="metax-tech.com/gpu",
        # /dev/mxcd and /dev/dri: MetaX's MACA run instructions.
        device_paths=("/dev/mxcd", "/dev/dri"),
    ),
    Family(
        name="enflame",
        vendor="Enflame",
        # HAMi (charts/hami device-configmap: enflame.com/gcu, enflame.com/vgcu,
        # enflame.com/drs-gcu, enflame.com/gcu-memory, enflame.com/gcu-core,
        # enflame.com/vgcu-percentage).
        resources=("enflame.com/*",),
        noun="Enflame GCU",
        request="enflame.com/gcu",
        # Enflame's container toolkit reads ENFLAME_VISIBLE_DEVICES (Enflame's run
        # instructions: `docker run -e ENFLAME_VISIBLE_DEVICES=2`), which device plugins set
        # from the allocation (e.g. Kraken/KrakenPlug on openi.pcl.ac.cn, its Enflame device's
        # GetContainerAllocateResponse).
        # No source of its parser was found: every value is read as devices, and no void is
        # written.
        device_env=("ENFLAME_VISIBLE_DEVICES",),
    ),
    Family(
        name="kunlunxin",
        vendor="Kunlunxin",
        # HAMi (charts/hami values.yaml: kunlunxin.com/xpu, kunlunxin.com/vxpu,
        # kunlunxin.com/vxpu-memory).
        resources=("kunlunxin.com/*",),
        noun="Kunlunxin XPU",
        request="kunlunxin.com/xpu",
    ),
    Family(
        name="mthreads",
        vendor="Moore Threads",
        # Moore Threads' device plugin (mthreads.com/gpu) and HAMi's (charts/hami
        # device-configmap: mthreads.com/vgpu, mthreads.com/sgpu-memory, mthreads.com/sgpu-core).
        resources=("mthreads.com/*",),
        noun="Moore Threads GPU",
        request="mthreads.com/gpu",
        # Moore Threads' mt-container-toolkit (runtime "mthreads") reads
        # MTHREADS_VISIBLE_DEVICES (its run instructions: `--env MTHREADS_VISIBLE_DEVICES=all`).
        # Its source is not public: every value is read as devices, and no void is written.
        device_env=("MTHREADS_VISIBLE_DEVICES",),
    ),
    Family(
        name="neuron",
        vendor="AWS Neuron",
        # aws-neuron device plugin: aws.amazon.com/neuron, aws.amazon.com/neuroncore,
        # aws.amazon.com/neurondevice (HAMi's device-configmap lists the first two).
        resources=("aws.amazon.com/neuron*",),
        noun="Neuron device",
        request="aws.amazon.com/neuron",
        # /dev/neuron<N>: the nodes the plugin and AWS's docker examples pass with --device.
        device_paths=("/dev/neuron",),
        # AWS's OCI hook (oci-neuron-hook; aws-neuron-sdk containers docs "tutorial-oci-hook")
        # and the ECS agent (aws/amazon-ecs-agent agent/api/container/container.go
        # neuronVisibleDevicesEnvVar) read
        # AWS_NEURON_VISIBLE_DEVICES (`ALL` or indexes). No source of the hook's parser was
        # found: every value is read as devices, and no void is written.
        device_env=("AWS_NEURON_VISIBLE_DEVICES",),
    ),
)

_BY_NAME = {f.name: f for f in FAMILIES}
# Device nodes of no one vendor: /dev/char links every character device by major:minor;
# /dev/accel is the kernel's compute-accelerator subsystem (drivers/accel); /dev/vfio hands
# whole PCI devices to a container.
_GENERIC_DEVICE_PATHS = ("/dev/char", "/dev/accel", "/dev/vfio")
DEVICE_PATHS: tuple[str, ...] = tuple(
    dict.fromkeys([p for f in FAMILIES for p in f.device_paths] + list(_GENERIC_DEVICE_PATHS))
)


# DRA device class -> the family whose devices its claims hand out.
CLASS_FAMILIES: Mapping[str, str] = MappingProxyType(
    {c: f.name for f in FAMILIES for c in f.device_classes}
)


@lru_cache(maxsize=4096)
def family_of(resource: str) -> Family | None:
    """The family whose devices `resource` counts, or None."""
    for family in FAMILIES:
        if family.counts(resource):
            return family
    return None


def family_named(name: str) -> Family | None:
    """The family called `name` (`nvidia`, `amd`, `ascend`, ...)."""
    return _BY_NAME.get(name)


def is_device_path(path: str) -> bool:
    """Whether an already normalised absolute host path reaches accelerator device nodes:
    `/`, `/dev`, or a path starting with a family's device-node prefix."""
    if path in ("/", "/dev"):
        return True
    return path.startswith(DEVICE_PATHS)
