"""The DRA claim-template cache (SPEC §6): ResourceClaimTemplates cluster-wide → ClaimIndex.

Kept per template: the device classes it requests (`webhook.core.claims.device_classes`), never
the object. Full objects are listed (the classes are in `spec`), from resource.k8s.io/v1 (GA
in Kubernetes 1.34). A cluster that does not serve that API answers 404 and one without the
RBAC 403: `store.claims` then stays None (pods are evaluated as without the cache), the reason
is logged once and shown on /inventory, and the reflector retries slowly.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from webhook.core.claims import ClaimIndex, device_classes
from webhook.sources.reflector import Key, Reflector, Watched
from webhook.sources.store import PolicyStore

CLAIM_TEMPLATES = Watched(
    kind="ResourceClaimTemplate",
    path="/apis/resource.k8s.io/v1/resourceclaimtemplates",
    what="ResourceClaimTemplates (resource.k8s.io/v1)",
    optional=True,
    snapshot="claim-template cache",
    rbac_hint=(
        "grant the webhook's service account get, list and watch on resourceclaimtemplates in "
        "resource.k8s.io (the Helm chart's ClusterRole does this unless "
        "config.claimTemplateCache is false); until then DRA claims are not recognised"
    ),
    not_served_hint=(
        "the cluster has no resource.k8s.io/v1 API (DRA needs Kubernetes 1.34 or later); "
        "DRA claims are not recognised"
    ),
)


def _project(obj: Mapping[str, Any]) -> frozenset[str]:
    # The list's items carry no `kind` (a list names it once); device_classes reads it.
    return device_classes({**obj, "kind": "ResourceClaimTemplate"})


class ClaimTemplateSource(Reflector[frozenset[str]]):
    """Publishes the device classes of every ResourceClaimTemplate into `store.claims`."""

    def __init__(self, store: PolicyStore, **options: Any) -> None:
        self.store = store
        self._shared: dict[frozenset[str], frozenset[str]] = {}
        super().__init__(
            CLAIM_TEMPLATES, self._intern, self._build, store.watch(CLAIM_TEMPLATES.kind), **options
        )

    def _intern(self, obj: Mapping[str, Any]) -> frozenset[str]:
        classes = _project(obj)
        return self._shared.setdefault(classes, classes)

    def _build(self, items: Mapping[Key, frozenset[str]]) -> None:
        claims = self.store.claims.claims if self.store.claims is not None else {}
        self.store.claims = ClaimIndex(templates=MappingProxyType(dict(items)), claims=claims)
