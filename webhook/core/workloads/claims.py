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

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

# Compiled with mypyc (setup.py), which cannot compile a frozenset subclass: that one is apart,
# re-exported here where its users import it.
from webhook.core.base.shapes import is_mapping
from webhook.core.families.catalog import CLASS_FAMILIES
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


# DRA drivers -> the device family whose devices they hand out (SPEC §13 "DeviceClasses are
# watched": a class's vendor is its driver, never its name). Each from the driver's own
# DeviceClass manifests, whose selectors read `device.driver == '<driver>'`:
DRIVER_FAMILIES: Mapping[str, str] = MappingProxyType(
    {
        # NVIDIA/k8s-dra-driver-gpu deployments/helm/dra-driver-nvidia-gpu/templates/
        # deviceclass-gpu.yaml, -mig.yaml, -vfio-gpu.yaml (at 2240711): gpu.nvidia.com,
        # mig.nvidia.com, vfio.gpu.nvidia.com, all `device.driver == 'gpu.nvidia.com' && ...`
        # (gpu.nvidia.com with extendedResourceName nvidia.com/gpu on resource.k8s.io/v1).
        "gpu.nvidia.com": "nvidia",
        # Project-HAMi/HAMi-DRA charts/hami-dra/templates/hami-dra-driver/deviceclass.yaml (at
        # 15adbee): DeviceClass hami-core-gpu.project-hami.io, `device.driver ==
        # "hami-core-gpu.project-hami.io"` (HAMi's NVIDIA GPU slices).
        "hami-core-gpu.project-hami.io": "nvidia",
        # ROCm/k8s-gpu-dra-driver pkg/consts/consts.go DriverName (at 4482249).
        "gpu.amd.com": "amd",
        # intel/intel-resource-drivers-for-kubernetes deployments/gpu/base/device-class.yaml.
        "gpu.intel.com": "intel",
        # Project-HAMi/ascend-dra-driver deployments/helm/ascend-dra-driver/templates/
        # deviceclass.yaml (at 91d82a2): npu-hamivnpucore.project-hami.io, `device.driver ==
        # "ascend.project-hami.io" && ...` (HAMi's Ascend vNPUs).
        "ascend.project-hami.io": "ascend",
    }
)

# KEP-5004 (DRA extended resources, k8s.io/api resource/v1 types.go): "the device class prefix
# is for generating implicit extended resource name for a device class when its
# ExtendedResourceName field is not specified. The generated name is this prefix + the device
# class name." Every class carries it, with or without `spec.extendedResourceName`.
DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"

# `device.driver == 'x'` (or "x", either side) as one conjunct of a selector's CEL expression.
_DRIVER_TERM = re.compile(
    r"""\s*(?:device\.driver\s*==\s*(['"])([^'"]+)\1|(['"])([^'"]+)\3\s*==\s*device\.driver)\s*"""
)


@dataclass(frozen=True, slots=True)
class DeviceClassFacts:
    """What the webhook reads of a DeviceClass: its driver, as its selectors name it (None:
    not read), and its `spec.extendedResourceName` (KEP-5004; None: not set)."""

    driver: str | None = None
    extended_resource: str | None = None


def _expression_driver(expression: str) -> str | None:
    """The driver a CEL expression requires, read in the simple form only: conjuncts joined by
    `&&`, one of them `device.driver == '<name>'`. Anything else (`||`, `!`, `in`, a
    driver compared twice) is not read."""
    if "||" in expression or "!" in expression.replace("!=", ""):
        return None
    drivers = set()
    for term in expression.split("&&"):
        match = _DRIVER_TERM.fullmatch(term)
        if match:
            drivers.add(match[2] or match[4])
    return drivers.pop() if len(drivers) == 1 else None


def device_class_facts(obj: Mapping[str, Any]) -> DeviceClassFacts:
    """A DeviceClass's driver and extended resource name (k8s.io/api resource/v1 types.go:
    DeviceClassSpec{Selectors []DeviceSelector{CEL *CELDeviceSelector{Expression}},
    ExtendedResourceName *string}). Every selector must hold, so the one driver any of them
    requires is the class's; two different drivers, or none read: None."""
    spec = obj.get("spec")
    selectors = spec.get("selectors") if is_mapping(spec) else None
    drivers: set[str] = set()
    if isinstance(selectors, list):
        for selector in selectors:
            expression = _get(selector, "cel", "expression")
            if isinstance(expression, str):
                driver = _expression_driver(expression)
                if driver is not None:
                    drivers.add(driver)
    extended = spec.get("extendedResourceName") if is_mapping(spec) else None
    return DeviceClassFacts(
        driver=drivers.pop() if len(drivers) == 1 else None,
        extended_resource=extended if isinstance(extended, str) and extended else None,
    )


@dataclass(frozen=True)
class DeviceClasses:
    """The cluster's DeviceClasses as the evaluation reads them (immutable, in the snapshot).

    `facts`: class name -> DeviceClassFacts. Derived: `families`, class -> device family, for
    every class the cluster has whose driver is known, and for the built-in class names
    (families.catalog device_classes) the cluster does not have (the fallback); `nvidia`, the
    classes of NVIDIA's drivers; `extended`, KEP-5004 resource name -> family (each class's
    `extendedResourceName` and its implicit `deviceclass.resource.kubernetes.io/<class>`).
    """

    facts: Mapping[str, DeviceClassFacts] = field(default_factory=dict)
    families: Mapping[str, str] = field(default_factory=lambda: CLASS_FAMILIES)
    nvidia: frozenset[str] = frozenset()
    extended: Mapping[str, str] = field(
        default_factory=lambda: {DEVICE_CLASS_PREFIX + n: f for n, f in CLASS_FAMILIES.items()}
    )
    vendors: frozenset[str] = frozenset(CLASS_FAMILIES)  # classes of vendors but NVIDIA

    @classmethod
    def of(cls, facts: Mapping[str, DeviceClassFacts]) -> DeviceClasses:
        families = {name: f for name, f in CLASS_FAMILIES.items() if name not in facts}
        for name, fact in facts.items():
            family = DRIVER_FAMILIES.get(fact.driver) if fact.driver else None
            if family is not None:
                families[name] = family
        extended: dict[str, str] = {}
        for name, family in families.items():
            extended[DEVICE_CLASS_PREFIX + name] = family
        # k8s.io/api DeviceClassSpec.ExtendedResourceName: "If two device classes have the
        # same name, then the class created later is picked" -- the webhook does not know
        # creation times: a name two classes of different families claim is not read.
        claimed: dict[str, set[str]] = {}
        for name, fact in facts.items():
            if fact.extended_resource and name in families:
                claimed.setdefault(fact.extended_resource, set()).add(families[name])
        for resource, found in claimed.items():
            if len(found) == 1:
                extended[resource] = next(iter(found))
        return cls(
            facts=MappingProxyType(dict(facts)),
            families=MappingProxyType(families),
            nvidia=frozenset(n for n, f in families.items() if f == "nvidia"),
            extended=MappingProxyType(extended),
            vendors=frozenset(n for n, f in families.items() if f != "nvidia"),
        )

    def resources(self, keys: Iterable[str], nvidia_classes: Iterable[str]) -> dict[str, str]:
        """KEP-5004 resource name -> family, of those among `keys` (resource_family)."""
        found: dict[str, str] = {}
        for key in keys:
            if key in self.extended or key.startswith(DEVICE_CLASS_PREFIX):
                family = self.resource_family(key, nvidia_classes)
                if family is not None:
                    found[key] = family
        return found

    def resource_family(self, key: str, nvidia_classes: Iterable[str]) -> str | None:
        """The family whose devices a KEP-5004 resource name counts: a class's
        `extendedResourceName`, or `deviceclass.resource.kubernetes.io/<class>` of a class
        with a known family or of one of `nvidia_classes` (the config's GPU classes)."""
        found = self.extended.get(key)
        if found is not None:
            return found
        if key.startswith(DEVICE_CLASS_PREFIX):
            name = key[len(DEVICE_CLASS_PREFIX) :]
            if name in self.families:
                return self.families[name]
            if name in nvidia_classes:
                return "nvidia"
        return None


BUILT_IN_CLASSES = DeviceClasses()


@dataclass(frozen=True)
class ClaimIndex:
    """Device classes per ResourceClaimTemplate and per ResourceClaim, by (namespace, name),
    and the cluster's DeviceClasses (`classes`)."""

    templates: Mapping[ClaimKey, ClaimClasses] = field(default_factory=dict)
    claims: Mapping[ClaimKey, ClaimClasses] = field(default_factory=dict)
    classes: DeviceClasses = BUILT_IN_CLASSES

    @classmethod
    def from_objects(cls, objs: Iterable[Mapping[str, Any]]) -> ClaimIndex:
        """Index the ResourceClaimTemplates and ResourceClaims among manifest documents (CLI).

        A document without a namespace is in "default", as `kubectl apply` would put it.
        """
        templates: dict[ClaimKey, ClaimClasses] = {}
        claims: dict[ClaimKey, ClaimClasses] = {}
        classes: dict[str, DeviceClassFacts] = {}
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
            elif kind == "DeviceClass":  # cluster-scoped
                classes[name] = device_class_facts(obj)
        return cls(
            templates=templates,
            claims=claims,
            classes=DeviceClasses.of(classes) if classes else BUILT_IN_CLASSES,
        )


DEFAULT_NAMESPACE = "default"


def classes_of(index: ClaimIndex | None) -> DeviceClasses:
    """The DeviceClasses the evaluation reads: the cluster's, or the built-in names alone."""
    return index.classes if index is not None else BUILT_IN_CLASSES


def nvidia_classes(config_classes: Iterable[str], index: ClaimIndex | None) -> frozenset[str]:
    """NVIDIA's DRA device classes: the config's `gpuDeviceClasses` and every DeviceClass of
    the cluster whose driver is NVIDIA's (DRIVER_FAMILIES)."""
    known = classes_of(index).nvidia
    return frozenset(config_classes) | known if known else frozenset(config_classes)


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
