"""One placement engine (SPEC §13 "One placement engine", issue 45): the pod-level sequence every
accelerator family is placed by. NVIDIA's CUDA (`place.CudaFamily`) and the table vendors
(`gate.TableFamily`: AMD ROCm, Huawei Ascend CANN and any vendor of
`webhook/data/accelerators.yaml`) are descriptions this code evaluates; none of them carries its
own copy of the steps below, so a new vendor cannot skip one.

The sequence, in the order users see its warnings:

1. `/validate` (`violations_only`) stops at once when nothing can deny: no `noCompatibleNode:
   deny` in force and the family says its containers cannot conflict (`may_conflict`: one
   CUDA container's compatible set is never empty).
2. The family reads what its containers need (`read`: annotations, env, tables, images); it
   answers False when placement is off for the pod (opt-out annotation, a disabled gate).
3. The images whose version nothing told are recorded for a registry lookup (`unresolved`).
4. The containers' needs may exclude each other (`violation`: no node runs them all): a
   violation, and nothing else is placed.
5. `/validate` stops here unless `noCompatibleNode: deny` is in force.
6. The family may have nothing to place (`placeable`: no known version, or one no table
   lists), with its warnings.
7. No inventory yet (the Nodes are still being listed): "not enforced yet", nothing injected;
   no inventory at all: the family's own words, or placement without one (CUDA's terms hold
   without knowing the nodes: `without_inventory` answers '').
8. The family reads the nodes (`read_nodes`): a warning when none of them advertises the
   family (nothing is injected then).
9. A DaemonSet's template is not mutated: the family's notes (`daemonset_template`).
10. A DaemonSet's pod, or a pod bound with `spec.nodeName`, is checked against its node, never
    given an affinity (the kubelet would fail it): each problem the family finds
    (`pinned_problems`) is a warning or, past the first warning-only ones, `noCompatibleNode`.
11. Otherwise the family's plan (`plan`: classify the nodes as fit, unfit or unknown, decide
    with `nodeclass.judge`, the one rule, write the terms and warnings) is injected
    (`injection.inject`: the user's affinity, the webhook's own terms, templates).

`Family` is an abstract class whose every member is abstract (no default): a description
that lacks one cannot be instantiated (mypy `--strict` rejects it, CI; the interpreter raises
TypeError), and tests/unit/test_placement_invariants.py checks that each description defines
every member itself. An abstract class rather than a Protocol: compiled (mypyc), the engine
calls a native subclass's methods through its vtable, not by looking the names up (~2k
instructions per review).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from webhook.core.base.wording import Message
from webhook.core.config.model import WebhookConfig
from webhook.core.images.facts import ImageQuery
from webhook.core.outcome.decision import PodState, short
from webhook.core.placement import fit
from webhook.core.placement.injection import Plan, inject
from webhook.core.placement.inventory import NodeInventory
from webhook.core.placement.needs import meta, record_problem

# (sentence, rule, warning only): a pinned node's problem (step 10).
Problem = tuple[str, str, bool]


class Family(ABC):
    """One accelerator family's description, for one pod spec's containers of that family."""

    @abstractmethod
    def may_conflict(self) -> bool:
        """Whether the containers' needs could exclude each other (else /validate has nothing
        to find without `noCompatibleNode: deny`)."""
        ...

    @abstractmethod
    def read(self, state: PodState, config: WebhookConfig) -> bool:
        """Read what each container needs; False when placement is off for this pod."""
        ...

    @abstractmethod
    def unresolved(self, state: PodState) -> list[ImageQuery]:
        """The registry lookups that could still tell an unknown version."""
        ...

    @abstractmethod
    def violation(self, state: PodState) -> bool:
        """Record the violation when no node can run every container; True if recorded."""
        ...

    @abstractmethod
    def placeable(self, state: PodState) -> bool:
        """Whether there is anything to place (with the family's warnings when not)."""
        ...

    @abstractmethod
    def not_enforced_yet(self) -> Message:
        """The warning while the webhook is still listing the Nodes."""
        ...

    @abstractmethod
    def without_inventory(self) -> Message:
        """The warning without a node inventory ('': the family places without one)."""
        ...

    @abstractmethod
    def read_nodes(
        self, state: PodState, config: WebhookConfig, inventory: NodeInventory | None
    ) -> Message:
        """Read the nodes; the warning when none advertises the family ('': go on)."""
        ...

    @abstractmethod
    def daemonset_template(self, state: PodState, config: WebhookConfig) -> None:
        """The notes (and warnings) for a DaemonSet's template, which is not mutated."""
        ...

    @abstractmethod
    def pinned_problems(self, config: WebhookConfig, node: str, who: str) -> list[Problem]:
        """What `node` (a pinned pod's) lacks; `who`: how a sentence names the pod."""
        ...

    @abstractmethod
    def plan(self, state: PodState, config: WebhookConfig) -> Plan | None:
        """The terms, notes and warnings (None: denied, or nothing to write)."""
        ...


def place_family(
    state: PodState,
    family: Family,
    config: WebhookConfig,
    inventory: NodeInventory | None,
    *,
    violations_only: bool = False,
    daemonset: bool = False,
) -> None:
    """Place a pod spec's containers of one family (the sequence of this module's docstring).

    `violations_only` (/validate): stop once nothing else can deny. `daemonset`: the spec is a
    DaemonSet's pod template, which is not mutated (its pods are pinned to their nodes)."""
    pending = inventory is not None and inventory.pending
    deny = inventory is not None and not pending and config.no_compatible_node == "deny"
    if violations_only and not deny and not family.may_conflict():
        return
    if not family.read(state, config):
        return
    queries = family.unresolved(state)
    if queries:
        state.unresolved += queries
    if family.violation(state):
        return
    if violations_only and not deny:
        return
    if not family.placeable(state):
        return
    if pending:
        # Not listed yet is not "no inventory": a label no node carries yet would leave the
        # pod Pending forever. Inject nothing.
        state.warnings.append(family.not_enforced_yet())
        return
    if inventory is None:
        text = family.without_inventory()
        if text:
            state.warnings.append(text)
            return
    text = family.read_nodes(state, config, inventory)
    if text:
        state.warnings.append(text)
        return
    if state.pod.is_template:
        if daemonset:
            family.daemonset_template(state, config)
            return
    else:
        pinned = fit.daemonset_node(meta(state), state.pod.spec)
        who = "this DaemonSet pod"
        if pinned is None:
            # Bound with spec.nodeName (SPEC §4): the kubelet would fail it on an affinity.
            pinned, who = fit.bound_node(state.pod.spec), "this pod"
        if pinned is not None:
            # Pinned to one node (by the DaemonSet controller, or spec.nodeName): an affinity
            # would only leave the pods on unfit nodes Pending. Checked, not placed.
            if pinned and inventory is not None:
                for problem, rule, warn_only in family.pinned_problems(config, pinned, who):
                    if warn_only:
                        state.warnings.append(short(problem))
                    elif record_problem(state, config, problem, rule):
                        break
            return
    plan = family.plan(state, config)
    if plan is not None:
        inject(state, config, plan)
