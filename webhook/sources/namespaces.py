"""Namespaces' Pod Security enforce level (SPEC §14): a metadata-only list/watch of Namespaces
→ {namespace: its pod-security.kubernetes.io/enforce label, "" when unlabelled}.

The RDMA fix adds IPC_LOCK only where Pod Security admits it, and Pod Security reads exactly
this label (k8s.io/pod-security-admission api.EnforceLevelLabel); a mutation runs before it, so
the webhook must know the level to never turn an admitted pod into a denied one. Only the label
is kept (one short string per namespace). Until the first list, or when Namespaces cannot be
read (403), `store.namespace_levels` stays None and the capability is warned about, never added.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from webhook.core.runtimefix.rdma import ENFORCE_LABEL
from webhook.sources.reflector import Reflector
from webhook.sources.store import PolicyStore
from webhook.sources.watched import Key, Watched

NAMESPACES = Watched(
    kind="Namespace",
    path="/api/v1/namespaces",
    what="Namespaces",
    metadata_only=True,
    optional=True,
    snapshot="namespace Pod Security levels",
    rbac_hint=(
        "grant the webhook's service account get, list and watch on namespaces (the Helm "
        "chart's ClusterRole does this unless config.runtimeFixes.namespaceLevels is false); "
        "until then IPC_LOCK for RDMA is only warned about"
    ),
)


class NamespaceLevelSource(Reflector[str]):
    """Publishes {namespace: enforce label value} into `store.namespace_levels`."""

    def __init__(self, store: PolicyStore, **options: Any) -> None:
        self.store = store
        super().__init__(
            NAMESPACES, self._project, self._build, store.watch("Namespace"), **options
        )

    @staticmethod
    def _project(obj: Mapping[str, Any]) -> str:
        labels = (obj.get("metadata") or {}).get("labels")
        value = labels.get(ENFORCE_LABEL) if isinstance(labels, Mapping) else None
        return sys.intern(value) if isinstance(value, str) else ""

    def _build(self, items: Mapping[Key, str]) -> None:
        self.store.namespace_levels = MappingProxyType(
            {name: level for (_, name), level in items.items()}
        )
