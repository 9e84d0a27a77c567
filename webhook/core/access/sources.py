"""GPU access control's `envFrom` route where no written void closes it (SPEC §12 "Nothing the
webhook cannot see passes as safe"). Pure; core/access/control.py judges a pod with it.

The kubelet builds a container's environment from `envFrom` first and `env` after it, and "values
defined by an Env with a duplicate key will take precedence" (k8s.io/api core/v1 types.go
`Container.EnvFrom`; kubernetes pkg/kubelet/kubelet_pods.go makeEnvironmentVariables): a fixed
name written with its void in `env` (NVIDIA_VISIBLE_DEVICES, AMD_VISIBLE_DEVICES,
ASCEND_VISIBLE_DEVICES) wins over a ConfigMap's or Secret's key of that name. Two kinds of names
no written value can close, each an *open* name of its family:

- a name prefix a runtime reads: AMD's container runtime takes every variable whose name starts
  with `DOCKER_RESOURCE_` as a device list, each one replacing the selection the previous made
  (ROCm/container-toolkit internal/oci/oci.go getAMDEnv: `strings.HasPrefix(pts[0],
  "DOCKER_RESOURCE_")`, `oci.amdDevices, err = oci.reserveGPUs(pts[1], ...)` in a loop over
  the OCI spec's env), so a ConfigMap key `DOCKER_RESOURCE_X=0-7` is read beside the written
  `AMD_VISIBLE_DEVICES=void`, and whichever comes last in the spec wins;
- the variable of a family whose runtime has no known value for "no device" (AWS Neuron's
  OCI hook, Moore Threads' and Enflame's container toolkits: catalog.py `void` None).

An envFrom `prefix` is put in front of every key (keys are never empty), so a prefix makes a
name only if the name starts with it and is longer; it makes a name of a prefix family if
either starts with the other. Names are case-sensitive (Go's `==` and HasPrefix).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from webhook.core.access.routes import AccessFinding
from webhook.core.base.shapes import is_mapping
from webhook.core.base.wording import cut
from webhook.core.families.catalog import FAMILIES, Family
from webhook.core.families.visible import selects_devices

_MAX_NAME = 32


def open_lists(family: Family) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(exact names, name prefixes) of `family`'s runtime that no written void closes."""
    return (family.device_env if family.void is None else ()), family.device_env_prefixes


def read_lists(family: Family) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(exact names, name prefixes) `family`'s runtime and sharing limiter read: what an envFrom
    of one of its device containers could set over the device plugin's values."""
    exact = (*family.device_env, *(n for n in family.limiter_env if not n.endswith("*")))
    prefixes = (*family.device_env_prefixes, *(n[:-1] for n in family.limiter_env if n[-1:] == "*"))
    return exact, prefixes


# Families with an open name, in the catalog's order (AMD, Enflame, Moore Threads, AWS Neuron).
OPEN_FAMILIES: tuple[Family, ...] = tuple(f for f in FAMILIES if any(open_lists(f)))
_OPEN_NAMES = frozenset(f.name for f in OPEN_FAMILIES)


def makes(prefix: str, exact: Iterable[str], prefixes: Iterable[str]) -> bool:
    """Whether an envFrom with `prefix` can make one of the names: an exact name longer than the
    prefix that starts with it, or a name of a prefix family."""
    return any(n.startswith(prefix) and n != prefix for n in exact) or any(
        p.startswith(prefix) or prefix.startswith(p) for p in prefixes
    )


# Device variables no void closes: those of families without a void, and name prefixes (AMD's
# DOCKER_RESOURCE_*), which no fixed name written can override.
_UNVOIDABLE = tuple(n for f in OPEN_FAMILIES for n in open_lists(f)[0])
_PREFIXES = tuple(p for f in OPEN_FAMILIES for p in open_lists(f)[1])


def unvoidable_prefix(prefixes: tuple[str, ...]) -> str:
    """The first envFrom prefix that makes names of device variables no void closes, or "" (in
    every pod: the runtime that reads them is not known where no device of its family is)."""
    for prefix in prefixes:
        if prefix and makes(prefix, _UNVOIDABLE, _PREFIXES):
            return prefix
    return ""


# The key of an image config whose open names a registry lookup did not all keep
# (registry/documents.py): never a variable's name, it holds "=".
TOO_MANY_OPEN = "="


# Device variables some runtime builds read from their first entry (catalog first_entry_env:
# Ascend's ASCEND_VISIBLE_DEVICES up to v5.0.0): on containerd the image's entry comes first, so
# the written void does not close them there.
FIRST_ENTRY_FAMILIES: tuple[Family, ...] = tuple(f for f in FAMILIES if f.first_entry_env)
FIRST_ENTRY_NAMES = frozenset(n for f in FIRST_ENTRY_FAMILIES for n in f.first_entry_env)
_FIRST_ENTRY_FAMILY_NAMES = frozenset(f.name for f in FIRST_ENTRY_FAMILIES)
# ImageQuery.runtime of a lookup made for GPU access control only (the image config's open and
# first-entry names), not for a runtime version.
ACCESS_LOOKUP = "gpu-access"


def is_open_name(name: str) -> bool:
    """Whether `name` is a device variable no void closes (everywhere, or on first-entry
    runtime builds), or TOO_MANY_OPEN: what a registry lookup keeps of an image config."""
    return (
        name in _UNVOIDABLE
        or name.startswith(_PREFIXES)
        or name == TOO_MANY_OPEN
        or name in FIRST_ENTRY_NAMES
    )


def first_entry_family(
    devices: Mapping[int, frozenset[str]], runtime_family: str, ignored: Iterable[str]
) -> Family | None:
    """The family with first-entry runtime builds whose runtime reads the pod: it has a device
    container of the family (init containers too) or runs under its vendor RuntimeClass; every
    container of such a pod runs on the family's node, under the runtime of that node (not when
    nodeSettings.envIgnored lists the family)."""
    # Most pods have no such family: answered without building a set (every review asks).
    names = {runtime_family} & _FIRST_ENTRY_FAMILY_NAMES if runtime_family else set()
    for own in devices.values():
        if not own.isdisjoint(_FIRST_ENTRY_FAMILY_NAMES):
            names |= own & _FIRST_ENTRY_FAMILY_NAMES
    if not names:
        return None
    skipped = set(ignored)
    return next((f for f in FIRST_ENTRY_FAMILIES if f.name in names - skipped), None)


def first_entry_finding(
    where: str, image: str, config_env: Mapping[str, str], family: Family, own: bool
) -> AccessFinding | None:
    """An image config (what a registry lookup read) setting a first-entry variable of `family`
    to a value its runtime reads as devices: on containerd a first-entry build keeps it over
    the written void and over the device plugin's value (`own`: a device container)."""
    for name in family.first_entry_env:
        value = config_env.get(name)
        if value is None or not selects_devices(family.selection, value):
            continue
        shown = f"{name}={cut(value, 16)}" if value.isprintable() else name
        what = f'runs image "{cut(image, 48)}" setting {shown}'
        advice = (
            f"rebuild it without {name}, or run ascend-docker-runtime v6.0.0-RC3 or later and "
            "set gpuAccess.nodeSettings.ascendRuntime: last-entry"
        )
        return AccessFinding(where, what, advice, own, family.noun)
    return None


def open_names(family: Family) -> str:
    """`DOCKER_RESOURCE_*`, `AWS_NEURON_VISIBLE_DEVICES`: the family's open names, for messages."""
    exact, prefixes = open_lists(family)
    return "/".join((*exact, *(f"{p}*" for p in prefixes)))


def env_from_sources(container: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(source as a message names it, prefix) for each envFrom entry: `configMap "cfg"`,
    `secret "s"` (`envFrom` for an entry naming neither), prefix "" for none."""
    entries = container.get("envFrom")
    found: list[tuple[str, str]] = []
    if type(entries) is not list:
        return found
    for entry in entries:
        if not is_mapping(entry):
            continue
        prefix = entry.get("prefix")
        shown = "envFrom"
        for key, kind in (("configMapRef", "configMap"), ("secretRef", "secret")):
            ref = entry.get(key)
            name = ref.get("name") if is_mapping(ref) else None
            if isinstance(name, str):
                shown = f'envFrom {kind} "{cut(name, _MAX_NAME)}"'
                break
        found.append((shown, prefix if isinstance(prefix, str) else ""))
    return found


def readers(
    devices: Mapping[int, frozenset[str]], runtime_family: str, ignored: Iterable[str]
) -> tuple[Family, ...]:
    """The families with an open name whose runtime reads the pod's containers: every container
    of a pod runs on the node its device containers need, under the runtime of that node (or of
    the pod's vendor RuntimeClass, `runtime_family`), so a sidecar's env is read as its device
    container's. Families whose nodes ignore device variables (nodeSettings.envIgnored) are not."""
    names = {runtime_family} & _OPEN_NAMES if runtime_family else set()
    for own in devices.values():
        if not own.isdisjoint(_OPEN_NAMES):
            names |= own & _OPEN_NAMES
    if not names:
        return ()
    names -= set(ignored)
    return tuple(f for f in OPEN_FAMILIES if f.name in names)


def open_finding(
    where: str, container: Mapping[str, Any], families: tuple[Family, ...]
) -> AccessFinding | None:
    """The first envFrom entry of a container without a device that can make an open name of
    `families` (the pod's readers): its keys reach the runtime unseen and no void overrides them.
    Only an unprefixed entry: a prefixed one that makes such a name is judged in every pod
    (control.unvoidable_prefix)."""
    for shown, prefix in env_from_sources(container):
        if prefix:
            continue
        family = families[0]
        return AccessFinding(
            where,
            f"uses {shown}",
            f"set an envFrom prefix: {open_names(family)} keys pick {family.noun}s",
            False,
            family.noun,
        )
    return None


def device_env_from(container: Mapping[str, Any], family: Family) -> str:
    """The first envFrom entry of a device container of `family` that can set a name its runtime
    or sharing limiter reads, as `envFrom` or `envFrom with prefix P`; "" when every entry has a
    prefix that makes none (`CFG_` cannot make AMD_VISIBLE_DEVICES or DOCKER_RESOURCE_*)."""
    exact, prefixes = read_lists(family)
    if not exact and not prefixes:
        return ""  # its runtime reads no variable (Intel: the plugin hands the nodes over)
    for _, prefix in env_from_sources(container):
        if not prefix:
            return "envFrom"
        if makes(prefix, exact, prefixes):
            return f"envFrom with prefix {cut(prefix, _MAX_NAME)}"
    return ""


def image_routes(
    where: str,
    config_env: Mapping[str, str],
    written: Iterable[str],
    own: frozenset[str],
    families: tuple[Family, ...],
    write: bool,
) -> tuple[tuple[tuple[str, str], ...], list[AccessFinding]]:
    """What an image configuration's open names need in a container (`config_env`: what a
    registry lookup read, core/images/facts.py ImageEnv; `written`: the names its env sets,
    which replace the config's in containerd and CRI-O alike; `own`: its device families;
    `families`: the pod's readers; `write`: voids are written, gpuAccess enforce with
    voidImageDevices all). Returns the (name, void) pairs to write — each DOCKER_RESOURCE_*
    name the config sets to a value AMD's parser reads as GPUs, written over with AMD's void —
    and the findings: such a name where nothing is written, a variable of a family without a
    void in a container without its device (its plugin sets its own), and a config with more
    open names than were read."""
    pins: list[tuple[str, str]] = []
    found: list[AccessFinding] = []
    names = set(written)
    for name, value in sorted(config_env.items()):
        if name == TOO_MANY_OPEN and families:
            first = families[0]
            what = f"runs an image setting more {open_names(first)} variables than are read"
            found.append(
                AccessFinding(where, what, "use another image", first.name in own, first.noun)
            )
            continue
        family = next(
            (f for f in families if name in open_lists(f)[0] or name.startswith(open_lists(f)[1])),
            None,
        )
        if family is None or name in names or not selects_devices(family.selection, value):
            continue
        if family.void is not None and write:
            pins.append((name, family.void))
        elif family.void is not None or family.name not in own:
            shown = f"{name}={cut(value, 16)}" if value.isprintable() else name
            what = f"runs an image setting {shown}"
            advice = "use another image"
            found.append(AccessFinding(where, what, advice, family.name in own, family.noun))
    return tuple(pins), found


def image_note(name: str, value: str, where: str) -> str:
    """The note saying a config's open name was written over (only AMD's have a void)."""
    return f"set {name}={value} in {where}: its image's value would choose its AMD GPUs"
