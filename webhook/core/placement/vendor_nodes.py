"""What the cluster's nodes say to one vendor's gate (SPEC §13): each node's driver release and
device, read through the config's label order and the vendor's shipped tables, as counts of
distinct combinations (a handful, whatever the number of nodes), and the node selector terms
that list exactly the label values that run a pod.

These labels are not integers (`30.10.1`, `6.14.14`, `25.3.RC1`, `74a1`, `910B3`), so terms use
`In` over the values the inventory has seen; a label listed after another one is read only on
nodes without the earlier one (`DoesNotExist`), so an admin's label wins over a labeller's."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from webhook.core.config.accelerators import VendorGate
from webhook.core.placement.inventory import DRA_AMD_DRIVER
from webhook.core.placement.terms import name_term
from webhook.core.placement.vendors import Release, Vendor, covers, release_order, version_key

Term = list[dict[str, Any]]


class NodeDriver(NamedTuple):
    """One node as the gate sees it ('' keys: the node carries none of those labels)."""

    driver_key: str
    driver_value: str
    release: Release | None  # the matrix row its driver is in (None: unknown)
    problem: str  # why the driver is unknown ('' when known)
    device_key: str
    device_value: str
    device: str | None  # gfx942, 910b (None: unknown or not advertised)


@dataclass(frozen=True, slots=True)
class VendorFacts:
    vendor: Vendor
    gate: VendorGate
    total: int  # nodes carrying any of the gate's labels
    combos: Mapping[NodeDriver, int]
    nodes: Mapping[str, NodeDriver]
    # What gate.py worked out per distinct need (Want), for this snapshot: replicas and
    # repeated submissions of one image are most reviews.
    placements: dict[Any, Any] = field(default_factory=dict)


# Nodes without driver labels whose DRA ResourceSlices publish the driver (SPEC §13 "DRA
# inventory"): the amdgpu kernel module's version, as the labeller's amd.com/gpu.driver-version
# is (inventory.py with_dra_labels). Read after every configured label; such nodes carry no
# label to select them by, so their terms name them (seen_terms).
_DRA_DRIVERS = {"rocm": DRA_AMD_DRIVER}


def _labels_of(vendor: Vendor, gate: VendorGate) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = [(label.key, label.value) for label in gate.driver_labels]
    dra = _DRA_DRIVERS.get(vendor.name)
    return [*found, (dra, "kernelModule")] if dra else found


def _driver(vendor: Vendor, gate: VendorGate, labels: Mapping[str, str]) -> tuple[str, str, Any]:
    """(key, value, release row or the reason it is unknown)."""
    for key, kind in _labels_of(vendor, gate):
        value = labels.get(key)
        if value is None:
            continue
        if not value:
            return key, value, f"{key} is empty"
        release = version_key(value)
        if kind == "kernelModule":
            mapped = vendor.release_of_module(release)
            if mapped is None:
                return key, value, f"{key}={value} has no table row"
            release = mapped
        row = vendor.release_row(release)
        if row is None:
            return key, value, f"{key}={value} is not in the shipped matrix"
        return key, value, row
    return "", "", "no driver label"


def node_driver(vendor: Vendor, gate: VendorGate, labels: Mapping[str, str]) -> NodeDriver | None:
    """How the gate reads one node's labels; None when it carries none of them."""
    key, value, found = _driver(vendor, gate, labels)
    device_key = device_value = ""
    device = None
    for label in gate.device_labels:
        if label in labels:
            device_key, device_value = label, labels[label]
            device = vendor.device_of(device_value)
            break
    if not key and not device_key:
        return None
    release = found if isinstance(found, Release) else None
    problem = "" if release is not None else str(found)
    return NodeDriver(key, value, release, problem, device_key, device_value, device)


def vendor_facts(
    vendor: Vendor, gate: VendorGate
) -> Callable[[Mapping[str, Mapping[str, str]]], VendorFacts]:
    """The builder NodeInventory.memo runs once per snapshot (off every later review)."""

    def build(nodes: Mapping[str, Mapping[str, str]]) -> VendorFacts:
        combos: Counter[NodeDriver] = Counter()
        shared: dict[NodeDriver, NodeDriver] = {}
        per_node: dict[str, NodeDriver] = {}
        for name, labels in nodes.items():
            node = node_driver(vendor, gate, labels)
            if node is None:
                continue
            node = shared.setdefault(node, node)
            per_node[name] = node
            combos[node] += 1
        return VendorFacts(
            vendor,
            gate,
            sum(combos.values()),
            MappingProxyType(dict(combos)),
            MappingProxyType(per_node),
        )

    return build


class Want(NamedTuple):
    """What a pod's containers of one vendor need: runtime versions (all of them must run on
    the driver) and, per container that lists some, the devices its code is built for."""

    versions: tuple[str, ...]
    devices: tuple[tuple[str, ...], ...]

    def runs(self, release: Release | None, device: str | None = None) -> bool:
        """Whether `release` runs every version: on any device, or (a qualified row) on
        `device`, the node's (None: unknown, never assumed)."""
        return release is not None and all(
            any(covers(rt, v) for rt in release.runtimes)
            or (
                device is not None
                and any(covers(q.runtime, v) and device in q.devices for q in release.qualified)
            )
            for v in self.versions
        )

    def runs_somewhere(self, release: Release) -> bool:
        """Whether `release` runs every version on some one device (its table rows)."""
        if self.runs(release):
            return True
        devices = {d for q in release.qualified for d in q.devices}
        return any(self.runs(release, d) for d in devices)

    def fits_device(self, device: str | None, match: Callable[[str, str], bool]) -> bool:
        if not self.devices:
            return True
        return device is not None and all(any(match(w, device) for w in d) for d in self.devices)


Pair = tuple[str, str, str, str]  # (driver key, driver value, device key, device value)


def _grouped_terms(gate: VendorGate, pairs: Iterable[Pair], paired: bool = False) -> list[Term]:
    """Terms from (driver key, driver value, device key, device value) that all run the pod:
    one term per (driver key, device key), each listing its values (driver and device
    compatibility are separate, so every value pair in a term runs it). `paired`: they are
    not (a qualified release row holds for some devices only), so a term holds the driver
    values that run with the same device values."""
    per_driver: dict[tuple[str, str, str], set[str]] = {}
    for driver_key, driver_value, device_key, device_value in pairs:
        devices = per_driver.setdefault((driver_key, device_key, driver_value), set())
        if device_key:
            devices.add(device_value)
    groups: dict[tuple[str, str, frozenset[str]], tuple[set[str], set[str]]] = {}
    for (driver_key, device_key, driver_value), devices in per_driver.items():
        key = (driver_key, device_key, frozenset(devices) if paired else frozenset())
        drivers, all_devices = groups.setdefault(key, (set(), set()))
        drivers.add(driver_value)
        all_devices |= devices
    driver_keys = [d.key for d in gate.driver_labels]
    device_keys = list(gate.device_labels)
    terms: list[Term] = []
    for group in sorted(
        groups,
        key=lambda k: (
            driver_keys.index(k[0]),
            device_keys.index(k[1]) if k[1] else -1,
            sorted(k[2]),
        ),
    ):
        driver_key, device_key, _ = group
        drivers, devices = groups[group]
        term: Term = [
            {"key": k, "operator": "DoesNotExist"}
            for k in driver_keys[: driver_keys.index(driver_key)]
        ]
        term.append({"key": driver_key, "operator": "In", "values": sorted(drivers)})
        if device_key:
            term += [
                {"key": k, "operator": "DoesNotExist"}
                for k in device_keys[: device_keys.index(device_key)]
            ]
            term.append({"key": device_key, "operator": "In", "values": sorted(devices)})
        terms.append(term)
    return terms


def _fits(node: NodeDriver, want: Want, match: Callable[[str, str], bool]) -> bool:
    return bool(
        node.driver_key
        and want.runs(node.release, node.device)
        and (not want.devices or node.device_key)
        and want.fits_device(node.device, match)
    )


def fitting(facts: VendorFacts, want: Want, match: Callable[[str, str], bool]) -> list[NodeDriver]:
    return [n for n in facts.combos if _fits(n, want, match)]


def seen_terms(
    facts: VendorFacts, nodes: list[NodeDriver], with_devices: bool, want: Want | None = None
) -> list[Term]:
    """Terms listing the label values of `nodes` (the fitting ones the inventory has seen);
    nodes whose driver only DRA publishes, one term per node naming it. A node that runs
    `want` only by a qualified row (on its device) is listed with its device."""
    dra = _DRA_DRIVERS.get(facts.vendor.name)
    labelled = [n for n in nodes if n.driver_key != dra]
    # Nodes that run it only on their device (a qualified row) are paired with their device.
    qualified = [n for n in labelled if want is not None and not want.runs(n.release)]
    plain = [n for n in labelled if n not in qualified]
    terms = _grouped_terms(
        facts.gate,
        (
            (n.driver_key, n.driver_value, n.device_key if with_devices else "", n.device_value)
            for n in plain
        ),
    )
    terms += _grouped_terms(
        facts.gate,
        ((n.driver_key, n.driver_value, n.device_key, n.device_value) for n in qualified),
        paired=True,
    )
    if len(labelled) < len(nodes):
        fit = set(nodes)
        terms += [
            name_term(name)
            for name, n in sorted(facts.nodes.items())
            if n in fit and n.driver_key == dra
        ]
    return terms


def _spellings(release: str) -> list[str]:
    upper = release.replace("rc", "RC")
    return [release] if upper == release else [release, upper]


def table_terms(
    vendor: Vendor, gate: VendorGate, want: Want, match: Callable[[str, str], bool]
) -> list[Term]:
    """Terms listing every value the shipped tables know to run the pod: for a pod no node
    runs yet (an autoscaler may add one), so it waits for one rather than land anywhere."""
    drivers: list[tuple[str, str, Release]] = []
    for label in gate.driver_labels:
        if label.value == "kernelModule":
            for row in vendor.modules:
                release = vendor.release_row(row.target)
                if release is not None and want.runs_somewhere(release):
                    drivers.append((label.key, row.value, release))
        else:
            for release in vendor.releases:
                if want.runs_somewhere(release):
                    drivers += [(label.key, s, release) for s in _spellings(release.release)]
    rows = [
        r for r in vendor.devices.values() if not want.devices or want.fits_device(r.target, match)
    ]
    plain: list[Pair] = []
    qualified: list[Pair] = []
    for key, value, release in drivers:
        if want.runs(release) and not want.devices:
            plain.append((key, value, "", ""))
            continue
        # Per device (a qualified row runs it on some only).
        out = plain if want.runs(release) else qualified
        out += [
            (key, value, device_key, row.value)
            for device_key in gate.device_labels
            for row in rows
            if want.runs(release, row.target)
        ]
    return _grouped_terms(gate, plain) + _grouped_terms(gate, qualified, paired=True)


def newest(facts: VendorFacts) -> tuple[str, int] | None:
    """The newest driver release any node has, and how many nodes have it."""
    counts: Counter[str] = Counter()
    for node, n in facts.combos.items():
        if node.release is not None:
            counts[node.release.release] += n
    if not counts:
        return None
    top = max(counts, key=release_order)
    return top, counts[top]


def device_counts(facts: VendorFacts, nodes: Iterable[NodeDriver]) -> str:
    """`gfx90a (2 nodes), gfx942 (3 nodes)`: the devices of `nodes`, most first."""
    counts: Counter[str] = Counter()
    for node in nodes:
        counts[node.device or node.device_value or "unknown"] += facts.combos.get(node, 0)
    return ", ".join(f"{d} ({n} node{'s' if n != 1 else ''})" for d, n in counts.most_common())


def summary(facts: VendorFacts) -> str:
    """`6 AMD GPU nodes (amdgpu driver 30.10: 3, 6.4: 2, unknown: 1)` ('' without any)."""
    if not facts.total:
        return ""
    vendor = facts.vendor
    counts: Counter[str] = Counter()
    for node, n in facts.combos.items():
        counts[vendor.shown(node.release.release) if node.release else "unknown"] += n
    listed = ", ".join(
        f"{release}: {counts[release]}"
        for release in sorted(
            counts, key=lambda r: (r != "unknown", release_order(r)), reverse=True
        )
    )
    return f"{count_nodes(facts.total, vendor)} ({vendor.driver} {listed})"


def count_nodes(count: int, vendor: Vendor) -> str:
    """`1 AMD GPU node`, `3 AMD GPU nodes`."""
    nodes = vendor.nodes if count != 1 else vendor.nodes.removesuffix("s")
    return f"{count} {nodes}"


def node_class(node: NodeDriver, want: Want, match: Callable[[str, str], bool]) -> str:
    """`fit`, `unfit` or `unknown` (nodeclass.py): unfit when its device is known and not
    one the images are built for, or its driver release is known and runs them on no device
    or not on its known one; unknown when neither is known well enough to tell."""
    if _fits(node, want, match):
        return "fit"
    if want.devices and node.device is not None and not want.fits_device(node.device, match):
        return "unfit"
    release = node.release
    if release is not None and (
        not want.runs_somewhere(release)
        or (node.device is not None and not want.runs(release, node.device))
    ):
        return "unfit"
    return "unknown"


class Classes(NamedTuple):
    """The vendor's nodes by class (nodeclass.py), as the distinct combinations."""

    fit: list[NodeDriver]
    unfit: list[NodeDriver]
    unknown: list[NodeDriver]


def classify(facts: VendorFacts, want: Want, match: Callable[[str, str], bool]) -> Classes:
    found = Classes([], [], [])
    for node in facts.combos:
        kind = node_class(node, want, match)
        (found.fit if kind == "fit" else found.unfit if kind == "unfit" else found.unknown).append(
            node
        )
    return found


def exclusions(
    facts: VendorFacts, want: Want, match: Callable[[str, str], bool]
) -> tuple[dict[str, set[str]], dict[str, set[str]], int]:
    """The label values to keep a pod off when no node runs it (nodeclass.exclusion_terms):
    a driver value whose release runs the images on no device, and a device value the images
    are not built for. Both say so of every node that carries them, now or later; a node
    whose release runs them on other devices only (a per-GPU row) is unfit but kept off by
    neither. Also: how many nodes they keep off."""
    dra = _DRA_DRIVERS.get(facts.vendor.name)
    by_driver: dict[str, set[str]] = {}
    by_device: dict[str, set[str]] = {}
    kept_off = 0
    for node, count in facts.combos.items():
        off = False
        release = node.release
        labelled = bool(node.driver_key) and node.driver_key != dra
        if labelled and release is not None and not want.runs_somewhere(release):
            by_driver.setdefault(node.driver_key, set()).add(node.driver_value)
            off = True
        device = node.device
        built = not want.devices or device is None or want.fits_device(device, match)
        if node.device_key and not built:
            by_device.setdefault(node.device_key, set()).add(node.device_value)
            off = True
        kept_off += count if off else 0
    return by_driver, by_device, kept_off
