"""The major-skew bound as a preference (SPEC §4 "Compatibility rule", issue 17 item 4): the
reference's Mandatory rule D ≥ R is required; its Recommended D.major − R.major ≤ maxMajorSkew
is preferred; beyond it ("Unstable") a pod is admitted with a warning, never left Pending for
want of an older driver. vGPU keeps its same-major requirement."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import (
    GPU,
    VCORE,
    VMEM,
    apply,
    container,
    expr,
    node_terms,
    pod,
    preferred,
    preferred_terms,
)

# Tests of the CUDA major skew: evaluated without the /dev/shm fix (on by default), whose volume and
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
GMAJ, GMIN = "nvidia.com/cuda.runtime-version.major", "nvidia.com/cuda.runtime-version.minor"
REQUIRE = load_config({"majorSkew": "require"})
DENY = load_config({"noCompatibleNode": "deny"})


def gpu_pod(image: str) -> dict[str, Any]:
    return pod(container(image=image, limits={GPU: "1"}, requests={GPU: "1"}))


def nodes(*versions: str, scheme: tuple[str, str] = (MAJOR, MINOR)) -> NodeInventory:
    named = {}
    for i, version in enumerate(versions):
        major, minor = version.split(".")
        named[f"node-{i}"] = {scheme[0]: major, scheme[1]: minor}
    return NodeInventory.build(named)


@pytest.mark.parametrize(
    ("image", "inventory", "warnings"),
    [
        pytest.param(
            "nvidia/cuda:11.7.1",
            nodes("13.0", "13.0"),
            ("only CUDA 13.0 nodes, 2 majors ahead of 11.7: the application may malfunction",),
            id="the SPEC's example",
        ),
        pytest.param(
            "nvidia/cuda:11.7.1",
            nodes("13.0", "14.2"),
            (
                "only CUDA 13.0 to 14.2 nodes, 2 to 3 majors ahead of 11.7: the application "
                "may malfunction",
            ),
            id="several versions beyond the skew",
        ),
        pytest.param(
            "nvidia/cuda:11.7.1",
            nodes("11.6", "13.0"),
            ("only CUDA 13.0 nodes, 2 majors ahead of 11.7: the application may malfunction",),
            id="older nodes cannot run it at all",
        ),
        pytest.param(
            "nvidia/cuda:11.7.1",
            nodes("12.8", "13.0"),
            (),
            id="a recommended node exists: silent",
        ),
        pytest.param(
            "nvidia/cuda:11.7.1",
            nodes("11.4", "10.2"),
            ("no node supports CUDA 11.7; highest available is 11.4 (1 node)",),
            id="no node at all: the usual warning",
        ),
        pytest.param(
            "nvidia/cuda:12.4.1",
            nodes("13.0", scheme=(GMAJ, GMIN)),
            (),
            id="within the skew on another scheme",
        ),
    ],
)
def test_nodes_beyond_the_skew_admit_with_a_warning(
    image: str, inventory: NodeInventory, warnings: tuple[str, ...]
) -> None:

    decision = run(gpu_pod(image), inventory=inventory)
    assert decision.allowed
    assert decision.warnings == warnings


def test_beyond_the_skew_the_pod_still_gets_its_exact_affinity() -> None:
    inventory = nodes("13.0", "13.0")
    decision = run(gpu_pod("nvidia/cuda:11.7.1"), config=DENY, inventory=inventory)
    assert decision.allowed  # never denied: "Unstable" in the reference, not "Blocked"
    mutated = apply(decision)
    assert mutated["spec"]["affinity"] == {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            expr(MAJOR, "Gt", 10),
                            expr(MAJOR, "Lt", 12),
                            expr(MINOR, "Gt", 6),
                        ]
                    },
                    {"matchExpressions": [expr(MAJOR, "Gt", 11)]},
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": preferred(12),
        }
    }
    assert decision.warnings == (
        "only CUDA 13.0 nodes, 2 majors ahead of 11.7: the application may malfunction",
    )
    assert_idempotent(decision, config=DENY, inventory=inventory)


def test_required_skew_with_nodes_beyond_it_warns_or_denies_as_no_compatible_node() -> None:
    inventory = nodes("13.0", "13.0")
    warned = run(gpu_pod("nvidia/cuda:11.7.1"), config=REQUIRE, inventory=inventory)
    assert warned.warnings == ("no node supports CUDA 11.7; highest available is 13.0 (2 nodes)",)
    assert node_terms(apply(warned)) == [
        {"matchExpressions": [expr(MAJOR, "Gt", 10), expr(MAJOR, "Lt", 12), expr(MINOR, "Gt", 6)]},
        {"matchExpressions": [expr(MAJOR, "Gt", 11), expr(MAJOR, "Lt", 13)]},
    ]
    deny = load_config({"majorSkew": "require", "noCompatibleNode": "deny"})
    denied = run(gpu_pod("nvidia/cuda:11.7.1"), config=deny, inventory=inventory)
    assert denied.denial_message() == (
        "Pod ml/train: no node supports CUDA 11.7; highest available is 13.0 (2 nodes)."
    )


def test_vgpu_keeps_its_same_major_requirement_and_gets_no_preference() -> None:
    vgpu = pod(container(image="nvidia/cuda:12.2.0", limits={VCORE: "50", VMEM: "4"}))
    decision = run(vgpu)
    mutated = apply(decision)
    assert node_terms(mutated) == [
        {"matchExpressions": [expr(MAJOR, "Gt", 11), expr(MAJOR, "Lt", 13), expr(MINOR, "Gt", 1)]}
    ]
    assert preferred_terms(mutated) is None
    assert decision.notes == ("required vGPU nodes with CUDA ≥ 12.2 (image nvidia/cuda:12.2.0)",)
    # a newer major only: no vGPU node can run it, whatever the skew setting
    only_13 = nodes("13.0")
    assert run(vgpu, inventory=only_13).warnings == (
        "no node supports CUDA 12.2 on vGPU; highest available is 13.0 (1 node)",
    )


def test_a_physical_and_a_vgpu_container_share_the_vgpu_bound() -> None:
    """pGPU 12.0 and vGPU 12.2: required 12.2 ≤ D < 13, nothing more to prefer."""
    obj = pod(
        container("a", "nvidia/cuda:12.0.0", limits={GPU: "1"}, requests={GPU: "1"}),
        container("b", "nvidia/cuda:12.2.0", limits={VCORE: "50", VMEM: "4"}),
    )
    decision = run(obj)
    mutated = apply(decision)
    assert node_terms(mutated) == [
        {"matchExpressions": [expr(MAJOR, "Gt", 11), expr(MAJOR, "Lt", 13), expr(MINOR, "Gt", 1)]}
    ]
    assert preferred_terms(mutated) is None
    assert decision.notes == ("required vGPU nodes with CUDA ≥ 12.2 (image nvidia/cuda:12.2.0)",)
