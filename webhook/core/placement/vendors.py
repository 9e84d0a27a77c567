"""Vendors as data (SPEC §13): the shipped driver-release tables of AMD ROCm and Huawei Ascend
CANN (webhook/data/accelerators.yaml, a source per row), read once, and what one vendor's
tables say about an image and about a node's labels. The engine that places pods with them is
gate.py; nothing here is specific to one vendor."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from types import MappingProxyType
from typing import Any, NamedTuple

from webhook.core.base.manifests import load_yaml_documents
from webhook.core.base.shapes import is_mapping
from webhook.core.config.accelerators import AcceleratorImage, Accelerators, VendorGate
from webhook.core.families import family_named
from webhook.core.images.references import MAX_REFERENCE_LENGTH, normalize, split_tag

DATA_FILE = "accelerators.yaml"


class VendorDataError(ValueError):
    """The shipped vendor file is malformed (a test loads it: never shipped broken)."""


def version_key(value: str) -> str:
    """Versions compare case-insensitively ("8.3.RC1" is "8.3.rc1"), without a leading v."""
    value = value.strip().lower()
    return value[1:] if value.startswith("v") and value[1:2].isdigit() else value


def covers(row: str, value: str, separators: str = ".") -> bool:
    """Whether a table row names `value`: the same version, or one of its patch versions (the
    row '6.4' covers '6.4.1'; with separators '.-', '6.14.14' covers '6.14.14-2204008')."""
    if value == row:
        return True
    return value.startswith(row) and value[len(row) : len(row) + 1] in tuple(separators)


def _order_part(part: str) -> tuple[int, int, str]:
    return (1, int(part), "") if part.isdigit() else (0, 0, part)


def release_order(release: str) -> tuple[tuple[int, int, str], ...]:
    """Newest last: numeric parts as numbers, and a release candidate before its release."""
    return tuple(_order_part(p) for p in re.split(r"[.-]", release))


def device_matches(wanted: str, device: str) -> bool:
    """An image's target `gfx94X` (a family: X for any last digit) or `gfx942`; a chip name."""
    if wanted.endswith("X") and len(wanted) == len(device):
        return device.startswith(wanted[:-1])
    return wanted == device


class Row(NamedTuple):
    value: str
    target: str  # a release (modules), or a device (devices)
    source: str


class Qualified(NamedTuple):
    """A runtime a driver release runs only on some devices (the GPUs a source pairs them
    for): a node whose device is unknown, or another, is not placed by it."""

    runtime: str
    devices: tuple[str, ...]
    source: str


class Release(NamedTuple):
    release: str
    runtimes: tuple[str, ...]  # on every device
    source: str
    # Rows of the same release with `devices` (accelerators.yaml): runtimes on those only.
    qualified: tuple[Qualified, ...] = ()


class KnownImages(NamedTuple):
    """Shipped knowledge for one image family: release in the tag -> runtime version."""

    repositories: frozenset[str]
    tag: re.Pattern[str]
    releases: Mapping[str, str]
    default_devices: tuple[str, ...]
    source: str
    # The tag's device word -> the device (vllm-ascend's `-a5` images are Ascend 950 builds).
    device_names: Mapping[str, str] = MappingProxyType({})


class ImageFinding(NamedTuple):
    """What an image says about its runtime: version (None: unknown), devices, and how."""

    version: str | None
    devices: tuple[str, ...]
    source: str


@dataclass(frozen=True, slots=True, eq=False)
class Vendor:
    """One vendor's shipped data: how messages name things, which containers, the tables.
    Hashed by identity (the image cache's key): one object per vendor per process."""

    name: str  # "rocm", "cann": the config key, the placement rule's name
    runtime: str  # ROCm
    driver: str  # amdgpu driver
    device: str  # GPU target
    nodes: str  # AMD GPU nodes
    annotation: str
    shown_components: int  # 2: ROCm 7.0.1 is shown as 7.0; 0: as written
    env_version: tuple[str, ...]
    env_devices: tuple[str, ...]
    tags: tuple[re.Pattern[str], ...]
    device_tags: tuple[re.Pattern[str], ...]
    modules: tuple[Row, ...]
    releases: tuple[Release, ...]
    devices: Mapping[str, Row]  # label value (lower case) -> row
    images: tuple[KnownImages, ...]

    def shown(self, version: str) -> str:
        parts = version.split(".")
        if self.shown_components and len(parts) > self.shown_components:
            version = ".".join(parts[: self.shown_components])
        return re.sub(r"rc(?=\d)", "RC", version)

    def release_of_module(self, value: str) -> str | None:
        for row in self.modules:
            if covers(row.value, value, ".-"):
                return row.target
        return None

    def release_row(self, release: str) -> Release | None:
        """The row of the driver release `release` ('30.10.1' -> the '30.10' row). Where
        several rows cover it (Huawei's '25.5.X' column and the '25.5.1' pairing of an older
        release note), one row holding what they all say, named by the most specific."""
        found = [row for row in self.releases if covers(row.release, release, ".-")]
        if len(found) <= 1:
            return found[0] if found else None
        found.sort(key=lambda row: len(row.release), reverse=True)
        return Release(
            found[0].release,
            tuple(dict.fromkeys(rt for row in found for rt in row.runtimes)),
            "; ".join(dict.fromkeys(row.source for row in found)),
            tuple(q for row in found for q in row.qualified),
        )

    def device_of(self, value: str) -> str | None:
        """The device a node label value names; `Ascend910B3` is read as `910B3` (npu-smi
        and CANN spell the SoC with the prefix, mind-cluster's chip-name label without)."""
        key = value.lower()
        row = self.devices.get(key) or self.devices.get(key.removeprefix("ascend"))
        return row.target if row is not None else None

    def image(self, image: str, table: Sequence[AcceleratorImage]) -> ImageFinding | None:
        return _image_finding(self, image, tuple(table))


def _strings(data: Any, field: str, where: str) -> tuple[str, ...]:
    value = data.get(field, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise VendorDataError(f"{where}: {field} must be a list of strings")
    return tuple(value)


def _text(data: Any, field: str, where: str) -> str:
    value = data.get(field)
    if not isinstance(value, str) or not value:
        raise VendorDataError(f"{where}: {field} must be a non-empty string")
    return value


def _rows(data: Any, field: str, target: str, where: str) -> tuple[Row, ...]:
    items = data.get(field, [])
    if not isinstance(items, list):
        raise VendorDataError(f"{where}: {field} must be a list")
    return tuple(
        Row(
            _text(item, "value", f"{where} {field}[{i}]"),
            _text(item, target, f"{where} {field}[{i}]"),
            _text(item, "source", f"{where} {field}[{i}]"),
        )
        for i, item in enumerate(items)
    )


def _add_release(
    releases: dict[str, Release],
    release: str,
    runtimes: tuple[str, ...],
    devices: tuple[str, ...],
    source: str,
    at: str,
    *,
    admin: bool = False,
) -> None:
    """One table row into `releases` (by release). A row that holds only for some devices
    joins its release's row as qualified; an admin's row adds its runtimes to a shipped one."""
    release = version_key(release)
    runtimes = tuple(version_key(v) for v in runtimes)
    row = releases.get(release) or Release(release, (), source)
    if devices:
        more = tuple(Qualified(r, devices, source) for r in runtimes)
        releases[release] = row._replace(qualified=row.qualified + more)
    elif row.runtimes and not admin:
        raise VendorDataError(f"{at}: a second row of release {release} without devices")
    elif row.runtimes:
        joined = tuple(dict.fromkeys((*row.runtimes, *runtimes)))
        releases[release] = row._replace(runtimes=joined, source=f"{row.source}; {source}")
    else:
        releases[release] = row._replace(runtimes=runtimes, source=source)


def _vendor(data: Any, where: str) -> Vendor:
    if not is_mapping(data):
        raise VendorDataError(f"{where} must be a mapping")
    releases: dict[str, Release] = {}
    for i, item in enumerate(data.get("releases") or []):
        at = f"{where} releases[{i}]"
        _add_release(
            releases,
            _text(item, "release", at),
            _strings(item, "runtimes", at),
            _strings(item, "devices", at),
            _text(item, "source", at),
            at,
        )
    images = []
    for i, item in enumerate(data.get("images") or []):
        at = f"{where} images[{i}]"
        known = {
            _text(r, "release", at): version_key(_text(r, "version", at))
            for r in item.get("releases") or []
        }
        names = item.get("deviceNames") or {}
        if not is_mapping(names) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in names.items()
        ):
            raise VendorDataError(f"{at}: deviceNames must map strings to strings")
        images.append(
            KnownImages(
                frozenset(_strings(item, "repositories", at)),
                re.compile(_text(item, "tag", at)),
                MappingProxyType(known),
                _strings(item, "defaultDevices", at),
                _text(item, "source", at),
                MappingProxyType(dict(names)),
            )
        )
    shown = data.get("shownComponents", 0)
    return Vendor(
        name=_text(data, "name", where),
        runtime=_text(data, "runtime", where),
        driver=_text(data, "driver", where),
        device=_text(data, "device", where),
        nodes=_text(data, "nodes", where),
        annotation=_text(data, "annotation", where),
        shown_components=shown if isinstance(shown, int) else 0,
        env_version=_strings(data, "envVersion", where),
        env_devices=_strings(data, "envDevices", where),
        tags=tuple(re.compile(p) for p in _strings(data, "tags", where)),
        device_tags=tuple(re.compile(p) for p in _strings(data, "deviceTags", where)),
        modules=tuple(
            Row(version_key(r.value), version_key(r.target), r.source)
            for r in _rows(data, "modules", "release", where)
        ),
        releases=tuple(releases.values()),
        devices=MappingProxyType(
            {r.value.lower(): r for r in _rows(data, "devices", "device", where)}
        ),
        images=tuple(images),
    )


def load_vendors(text: str, where: str) -> tuple[Vendor, ...]:
    documents = load_yaml_documents(text, where)
    data = documents[0] if documents else None
    if not is_mapping(data) or not isinstance(data.get("vendors"), list):
        raise VendorDataError(f"{where}: expected a mapping with a `vendors` list")
    return tuple(_vendor(v, f"{where} vendors[{i}]") for i, v in enumerate(data["vendors"]))


@lru_cache(maxsize=1)
def shipped_vendors() -> tuple[Vendor, ...]:
    """The package's own file, read once per process."""
    text = resources.files("webhook").joinpath("data", DATA_FILE).read_text(encoding="utf-8")
    return load_vendors(text, f"webhook/data/{DATA_FILE}")


def vendor_of(families: frozenset[str], accelerators: Accelerators) -> Vendor | None:
    """The vendor whose gate applies to a container requesting devices of `families` (the
    device families module names each family's placement rule), enabled gates only: its
    tables in force (the shipped rows and the config's, `in_force`)."""
    for name in sorted(families):
        family = family_named(name)
        vendor = _by_name().get(family.placement) if family is not None else None
        gate = accelerators.gate(vendor.name) if vendor is not None else None
        if vendor is not None and gate is not None and gate.enabled:
            return in_force(vendor, gate)
    return None


# (vendor name, id(gate)) -> (gate, vendor with the gate's rows): one object per config, so
# the image cache and the inventory's per-snapshot facts (keyed by identity) stay shared.
_IN_FORCE: dict[tuple[str, int], tuple[VendorGate, Vendor]] = {}


def in_force(vendor: Vendor, gate: VendorGate) -> Vendor:
    """`vendor` with the rows the admin added in the config (SPEC §13: admins extend every
    table, rows added to the shipped ones): an admin's module and device rows are read before
    the shipped ones of the same value, an admin's release row adds its runtimes."""
    if not (gate.modules or gate.releases or gate.devices):
        return vendor
    key = (vendor.name, id(gate))
    hit = _IN_FORCE.get(key)
    if hit is not None and hit[0] is gate:
        return hit[1]
    merged = _with_rows(vendor, gate)
    if len(_IN_FORCE) >= 32:  # configs reloaded many times: keep the newest only
        _IN_FORCE.clear()
    _IN_FORCE[key] = (gate, merged)
    return merged


def _with_rows(vendor: Vendor, gate: VendorGate) -> Vendor:
    releases = {r.release: r for r in vendor.releases}
    for i, row in enumerate(gate.releases):
        _add_release(
            releases,
            row.release,
            row.runtimes,
            row.devices,
            f"config: {row.source}",
            f"{vendor.name}.releases[{i}]",
            admin=True,
        )
    modules = tuple(
        Row(version_key(m.value), version_key(m.release), f"config: {m.source}")
        for m in gate.modules
    )
    devices = dict(vendor.devices)
    for d in gate.devices:
        devices[d.value.lower()] = Row(d.value, d.device, f"config: {d.source}")
    return Vendor(
        name=vendor.name,
        runtime=vendor.runtime,
        driver=vendor.driver,
        device=vendor.device,
        nodes=vendor.nodes,
        annotation=vendor.annotation,
        shown_components=vendor.shown_components,
        env_version=vendor.env_version,
        env_devices=vendor.env_devices,
        tags=vendor.tags,
        device_tags=vendor.device_tags,
        modules=modules + vendor.modules,
        releases=tuple(releases.values()),
        devices=MappingProxyType(devices),
        images=vendor.images,
    )


@lru_cache(maxsize=1)
def _by_name() -> Mapping[str, Vendor]:
    return MappingProxyType({v.name: v for v in shipped_vendors()})


def vendor_named(name: str) -> Vendor | None:
    """The shipped vendor called `name` ('rocm', 'cann'), None for any other name."""
    return _by_name().get(name)


# --- images ---------------------------------------------------------------------------------


@lru_cache(maxsize=256)
def _devices_in(value: str) -> tuple[str, ...]:
    """`gfx90a;gfx942:xnack-` -> (gfx90a, gfx942): a target id's features (after `:`,
    LLVM's AMDGPU target ids) run on the same target."""
    return tuple(d.split(":", 1)[0] for d in re.split(r"[;,\s]+", value.strip()) if d)


@lru_cache(maxsize=4096)
def _image_finding(
    vendor: Vendor, image: str, table: tuple[AcceleratorImage, ...]
) -> ImageFinding | None:
    """What the reference alone says (admin table, tag, shipped knowledge); cached per image."""
    if len(image) > MAX_REFERENCE_LENGTH:
        return None
    ref = normalize(image)
    if ref is None:
        return None
    for entry in table:
        if re.fullmatch(fnmatch.translate(normalize(entry.image) or entry.image), ref):
            return ImageFinding(version_key(entry.version), entry.devices, f"image table {image}")
    devices: list[str] = []
    for pattern in vendor.device_tags:
        devices += [m["devices"] for m in pattern.finditer(ref)]
    for pattern in vendor.tags:
        match = pattern.search(ref)
        if match is not None:
            found = match.groupdict().get("devices")
            return ImageFinding(
                version_key(match["version"]),
                tuple(dict.fromkeys([*devices, *([found] if found else [])])),
                f"image {image}",
            )
    repository, tag = split_tag(ref)
    for known in vendor.images:
        if repository not in known.repositories:
            continue
        match = known.tag.fullmatch(tag)
        if match is None or match["release"] not in known.releases:
            continue
        chip = match.groupdict().get("devices")
        return ImageFinding(
            known.releases[match["release"]],
            (known.device_names.get(chip, chip),) if chip else known.default_devices,
            f"{image}: {known.source}",
        )
    if devices:
        return ImageFinding(None, tuple(dict.fromkeys(devices)), f"image {image}")
    return None


def _env_devices(vendor: Vendor, env: Mapping[str, str | None]) -> tuple[str, ...] | None:
    for name in vendor.env_devices:
        value = env.get(name)
        if value:
            return _devices_in(value)
    return None


def _env_version(vendor: Vendor, env: Mapping[str, str | None]) -> tuple[str, str] | None:
    """(version, 'NAME=value') of the first version variable that holds one."""
    for name in vendor.env_version:
        value = env.get(name)
        if value and re.fullmatch(r"\d{1,2}\.\d{1,2}(\.\d{1,3})?", value.strip()):
            return version_key(value), f"{name}={value.strip()}"
    return None


def container_finding(
    vendor: Vendor,
    container: Mapping[str, Any],
    env: Mapping[str, str | None],
    gate: VendorGate,
    image_env: Mapping[str, Mapping[str, str]] | None = None,
) -> ImageFinding | None:
    """A container's runtime (SPEC §13 order after the pod annotation, CUDA's of SPEC §4): env
    as written, then the admin table, the tag, the shipped knowledge, and last the image's
    config read from its registry (`image_env`: image -> its vendor variables, what a lookup
    found for an image the others leave unknown). Devices from the container's env win over
    the config's, and the config's over the tag's (the targets the image was built for)."""
    image = container.get("image")
    found = vendor.image(image, gate.image_table) if isinstance(image, str) and image else None
    devices = found.devices if found is not None else ()
    written = _env_devices(vendor, env)
    if written is not None:
        devices = written
    version = _env_version(vendor, env)
    if version is not None:
        return ImageFinding(version[0], devices, f"env {version[1]}")
    config = image_env.get(image) if image_env and isinstance(image, str) else None
    if config is not None and (found is None or found.version is None):
        version = _env_version(vendor, config)
        if version is not None:
            built = _env_devices(vendor, config) if written is None else None
            return ImageFinding(
                version[0], devices if built is None else built, f"image config {version[1]}"
            )
    if found is None:
        return ImageFinding(None, devices, "") if devices else None
    return found._replace(devices=devices)
