"""The driver-release gate (SPEC §13): the description the placement engine (engine.py)
evaluates for every vendor whose compatibility is a published table of driver releases and
runtime versions (AMD ROCm, Huawei Ascend CANN), read from the vendor's data (vendors.py),
never from code written per vendor (`TableFamily`).

Per pod: each container's runtime version (pod annotation, env, admin table, tag, shipped
knowledge) and the devices its code is built for; the nodes whose driver release runs every
one of those versions and whose device every container is built for, as required node
affinity over the label values the inventory has seen; DaemonSet and spec.nodeName pods
checked, not pinned. A node whose driver is unknown (no label, an empty one, no table row) is
never taken as compatible, nor as incompatible: the decision between the fit nodes, keeping the
pod off the unfit ones only, and noCompatibleNode (warn or deny, as CUDA's gate, SPEC §4) is
nodeclass.py's, the one rule CUDA's placement takes too (SPEC §13 "Never strand a pod").

The named per-vendor rule is the device rule: ROCm code objects are per gfx target (no
PTX-like fallback) and CANN operator packages per chip, so the node's device must be one the
image is built for, where the image says which."""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from webhook.core.base.wording import Message, Wording
from webhook.core.config.model import WebhookConfig
from webhook.core.images.facts import ImageEnv, ImageQuery, pod_archs
from webhook.core.images.references import shown_image
from webhook.core.outcome.decision import PodState, Violation, container_label, short
from webhook.core.placement import nodeclass
from webhook.core.placement.engine import Family, Problem
from webhook.core.placement.injection import Plan
from webhook.core.placement.inventory import NodeInventory
from webhook.core.placement.needs import Envs, container_env, record_problem, runtime_unknown
from webhook.core.placement.terms import fresh_terms
from webhook.core.placement.vendor_nodes import (
    NodeDriver,
    Term,
    VendorFacts,
    Want,
    classify,
    device_counts,
    exclusions,
    newest,
    seen_terms,
    summary,
    table_terms,
    vendor_facts,
)
from webhook.core.placement.vendors import (
    Vendor,
    container_finding,
    device_matches,
    in_force,
    shipped_vendors,
    version_key,
)
from webhook.core.workloads.pods import ContainerRef


class VendorNeed(NamedTuple):
    container: ContainerRef
    version: str | None
    devices: tuple[str, ...]
    source: str


def _image(c: ContainerRef) -> str:
    image = c.container.get("image")
    return shown_image(image) if isinstance(image, str) and image else f"{c.name} (no image)"


def _needs(
    state: PodState,
    vendor: Vendor,
    containers: list[ContainerRef],
    config: WebhookConfig,
    image_env: ImageEnv | None,
) -> list[VendorNeed]:
    gate = config.accelerators.gate(vendor.name)
    assert gate is not None
    raw = state.pod.annotations.get(vendor.annotation)
    annotated = version_key(raw) if raw and len(raw) <= 20 and raw[:1].isdigit() else None
    if raw is not None and annotated is None:
        shown = raw if len(raw) <= 20 else raw[:19] + "…"
        state.warnings.append(short(f"annotation {vendor.annotation}={shown!r} is not a version"))
    envs: Envs = {}
    needs = []
    for c in containers:
        found = container_finding(vendor, c.container, container_env(envs, c), gate, image_env)
        devices = found.devices if found is not None else ()
        if annotated is not None:
            needs.append(VendorNeed(c, annotated, devices, f"annotation {vendor.annotation}"))
        elif found is not None and found.version is not None:
            needs.append(VendorNeed(c, found.version, devices, found.source))
        else:
            needs.append(VendorNeed(c, None, devices, ""))
    return needs


def _unresolved(state: PodState, vendor: Vendor, needs: list[VendorNeed]) -> list[ImageQuery]:
    """What a registry lookup could still tell: the images whose version nothing else told
    (their configs' vendor variables, documents.ACCELERATOR_VARIABLES), for every
    architecture the pod may run on."""
    images = [
        image
        for n in needs
        if n.version is None and isinstance(image := n.container.container.get("image"), str)
        if image
    ]
    if not images or not vendor.env_version:
        return []
    archs = pod_archs(state.pod.spec)
    return [ImageQuery(image, arch, vendor.name) for image in images for arch in archs]


def _shown(vendor: Vendor, versions: tuple[str, ...]) -> str:
    return ", ".join(dict.fromkeys(vendor.shown(v) for v in versions))


def _devices_text(want: Want) -> str:
    listed = [d for devices in want.devices for d in devices]
    return "/".join(dict.fromkeys(listed))


def _violation(state: PodState, vendor: Vendor, needs: list[VendorNeed], want: Want) -> bool:
    """The pod needs one node for all its containers: a driver release that runs every
    version (by the shipped table) and a device every container is built for."""
    if len(needs) < 2:
        return False
    each_known = all(
        any(Want((v,), ()).runs_somewhere(r) for r in vendor.releases) for v in set(want.versions)
    )
    if each_known and not any(want.runs_somewhere(r) for r in vendor.releases):
        what = f"no {vendor.driver} release runs every container"
    elif want.devices and not any(
        want.fits_device(d, device_matches)
        for d in {t for devices in want.devices for t in devices}
    ):
        what = f"no {vendor.device} runs every container"
    else:
        return False
    listed = "; ".join(
        f"{container_label(n.container)} needs {vendor.runtime} {vendor.shown(n.version or '')}"
        + (f" on {'/'.join(n.devices)}" if n.devices else "")
        for n in needs
    )
    state.violations.append(
        Violation(
            f"{state.ref}: {what}: {listed}; align them or split them into separate pods.",
            state.ref,
            rule=vendor.name,
        )
    )
    return True


def _problem(facts: VendorFacts, want: Want) -> str:
    """Why no node runs the pod (some node advertises the vendor's labels)."""
    vendor = facts.vendor
    runtime = f"{vendor.runtime} {_shown(vendor, want.versions)}"
    drivers = [n for n in facts.combos if want.runs(n.release, n.device)]
    listed = [n for n in facts.combos if n.release and want.runs_somewhere(n.release)]
    if not drivers and listed:
        # Their driver runs it on some GPU targets only (a per-GPU row), not on theirs.
        return (
            f"no node whose {vendor.driver} runs {runtime} has a {vendor.device} it is listed "
            f"for; they have {device_counts(facts, listed)}"
        )
    if not drivers:
        top = newest(facts)
        if top is None:
            problems = sorted({n.problem for n in facts.combos if n.problem})
            return f"no node's {vendor.driver} is known ({problems[0]}); {runtime} needs one"
        release, count = top
        return (
            f"no node's {vendor.driver} supports {runtime}; newest is "
            f"{vendor.shown(release)} ({count} node{'s' if count != 1 else ''})"
        )
    return (
        f"no node whose {vendor.driver} runs {runtime} has {vendor.device} "
        f"{_devices_text(want)}; they have {device_counts(facts, drivers)}"
    )


def _hints(facts: VendorFacts, unknown: list[NodeDriver]) -> tuple[nodeclass.Hint]:
    """The label that makes the unknown nodes known: the admin's driver release label (the
    first `release` label of the gate), or, when every unknown node's driver is known and its
    device is not, the first device label."""
    vendor, gate = facts.vendor, facts.gate
    release = next((d.key for d in gate.driver_labels if d.value == "release"), "")
    if release and any(n.release is None for n in unknown):
        return (nodeclass.Hint(release, f"<{vendor.driver} release>"),)
    device = gate.device_labels[0] if gate.device_labels else ""
    if device:
        return (nodeclass.Hint(device, "<a value the device table maps>"),)
    return (nodeclass.Hint(gate.driver_labels[0].key, f"<{vendor.driver} release>"),)


def _pinned(facts: VendorFacts, want: Want, node: str, who: str) -> list[Problem]:
    pinned = facts.nodes.get(node)
    if pinned is None:
        return []
    vendor = facts.vendor
    runtime = f"{vendor.runtime} {_shown(vendor, want.versions)}"
    problems: list[Problem] = []
    if pinned.problem:
        problems.append((f"node {node}'s {vendor.driver} is unknown ({pinned.problem})", "", True))
    elif not want.runs(pinned.release, pinned.device):
        release = vendor.shown(pinned.release.release) if pinned.release else "?"
        text = f"node {node}'s {vendor.driver} {release} does not support {runtime}; {who} needs it"
        problems.append((text, vendor.name, False))
    if want.devices and not want.fits_device(pinned.device, device_matches):
        have = pinned.device or pinned.device_value or "none"
        text = f"node {node} has {vendor.device} {have}; {who} needs {_devices_text(want)}"
        problems.append((text, vendor.name, False))
    return problems


def _daemonset(state: PodState, facts: VendorFacts, want: Want) -> None:
    vendor = facts.vendor
    runtime = f"{vendor.runtime} {_shown(vendor, want.versions)}"
    state.notes.append(
        Wording(
            (
                f"no {vendor.runtime} affinity (DaemonSet pods are pinned to their node); "
                f"nodes without an {vendor.driver} for {runtime} cannot run them",
                f"no {vendor.runtime} affinity (DaemonSet pods are pinned); "
                f"nodes without a driver for {runtime} cannot run them",
                f"no {vendor.runtime} affinity (DaemonSet pods are pinned to their node)",
            )
        )
    )
    # Known not to run them (nodeclass.py): a node whose driver is unknown may (as CUDA's
    # nodes without a version label, fit.daemonset_unfit).
    unfit = sum(facts.combos[n] for n in classify(facts, want, device_matches).unfit)
    if unfit:
        state.warnings.append(
            short(
                f"{unfit} of {facts.total} {vendor.nodes} cannot run these DaemonSet pods: "
                f"they need an {vendor.driver} for {runtime}"
            )
        )


_MAX_PLACEMENTS = 1024


@lru_cache(maxsize=1024)
def _listed(vendor: Vendor, want: Want) -> bool:
    """Whether some driver release in the vendor's table runs every version `want` has."""
    return any(want.runs_somewhere(r) for r in vendor.releases)


class _Placement(NamedTuple):
    """The terms for one need on one snapshot, and what to say about them (nodeclass.py)."""

    terms: list[Term]  # required onto the fit nodes; or off the unfit ones; or the table's
    warning: Message  # the unknown nodes counted, or the gamble on them ('' for none)
    problem: str  # why no node runs the pod ('' when some does or may)
    avoid: bool  # the terms only keep the pod off the unfit nodes


def _placement(facts: VendorFacts, want: Want, unknown_nodes: str) -> _Placement:
    classes = classify(facts, want, device_matches)
    fit = sum(facts.combos[n] for n in classes.fit)
    unknown = sum(facts.combos[n] for n in classes.unknown)
    vendor = facts.vendor
    by_driver, by_device, kept_off = exclusions(facts, want, device_matches)
    hints = _hints(facts, classes.unknown) if unknown else ()
    why = next((n.problem for n in classes.unknown if n.problem), "")
    runtime = f"{vendor.runtime} {_shown(vendor, want.versions)}"
    verdict, warning = nodeclass.judge(
        fit, unknown, kept_off, unknown_nodes, vendor.nodes, vendor.driver, runtime, hints, why
    )
    if verdict == nodeclass.REQUIRE:
        terms = seen_terms(facts, classes.fit, bool(want.devices), want)
        return _Placement(terms, warning, "", False)
    driver_keys = [d.key for d in facts.gate.driver_labels]
    if verdict == nodeclass.AVOID:
        terms = nodeclass.both(
            nodeclass.exclusion_terms(driver_keys, by_driver),
            nodeclass.exclusion_terms(facts.gate.device_labels, by_device),
        )
        return _Placement(terms, warning, "", True)
    terms, kept_off_only = _none_terms(facts, want, unknown_nodes)
    return _Placement(terms, "", _problem(facts, want), kept_off_only)


def _none_terms(facts: VendorFacts, want: Want, unknown_nodes: str) -> tuple[list[Term], bool]:
    """The terms for a pod no known node runs (noCompatibleNode: warn), so it waits for a
    node an autoscaler or an admin may add rather than land on a known-unfit one (issue 45
    item 2); also whether they only keep the pod off (the note says so).

    `unknownNodes: allow` (the default; then every node is known and unfit, or the verdict
    would be AVOID): not `In` over the table rows' own spellings (`30.10`), which a node
    labelled with a patch release the row covers (`30.10.1`, `25.3.RC1.2`) never matches (no
    node selector operator matches a prefix), but the values that make the known nodes unfit
    excluded (`NotIn`, read in the gate's label order: nodeclass.exclusion_terms), the same
    terms as AVOID: a new node with any other value, a patch release of a row that runs the
    pod among them, is eligible. When those values exclude nothing (every unfit node is so
    only through a per-GPU row, which neither value alone decides), the rows' own terms.

    `unknownNodes: exclude` (Pending rather than a gamble on a node whose driver no row
    maps): the rows' own values only (vendor_nodes.table_terms), so a node with a value the
    tables do not hold, a patch release among them, is not used until an admin labels it with
    its row's release."""
    if unknown_nodes != "exclude":
        by_driver, by_device, _ = exclusions(facts, want, device_matches)
        if by_driver or by_device:
            driver_keys = [d.key for d in facts.gate.driver_labels]
            terms = nodeclass.both(
                nodeclass.exclusion_terms(driver_keys, by_driver),
                nodeclass.exclusion_terms(facts.gate.device_labels, by_device),
            )
            return terms, True
    return table_terms(facts.vendor, facts.gate, want, device_matches), False


def facts_of(vendor: Vendor, inventory: NodeInventory, config: WebhookConfig) -> VendorFacts:
    """The vendor's view of the inventory, built once per snapshot and gate config (the
    gate's identity is checked: hashing a config part on every review costs more)."""
    gate = config.accelerators.gate(vendor.name)
    assert gate is not None
    key = ("vendor", vendor.name)
    facts = inventory.memo(key, vendor_facts(vendor, gate))
    if facts.gate is not gate or facts.vendor is not vendor:
        facts = vendor_facts(vendor, gate)(inventory.nodes)
        inventory.memo_set(key, facts)
    return facts


def inventory_summary(inventory: NodeInventory, config: WebhookConfig) -> list[str]:
    """Per vendor whose labels some node carries: its nodes by driver release (the CLI's
    inventory line, /inventory)."""
    found = []
    for vendor in shipped_vendors():
        gate = config.accelerators.gate(vendor.name)
        if gate is not None and gate.enabled:
            line = summary(facts_of(in_force(vendor, gate), inventory, config))
            if line:
                found.append(line)
    return found


class TableFamily(Family):
    """A table vendor as the engine's description (engine.Family, SPEC §13): one pod spec's
    `containers`, which use `vendor`'s devices. `image_env`: the vendor variables read from
    images' configs in their registries (the last resort, as for CUDA: SPEC §4 step 6)."""

    # Written out (no dataclass): a constructor mypyc compiles.
    def __init__(
        self, vendor: Vendor, containers: list[ContainerRef], image_env: ImageEnv | None = None
    ) -> None:
        self.vendor = vendor
        self.containers = containers
        self.image_env = image_env
        self.facts: VendorFacts | None = None

    # Set by `read` (the engine calls it first).
    needs: list[VendorNeed]
    known: list[VendorNeed]
    want: Want

    def may_conflict(self) -> bool:
        # Read in /validate too (the annotation's and image warnings are the review's).
        return True

    def read(self, state: PodState, config: WebhookConfig) -> bool:
        vendor = self.vendor
        gate = config.accelerators.gate(vendor.name)
        if gate is None or not gate.enabled:
            return False
        needs = self.needs = _needs(state, vendor, self.containers, config, self.image_env)
        known = self.known = [n for n in needs if n.version is not None]
        self.want = Want(
            tuple(n.version for n in known if n.version is not None),
            tuple(n.devices for n in needs if n.devices),
        )
        return True

    def unresolved(self, state: PodState) -> list[ImageQuery]:
        return _unresolved(state, self.vendor, self.needs)

    def violation(self, state: PodState) -> bool:
        known = self.known
        return bool(known) and _violation(state, self.vendor, known, self.want)

    def placeable(self, state: PodState) -> bool:
        vendor, known = self.vendor, bool(self.known)
        for n in self.needs:
            from_operator = n.container.image_from and not n.container.container.get("image")
            if n.version is None and not from_operator:
                table = f"accelerators.{vendor.name}.imageTable"
                warning = runtime_unknown(
                    n.container,
                    known,
                    state.pod.annotatable,
                    vendor.runtime,
                    vendor.annotation,
                    table,
                )
                state.warnings.append(warning)
                state.unknown_runtime(vendor.runtime, n.container)  # Decision.runtime_unknown
        if not known:
            return False
        if not _listed(vendor, self.want):
            state.warnings.append(
                short(
                    f"no {vendor.driver} release the webhook knows lists {vendor.runtime} "
                    f"{_shown(vendor, self.want.versions)}: no affinity"
                )
            )
            return False
        return True

    def not_enforced_yet(self) -> Message:
        return short(
            f"{self.vendor.runtime} placement is not enforced yet: "
            "the webhook is still listing the cluster's Nodes"
        )

    def without_inventory(self) -> Message:
        return short(f"{self.vendor.runtime} placement is not enforced without the node inventory")

    def read_nodes(
        self, state: PodState, config: WebhookConfig, inventory: NodeInventory | None
    ) -> Message:
        assert inventory is not None  # without_inventory stopped the engine
        vendor = self.vendor
        facts = self.facts = facts_of(vendor, inventory, config)
        if not facts.total:
            return short(
                f"{vendor.runtime} placement is not enforced: "
                f"no node advertises its {vendor.driver}"
            )
        return ""

    def daemonset_template(self, state: PodState, config: WebhookConfig) -> None:
        assert self.facts is not None
        _daemonset(state, self.facts, self.want)

    def pinned_problems(self, config: WebhookConfig, node: str, who: str) -> list[Problem]:
        assert self.facts is not None
        return _pinned(self.facts, self.want, node, who)

    def plan(self, state: PodState, config: WebhookConfig) -> Plan | None:
        facts, want, vendor = self.facts, self.want, self.vendor
        assert facts is not None
        key = (want, config.unknown_nodes)
        found = facts.placements.get(key)
        if found is None:
            if len(facts.placements) >= _MAX_PLACEMENTS:
                facts.placements.clear()  # annotations can name any version: stay bounded
            found = facts.placements[key] = _placement(facts, want, config.unknown_nodes)
        shared, warning, problem, avoid = found
        if warning:
            state.warnings.append(warning)
        if problem and record_problem(state, config, problem, vendor.name):
            return None
        terms = fresh_terms(shared)  # the memo's are shared by every review (issue 45)
        if not terms:
            return None
        runtime = f"{vendor.runtime} {_shown(vendor, want.versions)}"
        on = f" on {vendor.device} {_devices_text(want)}" if want.devices else ""
        source = self.known[0].source
        if avoid:
            note = Wording(
                (
                    f"kept off nodes whose {vendor.driver} cannot run {runtime}{on} ({source})",
                    f"kept off {vendor.driver}s without {runtime}{on} ({source})",
                    f"kept off {vendor.driver}s without {runtime}{on}",
                )
            )
        else:
            note = Wording(
                (
                    f"required nodes whose {vendor.driver} runs {runtime}{on} ({source})",
                    f"required {vendor.driver} for {runtime}{on} ({source})",
                    f"{vendor.driver} for {runtime}{on} ({source})",
                    f"{vendor.driver} for {runtime}{on}",
                )
            )
        return Plan(
            cuda=terms,
            keys=facts.gate.keys,
            note_kind=f"{vendor.name}-affinity",
            cuda_rule=vendor.name,
            cuda_want=f"an {vendor.driver} for {runtime}{on}",
            cuda_note=note,
        )
