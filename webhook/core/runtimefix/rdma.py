"""The RDMA fix (SPEC §14): IPC_LOCK for containers that request an RDMA resource — without it
they cannot pin memory and NCCL silently falls back to TCP — only where the namespace's Pod
Security level allows the capability, and a warning where it does not."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from webhook.core.base.errors import ObjectShapeError
from webhook.core.base.shapes import is_mapping
from webhook.core.base.wording import Wording
from webhook.core.config.runtime_fixes import RdmaFix
from webhook.core.outcome.decision import PodState, container_label
from webhook.core.policies.resources import ResourceLists
from webhook.core.workloads.pods import ContainerRef

CAPABILITY = "IPC_LOCK"
# The namespace label Pod Security admission enforces (k8s.io/pod-security-admission api
# EnforceLevelLabel).
ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
# Capabilities the baseline level lets a container add (k8s.io/pod-security-admission policy
# check_capabilities_baseline.go, capabilities_allowed_1_0); restricted allows only
# NET_BIND_SERVICE (check_capabilities_restricted.go). IPC_LOCK is in neither: only a
# `privileged` namespace admits it.
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
        "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
    }
)  # fmt: skip
RESTRICTED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})

# Namespace -> its enforce label's value ("" when it has none): a metadata-only snapshot.
NamespaceLevels = Mapping[str, str]


def level_allows(level: str, capability: str) -> bool:
    """Whether Pod Security at `level` admits a container adding `capability`. Anything but
    the three levels' names is not trusted to allow anything beyond restricted."""
    if level == "privileged":
        return True
    if level == "baseline":
        return capability in BASELINE_CAPABILITIES
    return capability in RESTRICTED_CAPABILITIES


def namespace_level(
    rule: RdmaFix, levels: NamespaceLevels | None, namespace: str | None
) -> tuple[str | None, bool]:
    """(the enforce level in force for `namespace`, whether its label says so); None when it
    cannot be known (no snapshot, no namespace, or one the snapshot does not hold yet)."""
    if levels is None or not namespace:
        return None, False
    label = levels.get(namespace)
    if label is None:
        return None, False
    return (label, True) if label else (rule.unlabelled_namespace_level, False)


def _has_capability(container: Mapping[str, Any]) -> bool:
    context = container.get("securityContext")
    if not is_mapping(context):
        return False
    if context.get("privileged") is True:
        return True  # a privileged container has every capability
    capabilities = context.get("capabilities")
    added = capabilities.get("add") if is_mapping(capabilities) else None
    if not isinstance(added, list):
        return False
    names = {a.upper().removeprefix("CAP_") for a in added if isinstance(a, str)}
    return CAPABILITY in names or "ALL" in names


def _drops_capability(container: Mapping[str, Any]) -> bool:
    """Whether the container drops IPC_LOCK by name. The runtimes apply `drop: [ALL]` first,
    then each capability added, then each one dropped by name (containerd pkg/cri/opts
    spec_linux.go WithCapabilities; CRI-O internal/factory/container setOCICapabilities, after
    kubernetes/kubernetes#51980): IPC_LOCK added beside `drop: [ALL]` is kept, beside
    `drop: [IPC_LOCK]` it is removed again."""
    context = container.get("securityContext")
    capabilities = context.get("capabilities") if is_mapping(context) else None
    dropped = capabilities.get("drop") if is_mapping(capabilities) else None
    if not isinstance(dropped, list):
        return False
    return CAPABILITY in {d.upper().removeprefix("CAP_") for d in dropped if isinstance(d, str)}


def rdma_key(rule: RdmaFix, keys: Iterable[str], c: ContainerRef | None = None) -> str:
    """The first RDMA resource (in name order) among a container's keys that it asks for some
    of (with `c`: a resource set to "0" asks for none, SPEC §3), or ''."""
    names = rule.resource_names
    found = [k for k in sorted(keys) if k in names]
    if found and c is not None:
        lists = ResourceLists.of(c.container, "", container_label(c))
        zero = lists.zero_keys(found)
        found = [k for k in found if k not in zero]
    return found[0] if found else ""


def apply_rdma(
    state: PodState,
    rule: RdmaFix,
    c: ContainerRef,
    key: str,
    level: str | None,
    namespace: str | None,
    labelled: bool = True,
) -> None:
    """Add IPC_LOCK to a container that requests RDMA resource `key`, if the namespace's Pod
    Security level (`level`; None: unknown; `labelled`: read from its label, else the config's
    assumption for unlabelled namespaces) allows it; warn otherwise."""
    if _has_capability(c.container):
        return
    where = container_label(c)
    if _drops_capability(c.container):
        # The user's own drop wins at the runtime whatever is added (_drops_capability): the
        # fix adds nothing and says what to change.
        state.warnings.append(
            Wording(
                (
                    f"{where}: RDMA ({key}) needs {CAPABILITY}; not added: the container drops it",
                    f"{where}: RDMA needs {CAPABILITY}; not added: the container drops it",
                )
            )
        )
        return
    if level is None or not level_allows(level, CAPABILITY):
        # A mutation runs before Pod Security admission: adding what it forbids would turn an
        # admitted pod into a denied one (SPEC §14). Say what to do instead.
        if level is None:
            why = "the namespace's Pod Security level is not known"
        elif labelled:
            why = f"namespace {namespace} is Pod Security {level}"
        else:
            why = f"namespace {namespace} has no Pod Security label"
        state.warnings.append(
            Wording(
                (
                    f"{where}: RDMA ({key}) needs {CAPABILITY}; not added: {why}",
                    f"{where}: RDMA needs {CAPABILITY}; not added: {why}",
                    f"{where}: RDMA needs {CAPABILITY}; not added",
                )
            )
        )
        return
    context = c.container.get("securityContext")
    capabilities = context.get("capabilities") if is_mapping(context) else None
    if (context is not None and not is_mapping(context)) or (
        capabilities is not None and not is_mapping(capabilities)
    ):
        raise ObjectShapeError(f"{state.ref} {where}: securityContext must be an object")
    path = (*state.container_path(c), "securityContext", "capabilities")
    state.draft.extend(path, "add", [CAPABILITY])
    state.note("rdma", f"added capability {CAPABILITY} to {where} for {key} (rdma fix)")
