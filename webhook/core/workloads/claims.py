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

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Compiled with mypyc (setup.py), which cannot compile a frozenset subclass: that one is apart,
# re-exported here where its users import it.
from webhook.core.base.shapes import is_mapping
from webhook.core.workloads.claim_classes import ClaimClasses as ClaimClasses  # noqa: PLC0414

ClaimKey = tuple[str, str]  # (namespace, name)


def _get(node: Any, *path: str) -> Any:
    for part in path:
        if not is_mapping(node):
            return None
        node = node.get(part)
    return node


def _claim_spec_classes(spec: Any) -> ClaimClasses:
    requests = _get(spec, "devices", "requests")
    if not isinstance(requests, list):
        return ClaimClasses.of({})
    by_request: dict[str, frozenset[str]] = {}
    for index, request in enumerate(requests):
        if not is_mapping(request):
            continue
        name = request.get("name")
        name = name if isinstance(name, str) and name else f"#{index}"
        classes: set[str] = set()
        for candidate in (
            _get(request, "exactly", "deviceClassName"),
            request.get("deviceClassName"),
        ):
            if isinstance(candidate, str) and candidate:
                classes.add(candidate)
        subs = request.get("firstAvailable")
        if isinstance(subs, list):
            for sub in subs:
                if not is_mapping(sub) or not isinstance(sub.get("deviceClassName"), str):
                    continue
                classes.add(sub["deviceClassName"])
                if isinstance(sub.get("name"), str):
                    by_request[f"{name}/{sub['name']}"] = frozenset({sub["deviceClassName"]})
        by_request[name] = frozenset(classes)
    return ClaimClasses.of(by_request)


def device_classes(obj: Mapping[str, Any]) -> ClaimClasses:
    """Every device class a ResourceClaimTemplate or a ResourceClaim requests (any shape: {}),
    with the classes of each request (`.requests`)."""
    if obj.get("kind") == "ResourceClaimTemplate":
        return _claim_spec_classes(_get(obj, "spec", "spec"))
    return _claim_spec_classes(obj.get("spec"))


@dataclass(frozen=True)
class ClaimIndex:
    """Device classes per ResourceClaimTemplate and per ResourceClaim, by (namespace, name)."""

    templates: Mapping[ClaimKey, ClaimClasses] = field(default_factory=dict)
    claims: Mapping[ClaimKey, ClaimClasses] = field(default_factory=dict)

    @classmethod
    def from_objects(cls, objs: Iterable[Mapping[str, Any]]) -> ClaimIndex:
        """Index the ResourceClaimTemplates and ResourceClaims among manifest documents (CLI).

        A document without a namespace is in "default", as `kubectl apply` would put it.
        """
        templates: dict[ClaimKey, ClaimClasses] = {}
        claims: dict[ClaimKey, ClaimClasses] = {}
        for obj in objs:
            if not is_mapping(obj):
                continue
            kind = obj.get("kind")
            api_version = obj.get("apiVersion")
            if not isinstance(api_version, str) or not api_version.startswith("resource.k8s.io/"):
                continue
            meta = obj.get("metadata")
            meta = meta if is_mapping(meta) else {}
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

    # Pod claim names (PodResourceClaim.name) whose claim requests a GPU device class, with
    # what that claim requests, so a container naming one request gets only that request's.
    gpu: Mapping[str, ClaimClasses]
    warnings: tuple[str, ...]
    gpu_classes: frozenset[str] = frozenset()
    # Pod claim names whose template or claim the snapshot does not know (yet).
    unknown: frozenset[str] = frozenset()

    # Written out, frozen: as wording.Wording's (one per pod spec with claims).
    def __init__(
        self,
        gpu: Mapping[str, ClaimClasses],
        warnings: tuple[str, ...],
        gpu_classes: frozenset[str] = frozenset(),
        unknown: frozenset[str] = frozenset(),
    ) -> None:
        object.__setattr__(self, "gpu", gpu)
        object.__setattr__(self, "warnings", warnings)
        object.__setattr__(self, "gpu_classes", gpu_classes)
        object.__setattr__(self, "unknown", unknown)

    def uses_gpu(self, container: Mapping[str, Any]) -> bool:
        """Whether the container gets a GPU device through one of its `resources.claims`."""
        if not self.gpu:
            return False
        for name, request in container_claim_refs(container):
            classes = self.gpu.get(name)
            if classes is not None and classes.on(request, self.gpu_classes):
                return True
        return False

    def classes_used(self, container: Mapping[str, Any]) -> frozenset[str]:
        """The device classes (of `gpu_classes`) the container gets devices of through its
        `resources.claims`: a whole claim's, or the one request it names."""
        if not self.gpu:
            return frozenset()
        found: set[str] = set()
        for name, request in container_claim_refs(container):
            classes = self.gpu.get(name)
            if classes is None:
                continue
            got = classes.requests.get(request, frozenset()) if request else classes
            found |= got & self.gpu_classes
        return frozenset(found)

    def sure_families(
        self, container: Mapping[str, Any], family: Callable[[str], str | None]
    ) -> frozenset[str]:
        """The device families (`family(device class)`) the container surely gets devices of
        through its `resources.claims` (GPU access control, SPEC §12): a request counts only
        when every class it may be allocated from is one family's. A `firstAvailable` request
        is allocated from the first subrequest that can be satisfied (k8s.io/api resource/v1
        DeviceRequest.FirstAvailable), so one whose GPU subrequest matches nothing and whose
        fallback is another class gives no GPU, and the image's device variables would stand."""
        found: set[str] = set()
        for name, request in container_claim_refs(container):
            classes = self.gpu.get(name)
            if classes is None:
                continue
            if request:
                requests: Iterable[frozenset[str]] = (classes.requests.get(request, frozenset()),)
            else:
                requests = (v for k, v in classes.requests.items() if "/" not in k)
            for got in requests:
                families = {family(c) for c in got}
                if len(families) == 1 and None not in families:
                    found.update(f for f in families if f is not None)
        return frozenset(found)

    def may_use_gpu(self, container: Mapping[str, Any]) -> bool:
        """Whether the container may get a GPU device through a claim: a GPU claim, or one the
        snapshot does not know yet (GPU access control gives it the benefit of the doubt)."""
        if self.uses_gpu(container):
            return True
        return bool(self.unknown) and any(
            name in self.unknown for name, _ in container_claim_refs(container)
        )


NO_CLAIMS = PodClaims({}, ())


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
    gpu: dict[str, ClaimClasses] = {}
    unknown: list[str] = []
    unknown_names: list[str] = []
    for entry in entries:
        if not is_mapping(entry) or not isinstance(entry.get("name"), str):
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
            unknown_names.append(entry["name"])
        elif not found.isdisjoint(classes):
            gpu[entry["name"]] = found
    warnings: tuple[str, ...] = ()
    if unknown:
        what = "no DRA claim data here" if index is None else "not in the DRA cache yet"
        more = f" (+{len(unknown) - 1} more)" if len(unknown) > 1 else ""
        text = f"{unknown[0]}{more}: {what}; evaluated without it (no GPU placement from it)"
        warnings = (text if len(text) <= 120 else text[:119] + "…",)
    return PodClaims(gpu, warnings, classes, frozenset(unknown_names))


def container_claim_refs(container: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """(claim name, request name or None) of each entry of a container's `resources.claims`."""
    resources = container.get("resources")
    claims = resources.get("claims") if is_mapping(resources) else None
    if not isinstance(claims, list):
        return []
    refs: list[tuple[str, str | None]] = []
    for ref in claims:
        if is_mapping(ref) and isinstance(ref.get("name"), str):
            request = ref.get("request")
            refs.append((ref["name"], request if isinstance(request, str) and request else None))
    return refs


def container_claims(container: Mapping[str, Any]) -> frozenset[str]:
    """Names of the pod claims a container references in `resources.claims`."""
    return frozenset(name for name, _ in container_claim_refs(container))
