"""Never strand a pod (SPEC §13, issue 45): each placement invariant stated once and run for
every vendor (CUDA, ROCm, CANN) on nodes labelled as the vendor's own tools label them: GPU
Feature Discovery and the GPU Operator for NVIDIA, AMD's GPU operator labeller, mind-cluster
before v26.1 (chip only) and after (with `huawei.com/driver.version`). No node carries an
admin label. Each test asserts the patched pod's affinity, which of the nodes it lets the
scheduler use (matched as the API server's selector does), and the exact warnings.

Every case runs through the one engine (`engine.place_family`, the only entry the evaluation
places a pod by) with the family's description (`place.CudaFamily`, `gate.TableFamily`): a
new vendor is a row of `VENDORS` (and of `FAMILIES` when it brings a new description), and
each invariant below runs for it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from tests.helpers import apply, container, pod, workload
from webhook.core.config.labels import NodeSelectorTerm
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.outcome.decision import Decision
from webhook.core.placement import engine, ranges
from webhook.core.placement.gate import TableFamily
from webhook.core.placement.inventory import NodeInventory
from webhook.core.placement.place import CudaFamily
from webhook.core.placement.vendors import shipped_vendors
from webhook.core.policies.policyset import PolicySet
from webhook.core.workloads.pods import ContainerRef

Labels = dict[str, str]
Term = dict[str, Any]

# GPU Feature Discovery's CUDA labels, and the GPU Operator's GPU-node labels.
GFD_MAJOR, GFD_MINOR = (
    "nvidia.com/cuda.runtime-version.major",
    "nvidia.com/cuda.runtime-version.minor",
)
PRESENT, PRODUCT = "nvidia.com/gpu.present", "nvidia.com/gpu.product"
NFD_NVIDIA = "feature.node.kubernetes.io/pci-10de.present"
# AMD's labeller (amdgpu kernel module version, PCI device id); the admin's release label.
MODULE, DEVICE, RELEASE = (
    "amd.com/gpu.driver-version",
    "amd.com/gpu.device-id",
    ("amdgpu-driver-release"),
)
# mind-cluster: the chip, the accelerator type, and (v26.1 on) the HDK; the admin's label.
CHIP, ACCEL, HDK, HDK_ADMIN = (
    "node.kubernetes.io/npu.chip.name",
    "accelerator-type",
    "huawei.com/driver.version",
    "ascend-driver-version",
)


@dataclass(frozen=True)
class Vendor:
    """One vendor's case: a container needing one runtime version, and its nodes as the
    vendor's tools label them."""

    name: str
    make: Callable[[], dict[str, Any]]
    fit: Labels
    unfit: Labels
    unknown: tuple[Labels, ...]  # two flavours: no version label, and one no row maps
    # What the webhook writes and says (exact).
    fit_terms: list[Term]
    avoid_terms: list[Term]  # none fit, some unknown: kept off the unfit node only
    unknown_warning: str  # fit + 2 unknown
    avoid_warning: str  # unfit + 2 unknown
    all_unknown_warning: str  # 2 unknown only
    no_node: str  # unfit only (noCompatibleNode)
    exclude_problem: str  # unfit + 2 unknown with unknownNodes: exclude
    note_kind: str

    def nodes(self, *kinds: str) -> dict[str, Labels]:
        found: dict[str, Labels] = {}
        for kind in kinds:
            if kind == "unknown":
                found |= {f"unknown-{i}": labels for i, labels in enumerate(self.unknown)}
            else:
                found[kind] = getattr(self, kind)
        return found


def _expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, **({"values": list(values)} if values else {})}


def _term(*exprs: dict[str, Any]) -> Term:
    return {"matchExpressions": list(exprs)}


CUDA_124 = "nvidia/cuda:12.4.1-base-ubuntu22.04"
ROCM_714 = "rocm/vllm:rocm7.14.0_vllm_0.10.2_20251006"
CANN_83 = "ascendai/cann:8.3.rc1-910b-ubuntu22.04-py3.11"
MANUAL = "label cuda-major-version=<major> cuda-minor-version=<minor>"
AMD_HINT = "label amdgpu-driver-release=<amdgpu driver release>"
HDK_HINT = "label ascend-driver-version=<Ascend HDK release>"

VENDORS = [
    Vendor(
        name="cuda",
        make=lambda: container(image=CUDA_124, limits={"nvidia.com/gpu": "1"}),
        fit={GFD_MAJOR: "12", GFD_MINOR: "6", PRESENT: "true", PRODUCT: "NVIDIA-H100-80GB-HBM3"},
        unfit={GFD_MAJOR: "12", GFD_MINOR: "2", PRESENT: "true", PRODUCT: "Tesla-T4"},
        # The GPU Operator without GFD's CUDA labels; NFD's PCI label only.
        unknown=({PRESENT: "true", PRODUCT: "NVIDIA-A100-SXM4-80GB"}, {NFD_NVIDIA: "true"}),
        fit_terms=[
            _term(
                _expr(GFD_MAJOR, "Gt", "11"),
                _expr(GFD_MAJOR, "Lt", "13"),
                _expr(GFD_MINOR, "Gt", "3"),
            ),
            _term(_expr(GFD_MAJOR, "Gt", "12")),
        ],
        avoid_terms=[
            _term(
                _expr(GFD_MAJOR, "Gt", "11"),
                _expr(GFD_MAJOR, "Lt", "13"),
                _expr(GFD_MINOR, "Gt", "3"),
            ),
            _term(_expr(GFD_MAJOR, "Gt", "12")),
            _term(
                _expr("cuda-major-version", "DoesNotExist"),
                _expr(GFD_MAJOR, "DoesNotExist"),
                _expr("nvidia.com/cuda.runtime.major", "DoesNotExist"),
            ),
        ],
        unknown_warning=f"2 GPU nodes not used, their CUDA is unknown: {MANUAL}",
        avoid_warning=f"CUDA 12.4 on no known node, kept off 1 unfit; 2 unknown may: {MANUAL}",
        all_unknown_warning=f"no node known to run CUDA 12.4; 2 unknown may: {MANUAL}",
        no_node="no node supports CUDA 12.4; highest available is 12.2 (1 node)",
        exclude_problem="no node supports CUDA 12.4; highest available is 12.2 (1 node)",
        note_kind="cuda-affinity",
    ),
    Vendor(
        name="rocm",
        make=lambda: container(image=ROCM_714, limits={"amd.com/gpu": "1"}),
        # MI300X (74a1) on amdgpu 30.10 (module 6.14.14) and on the ROCm 6.4 driver (6.12.12).
        fit={MODULE: "6.14.14", DEVICE: "74a1"},
        unfit={MODULE: "6.12.12", DEVICE: "74a1"},
        # The labeller without a driver version (no amdgpu module loaded), and a module the
        # table does not map.
        unknown=({DEVICE: "74a1"}, {MODULE: "6.99.1", DEVICE: "74a1"}),
        fit_terms=[_term(_expr(RELEASE, "DoesNotExist"), _expr(MODULE, "In", "6.14.14"))],
        # A node the admin labels is not excluded (no admin-labelled node is unfit); of the
        # others, those whose module is 6.12.12 are.
        avoid_terms=[
            _term(_expr(RELEASE, "Exists")),
            _term(_expr(RELEASE, "DoesNotExist"), _expr(MODULE, "NotIn", "6.12.12")),
        ],
        unknown_warning=(f"2 AMD GPU nodes not used (no driver label): {AMD_HINT}"),
        avoid_warning=(
            f"no node known to run ROCm 7.14, kept off 1 unfit; 2 unknown may: {AMD_HINT}"
        ),
        all_unknown_warning=f"no node known to run ROCm 7.14; 2 unknown may: {AMD_HINT}",
        no_node="no node's amdgpu driver supports ROCm 7.14; newest is 6.4 (1 node)",
        exclude_problem="no node's amdgpu driver supports ROCm 7.14; newest is 6.4 (1 node)",
        note_kind="rocm-affinity",
    ),
    Vendor(
        name="cann",
        make=lambda: container(image=CANN_83, limits={"huawei.com/Ascend910": "1"}),
        # mind-cluster v26.1 on: the HDK too (25.3.RC1 runs CANN 8.3.RC1, 25.5.1 does not).
        fit={HDK: "25.3.RC1", CHIP: "910B3", ACCEL: "module-910b-8"},
        unfit={HDK: "25.5.1", CHIP: "910B3", ACCEL: "module-910b-8"},
        # Before v26.1: chip and accelerator type, no HDK; an HDK no table row maps.
        unknown=(
            {CHIP: "910B3", ACCEL: "module-910b-8"},
            {HDK: "23.0.7", CHIP: "910B3", ACCEL: "module-910b-8"},
        ),
        fit_terms=[
            _term(
                _expr(HDK_ADMIN, "DoesNotExist"),
                _expr(HDK, "In", "25.3.RC1"),
                _expr(CHIP, "In", "910B3"),
            )
        ],
        avoid_terms=[
            _term(_expr(HDK_ADMIN, "Exists")),
            _term(_expr(HDK_ADMIN, "DoesNotExist"), _expr(HDK, "NotIn", "25.5.1")),
        ],
        unknown_warning=f"2 Ascend nodes not used (no driver label): {HDK_HINT}",
        avoid_warning=(
            f"no node known to run CANN 8.3.RC1, kept off 1 unfit; 2 unknown may: {HDK_HINT}"
        ),
        all_unknown_warning=(f"no node known to run CANN 8.3.RC1; 2 unknown may: {HDK_HINT}"),
        no_node="no node's Ascend HDK supports CANN 8.3.RC1; newest is 25.5.1 (1 node)",
        exclude_problem="no node's Ascend HDK supports CANN 8.3.RC1; newest is 25.5.1 (1 node)",
        note_kind="cann-affinity",
    ),
]
IDS = [v.name for v in VENDORS]
# Every case runs without the /dev/shm fix (tests/helpers.py without_shm: what it adds is
# asserted in test_runtime_fixes.py).
BASE = {"runtimeFixes": {"shm": {"enabled": False}}}


def config(**more: Any) -> WebhookConfig:
    return WebhookConfig.model_validate({**BASE, **more})


def run(obj: Mapping[str, Any], nodes: Mapping[str, Labels], cfg: WebhookConfig) -> Decision:
    inventory = NodeInventory.build(nodes, config=cfg)
    return evaluate(obj, PolicySet.empty(), cfg, operation="CREATE", inventory=inventory)


def required(spec: Mapping[str, Any]) -> Any:
    affinity = spec.get("affinity")
    if affinity is None:
        return None
    return affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]


def schedulable(spec: Mapping[str, Any], nodes: Mapping[str, Labels]) -> list[str]:
    """The nodes the pod's required node affinity lets the scheduler use (ORed terms, ANDed
    expressions, apimachinery's operators: labels.NodeSelectorRequirement.matches)."""
    terms = required(spec)
    if terms is None:
        return sorted(nodes)
    selectors = [NodeSelectorTerm.model_validate(t) for t in terms]
    return sorted(
        name for name, labels in nodes.items() if any(s.matches(labels) for s in selectors)
    )


def placement_warnings(decision: Decision) -> tuple[str, ...]:
    return tuple(w for w in decision.warnings if "label" in w or "node" in w)


@pytest.fixture(params=VENDORS, ids=IDS)
def vendor(request: pytest.FixtureRequest) -> Vendor:
    return request.param  # type: ignore[no-any-return]


def test_all_unknown_no_affinity_on_an_absent_label_schedulable_everywhere(vendor: Vendor) -> None:
    nodes = vendor.nodes("unknown")
    decision = run(pod(vendor.make()), nodes, config())
    spec = apply(decision)["spec"]
    assert required(spec) is None
    assert schedulable(spec, nodes) == sorted(nodes)
    assert decision.warnings == (vendor.all_unknown_warning,)
    assert all(len(w) <= 120 for w in decision.warnings)


def test_some_fit_required_onto_them_and_the_unknown_counted(vendor: Vendor) -> None:
    nodes = vendor.nodes("fit", "unknown")
    decision = run(pod(vendor.make()), nodes, config())
    spec = apply(decision)["spec"]
    assert required(spec) == vendor.fit_terms
    assert schedulable(spec, nodes) == ["fit"]
    assert decision.warnings == (vendor.unknown_warning,)
    assert decision.mutation_kinds == (vendor.note_kind,)


def test_none_fit_only_the_unfit_kept_off(vendor: Vendor) -> None:
    nodes = vendor.nodes("unfit", "unknown")
    decision = run(pod(vendor.make()), nodes, config())
    spec = apply(decision)["spec"]
    assert decision.allowed
    assert required(spec) == vendor.avoid_terms
    # Both unknown flavours (no label; a value no row maps) stay usable, the unfit one not.
    assert schedulable(spec, nodes) == ["unknown-0", "unknown-1"]
    assert decision.warnings == (vendor.avoid_warning,)
    assert all(len(w) <= 120 for w in decision.warnings)
    # Not even noCompatibleNode: deny refuses it: the webhook does not know that none fits.
    denied = run(pod(vendor.make()), nodes, config(noCompatibleNode="deny"))
    assert denied.allowed
    assert required(apply(denied)["spec"]) == vendor.avoid_terms


def test_all_unfit_is_no_compatible_node(vendor: Vendor) -> None:
    nodes = vendor.nodes("unfit")
    warned = run(pod(vendor.make()), nodes, config())
    assert warned.allowed
    assert warned.warnings == (vendor.no_node,)
    assert schedulable(apply(warned)["spec"], nodes) == []
    denied = run(pod(vendor.make()), nodes, config(noCompatibleNode="deny"))
    assert not denied.allowed
    assert [v.message for v in denied.violations] == [f"Pod ml/train: {vendor.no_node}."]


def test_unknown_nodes_exclude_prefers_pending(vendor: Vendor) -> None:
    nodes = vendor.nodes("unfit", "unknown")
    decision = run(pod(vendor.make()), nodes, config(unknownNodes="exclude"))
    assert decision.warnings == (vendor.exclude_problem,)
    assert schedulable(apply(decision)["spec"], nodes) == []
    # With a fit node the option changes nothing: required onto it, the unknown counted.
    mixed = vendor.nodes("fit", "unknown")
    fit = run(pod(vendor.make()), mixed, config(unknownNodes="exclude"))
    assert required(apply(fit)["spec"]) == vendor.fit_terms
    assert fit.warnings == (vendor.unknown_warning,)


def test_daemonset_and_bound_pods_are_checked_not_pinned(vendor: Vendor) -> None:
    nodes = vendor.nodes("unfit", "unknown")
    owner = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "name": "ds",
        "uid": "u",
        "controller": True,
    }
    ds_pod = pod(vendor.make(), nodeName="unknown-0")
    ds_pod["metadata"]["ownerReferences"] = [owner]
    for obj in (ds_pod, pod(vendor.make(), nodeName="unknown-1")):
        decision = run(obj, nodes, config())
        assert decision.patch == []
        assert required(apply(decision)["spec"]) is None


def test_templates_get_the_same_terms(vendor: Vendor) -> None:
    cfg = config(mutateTemplates=True)
    for nodes, terms in (
        (vendor.nodes("fit", "unknown"), vendor.fit_terms),
        (vendor.nodes("unfit", "unknown"), vendor.avoid_terms),
    ):
        decision = run(workload("Deployment", pod(vendor.make())), nodes, cfg)
        template = apply(decision)["spec"]["template"]
        assert required(template["spec"]) == terms
        single = run(pod(vendor.make()), nodes, cfg)
        assert required(apply(single)["spec"]) == terms
        assert decision.warnings == single.warnings
        assert decision.notes == single.notes


def test_own_terms_recognised_and_recomputed(vendor: Vendor) -> None:
    """Reinvocation: the webhook's own terms (required onto fit nodes, or off the unfit ones)
    are recognised (no change), and recomputed when the nodes say otherwise, never ANDed with
    the earlier ones."""
    cfg = config(mutateTemplates=True)
    avoid_nodes = vendor.nodes("unfit", "unknown")
    first = run(workload("Deployment", pod(vendor.make())), avoid_nodes, cfg)
    mutated = apply(first)
    again = run(mutated, avoid_nodes, cfg)
    assert again.patch == []
    fit_nodes = vendor.nodes("fit", "unfit", "unknown")
    recomputed = run(mutated, fit_nodes, cfg)
    template = apply(recomputed)["spec"]["template"]["spec"]
    assert schedulable(template, fit_nodes) == ["fit"]


def test_memoized_cuda_terms_are_copies() -> None:
    """Issue 45: a review's terms are its own; changing them never changes the next answer."""
    nodes = VENDORS[0].nodes("fit")
    cfg = config()
    inventory = NodeInventory.build(nodes, config=cfg)
    ranges._PARTS.clear()
    first = evaluate(pod(VENDORS[0].make()), PolicySet.empty(), cfg, inventory=inventory)
    # Reach into what the memo handed out and change it as a careless caller would.
    (part,) = [p for _, _, p in ranges._PARTS.values()]
    before = [list(t) for t in part.cuda]
    for op in first.patch:
        value = op.get("value")
        if isinstance(value, dict) and "nodeAffinity" in value:
            terms = value["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"].append("99")
            terms["nodeSelectorTerms"][0]["matchExpressions"][0]["operator"] = "Lt"
    assert [list(t) for t in part.cuda] == before
    second = evaluate(pod(VENDORS[0].make()), PolicySet.empty(), cfg, inventory=inventory)
    assert required(apply(second)["spec"]) == VENDORS[0].fit_terms


@pytest.mark.parametrize(
    ("make", "nodes", "terms"),
    [
        # amdgpu 30.10.1, a patch release of the 30.10 row, as an admin writes it; beside a node
        # whose module maps to the 6.4 driver (unfit for ROCm 7.14).
        (
            VENDORS[1].make,
            {"patch": {RELEASE: "30.10.1", DEVICE: "74a1"}, "old": VENDORS[1].unfit},
            [_term(_expr(RELEASE, "In", "30.10.1"))],
        ),
        # Ascend HDK 25.3.RC1.2 (the patch of 25.3.RC1 CANN 8.3.RC1's download page pairs).
        (
            VENDORS[2].make,
            {"patch": {HDK: "25.3.RC1.2", CHIP: "910B3"}, "old": VENDORS[2].unfit},
            [
                _term(
                    _expr(HDK_ADMIN, "DoesNotExist"),
                    _expr(HDK, "In", "25.3.RC1.2"),
                    _expr(CHIP, "In", "910B3"),
                )
            ],
        ),
    ],
    ids=["rocm-30.10.1", "cann-25.3.RC1.2"],
)
def test_a_patch_release_is_its_rows_release(
    make: Callable[[], dict[str, Any]], nodes: dict[str, Labels], terms: list[Term]
) -> None:
    decision = run(pod(make()), nodes, config())
    spec = apply(decision)["spec"]
    assert required(spec) == terms
    assert schedulable(spec, nodes) == ["patch"]
    assert decision.warnings == ()


def test_the_compute_capability_axis_never_strands_either() -> None:
    """An extra axis follows the same rule: a pod needing compute capability ≥ 8.0 where the
    only node advertising one has 7.0 and another GPU node advertises none is kept off the 7.0
    node; with a node at 8.6 it is required there, the other counted."""
    compute = {"nvidia.com/gpu.compute.major": "7", "nvidia.com/gpu.compute.minor": "0"}
    ampere = {"nvidia.com/gpu.compute.major": "8", "nvidia.com/gpu.compute.minor": "6"}
    cuda = {GFD_MAJOR: "12", GFD_MINOR: "6", PRESENT: "true"}
    annotated = pod(
        VENDORS[0].make(), annotations={"features.alauda.io/min-compute-capability": "8.0"}
    )
    hint = "label nvidia.com/gpu.compute.major=<major> nvidia.com/gpu.compute.minor=<minor>"
    nodes = {"volta": {**cuda, **compute}, "unknown": cuda}
    decision = run(annotated, nodes, config())
    assert schedulable(apply(decision)["spec"], nodes) == ["unknown"]
    # The label is long: the words around it get shorter, the label stays whole.
    assert decision.warnings == (f"compute capability ≥ 8.0 unknown: {hint}",)
    nodes = {"ampere": {**cuda, **ampere}, "unknown": cuda}
    decision = run(annotated, nodes, config())
    assert schedulable(apply(decision)["spec"], nodes) == ["ampere"]
    assert decision.warnings == (f"1 unknown not used: {hint}",)
    excluded = run(
        annotated, {"volta": {**cuda, **compute}, "unknown": cuda}, config(unknownNodes="exclude")
    )
    assert excluded.warnings == ("no node has compute capability ≥ 8.0; highest is 7.0 (1 node)",)
    assert (
        schedulable(apply(excluded)["spec"], {"volta": {**cuda, **compute}, "unknown": cuda}) == []
    )


def test_exclusion_terms_read_the_labels_in_the_gates_order() -> None:
    """The admin's label wins over the labeller's on a node carrying both: a node whose admin
    release is known and unfit is kept off even with an unmapped module, and one whose admin
    value is unmapped stays usable even with a known-unfit module."""
    # ROCm 6.0: amdgpu 5.6 to 6.2 only, by AMD's matrix (30.10 and module 6.14.14 are unfit).
    rocm_60 = container(image="rocm/dev-ubuntu-22.04:6.0.2", limits={"amd.com/gpu": "1"})
    nodes = {
        "admin-unfit": {RELEASE: "30.10", MODULE: "6.99.1", DEVICE: "74a1"},
        "module-unfit": {MODULE: "6.14.14", DEVICE: "74a1"},
        "module-unknown": {MODULE: "6.99.1", DEVICE: "74a1"},
        "admin-unknown": {RELEASE: "31.99", MODULE: "6.12.12", DEVICE: "74a1"},
        "no-driver": {DEVICE: "74a1"},
    }
    decision = run(pod(rocm_60), nodes, config())
    spec = apply(decision)["spec"]
    assert required(spec) == [
        _term(_expr(RELEASE, "Exists"), _expr(RELEASE, "NotIn", "30.10")),
        _term(_expr(RELEASE, "DoesNotExist"), _expr(MODULE, "NotIn", "6.14.14")),
    ]
    assert schedulable(spec, nodes) == ["admin-unknown", "module-unknown", "no-driver"]


def _ref(vendor: Vendor) -> ContainerRef:
    return ContainerRef("containers", 0, "main", vendor.make())


# Every description the engine evaluates, built as the evaluation builds it for each vendor.
FAMILIES: dict[str, Callable[[], object]] = {
    "cuda": lambda: CudaFamily([(_ref(VENDORS[0]), {"nvidia.com/gpu"})]),
    **{
        vendor.name: lambda vendor=vendor: TableFamily(  # type: ignore[misc]
            next(v for v in shipped_vendors() if v.name == vendor.name), [_ref(vendor)]
        )
        for vendor in VENDORS[1:]
    },
}


def _members() -> list[str]:
    return sorted(
        name
        for name, value in vars(engine.Family).items()
        if callable(value) and not name.startswith("_")
    )


def _missing(family: object) -> list[str]:
    """The parts of the pod-level sequence a description does not define itself."""
    return [name for name in _members() if name not in vars(type(family))]


def test_the_family_description_has_no_optional_part() -> None:
    """A description must bring every part of the pod-level sequence: engine.Family gives
    none a default (each is abstract), so a subclass lacking one cannot be instantiated
    (mypy --strict rejects it in CI; the interpreter raises TypeError), and this check names
    what a description lacks."""
    assert _members() == [
        "daemonset_template",
        "may_conflict",
        "not_enforced_yet",
        "pinned_problems",
        "placeable",
        "plan",
        "read",
        "read_nodes",
        "unresolved",
        "violation",
        "without_inventory",
    ]

    class Incomplete:
        """Every part but the pinned-node check (engine step 10)."""

    for name in _members():
        if name != "pinned_problems":
            setattr(Incomplete, name, lambda self, *args: None)
    assert _missing(Incomplete()) == ["pinned_problems"]
    if engine.__file__.endswith(".py"):
        # Interpreted (a compiled Family admits no interpreted subclass at all).
        parts = {name: vars(Incomplete)[name] for name in _members() if name in vars(Incomplete)}
        with pytest.raises(TypeError, match="abstract method pinned_problems"):
            type("Incomplete", (engine.Family,), parts)()


@pytest.mark.parametrize("name", [v.name for v in VENDORS])
def test_every_vendor_is_a_complete_description(name: str) -> None:
    # Defined by the description itself, not inherited from a default.
    assert _missing(FAMILIES[name]()) == []


@pytest.mark.parametrize(
    ("vendor", "patch"),
    [
        # amdgpu 30.10.1, a patch release of the 30.10 row (ROCm 7.14 runs on it), as an
        # admin writes it on a node an autoscaler adds.
        (VENDORS[1], {RELEASE: "30.10.1", DEVICE: "74a1"}),
        # Ascend HDK 25.3.RC1.2, the patch of 25.3.RC1 (CANN 8.3.RC1), as mind-cluster writes it.
        (VENDORS[2], {HDK: "25.3.RC1.2", CHIP: "910B3", ACCEL: "module-910b-8"}),
    ],
    ids=["rocm-30.10.1", "cann-25.3.RC1.2"],
)
def test_no_compatible_node_terms_admit_the_patch_releases_a_row_covers(
    vendor: Vendor, patch: Labels
) -> None:
    """Issue 45 item 2: every known node unfit (noCompatibleNode: warn), the pod waits for a
    node that runs it; the terms exclude the unfit node's values rather than list the rows'
    own spellings (`30.10`, `25.3.RC1`), which a node with a patch release never matched."""
    decision = run(pod(vendor.make()), vendor.nodes("unfit"), config())
    assert decision.warnings == (vendor.no_node,)
    spec = apply(decision)["spec"]
    assert required(spec) == vendor.avoid_terms
    later = {**vendor.nodes("unfit"), "patch": patch}
    assert schedulable(spec, later) == ["patch"]
