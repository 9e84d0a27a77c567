"""The node inventory source (SPEC §4): a metadata-only list/watch of Nodes → NodeInventory.

Only the label values of `WebhookConfig.inventory_label_keys` are kept, per node, as a tuple in
the order of `keys` (None where a node lacks the label); equal tuples and label strings are
shared, so 10,000 nodes cost a node name and a pointer each. Nodes are requested as
PartialObjectMetadata: a Node's status (images, conditions) never reaches the process, and a
status heartbeat arrives as an event whose projection is unchanged, so it publishes nothing.
The inventory never gates readiness: until the first list (or when Nodes cannot be read)
`store.inventory` stays None and placement works as without an inventory.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from webhook.core.config.model import WebhookConfig
from webhook.core.placement.inventory import NodeInventory
from webhook.sources.reflector import Reflector
from webhook.sources.store import PolicyStore
from webhook.sources.watched import Key, Watched

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


class NodeSource(Reflector[Labels]):
    """Publishes `NodeInventory.build({node: {key: value}})` into `store.inventory`, keeping the
    label keys of `config.inventory_label_keys`."""

    def __init__(self, store: PolicyStore, config: WebhookConfig, **options: Any) -> None:
        self.store = store
        self.config = config
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
        self.store.inventory = NodeInventory.build(
            {
                # An empty value is kept: a label present but empty is a node the ROCm and
                # CANN gates must leave out with a warning (SPEC §13), not a node without it.
                name: {
                    key: value for key, value in zip(keys, values, strict=True) if value is not None
                }
                for (_, name), values in items.items()
            },
            # The inventory precomputes its per-scheme counts for this config, off the request path.
            config=self.config,
        )
