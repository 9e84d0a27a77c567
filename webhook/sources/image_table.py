"""The admin's image table in a ConfigMap (SPEC §4 step 3), watched so it changes without a
restart: one named ConfigMap through the reflector → `store.config`, the webhook config with
the ConfigMap's entries before the config file's.

The table never gates readiness (the config file's table is in force until it is listed, and
when it cannot be read). A ConfigMap whose table does not parse is reported (log, /policies)
and the last good table stays in force, as with CRL ConfigMaps; a deleted ConfigMap, or one
without the data key, leaves the config file's table alone.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from webhook.core.config.image_rules import ImageTableConfigMap, parse_image_table
from webhook.core.config.model import ImageCudaEntry, WebhookConfig
from webhook.sources.reflector import Reflector
from webhook.sources.store import PolicyStore
from webhook.sources.watched import Key, Watched

log = logging.getLogger(__name__)

KIND = "ImageCudaTable"  # the metric label and the key in PolicyStore.watched


def watched(ref: ImageTableConfigMap) -> Watched:
    return Watched(
        kind=KIND,
        path=f"/api/v1/namespaces/{ref.namespace}/configmaps",
        what=f"ConfigMap {ref.ref} (image table)",
        # One object: the API server filters by name (fields.ParseSelector, metadata.name is
        # a supported field for every kind), and the projection checks the name again.
        field_selector=f"metadata.name={ref.name}",
        optional=True,
        snapshot="image table",
        rbac_hint=(
            f"grant the webhook's service account get, list and watch on configmaps in "
            f"{ref.namespace} (the Helm chart's Role does this for kube-public); until then "
            "the config file's imageCudaTable is used"
        ),
    )


class ImageTableSource(Reflector[str]):
    """Publishes `config.with_image_table(<the ConfigMap's entries>)` into `store.config`
    (None: the ConfigMap holds no table, the base config applies as it is)."""

    def __init__(self, store: PolicyStore, config: WebhookConfig, **options: Any) -> None:
        ref = config.image_cuda_table_config_map
        if ref is None:
            raise ValueError("the webhook config names no imageCudaTableConfigMap")
        self.store = store
        self.base = config
        self.ref = ref
        self.entries: tuple[ImageCudaEntry, ...] | None = None  # last good table
        self._problem = ""
        stats = store.watch(KIND)
        super().__init__(watched(ref), self._project, self._publish, stats, **options)

    def _project(self, obj: Mapping[str, Any]) -> str | None:
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping) or meta.get("name") != self.ref.name:
            return None
        data = obj.get("data")
        value = data.get(self.ref.key) if isinstance(data, Mapping) else None
        # Absent key: an empty table, like a deleted ConfigMap.
        return value if isinstance(value, str) else ""

    def _publish(self, items: Mapping[Key, str]) -> None:
        text = items.get((self.ref.namespace, self.ref.name), "")
        where = f"ConfigMap {self.ref.ref} key {self.ref.key}"
        try:
            entries = parse_image_table(text, where)
        except ValueError as exc:
            problem = str(exc)
            if problem != self._problem:
                log.warning("Ignoring the image table of %s; the last good one stays", problem)
            self._problem = problem
            self.stats.source_error = problem
            return
        self._problem = ""
        self.stats.source_error = None
        if entries == self.entries:
            return
        self.entries = entries
        self.store.config = self.base.with_image_table(entries) if entries else None
        log.info("Loaded %d image table entries from %s", len(entries), self.ref.ref)
