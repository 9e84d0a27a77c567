"""How each vendor's runtime reads its device-selection variables (SPEC §12 "Read a value as its
runtime reads it"): one parser per runtime, keyed from the catalog (`Family.selection`), each
citing the source it follows. A parser answers whether a value, as that runtime reads it, hands
the container devices; a value the webhook cannot see (`valueFrom`) always may.

Which entry of a name wins: the kubelet resolves a container's `env` into one value per name,
the last entry of a name winning (pkg/kubelet/kubelet_pods.go makeEnvironmentVariables keeps a
map), and appends a Service link's variables only under names the container does not set.
CRI-O (server/container_create.go mergeEnvs) adds an image config entry only under a name the
pod does not set. containerd does not: internal/cri/server/container_create.go buildLinuxSpec
(1.x: pkg/cri/server/container_create_linux.go) passes the image's entries, then the pod's, to
one oci.WithEnv, and pkg/oci/spec_opts.go replaceOrAppendEnvValues replaces only names of the
default spec, so a name both set is in the OCI spec twice, the image's first
(containerd/containerd#7348, #13929). The readers here take the last entry (NVIDIA's map, AMD's
getAMDEnv, MindCluster's getValueByDeviceKey), so a written void wins. Ascend/ascend-docker-runtime
up to v5.0.0-RC3.2 takes the first (hook/main.go, runtime/main.go getValueByKey) and v5.0.0 the
first naming `Ascend` (runtime/main.go getValueByDeviceKey): there the image's value wins on
containerd (docs/concepts/gpu-access.md names the builds). GPU access control judges every
entry of a name the pod writes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from types import MappingProxyType

# Go's strings.TrimSpace (unicode.IsSpace): the ASCII spaces, NEL, NBSP and the Unicode space
# separators. Python's str.strip() also strips \x1c-\x1f, which Go keeps: `void\x1f` is not
# `void` to NVIDIA's toolkit.
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"  # noqa: E501
# Go's strconv.Atoi: an optional sign and ASCII digits, nothing else (no spaces, no "_").
_ATOI = re.compile(r"[+-]?[0-9]+\Z")
_HEX = re.compile(r"[0-9a-fA-F]+\Z")


def go_trim_space(text: str) -> str:
    """`text` as Go's strings.TrimSpace returns it."""
    return text.strip(_GO_SPACE)


def _atoi(text: str) -> int | None:
    return int(text) if _ATOI.match(text) else None


def nvidia_selects(value: str) -> bool:
    """NVIDIA's toolkit (nvidia-container-toolkit internal/config/image/cuda_image.go
    DevicesFromEnvvars, devices.go NewVisibleDevices): the value is split on ",", each item
    trimmed with Go's TrimSpace, empty items dropped; no item left, or an item exactly `void`
    or `none` (case-sensitive: `VOID`, `Void` and `void\\x1f` are device names), selects no
    device; otherwise `all` or the named devices. The same parser reads
    NVIDIA_IMEX_CHANNELS; the MIG variables make the hook refuse any unprivileged container."""
    items = [go_trim_space(item) for item in value.split(",")]
    items = [item for item in items if item]
    return bool(items) and "void" not in items and "none" not in items


def amd_selects(value: str) -> bool:
    """AMD's container runtime (ROCm/container-toolkit internal/oci/oci.go getAMDEnv, which
    hands each AMD_VISIBLE_DEVICES or DOCKER_RESOURCE_* value to internal/gpu-tracker/
    gpu-tracker.go parseGPUsList; the last such entry wins): the whole value `all`, `All` or
    `ALL` is every GPU; otherwise each ","-separated item, untrimmed, is a unique id (`0x...`,
    or more than 8 hex digits), a range `a-b` of non-negative integers, or an index; anything
    else, `void` included, is ignored ("Ignoring ... GPUs as they are invalid") — so
    `0-7,void` is GPUs 0 to 7, and a value selects no device only when no item is one of
    these."""
    if value in ("all", "All", "ALL"):
        return True
    for item in value.split(","):
        if item[:2] in ("0x", "0X") or (len(item) > 8 and _HEX.match(item)):
            return True  # a unique id: the node's own ids decide; any may be one
        if "-" in item:
            start, end = item.split("-", 1)
            low, high = _atoi(start), _atoi(end)
            if low is not None and high is not None and 0 <= low <= high:
                return True
        else:
            index = _atoi(item)
            if index is not None and index >= 0:
                return True
    return False


def ascend_selects(value: str) -> bool:
    """Ascend's runtime: MindCluster's ascend-docker-runtime (Ascend/mind-cluster
    component/ascend-docker-runtime/runtime/process/process.go checkVisibleDevice, which reads
    the last ASCEND_VISIBLE_DEVICES entry) mounts nothing for an empty value or exactly `void`
    and parses anything else as `Ascend<chip>-<n>` names or indexes and ranges, failing the
    container on an error; the older Ascend/ascend-docker-runtime hook (hook/main.go
    doPrestartHook, the first entry) mounts nothing for an empty value and fails on any word.
    Only the empty value is no device on both (it is the void written); `void` is none too."""
    return value not in ("", "void")


def any_value_selects(value: str) -> bool:
    """A runtime whose parser the webhook has no source for (AWS Neuron's OCI hook, Moore
    Threads' and Enflame's container toolkits): every value may select devices."""
    return True


def hami_core_disables(value: str) -> bool:
    """HAMi-core's GPU_CORE_UTILIZATION_POLICY (Project-HAMi/HAMi-core src/multiprocess/
    multiprocess_memory_limit.c set_env_utilization_switch): exactly `disable` or `DISABLE`
    switches the core limiter off; `force`/`FORCE` forces it on; anything else is `default`."""
    return value in ("disable", "DISABLE")


# Family.selection -> its runtime's parser.
PARSERS: Mapping[str, Callable[[str], bool]] = MappingProxyType(
    {
        "nvidia": nvidia_selects,
        "amd": amd_selects,
        "ascend": ascend_selects,
        "any": any_value_selects,
    }
)


def selects_devices(selection: str, value: str) -> bool:
    """Whether `value` hands devices to the container, read as the runtime `selection` (a
    PARSERS key) reads it; an unknown key reads every value as devices."""
    parser = PARSERS.get(selection, any_value_selects)
    return parser(value)


# A sharing limiter's control -> its reader's parser, saying whether a value raises or
# switches off the limit (a control not listed: every value does).
LIMITER_PARSERS: Mapping[str, Callable[[str], bool]] = MappingProxyType(
    {"GPU_CORE_UTILIZATION_POLICY": hami_core_disables}
)
