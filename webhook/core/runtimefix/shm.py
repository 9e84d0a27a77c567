"""The /dev/shm fix (SPEC §14): a memory-backed emptyDir for accelerator pods that mount nothing
at /dev/shm, because a container runtime's 64 MiB make PyTorch DataLoader workers and NCCL fail
with "Bus error"."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Final

from webhook.core.base.errors import ObjectShapeError, QuantityError
from webhook.core.base.quantity import parse_quantity
from webhook.core.base.shapes import is_mapping
from webhook.core.config.runtime_fixes import ANNOTATION_INJECTED_SHM
from webhook.core.outcome.decision import PodState, container_label
from webhook.core.workloads.pods import ContainerRef

SHM_PATH = "/dev/shm"
VOLUME_NAME = "dshm"  # what Kubeflow's notebook spawner and most GPU examples call it
_LISTS = ("containers", "initContainers", "ephemeralContainers")
_BINARY = (("Ti", 1024**4), ("Gi", 1024**3), ("Mi", 1024**2), ("Ki", 1024))
# What a container runtime gives /dev/shm when nothing is mounted there (containerd's and
# CRI-O's sandbox shm: 64 MiB, containerd internal/cri/server defaultShmSize, CRI-O
# config default shm_size "64m"): the fix never writes less.
RUNTIME_SHM: Final = Fraction(64 * 1024 * 1024)


def field_of(value: Any, key: str) -> Any:
    """value.get(key) when value is an object, else None: a direct dict lookup for the decoded
    JSON's dicts (a method call on an untyped value is a generic attribute lookup)."""
    if type(value) is dict:
        return value.get(key)
    return value.get(key) if is_mapping(value) else None


def _mounts_shm(spec: Mapping[str, Any]) -> bool:
    """Whether any container of the spec mounts something at /dev/shm (any volume type)."""
    for list_name in _LISTS:
        containers = field_of(spec, list_name)
        for c in containers if isinstance(containers, list) else ():
            mounts = field_of(c, "volumeMounts")
            for m in mounts if isinstance(mounts, list) else ():
                path = field_of(m, "mountPath")
                if isinstance(path, str) and path.rstrip("/") == SHM_PATH:
                    return True
    return False


def _memory_limits(spec: Mapping[str, Any]) -> tuple[str | int | float, ...] | None:
    """The pod's memory limit as written: the pod-level one (`spec.resources.limits.memory`,
    PodLevelResources, KEP-2837: the pod cgroup's limit, which the kubelet then sizes a
    memory-backed emptyDir by: pkg/volume/emptydir calculateEmptyDirMemorySize ->
    cm.ResourceConfigForPod), else the app containers' limits; None when a container has
    none (or one that is no quantity's spelling: the API server will say so)."""
    pod_level = field_of(field_of(field_of(spec, "resources"), "limits"), "memory")
    if isinstance(pod_level, str | int | float) and not isinstance(pod_level, bool):
        return (pod_level,)
    found: list[str | int | float] = []
    containers = field_of(spec, "containers")
    for c in containers if isinstance(containers, list) else ():
        raw = field_of(field_of(field_of(c, "resources"), "limits"), "memory")
        if raw is None or isinstance(raw, bool) or not isinstance(raw, str | int | float):
            return None
        found.append(raw)
    return tuple(found) if found else None


def format_bytes(value: Fraction) -> str:
    """Whole bytes in the largest binary unit that divides them (`8Gi`, `1536Mi`)."""
    whole = int(value)
    for suffix, size in _BINARY:
        if whole >= size and whole % size == 0:
            return f"{whole // size}{suffix}"
    return str(whole)


def size_limit(cap: str, fraction: float, spec: Mapping[str, Any]) -> str:
    """The sizeLimit written: `cap` (the rule's `sizeLimit`), or `fraction` (its
    `memoryFraction`) of the pod's memory limit (pod-level, else the sum of the app
    containers' when every one has one) when that is smaller; never below the runtime's own
    64 MiB (RUNTIME_SHM: a smaller volume would make /dev/shm smaller than no fix). A
    memory-backed emptyDir counts against the pod's memory: at most
    min(sizeLimit, sum of the containers' memory limits) is usable (k8s.io/api core/v1
    EmptyDirVolumeSource.SizeLimit; kubelet pkg/volume/emptydir calculateEmptyDirMemorySize),
    so a /dev/shm as large as the limit would let shared memory alone get the pod
    OOM-killed."""
    limits = _memory_limits(spec)
    if limits is None:
        return cap
    return _sized(limits, fraction, cap)


# Pods of one workload carry the same limits: the size is worked out once per (limits as
# written, fraction, cap), the exact inputs of _sized. Bounded: emptied when full.
_SIZED: Final[dict[tuple[tuple[str | int | float, ...], float, str], str]] = {}
_SIZED_MAX: Final = 1024


def _sized(limits: tuple[str | int | float, ...], fraction: float, cap_text: str) -> str:
    """The sizeLimit for these limits (quantities are exact fractions, costly to add up on
    every review: memoized)."""
    key = (limits, fraction, cap_text)
    size = _SIZED.get(key)
    if size is None:
        if len(_SIZED) >= _SIZED_MAX:
            _SIZED.clear()
        size = _SIZED[key] = _work_out(limits, fraction, cap_text)
    return size


def _work_out(limits: tuple[str | int | float, ...], fraction: float, cap_text: str) -> str:
    try:
        total = sum((parse_quantity(raw) for raw in limits), Fraction(0))
    except QuantityError:
        return cap_text
    mib = 1024 * 1024
    share = Fraction(int(total * Fraction(fraction)) // mib * mib)
    if 0 < share < parse_quantity(cap_text):
        return format_bytes(max(share, RUNTIME_SHM))
    return cap_text


def _volume_name(spec: Mapping[str, Any]) -> str:
    volumes = field_of(spec, "volumes")
    taken = {
        field_of(v, "name") for v in (volumes if isinstance(volumes, list) else ()) if is_mapping(v)
    }
    name, n = VOLUME_NAME, 1
    while name in taken:
        n += 1
        name = f"{VOLUME_NAME}-{n}"
    return name


def _mounted_only_at_shm(spec: Mapping[str, Any], name: str) -> bool:
    """Whether the volume `name` is mounted somewhere, and only ever at /dev/shm (what the
    webhook's own volume is: it mounts it there and nowhere else)."""
    found = False
    for list_name in _LISTS:
        containers = field_of(spec, list_name)
        for c in containers if isinstance(containers, list) else ():
            mounts = field_of(c, "volumeMounts")
            for m in mounts if isinstance(mounts, list) else ():
                if field_of(m, "name") != name:
                    continue
                path = field_of(m, "mountPath")
                if not isinstance(path, str) or path.rstrip("/") != SHM_PATH:
                    return False
                found = True
    return found


def _own_volume(state: PodState) -> tuple[int, Mapping[str, Any]] | None:
    """(index, volume) of the /dev/shm volume the webhook added earlier and marked (the
    annotation names it): a memory-backed emptyDir of that name, mounted at /dev/shm and
    nowhere else. Any other volume is the user's and never changed.

    The mark is an annotation anyone who writes the pod can set. A user who marks a volume
    of their own gets the webhook's treatment of its volume and no more: the sizeLimit of a
    memory-backed emptyDir already at /dev/shm worked out again. Nothing is ever removed or
    unmounted, and a volume mounted anywhere else (a cache named in a forged mark) is not
    taken for the webhook's."""
    name = state.pod.annotations.get(ANNOTATION_INJECTED_SHM)
    volumes = field_of(state.pod.spec, "volumes")
    if not name or not isinstance(volumes, list):
        return None
    for i, v in enumerate(volumes):
        empty = field_of(v, "emptyDir")
        if field_of(v, "name") == name and field_of(empty, "medium") == "Memory":
            return (i, v) if _mounted_only_at_shm(state.pod.spec, name) else None
    return None


def _resize(state: PodState, cap: str, fraction: float, own: tuple[int, Mapping[str, Any]]) -> None:
    """Size the webhook's own volume again for the pod's memory limits as they are now (a
    reinvocation after another webhook set them, a template whose limit changed)."""
    index, volume = own
    size = size_limit(cap, fraction, state.pod.spec)
    empty = field_of(volume, "emptyDir")
    if field_of(empty, "sizeLimit") == size:
        return
    path = (*state.pod.spec_path, "volumes", index, "emptyDir")
    state.draft.set(path, "sizeLimit", size)
    state.note("shm", f"resized the webhook's /dev/shm ({volume['name']}) to {size} (shm fix)")


def apply_shm(state: PodState, cap: str, fraction: float, containers: list[ContainerRef]) -> None:
    """Mount a memory-backed emptyDir at /dev/shm in `containers` (the accelerator containers
    the rule matches; `cap` and `fraction` its sizeLimit and memoryFraction, read once per
    config by apply.py), unless the pod shares the host's IPC namespace (its /dev/shm is the
    host's) or any of its containers already mounts something there. The webhook's own
    volume (marked) is sized again instead."""
    spec = state.pod.spec
    if not containers or field_of(spec, "hostIPC") is True:
        return
    if _mounts_shm(spec):
        own = _own_volume(state) if state.pod.annotations else None
        if own is not None:
            _resize(state, cap, fraction, own)
        return
    volumes = field_of(spec, "volumes")
    if volumes is not None and not isinstance(volumes, list):
        raise ObjectShapeError(f"{state.ref}: volumes must be a list")
    name, size = _volume_name(spec), size_limit(cap, fraction, spec)
    volume = {"name": name, "emptyDir": {"medium": "Memory", "sizeLimit": size}}
    state.draft.extend(state.pod.spec_path, "volumes", [volume])
    for c in containers:
        mounts = field_of(c.container, "volumeMounts")
        if mounts is not None and not isinstance(mounts, list):
            raise ObjectShapeError(f"{state.ref} {container_label(c)}: volumeMounts must be a list")
        state.draft.extend(
            state.container_path(c), "volumeMounts", [{"name": name, "mountPath": SHM_PATH}]
        )
    if state.pod.annotatable:
        # The mark, on a template (and so on the pods made from it) as on a plain pod: the
        # next evaluation (the template with another memory limit; the pod reinvoked after
        # another webhook changed its limits, reinvocationPolicy IfNeeded) knows this volume
        # is the webhook's, not the user's, and sizes it again.
        annotations = (*state.pod.template_path, "metadata", "annotations")
        state.draft.set(annotations, ANNOTATION_INJECTED_SHM, name)
    where = ", ".join(container_label(c) for c in containers)
    state.note("shm", f"mounted a {size} memory-backed /dev/shm in {where} (shm fix)")
