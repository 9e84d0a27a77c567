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

from collections.abc import Mapping
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
