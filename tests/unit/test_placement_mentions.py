"""A user's own node constraints on placement labels (SPEC §4 "Injection", issue 18 defect 6):
naming a CUDA label key leaves the pod's CUDA placement alone; naming a compute-capability key
leaves only the compute part alone. Each case asserts the resulting object, the warnings and
that evaluating it again changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import (
    GPU,
    PREFERRED_12_4_TERMS,
    REQUIRED_12_4_TERMS,
    apply,
    container,
    expr,
    pod,
)

# Tests of the placement terms a user wrote: evaluated without the /dev/shm fix (on by default),
# whose volume and warning would be in every pod here (tests/helpers.py `without_shm`; the rule's
# own tests: test_runtime_fixes.py).
from tests.helpers import (
    assert_idempotent_without_shm as assert_idempotent,
)
from tests.helpers import (
    run_without_shm as run,
)

MAJOR = "cuda-major-version"
CMAJ = "nvidia.com/gpu.compute.major"
BF16 = ["--model", "m", "--dtype", "bfloat16"]  # the shipped rule: compute capability ≥ 8.0
CC_8 = [expr(CMAJ, "Gt", 7)]
KEPT_CUDA = (
    f"your node affinity on {MAJOR} is kept as is; this pod needs CUDA ≥ 12.4, preferably < 14.0"
)
KEPT_COMPUTE = (
    f"your node affinity on {CMAJ} is kept as is; this pod needs compute capability ≥ 8.0"
)
NOTE_CUDA = "required GPU nodes with CUDA ≥ 12.4 (image nvidia/cuda:12.4.1), preferably < 14.0"
NOTE_COMPUTE = 'required compute capability ≥ 8.0 (rule bfloat16-servers for container "c")'


def gpu_pod(args: list[str] | None = None, **spec: Any) -> dict[str, Any]:
    c = container(image="nvidia/cuda:12.4.1", limits={GPU: "1"}, requests={GPU: "1"})
    if args is not None:
        c["args"] = args
    return pod(c, **spec)


def node_affinity(
    required: list[dict[str, Any]] | None = None, preferred: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    affinity: dict[str, Any] = {}
    if required is not None:
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": required}
    if preferred is not None:
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return {"nodeAffinity": affinity}


def with_compute(terms: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"matchExpressions": [*t["matchExpressions"], *CC_8]} for t in terms]


USER_CC_TERM = {"matchExpressions": [expr(CMAJ, "In", "9")]}
USER_CUDA_TERM = {"matchExpressions": [expr(MAJOR, "In", "12")]}


@pytest.mark.parametrize(
    ("spec", "args", "affinity", "warnings", "notes"),
    [
        pytest.param(
            {"nodeSelector": {CMAJ: "9"}},
            None,
            node_affinity(REQUIRED_12_4_TERMS, PREFERRED_12_4_TERMS),
            (),
            (NOTE_CUDA,),
            id="compute nodeSelector, no compute requirement: CUDA placed",
        ),
        pytest.param(
            {"nodeSelector": {CMAJ: "9"}},
            BF16,
            node_affinity(REQUIRED_12_4_TERMS, PREFERRED_12_4_TERMS),
            (KEPT_COMPUTE,),
            (NOTE_CUDA,),
            id="compute nodeSelector, compute requirement: CUDA placed, compute left alone",
        ),
        pytest.param(
            {"affinity": node_affinity([USER_CC_TERM])},
            BF16,
            node_affinity(
                [
                    {
                        "matchExpressions": [
                            *USER_CC_TERM["matchExpressions"],
                            *t["matchExpressions"],
                        ]
                    }
                    for t in REQUIRED_12_4_TERMS
                ],
                PREFERRED_12_4_TERMS,
            ),
            (KEPT_COMPUTE,),
            (NOTE_CUDA,),
            id="compute affinity term: CUDA crossed with it, compute left alone",
        ),
        pytest.param(
            {"nodeSelector": {MAJOR: "12"}},
            BF16,
            node_affinity([{"matchExpressions": CC_8}]),
            (KEPT_CUDA,),
            (NOTE_COMPUTE,),
            id="CUDA nodeSelector: compute placed, CUDA left alone",
        ),
        pytest.param(
            {"affinity": node_affinity([USER_CUDA_TERM])},
            BF16,
            node_affinity([{"matchExpressions": [*USER_CUDA_TERM["matchExpressions"], *CC_8]}]),
            (KEPT_CUDA,),
            (NOTE_COMPUTE,),
            id="CUDA affinity term: compute crossed with it, CUDA left alone",
        ),
        pytest.param(
            {"nodeSelector": {MAJOR: "12", CMAJ: "9"}},
            BF16,
            None,
            (KEPT_CUDA, KEPT_COMPUTE),
            (),
            id="both named: nothing placed",
        ),
        pytest.param(
            {},
            BF16,
            node_affinity(with_compute(REQUIRED_12_4_TERMS), PREFERRED_12_4_TERMS),
            (),
            (NOTE_CUDA, NOTE_COMPUTE),
            id="none named: both placed",
        ),
    ],
)
def test_a_mentioned_label_leaves_only_its_own_part_alone(
    spec: dict[str, Any],
    args: list[str] | None,
    affinity: dict[str, Any] | None,
    warnings: tuple[str, ...],
    notes: tuple[str, ...],
) -> None:

    original = gpu_pod(args, **spec)
    decision = run(original)
    mutated = apply(decision)
    expected = {**original["spec"]}
    if affinity is not None:
        expected["affinity"] = affinity
    assert mutated["spec"] == expected
    assert decision.warnings == warnings
    assert decision.notes == notes
    assert decision.allowed
    again = run(mutated)
    assert again.patch == []
    assert again.notes == ()


def test_the_users_preferred_terms_on_cuda_labels_do_not_count_as_a_mention() -> None:
    """A preference constrains nothing: the required CUDA terms are still needed."""
    user = [{"weight": 5, "preference": {"matchExpressions": [expr(MAJOR, "Gt", 12)]}}]
    decision = run(gpu_pod(affinity=node_affinity(preferred=user)))
    assert apply(decision)["spec"]["affinity"] == node_affinity(
        REQUIRED_12_4_TERMS, [*user, *PREFERRED_12_4_TERMS]
    )
    assert_idempotent(decision)


def test_a_stale_injection_of_ours_is_kept_with_a_warning() -> None:
    """Terms of ours for another version (the image changed): kept, the user is told."""
    mutated = apply(run(gpu_pod()))
    mutated["spec"]["containers"][0]["image"] = "nvidia/cuda:12.6.0"
    decision = run(mutated)
    assert decision.patch == []
    assert decision.warnings == (
        f"your node affinity on {MAJOR} is kept as is; this pod needs CUDA ≥ 12.6, "
        "preferably < 14.0",
    )


def test_a_malformed_preferred_list_gets_the_required_terms_only() -> None:
    original = gpu_pod(
        affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": {}}}
    )
    decision = run(original)
    assert apply(decision)["spec"]["affinity"]["nodeAffinity"] == {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": REQUIRED_12_4_TERMS
        },
        "preferredDuringSchedulingIgnoredDuringExecution": {},
    }
