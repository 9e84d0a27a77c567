"""The ROCm and CANN gates (SPEC §13, issue 38 items 2-4): AMD and Ascend containers placed,
through the core, on the label values whose driver release and device run their images;
unknown drivers never taken as compatible; no vendor labels at all: warnings, no affinity."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import apply, assert_idempotent, container, pod, without_shm, workload
from tests.helpers import run as run_with
from tests.unit.test_placement_invariants import schedulable
from webhook.core.audit.audit import Audit, evaluate_object
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.outcome.decision import Decision
from webhook.core.placement.inventory import NodeInventory
from webhook.core.placement.vendors import load_vendors, shipped_vendors
from webhook.core.policies.policyset import PolicySet


def run(
    obj: dict[str, Any], policy_set: Any = None, config: WebhookConfig | None = None, **kw: Any
) -> Decision:
    """The vendor gate alone: the /dev/shm fix every vendor's pod gets (SPEC §14) is asserted in
    test_runtime_fixes_vendors.py (tests/helpers.py: tests of another rule run without it)."""
    return run_with(obj, policy_set, without_shm(config), **kw)


RELEASE, MODULE, DEVICE = (
    "amdgpu-driver-release",
    "amd.com/gpu.driver-version",
    "amd.com/gpu.device-id",
)
HDK_ADMIN, HDK, CHIP = (
    "ascend-driver-version",
    "huawei.com/driver.version",
    "node.kubernetes.io/npu.chip.name",
)
ROCM_64 = "rocm/pytorch:rocm6.4_ubuntu24.04_py3.12_pytorch_release_2.6.0"
ROCM_714 = "rocm/vllm:rocm7.14.0_vllm_0.10.2_20251006"
CANN_83_910B = "ascendai/cann:8.3.rc1-910b-ubuntu22.04-py3.11"

# MI210 (740f, gfx90a) and MI300X (74a1, gfx942) on two drivers: amdgpu module 6.12.12 (the
# ROCm 6.4 driver: ROCm 6.1-7.1, and 7.2 per GPU) and 6.14.14 (amdgpu 30.10: ROCm 6.2-7.2,
# 7.14, 10.0.0); an admin-labelled node whose release label wins over its module label; one
# node with an empty driver label.
AMD = NodeInventory.build(
    {
        "mi210-old": {MODULE: "6.12.12", DEVICE: "740f"},
        "mi300-old": {MODULE: "6.12.12", DEVICE: "74a1"},
        "mi210-new": {MODULE: "6.14.14", DEVICE: "740f"},
        "mi300-new": {MODULE: "6.14.14", DEVICE: "74a1"},
        "mi300-admin": {RELEASE: "30.10.1", MODULE: "6.99.1", DEVICE: "74a1"},
        "mi300-empty": {MODULE: "", DEVICE: "74a1"},
    }
)
# 910B and 310P on two HDKs (25.5.1: CANN 9.1, 9.0, 8.5.x; 25.3.RC1: CANN 9.1, 9.0, 8.5.2 and
# 8.3.RC1); one 310P
# node labelled by its admin (clusters before mind-cluster v26.1).
ASCEND = NodeInventory.build(
    {
        "a2-new": {HDK: "25.5.1", CHIP: "910B3"},
        "a2-old": {HDK: "25.3.RC1", CHIP: "910B3"},
        "p-new": {HDK: "25.5.1", CHIP: "310P3"},
        "p-old": {HDK_ADMIN: "25.3.RC1", CHIP: "310P3"},
    }
)
UNKNOWN_LEFT_OUT = (
    "1 AMD GPU node not used (amd.com/gpu.driver-version is empty): "
    "label amdgpu-driver-release=<amdgpu driver release>"
)


def amd(image: str, **kw: Any) -> dict[str, Any]:
    return container(image=image, limits={"amd.com/gpu": "1"}, **kw)


def npu(image: str, key: str = "huawei.com/Ascend910", **kw: Any) -> dict[str, Any]:
    return container(image=image, limits={key: "1"}, **kw)


def required(obj: dict[str, Any]) -> Any:
    affinity = obj["spec"].get("affinity")
    if affinity is None:
        return None
    return affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]


def term(*exprs: dict[str, Any]) -> dict[str, Any]:
    return {"matchExpressions": list(exprs)}


def absent(key: str) -> dict[str, Any]:
    return {"key": key, "operator": "DoesNotExist"}


def among(key: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": list(values)}


def notin(key: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": "NotIn", "values": list(values)}


def test_rocm_6_4_runs_on_both_drivers_never_on_the_unknown_one() -> None:
    decision = run(pod(amd(ROCM_64)), inventory=AMD)
    assert required(apply(decision)) == [
        term(among(RELEASE, "30.10.1")),
        term(absent(RELEASE), among(MODULE, "6.12.12", "6.14.14")),
    ]
    assert decision.notes == (
        f"required nodes whose amdgpu driver runs ROCm 6.4 (image {ROCM_64})",
    )
    assert decision.warnings == (UNKNOWN_LEFT_OUT,)
    assert decision.mutation_kinds == ("rocm-affinity",)
    assert decision.placements == ("rocm",)
    assert_idempotent(decision, config=without_shm(), inventory=AMD)


def test_rocm_7_0_only_on_the_30_10_driver() -> None:
    decision = run(pod(amd(ROCM_714)), inventory=AMD)
    assert required(apply(decision)) == [
        term(among(RELEASE, "30.10.1")),
        term(absent(RELEASE), among(MODULE, "6.14.14")),
    ]
    assert decision.warnings == (UNKNOWN_LEFT_OUT,)


def test_the_image_targets_select_the_gpus_too() -> None:
    """ROCm code objects are per gfx target: PYTORCH_ROCM_ARCH=gfx942 runs on MI300X only."""
    env = [{"name": "PYTORCH_ROCM_ARCH", "value": "gfx942"}]
    decision = run(pod(amd(ROCM_714, env=env)), inventory=AMD)
    assert required(apply(decision)) == [
        term(among(RELEASE, "30.10.1"), among(DEVICE, "74a1")),
        term(absent(RELEASE), among(MODULE, "6.14.14"), among(DEVICE, "74a1")),
    ]
    assert decision.notes == (
        "required nodes whose amdgpu driver runs ROCm 7.14 on GPU target gfx942 "
        f"(image {ROCM_714})",
    )


def test_a_target_family_in_the_tag() -> None:
    env = [{"name": "PYTORCH_ROCM_ARCH", "value": "gfx90a"}]
    no_mi210 = run(pod(amd("rocm/vllm:rocm7.14.0_gfx94X", env=env)), inventory=AMD)
    assert required(apply(no_mi210)) == [
        term(absent(RELEASE), among(MODULE, "6.14.14"), among(DEVICE, "740f")),
    ]
    family = run(pod(amd("rocm/vllm:rocm7.14.0_gfx94X")), inventory=AMD)
    assert required(apply(family)) == [
        term(among(RELEASE, "30.10.1"), among(DEVICE, "74a1")),
        term(absent(RELEASE), among(MODULE, "6.14.14"), among(DEVICE, "74a1")),
    ]


def test_no_node_runs_the_rocm_version_warn_then_deny() -> None:
    """Every node known and unfit: noCompatibleNode (issue 45 keeps this; the node whose
    driver is unknown is left out of this inventory, see the next test)."""
    image = "rocm/dev-ubuntu-22.04:6.0.2"  # AMD's matrix: amdgpu 5.6 to 6.2 (module 6.8.5 is 6.2)
    known = NodeInventory.build({k: v for k, v in AMD.nodes.items() if k != "mi300-empty"})
    warned = run(pod(amd(image)), inventory=known)
    assert warned.allowed
    assert warned.warnings == (
        "no node's amdgpu driver supports ROCm 6.0; newest is 30.10 (3 nodes)",
    )
    # It waits for a node that may run it (an autoscaler may add one), never lands on one
    # known not to: the values of the unfit nodes are excluded (issue 45 item 2), so a node
    # labelled with a patch release of a row that runs it (6.2.1, of the 6.2 row) is eligible,
    # which `In` over the rows' own spellings (6.2) never matched.
    terms = required(apply(warned))
    assert terms == [
        term({"key": RELEASE, "operator": "Exists"}, notin(RELEASE, "30.10.1")),
        term(absent(RELEASE), notin(MODULE, "6.12.12", "6.14.14")),
    ]
    added = {"patch": {RELEASE: "6.2.1", DEVICE: "74a1"}, "module": {MODULE: "6.8.5"}}
    nodes = {**{name: dict(labels) for name, labels in known.nodes.items()}, **added}
    assert schedulable(apply(warned)["spec"], nodes) == ["module", "patch"]
    denied = run(pod(amd(image)), inventory=known, config=load_config({"noCompatibleNode": "deny"}))
    assert not denied.allowed
    assert [v.message for v in denied.violations] == [
        "Pod ml/train: no node's amdgpu driver supports ROCm 6.0; newest is 30.10 (3 nodes)."
    ]


def test_no_node_known_to_run_it_but_one_unknown_is_not_stranded() -> None:
    """Issue 45: the node whose driver label is empty may run ROCm 6.0; the pod is only kept
    off the nodes known not to (before: required onto releases 5.6 to 6.2, which no node has:
    Pending)."""
    image = "rocm/dev-ubuntu-22.04:6.0.2"
    for config in (load_config({}), load_config({"noCompatibleNode": "deny"})):
        decision = run(pod(amd(image)), inventory=AMD, config=config)
        assert decision.allowed
        assert decision.warnings == (
            "no node known to run ROCm 6.0, kept off 5 unfit; 1 unknown may: "
            "label amdgpu-driver-release=<amdgpu driver release>",
        )
        assert required(apply(decision)) == [
            term({"key": RELEASE, "operator": "Exists"}, notin(RELEASE, "30.10.1")),
            term(absent(RELEASE), notin(MODULE, "6.12.12", "6.14.14")),
        ]
    excluded = run(pod(amd(image)), inventory=AMD, config=load_config({"unknownNodes": "exclude"}))
    assert excluded.warnings == (
        "no node's amdgpu driver supports ROCm 6.0; newest is 30.10 (3 nodes)",
    )
    assert required(apply(excluded)) == [
        term(among(RELEASE, "5.6", "5.7", "6.0", "6.1", "6.2")),
        term(absent(RELEASE), among(MODULE, "6.8.5")),
    ]


def test_containers_are_intersected() -> None:
    both = run(pod(amd(ROCM_64, name="a"), amd(ROCM_714, name="b")), inventory=AMD)
    assert required(apply(both)) == [
        term(among(RELEASE, "30.10.1")),
        term(absent(RELEASE), among(MODULE, "6.14.14")),
    ]
    apart = run(pod(amd("rocm/dev-ubuntu-22.04:6.0.2", name="a"), amd(ROCM_714, name="b")))
    assert not apart.allowed
    assert [v.message for v in apart.violations] == [
        'Pod ml/train: no amdgpu driver release runs every container: container "a" needs ROCm '
        '6.0; container "b" needs ROCm 7.14; align them or split them into separate pods.'
    ]


def test_annotation_and_unknown_images() -> None:
    annotated = pod(
        amd("registry.corp/team/train:v3"), annotations={"features.alauda.io/rocm-version": "7.14"}
    )
    decision = run(annotated, inventory=AMD)
    assert required(apply(decision)) == [
        term(among(RELEASE, "30.10.1")),
        term(absent(RELEASE), among(MODULE, "6.14.14")),
    ]
    assert decision.notes == (
        "required nodes whose amdgpu driver runs ROCm 7.14 "
        "(annotation features.alauda.io/rocm-version)",
    )
    unknown = run(pod(amd("rocm/pytorch:latest")), inventory=AMD)
    assert (unknown.patch, unknown.notes) == ([], ())
    assert unknown.warnings == (
        "ROCm version of rocm/pytorch:latest unknown: "
        "set features.alauda.io/rocm-version or accelerators.rocm.imageTable",
    )


def test_no_vendor_labels_at_all_warns_and_places_nothing() -> None:
    nvidia_only = NodeInventory.build({"a100": {"nvidia.com/cuda.runtime-version.major": "12"}})
    for obj, message in (
        (pod(amd(ROCM_64)), "ROCm placement is not enforced: no node advertises its amdgpu driver"),
        (
            pod(npu(CANN_83_910B)),
            "CANN placement is not enforced: no node advertises its Ascend HDK",
        ),
    ):
        decision = run(obj, inventory=nvidia_only)
        assert (decision.patch, decision.notes, decision.warnings) == ([], (), (message,))
    pending = run(pod(amd(ROCM_64)), inventory=NodeInventory.not_listed_yet())
    assert pending.warnings == (
        "ROCm placement is not enforced yet: the webhook is still listing the cluster's Nodes",
    )
    assert pending.patch == []


def test_daemonset_and_bound_pods_are_checked_not_pinned() -> None:
    owner = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "name": "ds",
        "uid": "u",
        "controller": True,
    }
    ds_pod = pod(amd(ROCM_714), nodeName="mi300-old")
    ds_pod["metadata"]["ownerReferences"] = [owner]
    decision = run(ds_pod, inventory=AMD)
    assert decision.patch == []
    assert decision.warnings == (
        "node mi300-old's amdgpu driver 6.4 does not support ROCm 7.14; "
        "this DaemonSet pod needs it",
    )
    bound = run(pod(amd(ROCM_714), nodeName="mi300-empty"), inventory=AMD)
    assert bound.patch == []
    assert bound.warnings == (
        "node mi300-empty's amdgpu driver is unknown (amd.com/gpu.driver-version is empty)",
    )
    template = run(workload("DaemonSet", pod(amd(ROCM_714))), inventory=AMD)
    assert template.patch == []
    assert template.notes == (
        "will apply to pods: no ROCm affinity (DaemonSet pods are pinned); "
        "nodes without a driver for ROCm 7.14 cannot run them",
    )
    # The two on the ROCm 6.4 driver; the one whose driver label is empty may run them.
    assert template.warnings == (
        "2 of 6 AMD GPU nodes cannot run these DaemonSet pods: "
        "they need an amdgpu driver for ROCm 7.14",
    )


def test_a_mutated_template_keeps_its_own_terms_when_the_image_changes() -> None:
    config = load_config({"mutateTemplates": True})
    first = run(workload("Deployment", pod(amd(ROCM_64))), config=config, inventory=AMD)
    mutated = apply(first)
    mutated["spec"]["template"]["spec"]["containers"][0]["image"] = ROCM_714
    second = run(mutated, config=config, inventory=AMD)
    assert required(apply(second)["spec"]["template"]) == [
        term(among(RELEASE, "30.10.1")),
        term(absent(RELEASE), among(MODULE, "6.14.14")),
    ]


def test_cann_version_and_chip_from_the_tag() -> None:
    decision = run(pod(npu(CANN_83_910B)), inventory=ASCEND)
    assert required(apply(decision)) == [
        term(absent(HDK_ADMIN), among(HDK, "25.3.RC1"), among(CHIP, "910B3")),
    ]
    assert decision.warnings == ()
    assert decision.mutation_kinds == ("cann-affinity",)
    assert_idempotent(decision, config=without_shm(), inventory=ASCEND)


@pytest.mark.parametrize(
    ("image", "key", "terms"),
    [
        # CANN 8.5.2 and 9.0.X run on HDK 25.3.X and 25.5.X (the CANN 9.1.1 notes' table).
        (
            "quay.io/ascend/cann:8.5.2-310p-ubuntu22.04-py3.11",
            "huawei.com/Ascend310P",
            [
                term(among(HDK_ADMIN, "25.3.RC1"), among(CHIP, "310P3")),
                term(absent(HDK_ADMIN), among(HDK, "25.5.1"), among(CHIP, "310P3")),
            ],
        ),
        (
            "ascendai/cann:8.3.rc1-310p-ubuntu22.04-py3.11",
            "huawei.com/Ascend310P",
            [term(among(HDK_ADMIN, "25.3.RC1"), among(CHIP, "310P3"))],
        ),
        (
            "ascendai/cann:9.0.0-910b-ubuntu22.04-py3.11",
            "huawei.com/Ascend910",
            [term(absent(HDK_ADMIN), among(HDK, "25.3.RC1", "25.5.1"), among(CHIP, "910B3"))],
        ),
        # vllm-ascend through its published CANN pairing: v0.11.0rc1 is CANN 8.3.RC1, the
        # default image the A2 (910b) build.
        (
            "quay.io/ascend/vllm-ascend:v0.11.0rc1",
            "huawei.com/Ascend910",
            [term(absent(HDK_ADMIN), among(HDK, "25.3.RC1"), among(CHIP, "910B3"))],
        ),
    ],
)
def test_cann_placements(image: str, key: str, terms: list[dict[str, Any]]) -> None:
    decision = run(pod(npu(image, key)), inventory=ASCEND)
    assert required(apply(decision)) == terms


def test_no_ascend_hdk_runs_the_cann_version() -> None:
    image = "ascendai/cann:8.2.rc1-910b-ubuntu22.04-py3.11"
    decision = run(pod(npu(image)), inventory=ASCEND)
    assert decision.warnings == (
        "no node's Ascend HDK supports CANN 8.2.RC1; newest is 25.5.1 (2 nodes)",
    )
    wrong_chip = run(pod(npu("ascendai/cann:8.3.rc1-a3-ubuntu22.04-py3.11")), inventory=ASCEND)
    assert wrong_chip.warnings == (
        "no node whose Ascend HDK runs CANN 8.3.RC1 has Ascend chip a3; "
        "they have 910b (1 node), 310p (1 node)",
    )


def test_a_cluster_without_the_gate_gets_nothing_new() -> None:
    config = load_config({"accelerators": {"rocm": {"enabled": False}}})
    decision = run(pod(amd(ROCM_714)), config=config, inventory=AMD)
    assert (decision.patch, decision.notes, decision.warnings) == ([], (), ())


def test_the_admins_labels_are_configurable() -> None:
    config = load_config(
        {
            "accelerators": {
                "cann": {"driverLabels": [{"key": "pool/hdk"}], "deviceLabels": ["pool/chip"]}
            }
        }
    )
    nodes = NodeInventory.build({"n": {"pool/hdk": "25.5.1", "pool/chip": "910B4"}}, config=config)
    decision = run(
        pod(npu("ascendai/cann:9.0.0-910b-ubuntu22.04-py3.11")), config=config, inventory=nodes
    )
    assert required(apply(decision)) == [
        term(among("pool/hdk", "25.5.1"), among("pool/chip", "910B4"))
    ]


def test_every_shipped_row_has_a_source() -> None:
    for vendor in shipped_vendors():
        rows = [*vendor.modules, *vendor.devices.values()]
        assert all(row.source for row in rows), vendor.name
        assert all(r.source and (r.runtimes or r.qualified) for r in vendor.releases)
        assert all(q.source for r in vendor.releases for q in r.qualified)
        assert all(known.source for known in vendor.images)


def test_a_row_without_a_source_is_refused() -> None:
    text = """
vendors:
- {name: x, runtime: X, driver: d, device: t, nodes: n, annotation: a,
   releases: [{release: '1.0', runtimes: ['1.0']}]}
"""
    with pytest.raises(ValueError, match=r"releases\[0\]: source must be a non-empty string"):
        load_vendors(text, "test")


def test_the_audit_reports_a_running_amd_pod_on_a_driver_that_cannot_run_it() -> None:
    """A pod already bound (spec.nodeName) is checked against its node: under
    noCompatibleNode: deny the audit's finding names the vendor's rule."""
    config = load_config({"noCompatibleNode": "deny"})
    running = pod(amd(ROCM_714), name="vllm-0", nodeName="mi300-old")
    audit = Audit()
    audit.add(
        running,
        "v1",
        "Pod",
        evaluate_object(running, "v1", "Pod", PolicySet.empty(), config, inventory=AMD),
    )
    (finding,) = audit.result().findings
    (problem,) = finding.denied.values()
    assert problem.rule == "rocm"
    assert problem.message == (
        "node mi300-old's amdgpu driver 6.4 does not support ROCm 7.14; this pod needs it."
    )


def test_the_users_own_affinity_on_a_gate_label_is_kept() -> None:
    selected = pod(amd(ROCM_714), nodeSelector={MODULE: "6.12.12"})
    decision = run(selected, inventory=AMD)
    assert decision.patch == []
    assert decision.warnings == (
        UNKNOWN_LEFT_OUT,
        "your node affinity on amd.com/gpu.driver-version is kept as is; "
        "this pod needs an amdgpu driver for ROCm 7.14",
    )


def test_the_table_answers_are_bounded_per_snapshot() -> None:
    nodes = NodeInventory.build({"n": {MODULE: "6.14.14"}})
    for patch in range(1100):
        annotations = {"features.alauda.io/rocm-version": f"7.14.{patch}"}
        run(pod(amd("registry.corp/x:1"), annotations=annotations), inventory=nodes)
    (facts,) = [v for k, v in nodes._memo.items() if k == ("vendor", "rocm")]
    assert len(facts.placements) <= 1024


def test_a_pod_mixing_vendors_is_placed_by_no_vendor_gate() -> None:
    nvidia = container("cuda", image="nvidia/cuda:12.4.1-base", limits={"nvidia.com/gpu": "1"})
    for others in (
        [amd(ROCM_714, name="rocm")],
        [amd(ROCM_714, name="rocm"), npu(CANN_83_910B, name="npu")],
    ):
        both = run(pod(nvidia, *others) if len(others) == 1 else pod(*others), inventory=AMD)
        assert "containers of different accelerator vendors: no node runs them all" in both.warnings
        assert "rocm-affinity" not in both.mutation_kinds
