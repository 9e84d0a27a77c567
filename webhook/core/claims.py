"""DRA claims (SPEC §6): which device classes a ResourceClaimTemplate or ResourceClaim requests.

`device_classes` is the projection the claim-template cache keeps per object (sources) and the
CLI applies to templates found in a manifest; `ClaimIndex` is the immutable snapshot the
evaluation reads. Shapes, from k8s.io/api/resource/v1/types.go:

- ResourceClaimTemplate.spec (ResourceClaimTemplateSpec).spec (ResourceClaimSpec);
  ResourceClaim.spec (ResourceClaimSpec);
- ResourceClaimSpec.devices (DeviceClaim).requests ([]DeviceRequest);
- v1 DeviceRequest: `exactly` (ExactDeviceRequest with `deviceClassName`) or `firstAvailable`
  ([]DeviceSubRequest, each with `deviceClassName`); v1beta1/v1beta2 DeviceRequest carried
  `deviceClassName` directly, so that form is read too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

ClaimKey = tuple[str, str]  # (namespace, name)


def _get(node: Any, *path: str) -> Any:
    for part in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def _claim_spec_classes(spec: Any) -> frozenset[str]:
    requests = _get(spec, "devices", "requests")
    if not isinstance(requests, list):
        return frozenset()
    classes: set[str] = set()
    for request in requests:
        if not isinstance(request, Mapping):
            continue
        for candidate in (
            _get(request, "exactly", "deviceClassName"),
            request.get("deviceClassName"),
        ):
            if isinstance(candidate, str) and candidate:
                classes.add(candidate)
        subs = request.get("firstAvailable")
        if isinstance(subs, list):
            classes.update(
                sub["deviceClassName"]
                for sub in subs
                if isinstance(sub, Mapping) and isinstance(sub.get("deviceClassName"), str)
            )
    return frozenset(classes)


def device_classes(obj: Mapping[str, Any]) -> frozenset[str]:
    """Every device class a ResourceClaimTemplate or a ResourceClaim requests (any shape: {})."""
    if obj.get("kind") == "ResourceClaimTemplate":
        return _claim_spec_classes(_get(obj, "spec", "spec"))
    return _claim_spec_classes(obj.get("spec"))


@dataclass(frozen=True)
class ClaimIndex:
    """Device classes per ResourceClaimTemplate and per ResourceClaim, by (namespace, name)."""

    templates: Mapping[ClaimKey, frozenset[str]] = field(default_factory=dict)
    claims: Mapping[ClaimKey, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def from_objects(cls, objs: Iterable[Mapping[str, Any]]) -> ClaimIndex:
        """Index the ResourceClaimTemplates and ResourceClaims among manifest documents (CLI).

        A document without a namespace is in "default", as `kubectl apply` would put it.
        """
        templates: dict[ClaimKey, frozenset[str]] = {}
        claims: dict[ClaimKey, frozenset[str]] = {}
        for obj in objs:
            if not isinstance(obj, Mapping):
                continue
            kind = obj.get("kind")
            api_version = obj.get("apiVersion")
            if not isinstance(api_version, str) or not api_version.startswith("resource.k8s.io/"):
                continue
            meta = obj.get("metadata")
            meta = meta if isinstance(meta, Mapping) else {}
            name, ns = meta.get("name"), meta.get("namespace") or DEFAULT_NAMESPACE
            if not isinstance(name, str) or not isinstance(ns, str):
                continue
            if kind == "ResourceClaimTemplate":
                templates[(ns, name)] = device_classes(obj)
            elif kind == "ResourceClaim":
                claims[(ns, name)] = device_classes(obj)
        return cls(templates=templates, claims=claims)


DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True, slots=True)
class PodClaims:
    """What a pod spec's `resourceClaims` mean for GPU placement."""

    gpu: frozenset[str]  # pod claim names (PodResourceClaim.name) on a GPU device class
    warnings: tuple[str, ...]


NO_CLAIMS = PodClaims(frozenset(), ())


def pod_claims(
    spec: Mapping[str, Any],
    namespace: str | None,
    index: ClaimIndex | None,
    gpu_classes: Iterable[str],
) -> PodClaims:
    """Which of a pod spec's claims request a GPU device class (SPEC §6).

    k8s.io/api core/v1: PodSpec.ResourceClaims []PodResourceClaim{Name, ResourceClaimName,
    ResourceClaimTemplateName} (exactly one of the two sources); a container references one
    by Container.Resources.Claims []ResourceClaim{Name, Request}. A template or claim the
    snapshot does not know yet counts as no GPU, with a warning.
    """
    entries = spec.get("resourceClaims")
    if not entries or not isinstance(entries, list):
        return NO_CLAIMS
    ns = namespace or DEFAULT_NAMESPACE
    classes = frozenset(gpu_classes)
    gpu: set[str] = set()
    unknown: list[str] = []
    for entry in entries:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            continue
        template, claim = entry.get("resourceClaimTemplateName"), entry.get("resourceClaimName")
        if isinstance(template, str):
            table = index.templates if index is not None else None
            source, key = f"ResourceClaimTemplate {template}", (ns, template)
        elif isinstance(claim, str):
            table = index.claims if index is not None else None
            source, key = f"ResourceClaim {claim}", (ns, claim)
        else:
            continue
        found = table.get(key) if table is not None else None
        if found is None:
            unknown.append(source)
        elif not found.isdisjoint(classes):
            gpu.add(entry["name"])
    warnings: tuple[str, ...] = ()
    if unknown:
        what = "no DRA claim data here" if index is None else "not in the DRA cache yet"
        more = f" (+{len(unknown) - 1} more)" if len(unknown) > 1 else ""
        text = f"{unknown[0]}{more}: {what}; evaluated without it (no GPU placement from it)"
        warnings = (text if len(text) <= 120 else text[:119] + "…",)
    return PodClaims(frozenset(gpu), warnings)


def container_claims(container: Mapping[str, Any]) -> frozenset[str]:
    """Names of the pod claims a container references in `resources.claims`."""
    resources = container.get("resources")
    claims = resources.get("claims") if isinstance(resources, Mapping) else None
    if not isinstance(claims, list):
        return frozenset()
    return frozenset(
        c["name"] for c in claims if isinstance(c, Mapping) and isinstance(c.get("name"), str)
    )
