"""The node inventory source (SPEC §4): a metadata-only list/watch of Nodes → NodeInventory.

Only the label values of `WebhookConfig.inventory_label_keys` are kept, per node, as a tuple in
the order of `keys` (None where a node lacks the label); equal tuples and label strings are
shared, so 10,000 nodes cost a node name and a pointer each. Nodes are requested as
PartialObjectMetadata: a Node's status (images, conditions) never reaches the process, and a
status heartbeat arrives as an event whose projection is unchanged, so it publishes nothing.
The inventory never gates readiness: until the first list (or when Nodes cannot be read)
`store.inventory` stays None and placement works as without an inventory.

DRA ResourceSlices (SPEC §13 "DRA inventory") are a second reflector feeding the same
inventory: of each slice of `gpu.nvidia.com` or `gpu.amd.com` that names its node, the node
and three attributes are kept (core/placement/dra.py), nothing else. Slices are listed whole
(the attributes are in `spec`, which a metadata-only request does not carry); each page is
dropped once projected. Whichever source publishes rebuilds the inventory from both parts.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from webhook.core.config.model import WebhookConfig
from webhook.core.placement.dra import DraNode, merge_nodes, slice_facts
from webhook.core.placement.inventory import NodeInventory
from webhook.sources.reflector import Reflector
from webhook.sources.store import PolicyStore
from webhook.sources.watched import Key, Watched, copy_text

Labels = tuple[str | None, ...]

NODES = Watched(
    kind="Node",
    path="/api/v1/nodes",
    what="Nodes",
    metadata_only=True,
    optional=True,
    snapshot="node inventory",
    rbac_hint=(
        "grant the webhook's service account get, list and watch on nodes (the Helm chart's "
        "ClusterRole does this unless config.nodeInventory is false); until then CUDA placement "
        "works as without a node inventory"
    ),
)


# k8s.io/api resource/v1 types.go: ResourceSlice{Spec ResourceSliceSpec{Driver, NodeName,
# Devices []Device{Attributes}}}, plural "resourceslices" (GA in Kubernetes 1.34).
SLICES = Watched(
    kind="ResourceSlice",
    path="/apis/resource.k8s.io/v1/resourceslices",
    what="ResourceSlices (resource.k8s.io/v1)",
    optional=True,
    snapshot="DRA node inventory",
    rbac_hint=(
        "grant the webhook's service account get, list and watch on resourceslices in "
        "resource.k8s.io (the Helm chart's ClusterRole does this unless config.nodeInventory "
        "is false); until then nodes that only DRA describes get no placement"
    ),
    not_served_hint=(
        "the cluster has no resource.k8s.io/v1 API (DRA needs Kubernetes 1.34 or later); "
        "placement reads node labels only"
    ),
)


class InventoryParts:
    """The two halves of the inventory, each as its source last published it: node labels
    (None until the first Node list) and what DRA ResourceSlices publish per node."""

    def __init__(self, store: PolicyStore, config: WebhookConfig) -> None:
        self.store = store
        self.config = config
        self.labels: Mapping[str, Mapping[str, str]] | None = None
        self.dra: Mapping[str, DraNode] = {}

    def publish(self) -> None:
        if self.labels is None:
            return  # not "no inventory" before the Node list: placement waits for it
        self.store.inventory = NodeInventory.build(
            # The inventory precomputes its per-scheme counts for this config, off the
            # request path.
            self.labels,
            config=self.config,
            dra=self.dra,
        )


class NodeSource(Reflector[Labels]):
    """Publishes `NodeInventory.build({node: {key: value}})` into `store.inventory`, keeping the
    label keys of `config.inventory_label_keys`."""

    def __init__(
        self,
        store: PolicyStore,
        config: WebhookConfig,
        parts: InventoryParts | None = None,
        **options: Any,
    ) -> None:
        self.store = store
        self.config = config
        self.parts = parts or InventoryParts(store, config)
        self.keys = tuple(sorted(config.inventory_label_keys))
        self._shared: dict[Labels, Labels] = {}
        super().__init__(NODES, self._project, self._build, store.watch("Node"), **options)

    def _project(self, obj: Mapping[str, Any]) -> Labels:
        labels = (obj.get("metadata") or {}).get("labels")
        if not isinstance(labels, Mapping):
            labels = {}
        values = tuple(
            sys.intern(value) if isinstance(value := labels.get(key), str) else None
            for key in self.keys
        )
        # Thousands of nodes carry a handful of distinct label combinations: keep one tuple each.
        # (Bounded by the distinct combinations ever seen, which label values bound in practice.)
        return self._shared.setdefault(values, values)

    def _build(self, items: Mapping[Key, Labels]) -> None:
        keys = self.keys
        self.parts.labels = {
            # An empty value is kept: a label present but empty is a node the ROCm and CANN
            # gates must leave out with a warning (SPEC §13), not a node without it.
            name: {key: value for key, value in zip(keys, values, strict=True) if value is not None}
            for (_, name), values in items.items()
        }
        self.parts.publish()


Published = tuple[str, DraNode]


class SliceSource(Reflector[Published]):
    """Keeps (node, DraNode) per ResourceSlice of a known driver and republishes the inventory
    (`InventoryParts`) with what they say per node."""

    def __init__(self, parts: InventoryParts, **options: Any) -> None:
        self.parts = parts
        # One DraNode per distinct set of versions (a node pool's slices publish a handful).
        self._shared: dict[DraNode, DraNode] = {}
        super().__init__(
            SLICES,
            self._project,
            self._build,
            parts.store.watch("ResourceSlice"),
            settle=self._settle_value,
            **options,
        )

    def _project(self, obj: Mapping[str, Any]) -> Published | None:
        found = slice_facts(obj)
        if found is None:
            return None
        return found[0], self._shared.setdefault(found[1], found[1])

    @staticmethod
    def _settle_value(value: Published) -> Published:
        # After the list page is dropped: the node name copied out of it, so its arena can be
        # released (measured: bench/bench_inventory.py --dra).
        return sys.intern(copy_text(value[0])), value[1]

    def _build(self, items: Mapping[Key, Published]) -> None:
        self.parts.dra = merge_nodes(items.values())
        self.parts.publish()


# A ResourceSlice of 8 GPUs is ~4 KiB of JSON, ten times a Node's metadata: pages of 100 keep
# one page's parsed objects (which the allocator keeps as RSS after they are freed) near a Node
# page's. Measured, 10,000 nodes with one slice each (bench/bench_inventory.py --dra): RSS
# growth 37 MiB with pages of 500, 15 MiB with pages of 100.
SLICE_PAGE_SIZE = 100


def inventory_sources(
    store: PolicyStore,
    config: WebhookConfig,
    *,
    slice_page_size: int = SLICE_PAGE_SIZE,
    **options: Any,
) -> list[Reflector[Any]]:
    """The node inventory's reflectors (config `nodeInventory`): Nodes, then ResourceSlices."""
    parts = InventoryParts(store, config)
    slices = SliceSource(parts, **{**options, "page_size": slice_page_size})
    return [NodeSource(store, config, parts, **options), slices]
