"""A DaemonSet's template (SPEC §4 "DaemonSet pods", issue 18 defect 5): its pods are pinned to
their nodes and get no CUDA affinity, so the template's note says that and which nodes cannot
run them, never an affinity the pods will not get; with an inventory, how many nodes that is.
With mutateTemplates the template itself gets the affinity, which limits the nodes it runs on."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import (
    GPU,
    PREFERRED_12_4_TERMS,
    REQUIRED_12_4_TERMS,
    VCORE,
    VMEM,
    apply,
    container,
    pod,
    workload,
)

# Tests of DaemonSet placement: evaluated without the /dev/shm fix (on by default), whose volume and
# warning would be in every pod here (tests/helpers.py `without_shm`; the rule's own tests:
# test_runtime_fixes.py).
from tests.helpers import (
    assert_idempotent_without_shm as assert_idempotent,
)
from tests.helpers import (
    load_without_shm as load_config,
)
from tests.helpers import (
    run_without_shm as run,
)
from webhook.core.placement.inventory import NodeInventory

MAJOR, MINOR = "cuda-major-version", "cuda-minor-version"
CMAJ, CMIN = "nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor"
BF16 = ["--dtype", "bfloat16"]
PGPU_NOTE = (
    "will apply to pods: no CUDA affinity (DaemonSet pods are pinned to their node); "
    "nodes below CUDA 12.4 cannot run them"
)


def daemonset(*containers: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return workload("DaemonSet", pod(*containers, **kw), name="dcgm")


def gpu(image: str = "nvidia/cuda:12.4.1", **kw: Any) -> dict[str, Any]:
    return container(image=image, limits={GPU: "1"}, requests={GPU: "1"}, **kw)


def inventory(*labels: dict[str, str]) -> NodeInventory:
    return NodeInventory.build({f"node-{i}": node for i, node in enumerate(labels)})


def test_template_note_says_what_the_pods_really_get() -> None:
    decision = run(daemonset(gpu()))
    assert decision.notes == (PGPU_NOTE,)
    assert len(PGPU_NOTE) <= 120
    assert (decision.patch, decision.warnings, decision.mutation_kinds) == ([], (), ())
    assert decision.allowed


def test_a_mutated_daemonset_template_restricts_the_nodes_its_pods_run_on() -> None:
    """With mutateTemplates the template gets the affinity: the DaemonSet controller creates
    pods only on nodes its required affinity matches (NodeShouldRunDaemonPod)."""
    obj = daemonset(gpu())
    config = load_config({"mutateTemplates": True})
    decision = run(obj, config=config)
    spec = apply(decision)["spec"]["template"]["spec"]
    assert spec["affinity"] == {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": REQUIRED_12_4_TERMS
            },
            "preferredDuringSchedulingIgnoredDuringExecution": PREFERRED_12_4_TERMS,
        }
    }
    assert decision.notes == (
        "required GPU nodes with CUDA ≥ 12.4 (image nvidia/cuda:12.4.1), preferably < 14.0",
    )
    assert decision.mutation_kinds == ("cuda-affinity",)
    assert_idempotent(decision, config=config)


def test_vgpu_and_required_skew_say_the_whole_range() -> None:
    vgpu = run(daemonset(container(image="nvidia/cuda:12.2.0", limits={VCORE: "50", VMEM: "4"})))
    assert vgpu.notes == (
        "will apply to pods: no CUDA affinity (DaemonSet pods are pinned); "
        "nodes outside CUDA ≥ 12.2 and < 13.0 cannot run them",
    )
    required = run(daemonset(gpu()), config=load_config({"majorSkew": "require"}))
    assert required.notes == (
        "will apply to pods: no CUDA affinity (DaemonSet pods are pinned); "
        "nodes outside CUDA ≥ 12.4 and < 14.0 cannot run them",
    )
    assert all(len(n) <= 120 for n in (*vgpu.notes, *required.notes))


def test_compute_capability_note() -> None:
    decision = run(daemonset(gpu(args=BF16)))
    assert decision.notes == (
        PGPU_NOTE,
        "will apply to pods: no compute capability affinity (DaemonSet pods are pinned); "
        "nodes below 8.0 cannot run them",
    )


@pytest.mark.parametrize(
    ("nodes", "warnings"),
    [
        pytest.param(
            [{MAJOR: "12", MINOR: "2"}, {MAJOR: "11", MINOR: "8"}, {MAJOR: "12", MINOR: "6"}],
            ("2 of 3 CUDA nodes cannot run these DaemonSet pods: they need CUDA ≥ 12.4",),
            id="some nodes too old",
        ),
        pytest.param(
            [{MAJOR: "12", MINOR: "4"}, {MAJOR: "13", MINOR: "0"}, {}],
            (),
            id="every CUDA node fits (unlabelled nodes are no GPU nodes)",
        ),
        pytest.param([{}, {}], (), id="no node advertises CUDA"),
    ],
)
def test_with_an_inventory_the_unfit_nodes_are_counted(
    nodes: list[dict[str, str]], warnings: tuple[str, ...]
) -> None:

    decision = run(daemonset(gpu()), inventory=inventory(*nodes))
    assert decision.notes == (PGPU_NOTE,)
    assert decision.warnings == warnings
    assert decision.patch == []


def test_unfit_nodes_never_deny_the_daemonset() -> None:
    """Denying the DaemonSet for some nodes would stop it everywhere; each pod is checked
    against its own node when it is created."""
    deny = load_config({"noCompatibleNode": "deny"})
    nodes = inventory({MAJOR: "11", MINOR: "8"})
    decision = run(daemonset(gpu()), config=deny, inventory=nodes)
    assert decision.allowed
    assert decision.warnings == (
        "1 of 1 CUDA nodes cannot run these DaemonSet pods: they need CUDA ≥ 12.4",
    )


def test_compute_capability_unfit_nodes() -> None:
    nodes = inventory(
        {MAJOR: "12", MINOR: "6", CMAJ: "7", CMIN: "0"},
        {MAJOR: "12", MINOR: "6", CMAJ: "8", CMIN: "0"},
    )
    decision = run(daemonset(gpu(args=BF16)), inventory=nodes)
    assert decision.warnings == (
        "1 of 2 GPU nodes cannot run these DaemonSet pods: they need compute capability ≥ 8.0",
    )


def test_unknown_cuda_gives_no_note_and_no_advice() -> None:
    """Nothing would be injected anyway: no "set the annotation" advice for a DaemonSet."""
    decision = run(daemonset(gpu("busybox:1.36")))
    assert (decision.notes, decision.warnings, decision.patch) == ((), (), [])


def test_opt_out_gives_nothing() -> None:
    obj = daemonset(gpu(), annotations={"features.alauda.io/cuda-affinity": "false"})
    assert run(obj).notes == ()
