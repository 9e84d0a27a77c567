"""GPU access routes the kubelet opens after admission (SPEC §12): what it adds to a container's
environment after the written void (Service links), and what it drops from a pod that names its
node itself (`spec.nodeName`). Pure; evaluation/containers.py applies them by mode."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from webhook.core.access.routes import AccessFinding, label, nonzero
from webhook.core.base.shapes import is_mapping
from webhook.core.base.wording import cut
from webhook.core.families.catalog import FAMILIES, Family, family_named, family_of
from webhook.core.workloads.pods import ContainerRef

# The variables a Service link makes (kubernetes pkg/kubelet/envvars/envvars.go FromServices,
# makeLinkVariables): for each Service of the pod's namespace, with NAME its name upper-cased and
# "-" made "_", NAME_SERVICE_HOST, NAME_SERVICE_PORT, NAME_SERVICE_PORT_<port name>, NAME_PORT,
# NAME_PORT_<port>_<TCP|UDP|SCTP> and that name with _PROTO, _PORT or _ADDR. The kubelet adds them
# to every container of a pod whose enableServiceLinks is true (the API server's default,
# pkg/apis/core/v1/defaults.go SetDefaults_Pod) under each name the container does not set
# (pkg/kubelet/kubelet_pods.go makeEnvironmentVariables, "Append service env vars"), and no
# Service reaches an admission webhook that reviews pods.
_LINK_NAME = re.compile(
    r"[A-Z][A-Z0-9_]*_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?"
    r"|PORT(_[0-9]+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?)?)\Z"
)


def service_link_name(name: str) -> bool:
    """Whether a Service link can make the variable `name`."""
    return _LINK_NAME.match(name) is not None


def _reads_link_names(family: Family) -> bool:
    """Whether the family's runtime or limiter reads a variable a Service link can make: a
    name prefix (a Service named after it makes <prefix>..._SERVICE_HOST), or an exact name of
    a link's shape. HAMi-core's `*` controls are CUDA_DEVICE_*_LIMIT and ..._LIMIT_<index>
    (catalog.py), names no link makes."""
    if any(service_link_name(p + "X_SERVICE_HOST") for p in family.device_env_prefixes):
        return True
    exact = (*family.device_env, *(p.rstrip("*") for p in family.limiter_env))
    return any(service_link_name(name) for name in exact)


# Families a Service link can hand devices to: AMD's (ROCm/container-toolkit internal/oci/
# oci.go getAMDEnv reads every DOCKER_RESOURCE_* variable, the last one winning, and a Service
# named docker-resource-gpu makes DOCKER_RESOURCE_GPU_SERVICE_PORT=<a port that names a GPU>).
SERVICE_LINK_FAMILIES = frozenset(f.name for f in FAMILIES if _reads_link_names(f))


def link_family(spec: Mapping[str, Any], devices: Mapping[int, frozenset[str]]) -> Family | None:
    """The family of the pod's device containers a Service link can hand devices to, when the
    pod keeps its Service links (enableServiceLinks is not false), or None."""
    if spec.get("enableServiceLinks") is False:
        return None
    families: set[str] = set()
    for own in devices.values():
        families |= own & SERVICE_LINK_FAMILIES
    return family_named(min(families)) if families else None


def link_names(family: Family) -> str:
    """`DOCKER_RESOURCE_*`: the variables of `family` a Service link can make."""
    return "/".join(f"{p}*" for p in family.device_env_prefixes) or family.device_env[0]


def link_note(family: Family) -> str:
    return (
        f"set enableServiceLinks to false: a Service's {link_names(family)} variables could "
        f"choose its {family.noun}s"
    )


def link_finding(family: Family) -> AccessFinding:
    return AccessFinding(
        "",
        f"enableServiceLinks lets a Service's {link_names(family)} variables choose {family.noun}s",
        "set it to false",
    )


# A pod created with spec.nodeName skips the scheduler, and the kubelet admits it without the
# extended resources its node does not advertise: pkg/kubelet/lifecycle/predicate.go
# removeMissingExtendedResources drops them before the fit check, and the device manager
# allocates only resources a device plugin registered (pkg/kubelet/cm/devicemanager/manager.go
# allocateContainerResources, `if !m.isDevicePluginResource(resource) { continue }`). No plugin
# runs, nothing sets the device variables, and the image's (NVIDIA_VISIBLE_DEVICES=all in
# NVIDIA's CUDA images) stands, while quotas count the request. Which resources a node
# advertises is in its status, which the node inventory does not read (sources/nodes.py lists
# Nodes metadata-only), so every such request is a finding.
_ENV_FAMILIES = frozenset(f.name for f in FAMILIES if f.device_env or f.device_env_prefixes)
_BOUND_ADVICE = "use a nodeSelector on kubernetes.io/hostname instead"


def _env_resource(container: Mapping[str, Any]) -> str:
    """The first extended resource of a family whose runtime reads device variables that the
    container requests (non-zero), or ""."""
    resources = container.get("resources")
    if not is_mapping(resources):
        return ""
    for values in (resources.get("limits"), resources.get("requests")):
        if not is_mapping(values):
            continue
        for key in values:
            if not isinstance(key, str) or "/" not in key:
                continue
            family = family_of(key)
            if family is not None and family.name in _ENV_FAMILIES and nonzero(values, key):
                return key
    return ""


def bound_findings(
    spec: Mapping[str, Any],
    containers: Iterable[ContainerRef],
    devices: Mapping[int, frozenset[str]],
) -> list[AccessFinding]:
    """The device containers of a pod created with spec.nodeName (its init containers too)."""
    node = spec.get("nodeName")
    if not isinstance(node, str) or not node:
        return []
    found = []
    for c in containers:
        if id(c.container) not in devices:
            continue
        key = _env_resource(c.container)
        if key:
            what = f"requests {cut(key, 32)} with spec.nodeName"
            found.append(AccessFinding(label(c), what, _BOUND_ADVICE, gpu=True))
    return found
