"""ROCm 7.2 rows that hold per GPU target (SPEC §13): AMD's KMD <-> ROCm matrix (amdgpu-docs)
pairs ROCm 7.2 with amdgpu 31.x, 30.x and 6.4 "assuming hardware support is available in both";
the ROCm 7.2.1/7.2.2 release notes list 6.4 for MI325X and for the cell spanning MI300X, MI300A,
MI250X, MI250, MI210 and MI100 (gfx942, gfx90a, gfx908), not for MI355X or MI350X (gfx950). So
6.4 -> 7.2 is a per-GPU row, 30.x -> 7.2 holds on every GPU. A node is placed by a per-GPU row
only with a known target the row lists."""

from __future__ import annotations

import pytest

from tests.helpers import apply, pod
from tests.unit.test_vendor_gate import (
    AMD,
    DEVICE,
    MODULE,
    RELEASE,
    absent,
    amd,
    among,
    required,
    run,
    term,
)
from webhook.core.config.model import load_config
from webhook.core.placement.inventory import NodeInventory
from webhook.core.placement.vendors import VendorDataError, load_vendors, shipped_vendors

ROCM_72 = "rocm/dev-ubuntu-24.04:7.2.1"
# The shipped device ids of gfx908, gfx90a and gfx942 (not gfx950's 75a0, 75a3).
SIX_FOUR_IDS = ("738c", "7408", "740c", "740f", "74a0", "74a1", "74a5", "74a9")


def test_rocm_7_2_runs_on_the_drivers_the_release_notes_list_for_each_gpu() -> None:
    # MI210 (740f, gfx90a) and MI300X (74a1, gfx942): on 30.10 (module 6.14.14, and the
    # admin's 30.10.1) whatever the GPU; on 6.4 (module 6.12.12) as listed for those GPUs.
    decision = run(pod(amd(ROCM_72)), inventory=AMD)
    assert required(apply(decision)) == [
        term(among(RELEASE, "30.10.1")),
        term(absent(RELEASE), among(MODULE, "6.14.14")),
        term(absent(RELEASE), among(MODULE, "6.12.12"), among(DEVICE, "740f", "74a1")),
    ]
    assert decision.notes == (
        f"required nodes whose amdgpu driver runs ROCm 7.2 (image {ROCM_72})",
    )


def test_an_mi355x_on_amdgpu_6_4_is_not_placed_for_rocm_7_2() -> None:
    nodes = NodeInventory.build(
        {
            "mi355-old": {MODULE: "6.12.12", DEVICE: "75a3"},  # gfx950 on 6.4: not listed
            "mi355-new": {MODULE: "6.14.14", DEVICE: "75a3"},  # gfx950 on 30.10: listed
            "mi210-old": {MODULE: "6.12.12", DEVICE: "740f"},  # gfx90a on 6.4: listed
        }
    )
    decision = run(pod(amd(ROCM_72)), inventory=nodes)
    # 30.10 on any GPU; 6.12.12 with the targets it runs 7.2 on: never with 75a3.
    assert required(apply(decision)) == [
        term(absent(RELEASE), among(MODULE, "6.14.14")),
        term(absent(RELEASE), among(MODULE, "6.12.12"), among(DEVICE, "740f")),
    ]
    # ROCm 6.4 needs no target: 6.4 and 30.10 run it on every GPU, no device term.
    older = run(pod(amd("rocm/dev-ubuntu-24.04:6.4.1")), inventory=nodes)
    assert required(apply(older)) == [term(absent(RELEASE), among(MODULE, "6.12.12", "6.14.14"))]


def test_a_node_without_a_known_target_is_never_placed_by_a_per_gpu_row() -> None:
    nodes = NodeInventory.build(
        {
            "admin": {RELEASE: "6.4.1"},  # no device label
            "odd": {RELEASE: "6.4.1", DEVICE: "ffff"},  # a device id the table lacks
        }
    )
    # Their targets are unknown, so they may run it (issue 45: never strand a pod): nothing
    # to keep the pod off, and a warning naming the label the gate reads the target from.
    allowed = run(pod(amd(ROCM_72)), inventory=nodes)
    assert allowed.warnings == (
        "no node known to run ROCm 7.2; 2 unknown may: "
        "label amd.com/gpu.device-id=<a value the device table maps>",
    )
    assert required(apply(allowed)) is None
    # An admin who prefers Pending to a gamble: never placed by a per-GPU row.
    exclude = load_config({"unknownNodes": "exclude"})
    decision = run(pod(amd(ROCM_72)), inventory=nodes, config=exclude)
    assert decision.warnings == (
        "no node whose amdgpu driver runs ROCm 7.2 has a GPU target it is listed for; they have "
        "unknown (1 node), ffff (1 node)",
    )
    # It waits for a listed GPU on a driver the release notes name (an autoscaler may add
    # one): each driver value with the device ids it runs 7.2 on.
    terms = required(apply(decision))
    assert term(among(RELEASE, "30.10", "30.20", "30.30", "31.40", "31.50")) in terms
    assert term(among(RELEASE, "6.4"), among(DEVICE, *SIX_FOUR_IDS)) in terms
    # 7.0 runs on 6.4 whatever the GPU: placed.
    older = run(pod(amd("rocm/dev-ubuntu-24.04:7.0.2")), inventory=nodes)
    assert required(apply(older)) == [term(among(RELEASE, "6.4.1"))]


def test_a_pinned_pod_and_the_deny_mode_read_the_nodes_target() -> None:
    nodes = NodeInventory.build({"mi355-old": {MODULE: "6.12.12", DEVICE: "75a3"}})
    bound = pod(amd(ROCM_72), nodeName="mi355-old")
    decision = run(bound, inventory=nodes)
    assert decision.warnings == (
        "node mi355-old's amdgpu driver 6.4 does not support ROCm 7.2; this pod needs it",
    )
    denied = run(
        pod(amd(ROCM_72)), inventory=nodes, config=load_config({"noCompatibleNode": "deny"})
    )
    assert not denied.allowed


def test_the_shipped_per_gpu_rows_carry_their_source() -> None:
    (rocm,) = [v for v in shipped_vendors() if v.name == "rocm"]
    six_four = rocm.release_row("6.4")
    assert six_four is not None and six_four.runtimes == ("6.1", "6.2", "6.3", "6.4", "7.0", "7.1")
    assert [(q.runtime, q.devices) for q in six_four.qualified] == [
        ("7.2", ("gfx942", "gfx90a", "gfx908"))
    ]
    assert all(q.source.startswith("ROCm 7.2.1/7.2.2 release notes") for q in six_four.qualified)


def test_two_unqualified_rows_of_one_release_are_refused() -> None:
    text = """
vendors:
- {name: x, runtime: X, driver: d, device: t, nodes: n, annotation: a,
   releases: [{release: '1.0', runtimes: ['1.0'], source: s},
              {release: '1.0', runtimes: ['1.1'], source: s}]}
"""
    with pytest.raises(VendorDataError, match=r"second row of release 1\.0"):
        load_vendors(text, "test")
