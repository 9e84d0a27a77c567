"""`cudaCompatibility: minorVersion` under what NVIDIA's stack really checks (issue 37 defect 5).

a. The image's own requirement: NVIDIA's toolkit checks `NVIDIA_REQUIRE_CUDA` (or, without
   it, `cuda>=` CUDA_VERSION's major.minor) against the driver in legacy mode and refuses the
   container on an older one (nvidia-container-toolkit internal/config/image/cuda_image.go
   GetRequirements, IsLegacy). minorVersion placed a `cuda>=12.8` image on an R525 (CUDA 12.0)
   node; it now never goes below what the image declares, unless NVIDIA_DISABLE_REQUIRE is set.
b. CUDA 11.x: minor-version compatibility needs driver ≥ 450.80.02 (NVIDIA's CUDA
   Compatibility guide, "Minor Version Compatibility"); the 11.0 GA drivers (450.36.06,
   450.51.06) report CUDA 11.0 too. A CUDA 11.0 node counts only where GFD's driver version
   labels say ≥ 450.80.02.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest

from tests.helpers import (
    GPU,
    apply,
    container,
    expr,
    node_terms,
    pod,
    standard_policies,
    workload,
)

# Tests of CUDA minor-version compatibility: evaluated without the /dev/shm fix (on by default),
# whose volume and warning would be in every pod here (tests/helpers.py `without_shm`; the rule's
# own tests: test_runtime_fixes.py).
from tests.helpers import (
    assert_idempotent_without_shm as assert_idempotent,
)
from tests.helpers import preferred_terms as preferred_of
from tests.helpers import (
    run_without_shm as run,
)
from tests.unit.test_cuda_rules import AT_LEAST_12_4, MAJ, MIN, MV, REQUIRE_12_8, terms
from tests.unit.test_placement_inventory import GMAJ, GMIN, gfd, gpu_pod, nodes
from tests.unit.test_terms_bruteforce import selects
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import Decision, evaluate
from webhook.core.images.facts import ImageQuery
from webhook.core.placement.cuda import driver_11_0 as cuda_driver_11_0
from webhook.registry.client import config_requirement
from webhook.registry.documents import read_config

MV_DENY = MV.model_copy(update={"no_compatible_node": "deny"})
DMAJ, DMIN, DREV = (
    "nvidia.com/cuda.driver-version.major",
    "nvidia.com/cuda.driver-version.minor",
    "nvidia.com/cuda.driver-version.revision",
)
AT_LEAST_12_8 = [
    [expr(MAJ, "Gt", 11), expr(MAJ, "Lt", 13), expr(MIN, "Gt", 7)],
    [expr(MAJ, "Gt", 12)],
]
APP = "registry.example/team/app:v2"


def env_pod(*env: tuple[str, str], image: str = APP) -> dict[str, Any]:
    values = [{"name": k, "value": v} for k, v in env]
    return pod(container(image=image, limits={GPU: "1"}, requests={GPU: "1"}, env=values))


def registry_review(
    obj: dict[str, Any], image_env: list[str], config: WebhookConfig = MV, **kw: Any
) -> Decision:
    """The pod's image read from its registry (SPEC §4 step 6), its config's Env `image_env`."""
    body = json.dumps({"config": {"Env": image_env}}).encode()
    found = read_config(body, "sha256:" + hashlib.sha256(body).hexdigest())
    requirement = config_requirement(found, config).requirement
    assert requirement is not None
    return evaluate(obj, standard_policies(), config, images={ImageQuery(APP): requirement}, **kw)


# --- a. the image's own requirement ---------------------------------------------------------


@pytest.mark.parametrize(
    "env",
    [
        (("NVIDIA_REQUIRE_CUDA", "cuda>=12.8"),),
        (("CUDA_VERSION", "12.8.1"),),  # legacy image: the toolkit checks cuda>=12.8
        (("CUDA_VERSION", "12.8.1"), ("NVIDIA_REQUIRE_CUDA", REQUIRE_12_8)),
    ],
)
def test_minor_version_never_places_below_what_the_image_declares(
    env: tuple[tuple[str, str], ...],
) -> None:

    decision = run(env_pod(*env), config=MV)
    assert node_terms(apply(decision)) == terms(*AT_LEAST_12_8)
    assert decision.notes[0].startswith(
        "required GPU nodes with CUDA ≥ 12.8 (backward, as the image"
    )
    assert decision.placements == ("backward",)
    # On an R525 (CUDA 12.0) node the toolkit's legacy mode refuses it: not placed there.
    r525 = nodes(gfd("12", "0"))
    denied = run(env_pod(*env), config=MV_DENY, inventory=r525)
    assert denied.denial_message() == (
        "Pod ml/train: no node supports CUDA 12.8; highest available is 12.0 (1 node)."
    )


def test_the_image_config_from_its_registry_counts_too() -> None:
    image_env = ["CUDA_VERSION=12.8.1", f"NVIDIA_REQUIRE_CUDA={REQUIRE_12_8}"]
    decision = registry_review(env_pod(), image_env)
    assert node_terms(apply(decision)) == terms(*AT_LEAST_12_8)
    assert decision.notes[0] == (
        "required CUDA ≥ 12.8 (backward, as the image requires: image config "
        "CUDA_VERSION=12.8.1), preferably < 14.0"
    )
    denied = registry_review(env_pod(), image_env, MV_DENY, inventory=nodes(gfd("12", "0")))
    assert not denied.allowed


def test_nvidia_disable_require_lets_minor_version_relax_again() -> None:
    disabled = ("NVIDIA_DISABLE_REQUIRE", "true")
    decision = run(env_pod(("NVIDIA_REQUIRE_CUDA", "cuda>=12.8"), disabled), config=MV)
    assert node_terms(apply(decision)) == terms([expr(MAJ, "Gt", 11)])
    assert decision.placements == ("minorVersion",)
    # The pod's own env turns off what the image config declares, as the runtime does.
    image_env = ["CUDA_VERSION=12.8.1", "NVIDIA_REQUIRE_CUDA=cuda>=12.8"]
    relaxed = registry_review(env_pod(disabled), image_env)
    assert node_terms(apply(relaxed)) == terms([expr(MAJ, "Gt", 11)])


def test_a_lower_declared_requirement_is_the_floor() -> None:
    env = (("CUDA_VERSION", "12.8.1"), ("NVIDIA_REQUIRE_CUDA", "cuda>=12.4"))
    decision = run(env_pod(*env), config=MV)
    assert node_terms(apply(decision)) == terms(*AT_LEAST_12_4)
    assert decision.notes[0].startswith(
        "required GPU nodes with CUDA ≥ 12.4 (minorVersion: env CUDA_VERSION=12.8.1), "
    )


def test_a_version_from_the_tag_alone_still_relaxes() -> None:
    """Nothing tells the image's env (no registry answer): minorVersion as configured."""
    decision = run(gpu_pod("nvidia/cuda:12.4.1"), config=MV)
    assert node_terms(apply(decision)) == terms([expr(MAJ, "Gt", 11)])


# --- b. CUDA 11.x and the 450.80.02 driver ---------------------------------------------------

AT_LEAST_11_1 = [
    [expr(MAJ, "Gt", 10), expr(MAJ, "Lt", 12), expr(MIN, "Gt", 0)],
    [expr(MAJ, "Gt", 11)],
]


def driver_11_0(major: str, minor: str) -> list[list[dict[str, Any]]]:
    node = [expr(major, "Gt", 10), expr(major, "Lt", 12), expr(minor, "Lt", 1)]
    branch = [expr(DMAJ, "Gt", 449), expr(DMAJ, "Lt", 451)]
    return [
        [*node, *branch, expr(DMIN, "Gt", 80)],
        [*node, *branch, expr(DMIN, "Gt", 79), expr(DMIN, "Lt", 81), expr(DREV, "Gt", 1)],
    ]


def driver(version: str) -> dict[str, str]:
    major, minor, revision = version.split(".")
    return {DMAJ: major, DMIN: minor, DREV: revision}


GA = gfd("11", "0") | driver("450.51.06")  # an 11.0 GA driver
R450_80 = gfd("11", "0") | driver("450.80.02")
R450_102 = gfd("11", "0") | driver("450.102.04")
BARE_11_0 = gfd("11", "0")  # no driver version labels
IMAGE_11_8 = "nvidia/cuda:11.8.0"
NO_NODE = "no node supports CUDA 11.x (minorVersion, for 11.8); highest available is 11.0"


def test_without_inventory_11_0_nodes_need_the_driver_labels() -> None:
    decision = run(gpu_pod(IMAGE_11_8), config=MV)
    mutated = apply(decision)
    assert node_terms(mutated) == terms(*AT_LEAST_11_1, *driver_11_0(MAJ, MIN))
    assert decision.notes[0].startswith(
        "required GPU nodes with CUDA ≥ 11.1, or 11.0 with driver ≥ 450.80.02 (minorVersion: "
        "image nvidia/cuda:11.8.0)"
    )
    assert decision.placements == ("minorVersion",)
    assert preferred_of(mutated)[0]["preference"]["matchExpressions"] == [
        expr(MAJ, "Gt", 10),
        expr(MAJ, "Lt", 12),
        expr(MIN, "Gt", 7),
    ]
    assert_idempotent(decision, config=MV)


def test_an_11_0_node_with_a_ga_driver_does_not_run_it() -> None:
    decision = run(gpu_pod(IMAGE_11_8), config=MV_DENY, inventory=nodes(GA, GA))
    assert decision.denial_message() == f"Pod ml/train: {NO_NODE} (2 nodes)."


@pytest.mark.parametrize("node", [R450_80, R450_102])
def test_an_11_0_node_with_driver_450_80_02_or_newer_runs_it(node: dict[str, str]) -> None:
    inventory = nodes(node, GA)
    decision = run(gpu_pod(IMAGE_11_8), config=MV_DENY, inventory=inventory)
    assert decision.allowed
    assert node_terms(apply(decision)) == terms(
        [expr(GMAJ, "Gt", 10), expr(GMAJ, "Lt", 12), expr(GMIN, "Gt", 0)],
        [expr(GMAJ, "Gt", 11)],
        *driver_11_0(GMAJ, GMIN),
    )
    assert decision.warnings == (
        "no node has CUDA ≥ 11.8: minorVersion places it on CUDA 11.0 nodes with driver "
        "≥ 450.80.02, with a limited feature-set",
    )
    assert_idempotent(decision, config=MV_DENY, inventory=inventory)


def test_11_0_nodes_without_driver_labels_are_said() -> None:
    decision = run(gpu_pod(IMAGE_11_8), config=MV, inventory=nodes(BARE_11_0, BARE_11_0))
    assert decision.warnings == (
        "2 CUDA 11.0 nodes do not label the driver version: minorVersion uses them only with "
        "driver ≥ 450.80.02",
        f"{NO_NODE} (2 nodes)",
    )
    assert all(len(w) <= 120 for w in decision.warnings)
    # A newer node with the full version: nothing to say about the 11.0 ones.
    newer = nodes(BARE_11_0, gfd("11", "8"))
    assert run(gpu_pod(IMAGE_11_8), config=MV, inventory=newer).warnings == ()


def test_an_11_0_image_and_backward_are_unchanged() -> None:
    decision = run(gpu_pod("nvidia/cuda:11.0.3"), config=MV)
    assert node_terms(apply(decision)) == terms([expr(MAJ, "Gt", 10)])
    backward = run(gpu_pod(IMAGE_11_8))
    assert all(DMAJ not in json.dumps(t) for t in node_terms(apply(backward)))


@pytest.mark.parametrize(("node", "admitted"), [(R450_80, True), (GA, False), (BARE_11_0, False)])
def test_a_pinned_pod_on_an_11_0_node(node: dict[str, str], admitted: bool) -> None:
    obj = gpu_pod(IMAGE_11_8, nodeName="node-0")
    decision = run(obj, config=MV_DENY, inventory=nodes(node))
    assert decision.allowed is admitted
    if not admitted:
        assert decision.denial_message() == (
            "Pod ml/train: node node-0 supports CUDA 11.0; this pod needs CUDA ≥ 11.1."
        )


def test_a_template_keeps_recognising_its_11_0_terms_after_an_image_change() -> None:
    config = MV.model_copy(update={"mutate_templates": True})
    c = container(image=IMAGE_11_8, limits={GPU: "1"})
    created = apply(evaluate(workload("Deployment", pod(c)), standard_policies(), config))
    updated = copy.deepcopy(created)
    updated["spec"]["template"]["spec"]["containers"][0]["image"] = "nvidia/cuda:11.4.3"
    decision = evaluate(
        updated, standard_policies(), config, operation="UPDATE", old_object=created
    )
    assert decision.warnings == ()
    stored = apply(decision)
    assert node_terms(stored, "spec", "template", "spec") == terms(
        *AT_LEAST_11_1, *driver_11_0(MAJ, MIN)
    )


def test_the_terms_select_exactly_the_nodes_the_rule_names() -> None:
    """Brute force over CUDA and driver label values: the injected terms select a node iff it
    advertises CUDA ≥ 11.1, or 11.0 with a driver ≥ 450.80.02 by its labels (and the inventory's
    reading, cuda.driver_11_0, agrees with the terms)."""
    required = node_terms(apply(run(gpu_pod(IMAGE_11_8), config=MV)))
    for cuda in ("10.2", "11.0", "11.00", "11.1", "11.8", "12.0"):
        major, minor = cuda.split(".")
        for version in (
            "450.36.06", "450.51.06", "450.66.01", "450.80.01", "450.80.02", "450.80.2",
            "450.81.00", "450.102.04", "455.23.05", "450.80", "450.80.", None,
        ):  # fmt: skip
            labels = {MAJ: major, MIN: minor}
            if version is not None:
                dmajor, dminor, *rest = version.split(".")
                labels |= {DMAJ: dmajor, DMIN: dminor, DREV: rest[0] if rest else ""}
            by_labels = cuda_driver_11_0(labels)
            on_11_0 = (int(major), int(minor)) == (11, 0)
            want = (int(major), int(minor)) >= (11, 1) or (on_11_0 and by_labels is True)
            assert selects(required, labels) is want, (cuda, version)
            if version is not None:
                numbers = tuple(int(p) for p in version.split(".") if p)
                assert by_labels is (numbers[0] == 450 and numbers >= (450, 80, 2)), version


def test_a_daemonsets_template_counts_11_0_nodes_with_the_driver_as_fit() -> None:
    c = container(image=IMAGE_11_8, limits={GPU: "1"})
    template = workload("DaemonSet", pod(c), name="agent")
    decision = run(template, config=MV, inventory=nodes(R450_80, GA, BARE_11_0))
    assert decision.warnings == (
        "2 of 3 CUDA nodes cannot run these DaemonSet pods: they need CUDA ≥ 11.1",
    )
    assert decision.notes[-1] == (
        "will apply to pods: CUDA 11.0 nodes with driver ≥ 450.80.02 run them too (minorVersion)"
    )
    without = run(template, config=MV, inventory=nodes(GA, BARE_11_0))
    assert without.warnings == (
        "2 of 2 CUDA nodes cannot run these DaemonSet pods: they need CUDA ≥ 11.1",
    )
    assert not any("450.80.02" in n for n in without.notes)
