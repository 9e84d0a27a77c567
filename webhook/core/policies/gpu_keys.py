"""What a container's resource keys say about GPUs (SPEC §4 "Which containers"): the keys asked
for, whether one is a GPU resource, and those whose name says GPU or another accelerator that
no rule and no device family knows (one warning per pod, so a new device plugin is never
silently unchecked; SPEC §13)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from webhook.core.base.wording import Wording
from webhook.core.config.model import WebhookConfig
from webhook.core.families import family_of


@dataclass(slots=True)  # not a NamedTuple: built per container, and its __new__ is interpreted
class GpuKeys:
    """What a container's resource keys say (SPEC §3, §4 "Which containers")."""

    asked: set[str]  # keys asked for (a key set to zero asks for nothing)
    crl: bool  # uses a CRL group
    gpu: bool  # asks for a GPU resource (config names or patterns)
    unknown: list[str]  # asks for a resource whose name says GPU that no rule knows

    # Written out: @dataclass's own __init__ stays interpreted under mypyc (pods.ContainerRef).
    def __init__(self, asked: set[str], crl: bool, gpu: bool, unknown: list[str]) -> None:
        self.asked = asked
        self.crl = crl
        self.gpu = gpu
        self.unknown = unknown


# What in a resource name says it counts accelerator devices (SPEC §13), as the vendors' device
# plugins name them: gpu anywhere (NVIDIA, AMD, Intel, MetaX, Iluvatar, Moore Threads: vgpu,
# gpumem, ...), and at the start of a word (optionally after v for virtual) npu (Ascend and
# generic NPUs), xpu (Kunlunxin), mlu (Cambricon), dcu (Hygon), gcu (Enflame), tpu and ipu
# (Google's and Graphcore's): "output" or "multipurpose" say nothing. neuron (AWS) and
# accelerator anywhere.
_ACCELERATOR = re.compile(r"gpu|neuron|accelerator|(?:^|[^a-z])v?(?:npu|xpu|mlu|dcu|gcu|tpu|ipu)")


def says_gpu(key: str, config: WebhookConfig) -> bool:
    """An extended resource (domain-prefixed) whose name says GPU or another accelerator and
    that is not ignored."""
    if "/" not in key or key in config.ignored_gpu_resources:
        return False
    lowered = key.lower()
    # "gpu" anywhere in the key, as always (a domain such as gpu.example.com says it too).
    return "gpu" in lowered or _ACCELERATOR.search(lowered.rsplit("/", 1)[1]) is not None


def cuda_or_unknown(key: str) -> bool:
    """Whether `key` is NVIDIA's or no device family's. Such a resource that says accelerator
    (says_gpu) and no rule of the config knows is left unchecked, worth a warning, and a CRL
    group with such a key makes a CUDA container. Another vendor's devices (AMD, Ascend, ...)
    are neither: that vendor's gate places them. An NVIDIA resource the config does not name
    stays worth the warning (the config decides NVIDIA's)."""
    family = family_of(key)
    return family is None or family.placement == "cuda"


def unknown_gpu_warning(keys: list[str]) -> Wording:
    """One warning per pod spec for resources that say GPU (or another accelerator) but that no
    rule and no device family knows, so a new device plugin is never silently unchecked. The
    names stay whole; the fixed words shorten."""
    names = ", ".join(keys)
    if not any("gpu" in key.lower() for key in keys):
        # Not a GPU: gpuResourceNames (CUDA placement) is not the fix.
        verb = "is" if len(keys) == 1 else "are"
        return Wording(
            (
                f"{names} {verb} an accelerator resource no device family knows: it is not checked",
                f"unknown accelerator resource {names}: not checked",
            )
        )
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
