"""The runtime fixes applied to one pod spec (SPEC §14): which containers each rule matches,
the per-pod opt-out, and the order (after placement, whose terms the architecture joins)."""

from __future__ import annotations

from collections.abc import Mapping

from webhook.core.base.annotations import parse_opt_out
from webhook.core.config.model import WebhookConfig
from webhook.core.config.runtime_fixes import ANNOTATION_RUNTIME_FIXES, FixMatch
from webhook.core.envfix.fixes import repository_path
from webhook.core.outcome.decision import PodState, short
from webhook.core.placement.inventory import NodeInventory
from webhook.core.policies.policyset import PolicySet
from webhook.core.policies.resources import used_policies
from webhook.core.runtimefix.arch import apply_architecture
from webhook.core.runtimefix.rdma import NamespaceLevels, apply_rdma, namespace_level, rdma_key
from webhook.core.runtimefix.shm import apply_shm
from webhook.core.workloads.pods import ContainerRef

Keyed = list[tuple[ContainerRef, set[str]]]


def matches(
    rule: FixMatch, c: ContainerRef, keys: set[str], policies: PolicySet, resources: bool = True
) -> bool:
    """Every condition the rule gives holds for the container (SPEC §14, as §5's env fixes);
    `resources=False`: all but the resources (the RDMA rule's name its trigger)."""
    if resources and rule.resources and not rule.resource_names.any_of(keys):
        return False
    if rule.families and not {p.group for p in used_policies(keys, policies)} & set(rule.families):
        return False
    regex = rule.image_regex
    if regex is not None:
        image = c.container.get("image")
        if not regex.search(repository_path(image) if isinstance(image, str) else ""):
            return False
    return True


def apply_runtime_fixes(
    state: PodState,
    accelerators: Keyed,
    containers: Keyed,
    policies: PolicySet,
    config: WebhookConfig,
    inventory: NodeInventory | None,
    levels: NamespaceLevels | None,
    namespace: str | None,
    daemonset: bool = False,
    platforms: Mapping[str, tuple[str, ...]] | None = None,
) -> None:
    """`accelerators`: the pod's accelerator containers with their resource keys;
    `containers`: every container with its keys (RDMA needs no accelerator); `platforms`:
    the architectures registry lookups read from images' indexes."""
    fixes = config.runtime_fixes
    if not fixes.any_enabled:
        return
    value = state.pod.annotations.get(ANNOTATION_RUNTIME_FIXES)
    if value is not None:
        opted_out, warning = parse_opt_out(ANNOTATION_RUNTIME_FIXES, value)
        if warning:
            state.warnings.append(short(warning))
        if opted_out:
            return
    if fixes.rdma.enabled:
        rule = fixes.rdma
        names = rule.resource_names
        level: tuple[str | None, bool] | None = None
        for c, keys in containers:
            if not keys or not names.any_of(keys):
                continue  # most containers: one set or prefix test
            key = rdma_key(rule, keys)
            if key and matches(rule, c, keys, policies, resources=False):
                if level is None:
                    level = namespace_level(rule, levels, namespace)
                apply_rdma(state, rule, c, key, level[0], namespace, level[1])
    if not accelerators:
        return
    if fixes.shm.enabled:
        chosen = [c for c, keys in accelerators if matches(fixes.shm, c, keys, policies)]
        apply_shm(state, fixes.shm, chosen)
    if fixes.architecture.enabled and any(
        matches(fixes.architecture, c, keys, policies) for c, keys in accelerators
    ):
        apply_architecture(state, fixes.architecture, config, inventory, daemonset, platforms)
