"""Forward compatibility under what a pod may write (issue 37, defects 1 and 4; SPEC §4).

1. What a pod's NVIDIA_REQUIRE_CUDA declares must not set the size of its patch: a range
   `driver>=1,driver<N` listed every branch from 1 to N (N = 200,000: a 1.9 MB patch; a
   9-digit N exhausted memory). Branches are bounded by the ones nodes can have (below
   requires.MAX_DRIVER_BRANCH), and the term lists at most MAX_LISTED_BRANCHES of them (with an
   inventory: the branches its forward-compatible nodes have). Sizes and counts, no timings.
4. Pods pinned to a node (DaemonSet pods, `spec.nodeName`) are checked with forward
   compatibility too: a forward-compatible node with a branch the image declares runs them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers import (
    apply,
    node_terms,
    pod,
    workload,
)

# Tests of forward-compatible CUDA bounds: evaluated without the /dev/shm fix (on by default), whose
# volume and warning would be in every pod here (tests/helpers.py `without_shm`; the rule's own
# tests: test_runtime_fixes.py).
from tests.helpers import (
    run_without_shm as run,
)
from tests.unit.test_cuda_rules import (
    A100,
    AT_LEAST_12_8_GFD,
    DRIVER,
    FC,
    PRODUCT,
    fc_container,
    fc_term,
    terms,
)
from tests.unit.test_placement_inventory import gfd, nodes
from webhook.core.images.requires import (
    MAX_DRIVER_BRANCH,
    branch_count,
    branch_list,
    forward_branches,
)
from webhook.core.placement.ranges import MAX_LISTED_BRANCHES

HUGE = (200_000, 999_999_999, 10**60)
FC_DENY = FC.model_copy(update={"no_compatible_node": "deny"})
TOO_MANY = (
    f"forward compatibility not used: the image declares more than {MAX_LISTED_BRANCHES} "
    "driver branches"
)


def wide(n: int) -> str:
    return f"cuda>=12.8 brand=tesla,driver>=1,driver<{n}"


@pytest.mark.parametrize("n", HUGE)
def test_declared_branches_are_bounded_by_the_branches_nodes_can_have(n: int) -> None:
    branches = forward_branches({"NVIDIA_REQUIRE_CUDA": wide(n)})
    assert branches == ((1, MAX_DRIVER_BRANCH),)
    assert branch_count(branches) == MAX_DRIVER_BRANCH - 1
    assert len(branch_list(branches)) == MAX_DRIVER_BRANCH - 1


def test_many_alternatives_and_variables_stay_bounded() -> None:
    # 600 one-branch alternatives in each of two variables: what is below the ceiling counts.
    many = " ".join(f"driver>={b},driver<{b + 1}" for b in range(0, 1200, 2))
    env = {"NVIDIA_REQUIRE_CUDA": f"cuda>=12.8 {many}", "NVIDIA_REQUIRE_X": many}
    branches = forward_branches(env)
    assert branch_count(branches) == 500  # the even branches below 1000
    assert all(high is not None and high <= MAX_DRIVER_BRANCH for _, high in branches)


@pytest.mark.parametrize("n", HUGE)
def test_a_pod_declaring_too_many_branches_gets_no_forward_term_and_a_small_patch(n: int) -> None:
    decision = run(pod(fc_container(require=wide(n))), config=FC)
    assert decision.warnings == (TOO_MANY,)
    assert len(TOO_MANY) <= 120
    assert all(DRIVER not in json.dumps(t) for t in node_terms(apply(decision)))
    # The CUDA rule's terms only: the same patch as an image that declares nothing.
    plain = run(pod(fc_container(require="cuda>=12.8")), config=FC)
    assert decision.patch == plain.patch
    assert len(json.dumps(decision.patch)) < 1000


@pytest.mark.parametrize("n", HUGE)
def test_with_an_inventory_the_branches_its_forward_compatible_nodes_have(n: int) -> None:
    inventory = nodes(
        gfd("12", "2") | A100 | {DRIVER: "535"},
        gfd("12", "4") | A100 | {DRIVER: "550"},
        gfd("12", "2") | {PRODUCT: "Tesla-T4", DRIVER: "535"},
    )
    decision = run(pod(fc_container(require=wide(n))), config=FC, inventory=inventory)
    assert decision.warnings == ()
    assert node_terms(apply(decision)) == terms(*AT_LEAST_12_8_GFD, fc_term(535, 550))
    assert decision.notes[1] == (
        "or driver 535, 550 on forwardCompatibleNodes (forward compatibility the image declares)"
    )
    assert len(json.dumps(decision.patch)) < 1500


def test_up_to_the_limit_every_declared_branch_is_listed() -> None:
    """Within the limit nothing changes: an autoscaler may still add a listed branch's node."""
    last = 520 + MAX_LISTED_BRANCHES  # 520 to 551: R535 among them
    require = f"cuda>=12.8 brand=tesla,driver>=520,driver<{last}"
    inventory = nodes(gfd("12", "2") | A100 | {DRIVER: "535"})
    decision = run(pod(fc_container(require=require)), config=FC, inventory=inventory)
    assert decision.warnings == ()
    assert node_terms(apply(decision))[-1] == {"matchExpressions": fc_term(*range(520, last))}


# --- 4. pods pinned to a node ---------------------------------------------------------------

R535_A100 = gfd("12", "2") | A100 | {DRIVER: "535"}
R535_T4 = gfd("12", "2") | {PRODUCT: "Tesla-T4", DRIVER: "535"}
R525_A100 = gfd("12", "0") | A100 | {DRIVER: "525"}


def pinned(how: str, node: str, **extra: Any) -> dict[str, Any]:
    if how == "nodeName":
        return pod(fc_container(**extra), nodeName=node)
    obj = pod(fc_container(**extra), nodeName=node)
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u", "controller": True}
    ]
    return obj


@pytest.mark.parametrize("how", ["nodeName", "DaemonSet"])
def test_a_pinned_pod_on_a_forward_compatible_node_is_admitted(how: str) -> None:
    inventory = nodes(R535_A100, R535_T4, R525_A100)  # node-0, node-1, node-2
    decision = run(pinned(how, "node-0"), config=FC_DENY, inventory=inventory)
    assert decision.allowed
    assert decision.warnings == ()
    assert decision.patch == []


@pytest.mark.parametrize("how", ["nodeName", "DaemonSet"])
def test_a_pinned_pod_on_a_node_forward_compatibility_does_not_cover_is_denied(how: str) -> None:
    inventory = nodes(R535_A100, R535_T4, R525_A100)
    who = "this pod" if how == "nodeName" else "this DaemonSet pod"
    # The T4 is not on forwardCompatibleNodes; R525 is not a branch the image lists.
    for node in ("node-1", "node-2"):
        decision = run(pinned(how, node), config=FC_DENY, inventory=inventory)
        version = "12.2" if node == "node-1" else "12.0"
        assert decision.denial_message() == (
            f"Pod ml/train: node {node} supports CUDA {version}; {who} needs CUDA ≥ 12.8."
        )
    # An image that declares no branch: the CUDA rule alone, on the A100 too.
    plain = run(pinned(how, "node-0", require="cuda>=12.8"), config=FC_DENY, inventory=inventory)
    assert not plain.allowed
    # Without forwardCompatibleNodes in the config: the CUDA rule alone.
    off = run(
        pinned(how, "node-0"),
        config=FC_DENY.model_copy(update={"forward_compatible_nodes": None}),
        inventory=inventory,
    )
    assert not off.allowed


def ds_template(**extra: Any) -> dict[str, Any]:
    return workload("DaemonSet", pod(fc_container(**extra)), name="agent")


def test_a_daemonsets_template_counts_forward_compatible_nodes_as_fit() -> None:
    inventory = nodes(R535_A100, R535_T4, R525_A100)
    decision = run(ds_template(), config=FC, inventory=inventory)
    # The A100 on R535 runs its pod; the T4 (not forward compatible) and R525 do not.
    assert decision.warnings == (
        "2 of 3 CUDA nodes cannot run these DaemonSet pods: they need CUDA ≥ 12.8",
    )
    assert decision.notes == (
        "will apply to pods: no CUDA affinity (DaemonSet pods are pinned to their node); nodes "
        "below CUDA 12.8 cannot run them",
        "will apply to pods: forwardCompatibleNodes with driver 470, 535, 550, 560, 565 run them "
        "too",
    )
    assert decision.patch == []
    # Without the image's declaration, or where no such node has a listed branch: as before.
    plain = run(ds_template(require="cuda>=12.8"), config=FC, inventory=inventory)
    assert plain.warnings == (
        "3 of 3 CUDA nodes cannot run these DaemonSet pods: they need CUDA ≥ 12.8",
    )
    assert plain.notes == (
        "will apply to pods: no CUDA affinity (DaemonSet pods are pinned to their node); nodes "
        "below CUDA 12.8 cannot run them",
    )
    only_t4 = run(ds_template(), config=FC, inventory=nodes(R535_T4))
    assert only_t4.notes == plain.notes
    # A pod declaring more branches than are ever listed: nothing of them in the note.
    wide_one = run(ds_template(require=wide(10**9)), config=FC, inventory=inventory)
    assert wide_one.notes == plain.notes
