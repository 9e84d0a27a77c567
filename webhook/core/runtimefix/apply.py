"""The runtime fixes applied to one pod spec (SPEC §14): which containers each rule matches,
the per-pod opt-out, and the order (after placement, whose terms the architecture joins)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

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
from webhook.core.runtimefix.shm import apply_shm, field_of
from webhook.core.workloads.pods import ContainerRef

Keyed = list[tuple[ContainerRef, set[str]]]


class _Match:
    """What matches() reads of a rule: a FixMatch is a pydantic model, whose every attribute
    read costs hundreds of instructions interpreted; read once per loaded config."""

    def __init__(self, rule: FixMatch) -> None:
        self.resources = bool(rule.resources)
        self.names = rule.resource_names
        self.families = frozenset(rule.families)
        self.image_regex = rule.image_regex


class _Plan:
    """A loaded config's runtime fixes as apply_runtime_fixes reads them on every review."""

    def __init__(self, config: WebhookConfig) -> None:
        # Held, so that `plan.config is config` is the same config (its id cannot be reused);
        # the config is frozen (ConfigModel), so what is read here cannot change.
        self.config = config
        fixes = config.runtime_fixes
        self.shm_size_limit = fixes.shm.size_limit
        self.shm_memory_fraction = fixes.shm.memory_fraction
        self.any_enabled = fixes.any_enabled
        self.rdma = fixes.rdma if fixes.rdma.enabled else None
        self.rdma_match = _Match(fixes.rdma)
        self.shm = fixes.shm if fixes.shm.enabled else None
        self.shm_match = _Match(fixes.shm)
        self.architecture = fixes.architecture if fixes.architecture.enabled else None
        self.architecture_match = _Match(fixes.architecture)


# The last config's plan (one slot: a new config replaces it).
_LAST: Final[list[_Plan]] = []


def _plan(config: WebhookConfig) -> _Plan:
    """The plan of the config in force."""
    if _LAST:
        plan = _LAST[0]
        if plan.config is config:
            return plan
    plan = _Plan(config)
    _LAST[:] = [plan]
    return plan


def matches(
    rule: _Match,
    c: ContainerRef,
    keys: set[str],
    policies: PolicySet,
    resources: bool = True,
    families: frozenset[str] = frozenset(),
) -> bool:
    """Every condition the rule gives holds for the container (SPEC §14, as §5's env fixes);
    `resources=False`: all but the resources (the RDMA rule's name its trigger). `families`:
    the device families (families.catalog names: nvidia, amd, ascend, ...) whose devices the
    container has; the rule's `families` match those or its CRL policies' group labels."""
    if resources and rule.resources and not rule.names.any_of(keys):
        return False
    if (
        rule.families
        and not families & rule.families
        and not {p.group for p in used_policies(keys, policies)} & rule.families
    ):
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
    families: Mapping[int, frozenset[str]] | None = None,
    violations_only: bool = False,
) -> None:
    """`accelerators`: the pod's accelerator containers of every device family (SPEC §14:
    §13's families, DRA claims) with their resource keys; `families`: id(container) -> the
    device families it has; `containers`: every container with its keys (RDMA needs no
    accelerator); `platforms`: the architectures registry lookups read from images' indexes.
    `violations_only` (/validate): only what can deny runs, the architecture rule under
    `noCompatibleNode: deny`, so /validate denies what /mutate's warning and the CLI say."""
    plan = _plan(config)
    if not plan.any_enabled:
        return
    if violations_only and (plan.architecture is None or config.no_compatible_node != "deny"):
        return
    value = field_of(state.pod.annotations, ANNOTATION_RUNTIME_FIXES)
    if value is not None:
        opted_out, warning = parse_opt_out(ANNOTATION_RUNTIME_FIXES, value)
        if warning:
            state.warnings.append(short(warning))
        if opted_out:
            return
    rdma = plan.rdma if not violations_only else None
    if rdma is not None:
        names = plan.rdma_match.names
        level: tuple[str | None, bool] | None = None
        for c, keys in containers:
            if not keys or not names.any_of(keys):
                continue  # most containers: one set or prefix test
            key = rdma_key(rdma, keys, c)
            if key and matches(plan.rdma_match, c, keys, policies, resources=False):
                if level is None:
                    level = namespace_level(rdma, levels, namespace)
                apply_rdma(state, rdma, c, key, level[0], namespace, level[1])
    if not accelerators:
        return
    of = families or {}
    if plan.shm is not None and not violations_only:
        rule = plan.shm_match
        chosen = [
            c
            for c, keys in accelerators
            if matches(rule, c, keys, policies, families=of.get(id(c.container), _NONE))
        ]
        apply_shm(state, plan.shm_size_limit, plan.shm_memory_fraction, chosen)
    if plan.architecture is not None:
        rule = plan.architecture_match
        chosen_families: set[str] = set()
        for c, keys in accelerators:
            found = of.get(id(c.container), _NONE)
            if matches(rule, c, keys, policies, families=found):
                chosen_families |= found or _NVIDIA
        if chosen_families:
            apply_architecture(
                state,
                plan.architecture,
                config,
                inventory,
                daemonset,
                platforms,
                frozenset(chosen_families),
                violations_only,
            )


_NONE: Final[frozenset[str]] = frozenset()
# A container the caller gave no families for is one of the config's GPU containers: NVIDIA's.
_NVIDIA: Final = frozenset({"nvidia"})
