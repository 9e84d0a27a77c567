"""The cluster policy source: CRL ConfigMaps in kube-public through the reflector → PolicySet."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.policies.crl import CRL_NAMESPACE, LABEL_TYPE, TYPE_VALUE
from webhook.core.policies.policyset import PolicySet
from webhook.sources.reflector import Reflector
from webhook.sources.store import PolicyStore, log_policy_changes
from webhook.sources.watched import Key, Watched

DEFAULT_LABEL_SELECTOR = f"{LABEL_TYPE}={TYPE_VALUE}"


def _keep_whole(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    # A CRL is its whole ConfigMap (data, labels, creationTimestamp orders conflicts); there are
    # a handful of them, selected by label on the server.
    return obj


class ConfigMapWatcher(Reflector[Mapping[str, Any]]):
    """Keeps `store.current` in sync with the CRL ConfigMaps of one namespace.

    The store is ready after the first successful list; afterwards the last good policies stay
    in force through API outages (the reflector keeps its state and retries).
    """

    def __init__(
        self,
        store: PolicyStore,
        *,
        namespace: str = CRL_NAMESPACE,
        label_selector: str = DEFAULT_LABEL_SELECTOR,
        **options: Any,
    ) -> None:
        self.store = store
        self.namespace = namespace
        self.label_selector = label_selector
        watched = Watched(
            kind="ConfigMap",
            path=f"/api/v1/namespaces/{namespace}/configmaps",
            what=f"ConfigMaps in {namespace} ({label_selector})",
            label_selector=label_selector,
            snapshot="policies",
            rbac_hint=(
                f"grant the webhook's service account get, list and watch on configmaps in "
                f"{namespace} (the Helm chart's Role does this)"
            ),
        )
        super().__init__(watched, _keep_whole, self._rebuild, store.watch("ConfigMap"), **options)

    def _rebuild(self, configmaps: Mapping[Key, Mapping[str, Any]]) -> None:
        old = self.store.current if self.store.ready else None
        policies = PolicySet.from_configmaps(configmaps.values())
        # The reflector counts the sync in store.stats right after this (ready from then on).
        self.store.current = policies
        log_policy_changes(old, policies, self.namespace)
