"""The DRA claim cache (SPEC §6): ResourceClaimTemplates and ResourceClaims cluster-wide →
ClaimIndex.

Kept per object: the device classes it requests, per request name
(`core.workloads.claims.device_classes`), never the object. Full objects are listed (the classes
are in `spec`), from resource.k8s.io/v1 (GA in Kubernetes 1.34). One reflector per kind, each
filling its own field of the one ClaimIndex
(`templates` for pods' `resourceClaimTemplateName`, `claims` for `resourceClaimName`). A
cluster that does not serve that API answers 404 and one without the RBAC 403: that kind's
field then stays empty (`store.claims` stays None while neither kind has been listed), the
reason is logged once and shown on /inventory, and the reflector retries slowly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any, Literal

from webhook.core.workloads.claims import (
    BUILT_IN_CLASSES,
    ClaimClasses,
    ClaimIndex,
    DeviceClasses,
    DeviceClassFacts,
    device_class_facts,
    device_classes,
)
from webhook.sources.reflector import Reflector
from webhook.sources.store import PolicyStore
from webhook.sources.watched import Key, Watched

_NOT_SERVED = (
    "the cluster has no resource.k8s.io/v1 API (DRA needs Kubernetes 1.34 or later); "
    "DRA claims are not recognised"
)


def _rbac_hint(resource: str, effect: str) -> str:
    return (
        f"grant the webhook's service account get, list and watch on {resource} in "
        "resource.k8s.io (the Helm chart's ClusterRole does this unless "
        f"config.claimTemplateCache is false); until then {effect}"
    )


CLAIM_TEMPLATES = Watched(
    kind="ResourceClaimTemplate",
    path="/apis/resource.k8s.io/v1/resourceclaimtemplates",
    what="ResourceClaimTemplates (resource.k8s.io/v1)",
    optional=True,
    snapshot="claim-template cache",
    rbac_hint=_rbac_hint("resourceclaimtemplates", "DRA claims are not recognised"),
    not_served_hint=_NOT_SERVED,
)

# k8s.io/api resource/v1 types.go: ResourceClaim{Spec ResourceClaimSpec, Status}, plural
# "resourceclaims". The control plane also creates one ResourceClaim per pod from a template
# (core/v1 PodResourceClaimStatus.ResourceClaimName): those are cached too, a few classes each.
CLAIMS = Watched(
    kind="ResourceClaim",
    path="/apis/resource.k8s.io/v1/resourceclaims",
    what="ResourceClaims (resource.k8s.io/v1)",
    optional=True,
    snapshot="claim cache",
    rbac_hint=_rbac_hint(
        "resourceclaims", "pods naming a ResourceClaim are evaluated as without it"
    ),
    not_served_hint=_NOT_SERVED,
)

Field = Literal["templates", "claims"]


def _current(store: PolicyStore) -> ClaimIndex:
    """The claim index the three sources share; each replaces only its own field of it (they
    all run on the one event loop, so a read-modify-write is never interleaved)."""
    return store.claims if store.claims is not None else ClaimIndex()


class ClaimSource(Reflector[ClaimClasses]):
    """Publishes the device classes of every object of one kind into one field of
    `store.claims`, keeping the other field as the other kind's source last published it."""

    def __init__(self, store: PolicyStore, watched: Watched, field: Field, **options: Any) -> None:
        self.store = store
        self._field = field
        self._shared: dict[ClaimClasses, ClaimClasses] = {}
        super().__init__(watched, self._intern, self._build, store.watch(watched.kind), **options)

    def _intern(self, obj: Mapping[str, Any]) -> ClaimClasses:
        # The list's items carry no `kind` (a list names it once) and device_classes reads it
        # (a template's ResourceClaimSpec is at spec.spec, a claim's at spec).
        classes = device_classes({**obj, "kind": self.watched.kind})
        return self._shared.setdefault(classes, classes)

    def _build(self, items: Mapping[Key, ClaimClasses]) -> None:
        table = MappingProxyType(dict(items))
        current = _current(self.store)
        if self._field == "templates":
            self.store.claims = replace(current, templates=table)
        else:
            self.store.claims = replace(current, claims=table)


class ClaimTemplateSource(ClaimSource):
    """ResourceClaimTemplates → `store.claims.templates`."""

    def __init__(self, store: PolicyStore, **options: Any) -> None:
        super().__init__(store, CLAIM_TEMPLATES, "templates", **options)


class ResourceClaimSource(ClaimSource):
    """ResourceClaims → `store.claims.claims`."""

    def __init__(self, store: PolicyStore, **options: Any) -> None:
        super().__init__(store, CLAIMS, "claims", **options)


# k8s.io/api resource/v1 types.go: DeviceClass (cluster-scoped, plural "deviceclasses"),
# DeviceClassSpec{Selectors, Config, ExtendedResourceName}. Kept per class: its driver as its
# selectors name it and its extendedResourceName (core.workloads.claims.device_class_facts).
DEVICE_CLASSES = Watched(
    kind="DeviceClass",
    path="/apis/resource.k8s.io/v1/deviceclasses",
    what="DeviceClasses (resource.k8s.io/v1)",
    optional=True,
    snapshot="device-class cache",
    rbac_hint=_rbac_hint(
        "deviceclasses", "DRA device classes are known by their built-in names only"
    ),
    not_served_hint=_NOT_SERVED,
)


class DeviceClassSource(Reflector[DeviceClassFacts]):
    """DeviceClasses → `store.claims.classes` (SPEC §13 "DeviceClasses are watched"): each
    class's vendor by its driver, and its KEP-5004 resource names."""

    def __init__(self, store: PolicyStore, **options: Any) -> None:
        self.store = store
        super().__init__(
            DEVICE_CLASSES, device_class_facts, self._build, store.watch("DeviceClass"), **options
        )

    def _build(self, items: Mapping[Key, DeviceClassFacts]) -> None:
        facts = {key[-1]: fact for key, fact in items.items()}
        classes = DeviceClasses.of(facts) if facts else BUILT_IN_CLASSES
        self.store.claims = replace(_current(self.store), classes=classes)


def claim_sources(store: PolicyStore, **options: Any) -> list[Reflector[Any]]:
    """The DRA claim cache's reflectors (config `claimTemplateCache`): templates, claims, and
    the DeviceClasses they name."""
    return [
        ClaimTemplateSource(store, **options),
        ResourceClaimSource(store, **options),
        DeviceClassSource(store, **options),
    ]
