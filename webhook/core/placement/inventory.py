"""The node inventory (SPEC §4): label values the cluster's nodes advertise, as a snapshot.

Sources build it from a metadata-only list/watch of Nodes, keeping only the label keys that
placement reads (`WebhookConfig.inventory_label_keys`); the CLI builds it from
`kubectl get nodes -o yaml` output. Evaluation only reads it.

Everything placement asks is precomputed when the snapshot is built: counts per version and
scheme, and each node's versions for DaemonSet pods pinned to one node. A review then costs
the number of distinct versions in the cluster (a handful), never the number of nodes.
"""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar, cast

from webhook.core.base.versions import CudaVersion, label_int
from webhook.core.config.model import CudaLabels, NodeSelectorTerm, WebhookConfig
from webhook.core.placement.cuda import CUDA_11_0, driver_11_0
from webhook.core.placement.dra import DraNode

_DEFAULT_CONFIG = WebhookConfig()
T = TypeVar("T")

# The pseudo-scheme of nodes whose CUDA version comes from their DRA ResourceSlices (SPEC §13
# "DRA inventory"): such nodes carry no label to select them by, so its terms name the nodes
# (matchFields metadata.name, terms.py). It is appended to a config's schemes only when some
# node without CUDA labels has one. Its keys are never written into a pod.
# What the AMD DRA driver's `driverVersion` (the amdgpu kernel module's, core/placement/dra.py)
# is handed to the ROCm gate as: a pseudo label of DRA-only nodes (vendor_nodes.py).
DRA_AMD_DRIVER = "gpu.amd.com/driverVersion"
DRA_SCHEME = CudaLabels(
    name="DRA ResourceSlices (gpu.nvidia.com)",
    major="gpu.nvidia.com/cudaDriverVersion",
    minor="gpu.nvidia.com/cudaDriverVersion",
)


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What one node advertises: its CUDA version per scheme index, its compute capability."""

    cuda: tuple[tuple[int, CudaVersion], ...]
    compute: CudaVersion | None


@dataclass(frozen=True, slots=True)
class InventoryFacts:
    """The inventory read through one config's label schemes."""

    schemes: tuple[CudaLabels, ...]
    total: int
    labelled: int  # nodes carrying at least one CUDA scheme
    by_scheme: tuple[Mapping[CudaVersion, int], ...]  # aligned with `schemes`
    cuda: Mapping[CudaVersion, int]  # per node: the version of the first scheme it carries
    compute: Mapping[CudaVersion, int]
    nodes: Mapping[str, NodeFacts]
    # Distinct (CUDA versions per scheme, compute capability) pairs and how many nodes have
    # each, for "both on one node" and "how many nodes cannot run a DaemonSet's pods".
    combos: Mapping[tuple[tuple[tuple[int, CudaVersion], ...], CudaVersion | None], int]
    # Schemes at least one node carries, in config order: what every GPU review's terms use,
    # so worked out with the snapshot rather than per review.
    carried: tuple[CudaLabels, ...]
    # Forward compatibility: driver branch -> how many nodes match forwardCompatibleNodes and
    # advertise that branch (empty when the config names no such nodes).
    forward: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    # The same nodes by (driver branch, CUDA versions per scheme), for how many of a
    # DaemonSet's nodes forward compatibility lets run its pods.
    forward_nodes: Mapping[tuple[int, tuple[tuple[int, CudaVersion], ...]], int] = field(
        default_factory=lambda: MappingProxyType({})
    )
    # minorVersion on CUDA 11.0 nodes (cuda.driver_11_0): how many nodes advertising CUDA 11.0
    # (on every scheme they carry) have a driver ≥ 450.80.02 by their labels, and how many do
    # not label their driver.
    driver_11_0: int = 0
    unlabelled_11_0: int = 0
    # Nodes described only by DRA ResourceSlices, by version (sorted names): what the terms of
    # DRA_SCHEME and of the compute capability of such nodes select.
    dra_cuda: Mapping[CudaVersion, tuple[str, ...]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    dra_compute: Mapping[CudaVersion, tuple[str, ...]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    # NVIDIA GPU nodes (a config's gpuNodeLabels, or a compute capability) that advertise no
    # CUDA version: unknown to CUDA placement (nodeclass.py, SPEC §13 "Never strand a pod").
    unknown: int = 0
    # GPU nodes (a CUDA version, or a gpuNodeLabels key) that advertise no compute capability:
    # unknown to the compute-capability rule.
    unknown_compute: int = 0


def _version(labels: Mapping[str, str], scheme: CudaLabels) -> CudaVersion | None:
    major, minor = label_int(labels.get(scheme.major)), label_int(labels.get(scheme.minor))
    if major is None or minor is None:
        # Half-labelled nodes are not counted: the injected terms need both labels anyway
        # (except for a .0 version, where the count is only an under-estimate for messages).
        return None
    return CudaVersion(major, minor)


def _forward(
    nodes: Mapping[str, Mapping[str, str]],
    term: NodeSelectorTerm | None,
    label: str,
    schemes: tuple[CudaLabels, ...],
) -> tuple[Mapping[int, int], Mapping[tuple[int, tuple[tuple[int, CudaVersion], ...]], int]]:
    counts: Counter[int] = Counter()
    by_cuda: Counter[tuple[int, tuple[tuple[int, CudaVersion], ...]]] = Counter()
    if term is not None:
        for labels in nodes.values():
            branch = label_int(labels.get(label))
            if branch is not None and term.matches(labels):
                counts[branch] += 1
                found = ((i, _version(labels, s)) for i, s in enumerate(schemes))
                by_cuda[branch, tuple((i, v) for i, v in found if v is not None)] += 1
    return MappingProxyType(dict(counts)), MappingProxyType(dict(by_cuda))


def _names(found: Mapping[CudaVersion, list[str]]) -> Mapping[CudaVersion, tuple[str, ...]]:
    return MappingProxyType({v: tuple(sorted(names)) for v, names in found.items()})


def _facts(
    nodes: Mapping[str, Mapping[str, str]],
    schemes: tuple[CudaLabels, ...],
    compute: CudaLabels,
    dra: Mapping[str, DraNode],
    signs: frozenset[str] = frozenset(),
) -> InventoryFacts:
    # A node's labels win; its ResourceSlices are read only for what it does not label, so a
    # labelled cluster's facts (and terms) are exactly as without DRA.
    dra_cuda: dict[CudaVersion, list[str]] = {}
    dra_compute: dict[CudaVersion, list[str]] = {}
    if dra:
        schemes = (*schemes, DRA_SCHEME)
    dra_index = len(schemes) - 1
    by_scheme: list[Counter[CudaVersion]] = [Counter() for _ in schemes]
    per_node_cuda: Counter[CudaVersion] = Counter()
    compute_counts: Counter[CudaVersion] = Counter()
    facts: dict[str, NodeFacts] = {}
    # One shared NodeFacts per distinct combination: 10,000 nodes hold a handful of objects.
    shared: dict[tuple[tuple[tuple[int, CudaVersion], ...], CudaVersion | None], NodeFacts] = {}
    combos: Counter[tuple[tuple[tuple[int, CudaVersion], ...], CudaVersion | None]] = Counter()
    drivers_11_0: Counter[bool | None] = Counter()
    unknown = unknown_compute = 0
    for name, labels in nodes.items():
        # A slice of a node that is not (or no longer) a Node places nothing.
        published = dra.get(name) if dra else None
        found: list[tuple[int, CudaVersion]] = []
        for index, scheme in enumerate(schemes):
            version = (
                _version(labels, scheme)
                if scheme is not DRA_SCHEME
                else (published.cuda if published is not None and not found else None)
            )
            if version is not None:
                found.append((index, version))
                by_scheme[index][version] += 1
                if index == dra_index and published is not None:
                    dra_cuda.setdefault(version, []).append(name)
        if found:
            per_node_cuda[found[0][1]] += 1
            if all(v == CUDA_11_0 for _, v in found):
                drivers_11_0[driver_11_0(labels)] += 1
        capability = _version(labels, compute)
        if capability is None and published is not None and published.compute is not None:
            capability = published.compute
            dra_compute.setdefault(capability, []).append(name)
        if capability is not None:
            compute_counts[capability] += 1
        signed = any(k in labels for k in signs)
        if not found and (capability is not None or signed):
            unknown += 1
        if capability is None and (found or signed):
            unknown_compute += 1
        if found or capability is not None:
            key = (tuple(found), capability)
            node = shared.get(key)
            if node is None:
                node = shared[key] = NodeFacts(*key)
            facts[name] = node
            combos[key] += 1
    return InventoryFacts(
        carried=tuple(s for s, counts in zip(schemes, by_scheme, strict=True) if counts),
        schemes=schemes,
        total=len(nodes),
        labelled=sum(per_node_cuda.values()),
        by_scheme=tuple(MappingProxyType(dict(c)) for c in by_scheme),
        cuda=MappingProxyType(dict(per_node_cuda)),
        compute=MappingProxyType(dict(compute_counts)),
        nodes=MappingProxyType(facts),
        combos=MappingProxyType(dict(combos)),
        driver_11_0=drivers_11_0[True],
        unlabelled_11_0=drivers_11_0[None],
        dra_cuda=_names(dra_cuda),
        dra_compute=_names(dra_compute),
        unknown=unknown,
        unknown_compute=unknown_compute,
    )


def _node_name(obj: Mapping[str, Any]) -> str | None:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else None


def kept_labels(obj: Mapping[str, Any], keys: frozenset[str]) -> dict[str, str]:
    """The labels of a Node object that placement reads ({key: value} for `keys` only)."""
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    if not isinstance(labels, Mapping):
        return {}
    return {key: value for key in keys if isinstance(value := labels.get(key), str)}


class NodeInventory:
    """Per node name, the kept labels ({key: value}); built once per change, read per review."""

    __slots__ = ("_facts", "_last", "_memo", "dra", "nodes", "pending")

    def __init__(
        self,
        nodes: Mapping[str, Mapping[str, str]] | None = None,
        *,
        config: WebhookConfig | None = None,
        pending: bool = False,
        dra: Mapping[str, DraNode] | None = None,
    ) -> None:
        # pending: the inventory is switched on but its first list has not arrived (SPEC §4):
        # not "no inventory", so placement injects nothing rather than guess a label scheme.
        self.pending = pending
        self.nodes: Mapping[str, Mapping[str, str]] = MappingProxyType(
            {
                name: {key: sys.intern(value) for key, value in labels.items()}
                for name, labels in (nodes or {}).items()
            }
        )
        # What DRA ResourceSlices publish per node (SPEC §13), read for nodes without labels.
        self.dra: Mapping[str, DraNode] = MappingProxyType(dict(dra or {}))
        self._facts: dict[tuple[Any, ...], InventoryFacts] = {}
        self._last: tuple[WebhookConfig, InventoryFacts] | None = None
        self._memo: dict[Hashable, Any] = {}
        self.facts(config or _DEFAULT_CONFIG)  # precompute now, off the request path

    @classmethod
    def not_listed_yet(cls) -> NodeInventory:
        """The stand-in the server hands to evaluation until the first Node list arrives."""
        return cls(pending=True)

    @classmethod
    def from_objects(
        cls,
        objs: Iterable[Mapping[str, Any]],
        config: WebhookConfig | None = None,
        *,
        dra: Mapping[str, DraNode] | None = None,
    ) -> NodeInventory:
        """The snapshot of Node objects (`kubectl get nodes -o yaml` items, or the metadata-only
        PartialObjectMetadata a list returns): only `config.inventory_label_keys` are kept.

        An object without a string `metadata.name` is not a node anyone can be scheduled on
        and is left out; label values that are not strings (a hand-written file) are too.
        """
        config = config or _DEFAULT_CONFIG
        return cls.build(
            {
                name: kept_labels(obj, config.inventory_label_keys)
                for obj in objs
                if isinstance(name := _node_name(obj), str)
            },
            config=config,
            dra=dra,
        )

    @classmethod
    def build(
        cls,
        nodes: Mapping[str, Mapping[str, str]],
        *,
        config: WebhookConfig | None = None,
        dra: Mapping[str, DraNode] | None = None,
    ) -> NodeInventory:
        """The snapshot for `nodes` (name -> labels) and what DRA ResourceSlices publish for
        them (`dra`). Pass the webhook's config when it has non-default label schemes, so the
        precomputation is done here and not by a review."""
        return cls(nodes, config=config, dra=dra)

    def facts(self, config: WebhookConfig) -> InventoryFacts:
        """The precomputed view for `config`'s schemes (computed once per distinct schemes)."""
        # Every review passes the same config object: answer it by identity, since the key
        # below hashes pydantic models field by field (~1 µs per review). The config is kept
        # referenced, so its identity cannot be reused by another object meanwhile.
        last = self._last
        if last is not None and last[0] is config:
            return last[1]
        forward = (config.forward_compatible_nodes, config.driver_branch_label)
        signs = frozenset(config.gpu_node_labels)
        key = (config.schemes, config.compute_capability_labels, *forward, signs)
        facts = self._facts.get(key)
        if facts is None:
            facts = _facts(
                self.nodes, config.schemes, config.compute_capability_labels, self.dra, signs
            )
            if forward[0] is not None:
                counts, by_cuda = _forward(self.nodes, *forward, config.schemes)
                facts = dataclasses.replace(facts, forward=counts, forward_nodes=by_cuda)
            self._facts[key] = facts
        self._last = (config, facts)
        return facts

    def memo(self, key: Hashable, build: Callable[[Mapping[str, Mapping[str, str]]], T]) -> T:
        """What `build` makes of this snapshot's nodes, once per `key` (another placement rule's
        precomputed view, e.g. a vendor gate's: SPEC §13)."""
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = build(self.with_dra_labels())
        return cast(T, found)

    def with_dra_labels(self) -> Mapping[str, Mapping[str, str]]:
        """The nodes' kept labels, and for a node whose ResourceSlices publish an amdgpu driver
        version, that version under DRA_AMD_DRIVER (a key no node carries: the ROCm gate
        reads it only where the node has no driver label, and names such nodes in its terms)."""
        amd = {name: facts.amdgpu for name, facts in self.dra.items() if facts.amdgpu}
        if not amd:
            return self.nodes
        return MappingProxyType(
            {
                name: {**labels, DRA_AMD_DRIVER: amd[name]} if name in amd else labels
                for name, labels in self.nodes.items()
            }
        )

    def memo_set(self, key: Hashable, value: object) -> None:
        """Replace what memo() keeps for `key` (its builder's input changed: a new config)."""
        self._memo[key] = value

    def to_json(self, config: WebhookConfig | None = None) -> dict[str, Any]:
        """For /inventory and metrics: node counts per CUDA version and compute capability."""
        facts = self.facts(config or _DEFAULT_CONFIG)
        return {
            "nodes": facts.total,
            "labelledNodes": facts.labelled,
            "schemes": [s.label for s in facts.carried],
            "cuda": {str(v): n for v, n in sorted(facts.cuda.items(), reverse=True)},
            "computeCapability": {
                str(v): n for v, n in sorted(facts.compute.items(), reverse=True)
            },
            **({"draNodes": sum(map(len, facts.dra_cuda.values()))} if facts.dra_cuda else {}),
            **(
                {
                    "forwardCompatibleDriverBranches": {
                        str(b): n for b, n in sorted(facts.forward.items())
                    }
                }
                if facts.forward
                else {}
            ),
        }

    def __repr__(self) -> str:
        if self.pending:
            return "NodeInventory(not listed yet)"
        return f"NodeInventory({len(self.nodes)} nodes)"
