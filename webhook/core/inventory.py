"""The node inventory (SPEC §4): label values the cluster's nodes advertise, as a snapshot.

Sources build it from a metadata-only list/watch of Nodes, keeping only the label keys that
placement reads (`WebhookConfig.inventory_label_keys`); the CLI builds it from
`kubectl get nodes -o yaml` output. Evaluation only reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from webhook.core.config import WebhookConfig


@dataclass(frozen=True)
class NodeInventory:
    """Per node name, the kept labels ({key: value}); built once per change, read per review."""

    nodes: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @classmethod
    def build(
        cls, nodes: Mapping[str, Mapping[str, str]], *, config: WebhookConfig | None = None
    ) -> NodeInventory:
        return cls(MappingProxyType({name: dict(labels) for name, labels in nodes.items()}))

    def to_json(self, config: WebhookConfig | None = None) -> dict[str, Any]:
        """Summary for /inventory (the placement branch extends it with schemes and versions)."""
        return {"nodes": len(self.nodes)}
