"""NVIDIA's compatibility axes (SPEC §4 "Compatibility rule"): the architecture floor of each
CUDA major, `cudaCompatibility: backward | minorVersion`, and forward compatibility on the
nodes the config names, from the driver branches an image declares in NVIDIA_REQUIRE_CUDA."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import (
    CONFIGMAPS,
    DATA,
    apply,
    container,
    expr,
    node_terms,
    pod,
    standard_policies,
)

# Tests of the CUDA rules: evaluated without the /dev/shm fix (on by default), whose volume and
# warning would be in every pod here (tests/helpers.py `without_shm`; the rule's own tests:
# test_runtime_fixes.py).
from tests.helpers import (
    assert_idempotent_without_shm as assert_idempotent,
)
from tests.helpers import (
    load_without_shm as load_config,
)
from tests.helpers import preferred_terms as preferred_of
from tests.helpers import (
    run_without_shm as run,
)
from tests.unit.test_placement_inventory import CMAJ, CMIN, DENY, GMAJ, gfd, gpu_pod, nodes
from webhook.cli import main
from webhook.core.base.errors import ConfigError
from webhook.core.base.versions import CudaVersion
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.images.facts import ImageQuery
from webhook.core.images.requires import branch_list, forward_branches
from webhook.core.placement.cuda import architecture_floor
from webhook.registry.client import config_requirement
from webhook.registry.documents import read_config

CUDA13 = "nvidia/cuda:13.0.0-base-ubuntu24.04"
CUDA13_NOTE = f"required GPU nodes with CUDA ≥ 13.0 (image {CUDA13}), preferably < 15.0"
V100 = {CMAJ: "7", CMIN: "0"}
L4 = {CMAJ: "8", CMIN: "9"}
GT_12 = expr(GMAJ, "Gt", 12)
FLOOR_7_5 = [[expr(CMAJ, "Gt", 6), expr(CMAJ, "Lt", 8), expr(CMIN, "Gt", 4)], [expr(CMAJ, "Gt", 7)]]


def terms(*groups: list[Any]) -> list[dict[str, Any]]:
    return [{"matchExpressions": list(g)} for g in groups]


# --- 1. the architecture floor -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("runtime", "floor"),
    [
        (CudaVersion(13, 0), CudaVersion(7, 5)),
        (CudaVersion(13, 2), CudaVersion(7, 5)),
        (CudaVersion(14, 1), CudaVersion(7, 5)),  # a newer major keeps at least the newest floor
        (CudaVersion(12, 9), CudaVersion(5, 0)),
        (CudaVersion(12, 0), CudaVersion(5, 0)),
        (CudaVersion(11, 8), CudaVersion(3, 5)),
        (CudaVersion(10, 2), None),
    ],
)
def test_architecture_floor_per_major(runtime: CudaVersion, floor: CudaVersion | None) -> None:
    assert architecture_floor(runtime) == floor


def test_cuda13_pod_is_kept_off_a_volta_node_with_a_cuda13_driver() -> None:
    inventory = nodes(gfd("13", "0") | V100, gfd("13", "0") | L4)
    decision = run(gpu_pod(CUDA13), inventory=inventory)
    assert node_terms(apply(decision)) == terms(*[[GT_12, *cc] for cc in FLOOR_7_5])
    assert decision.notes == (
        CUDA13_NOTE,
        "required compute capability ≥ 7.5 (architecture floor of CUDA 13.0)",
    )
    assert decision.warnings == ()
    assert_idempotent(decision)


def test_floor_implied_by_every_node_adds_no_term() -> None:
    # Every node that advertises a compute capability meets 7.5: no term on every pod.
    decision = run(gpu_pod(CUDA13), inventory=nodes(gfd("13", "0") | L4, gfd("13", "1")))
    assert node_terms(apply(decision)) == terms([GT_12])
    assert decision.notes == (CUDA13_NOTE,)
    # a CUDA 12 pod on a V100 cluster: 7.0 ≥ 5.0
    decision = run(gpu_pod("nvidia/cuda:12.4.1"), inventory=nodes(gfd("13", "0") | V100))
    assert [n for n in decision.notes if "compute" in n] == []


def test_floor_without_inventory_adds_no_term() -> None:
    decision = run(gpu_pod(CUDA13))
    assert node_terms(apply(decision)) == terms([expr("cuda-major-version", "Gt", 12)])
    assert len(decision.notes) == 1


def test_no_node_at_the_floor_warns_or_denies() -> None:
    inventory = nodes(gfd("13", "0") | V100, gfd("13", "0") | V100)
    message = f"no node with compute capability ≥ 7.5 for CUDA 13.0 (image {CUDA13})"
    warned = run(gpu_pod(CUDA13), inventory=inventory)
    assert warned.allowed
    assert warned.warnings == (message,)
    assert len(message) <= 120
    denied = run(gpu_pod(CUDA13), config=DENY, inventory=inventory)
    assert not denied.allowed
    assert denied.denial_message() == f"Pod ml/train: {message}."


def test_stricter_of_floor_and_compute_rule_wins() -> None:
    inventory = nodes(gfd("13", "0") | V100, gfd("13", "0") | L4)
    asked_more = run(
        gpu_pod(CUDA13, annotations={"features.alauda.io/min-compute-capability": "8.0"}),
        inventory=inventory,
    )
    assert node_terms(apply(asked_more)) == terms([GT_12, expr(CMAJ, "Gt", 7)])
    assert asked_more.notes[1] == (
        "required compute capability ≥ 8.0 (annotation features.alauda.io/min-compute-capability)"
    )
    asked_less = run(
        gpu_pod(CUDA13, annotations={"features.alauda.io/min-compute-capability": "6.1"}),
        inventory=inventory,
    )
    assert node_terms(apply(asked_less)) == terms(*[[GT_12, *cc] for cc in FLOOR_7_5])
    assert (
        asked_less.notes[1] == "required compute capability ≥ 7.5 (architecture floor of CUDA 13.0)"
    )


def test_floor_of_the_newest_container_counts() -> None:
    inventory = nodes(gfd("13", "0") | V100, gfd("13", "0") | L4)
    obj = pod(
        container("old", "nvidia/cuda:12.8.1", limits={"nvidia.com/gpu": "1"}),
        container("new", CUDA13, limits={"nvidia.com/gpu": "1"}),
    )
    decision = run(obj, inventory=inventory)
    assert node_terms(apply(decision)) == terms(*[[GT_12, *cc] for cc in FLOOR_7_5])


def test_daemonset_pod_on_a_volta_node_is_warned_by_the_floor() -> None:
    inventory = nodes(gfd("13", "0") | V100, gfd("13", "0") | L4)
    obj = gpu_pod(CUDA13, nodeName="node-0")
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u", "controller": True}
    ]
    decision = run(obj, inventory=inventory)
    assert decision.patch == []
    assert decision.warnings == (
        "node node-0 has compute capability 7.0; this DaemonSet pod needs ≥ 7.5",
    )


def test_images_command_shows_the_floor() -> None:
    out = io.StringIO()
    assert main(["images", CUDA13, "--no-lookup"], out=out) == 0
    assert out.getvalue() == (
        f"{CUDA13}: CUDA 13.0 from the reference\n"
        "  GPUs with compute capability ≥ 7.5 (architecture floor of CUDA 13.0)\n"
    )


# --- 2. cudaCompatibility: backward | minorVersion ---------------------------------------------

MV = load_config({"cudaCompatibility": "minorVersion"})
MAJ, MIN = "cuda-major-version", "cuda-minor-version"
AT_LEAST_12_4 = [
    [expr(MAJ, "Gt", 11), expr(MAJ, "Lt", 13), expr(MIN, "Gt", 3)],
    [expr(MAJ, "Gt", 12)],
]


def weighted(*groups: list[Any]) -> list[dict[str, Any]]:
    return [{"weight": 100, "preference": {"matchExpressions": list(g)}} for g in groups]


def test_config_defaults_to_backward() -> None:
    assert WebhookConfig().cuda_compatibility == "backward"
    with pytest.raises(ConfigError, match="cudaCompatibility"):
        load_config({"cudaCompatibility": "forward"})


def test_minor_version_requires_the_major_family_and_prefers_the_full_version() -> None:
    decision = run(gpu_pod("nvidia/cuda:12.4.1"), config=MV)
    mutated = apply(decision)
    assert node_terms(mutated) == terms([expr(MAJ, "Gt", 11)])
    assert preferred_of(mutated) == weighted(*AT_LEAST_12_4, [expr(MAJ, "Lt", 14)])
    assert decision.notes == (
        "required GPU nodes with CUDA ≥ 12.0 (minorVersion: image nvidia/cuda:12.4.1), "
        "preferably ≥ 12.4 and < 14.0",
    )
    assert decision.warnings == ()
    assert_idempotent(decision, config=MV)


def test_minor_version_says_when_only_the_limited_feature_set_is_available() -> None:
    inventory = nodes(gfd("12", "2"), gfd("12", "2"))
    decision = run(gpu_pod("nvidia/cuda:12.4.1"), config=MV, inventory=inventory)
    assert node_terms(apply(decision)) == terms([expr(GMAJ, "Gt", 11)])
    assert decision.warnings == (
        "no node has CUDA ≥ 12.4: minorVersion places it on CUDA 12.2 nodes, "
        "with a limited feature-set",
    )
    older = nodes(gfd("11", "8"))
    message = (
        "no node supports CUDA 12.x (minorVersion, for 12.4); highest available is 11.8 (1 node)"
    )
    assert run(gpu_pod("nvidia/cuda:12.4.1"), config=MV, inventory=older).warnings == (message,)
    denied = run(
        gpu_pod("nvidia/cuda:12.4.1"),
        config=MV.model_copy(update={"no_compatible_node": "deny"}),
        inventory=older,
    )
    assert denied.denial_message() == f"Pod ml/train: {message}."


def test_pod_may_ask_for_backward_where_the_cluster_says_minor_version() -> None:
    obj = gpu_pod(
        "nvidia/cuda:12.4.1", annotations={"features.alauda.io/cuda-compatibility": "backward"}
    )
    decision = run(obj, config=MV)
    assert node_terms(apply(decision)) == terms(*AT_LEAST_12_4)
    assert preferred_of(apply(decision)) == weighted([expr(MAJ, "Lt", 14)])
    assert decision.notes == (
        "required GPU nodes with CUDA ≥ 12.4 (backward, as annotated: image nvidia/cuda:12.4.1), "
        "preferably < 14.0",
    )
    assert decision.warnings == ()


def test_pod_cannot_relax_a_backward_cluster() -> None:
    obj = gpu_pod(
        "nvidia/cuda:12.4.1", annotations={"features.alauda.io/cuda-compatibility": "minorVersion"}
    )
    decision = run(obj)
    assert node_terms(apply(decision)) == terms(*AT_LEAST_12_4)
    assert decision.notes == (
        "required GPU nodes with CUDA ≥ 12.4 (image nvidia/cuda:12.4.1), preferably < 14.0",
    )
    assert decision.warnings == (
        "annotation features.alauda.io/cuda-compatibility=minorVersion cannot relax the "
        "cluster's backward rule",
    )
    bad = run(
        gpu_pod("nvidia/cuda:12.4.1", annotations={"features.alauda.io/cuda-compatibility": "yes"}),
        config=MV,
    )
    assert bad.warnings == (
        "annotation features.alauda.io/cuda-compatibility='yes' is not backward or minorVersion; "
        "ignored",
    )
    assert node_terms(apply(bad)) == terms([expr(MAJ, "Gt", 11)])


def test_minor_version_only_from_cuda_11_and_never_for_vgpu() -> None:
    old = run(gpu_pod("nvidia/cuda:10.2"), config=MV)
    assert node_terms(apply(old)) == terms(
        [expr(MAJ, "Gt", 9), expr(MAJ, "Lt", 11), expr(MIN, "Gt", 1)], [expr(MAJ, "Gt", 10)]
    )
    assert old.notes == (
        "required GPU nodes with CUDA ≥ 10.2 (image nvidia/cuda:10.2), preferably < 12.0",
    )
    vgpu = pod(container(image="nvidia/cuda:12.4.1", limits={"nvidia.com/gpumem": "4000"}))
    decision = run(vgpu, config=MV)
    assert node_terms(apply(decision)) == terms(
        [expr(MAJ, "Gt", 11), expr(MAJ, "Lt", 13), expr(MIN, "Gt", 3)]
    )
    assert decision.notes[0] == "required vGPU nodes with CUDA ≥ 12.4 (image nvidia/cuda:12.4.1)"


def test_minor_version_intersection_of_two_containers() -> None:
    obj = pod(
        container("a", "nvidia/cuda:12.2.0", limits={"nvidia.com/gpu": "1"}),
        container("b", "nvidia/cuda:12.6.3", limits={"nvidia.com/gpu": "1"}),
    )
    decision = run(obj, config=MV)
    assert node_terms(apply(decision)) == terms([expr(MAJ, "Gt", 11)])
    assert preferred_of(apply(decision))[:2] == weighted(
        [expr(MAJ, "Gt", 11), expr(MAJ, "Lt", 13), expr(MIN, "Gt", 5)], [expr(MAJ, "Gt", 12)]
    )


# --- 3. forward compatibility ------------------------------------------------------------------

REQUIRE_12_8 = (DATA / "cuda" / "nvidia-cuda-12.8.1.require").read_text().strip()
REQUIRE_13_0 = (DATA / "cuda" / "nvidia-cuda-13.0.3.require").read_text().strip()
PRODUCT = "nvidia.com/gpu.product"
DRIVER = "nvidia.com/cuda.driver-version.major"
FC = load_config(
    {
        "forwardCompatibleNodes": {
            "matchExpressions": [
                {
                    "key": PRODUCT,
                    "operator": "In",
                    "values": ["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"],
                }
            ]
        }
    }
)
FC_EXPR = {
    "key": PRODUCT,
    "operator": "In",
    "values": ["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"],
}
A100 = {PRODUCT: "NVIDIA-A100-SXM4-80GB"}


@pytest.mark.parametrize(
    ("env", "branches"),
    [
        # NVIDIA's own images: every branch their cuda-compat package supports
        ({"NVIDIA_REQUIRE_CUDA": REQUIRE_12_8}, [470, 535, 550, 560, 565]),
        ({"NVIDIA_REQUIRE_CUDA": REQUIRE_13_0}, [535, 550, 565, 570, 575]),
        # the legacy rule alone, or CUDA_VERSION only: nothing declared
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.8"}, []),
        ({"CUDA_VERSION": "12.8.1"}, []),
        # a branch range (an image built by hand): every branch in it
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.8 brand=tesla,driver>=525,driver<528"}, [525, 526, 527]),
        # no upper bound: not a forward-compatibility declaration
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.8 brand=tesla,driver>=535"}, []),
        # only part of a branch is declared: the branch is not taken (never wider)
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.8 driver>=535.104,driver<536"}, []),
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.8 driver>=535,driver<535.200"}, []),
        # an unknown or malformed constraint makes its alternative unusable, not wider
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.8 brand=tesla,driver>=535,driver<536,foo=1"}, []),
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.8 brand=tesla,driver=>535,driver<536"}, []),
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.8 brand=tesla,driver>=5x5,driver<536"}, []),
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.8 arch>=8.0,driver>=535,driver<536"}, []),
        # names are case-insensitive (dsl.c str_case_equal); empty pieces are skipped
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.8  BRAND=tesla,,DRIVER>=535,driver<536 "}, [535]),
        # several variables are ANDed: another one that no driver branch satisfies blocks all
        ({"NVIDIA_REQUIRE_CUDA": REQUIRE_12_8, "NVIDIA_REQUIRE_ARCH": "arch>=7.5"}, []),
        (
            {
                "NVIDIA_REQUIRE_CUDA": REQUIRE_12_8,
                "NVIDIA_REQUIRE_DRIVER": "driver>=535,driver<556",
            },
            [535, 550],
        ),
        # NVIDIA_REQUIRE_JETPACK is not a requirement the toolkit checks
        (
            {"NVIDIA_REQUIRE_CUDA": REQUIRE_12_8, "NVIDIA_REQUIRE_JETPACK": "csv-mounts=all"},
            [470, 535, 550, 560, 565],
        ),
        # NVIDIA_DISABLE_REQUIRE (strconv.ParseBool true) turns every requirement off
        ({"NVIDIA_REQUIRE_CUDA": REQUIRE_12_8, "NVIDIA_DISABLE_REQUIRE": "true"}, []),
        (
            {"NVIDIA_REQUIRE_CUDA": REQUIRE_12_8, "NVIDIA_DISABLE_REQUIRE": "no"},
            [470, 535, 550, 560, 565],
        ),
    ],
)
def test_forward_branches_as_the_toolkit_reads_them(
    env: dict[str, str], branches: list[int]
) -> None:
    assert branch_list(forward_branches(env)) == branches


def fc_container(
    image: str = "registry.example/team/app:v1", require: str = REQUIRE_12_8
) -> dict[str, Any]:
    env = [
        {"name": "CUDA_VERSION", "value": "12.8.1"},
        {"name": "NVIDIA_REQUIRE_CUDA", "value": require},
    ]
    return container(
        image=image, limits={"nvidia.com/gpu": "1"}, requests={"nvidia.com/gpu": "1"}, env=env
    )


def fc_term(*branches: int) -> list[dict[str, Any]]:
    return [FC_EXPR, expr(DRIVER, "In", *branches)]


AT_LEAST_12_8_GFD = [
    [
        expr(GMAJ, "Gt", 11),
        expr(GMAJ, "Lt", 13),
        expr("nvidia.com/cuda.runtime-version.minor", "Gt", 7),
    ],
    [expr(GMAJ, "Gt", 12)],
]


def test_forward_compatible_nodes_are_ored_in() -> None:
    decision = run(pod(fc_container()), config=FC)
    assert node_terms(apply(decision)) == terms(
        [expr(MAJ, "Gt", 11), expr(MAJ, "Lt", 13), expr(MIN, "Gt", 7)],
        [expr(MAJ, "Gt", 12)],
        fc_term(470, 535, 550, 560, 565),
    )
    assert decision.notes == (
        "required GPU nodes with CUDA ≥ 12.8 (env CUDA_VERSION=12.8.1), preferably < 14.0",
        "or driver 470, 535, 550, 560, 565 on forwardCompatibleNodes (forward compatibility the "
        "image declares)",
    )
    assert_idempotent(decision, config=FC)


def test_no_forward_compatibility_unless_configured() -> None:
    decision = run(pod(fc_container()))
    assert node_terms(apply(decision)) == terms(
        [expr(MAJ, "Gt", 11), expr(MAJ, "Lt", 13), expr(MIN, "Gt", 7)], [expr(MAJ, "Gt", 12)]
    )


def test_forward_compatibility_with_inventory() -> None:
    r535 = gfd("12", "2") | A100 | {DRIVER: "535"}
    t4 = gfd("12", "2") | {PRODUCT: "Tesla-T4", DRIVER: "535"}
    inventory = nodes(r535, t4)
    decision = run(pod(fc_container()), config=FC, inventory=inventory)
    assert node_terms(apply(decision)) == terms(
        *AT_LEAST_12_8_GFD, fc_term(470, 535, 550, 560, 565)
    )
    # the R535 A100 can run it: no "no node supports" warning
    assert decision.warnings == ()
    assert_idempotent(decision, config=FC, inventory=inventory)
    # only the T4 (not forward compatible): the usual warning, and no forward term
    only_t4 = run(pod(fc_container()), config=FC, inventory=nodes(t4))
    assert only_t4.warnings == ("no node supports CUDA 12.8; highest available is 12.2 (1 node)",)
    assert node_terms(apply(only_t4)) == terms(*AT_LEAST_12_8_GFD)
    # an A100 on R580 runs it by the CUDA rule; R525 is not a branch the image lists
    r525 = gfd("12", "0") | A100 | {DRIVER: "525"}
    denied = run(
        pod(fc_container()),
        config=FC.model_copy(update={"no_compatible_node": "deny"}),
        inventory=nodes(r525),
    )
    assert denied.denial_message() == (
        "Pod ml/train: no node supports CUDA 12.8; highest available is 12.0 (1 node)."
    )


def test_forward_compatibility_of_every_container_intersects() -> None:
    other = "cuda>=12.6 brand=tesla,driver>=535,driver<536 brand=tesla,driver>=470,driver<471"
    obj = pod(fc_container(), fc_container(require=other) | {"name": "side"})
    decision = run(obj, config=FC)
    assert node_terms(apply(decision))[-1] == {"matchExpressions": fc_term(470, 535)}
    # a container that declares nothing: the CUDA rule only (narrower, never wider)
    plain = container("plain", "nvidia/cuda:12.8.1", limits={"nvidia.com/gpu": "1"})
    decision = run(pod(fc_container(), plain), config=FC)
    assert all(DRIVER not in str(t) for t in node_terms(apply(decision)))


def test_forward_compatibility_from_the_image_config_in_its_registry() -> None:
    blob = {
        "config": {
            "Env": ["PATH=/usr/bin", "CUDA_VERSION=12.8.1", f"NVIDIA_REQUIRE_CUDA={REQUIRE_12_8}"]
        }
    }
    body = json.dumps(blob).encode()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    result = config_requirement(read_config(body, digest), FC)
    assert result.requirement is not None
    image = "registry.example/team/app:v1"
    c = container(image=image, limits={"nvidia.com/gpu": "1"}, requests={"nvidia.com/gpu": "1"})
    decision = evaluate(
        pod(c), standard_policies(), FC, images={ImageQuery(image): result.requirement}
    )
    assert node_terms(apply(decision)) == terms(
        [expr(MAJ, "Gt", 11), expr(MAJ, "Lt", 13), expr(MIN, "Gt", 7)],
        [expr(MAJ, "Gt", 12)],
        fc_term(470, 535, 550, 560, 565),
    )
    assert decision.notes[0] == (
        "required GPU nodes with CUDA ≥ 12.8 (image config CUDA_VERSION=12.8.1), preferably < 14.0"
    )


@pytest.mark.parametrize(
    ("term", "message"),
    [
        ({"matchExpressions": []}, "an empty node selector term matches no node"),
        (
            {"matchExpressions": [{"key": PRODUCT, "operator": "In"}]},
            "operator In needs at least one value",
        ),
        (
            {"matchExpressions": [{"key": "pool", "operator": "Exists", "values": ["a"]}]},
            "operator Exists takes no values",
        ),
        (
            {"matchExpressions": [{"key": "pool", "operator": "Gt", "values": ["a"]}]},
            "exactly one integer value",
        ),
        (
            {"matchExpressions": [{"key": "pool", "operator": "Near", "values": ["a"]}]},
            "Input should be",
        ),
        ({"matchExpressions": [{"key": "-pool", "operator": "Exists"}]}, "not a valid label key"),
        (
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a b"]}]},
            "not a valid label value",
        ),
    ],
)
def test_forward_compatible_nodes_validated_at_load(term: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match="forwardCompatibleNodes") as caught:
        load_config({"forwardCompatibleNodes": term})
    assert message in str(caught.value)


def test_inventory_counts_forward_compatible_branches() -> None:
    inventory = nodes(
        gfd("12", "2") | A100 | {DRIVER: "535"},
        gfd("13", "0") | A100 | {DRIVER: "580"},
        gfd("12", "2") | {DRIVER: "535"},
    )
    assert inventory.to_json(FC)["forwardCompatibleDriverBranches"] == {"535": 1, "580": 1}


def test_review_command_shows_the_floor(tmp_path: Path) -> None:
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(gpu_pod(CUDA13)), encoding="utf-8")
    nodes_doc = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {"kind": "Node", "metadata": {"name": name, "labels": gfd("13", "0") | labels}}
            for name, labels in (("v100", V100), ("l4", L4))
        ],
    }
    (tmp_path / "nodes.yaml").write_text(yaml.safe_dump(nodes_doc), encoding="utf-8")
    out = io.StringIO()
    code = main(
        ["review", "-f", str(tmp_path / "pod.yaml"), "--policies", str(CONFIGMAPS),
         "--nodes", str(tmp_path / "nodes.yaml")],
        out=out,
    )  # fmt: skip
    assert code == 0
    assert (
        "  - required compute capability ≥ 7.5 (architecture floor of CUDA 13.0)\n"
        in out.getvalue()
    )


def test_the_registry_reader_keeps_every_requirement_variable_and_the_switch_a_few() -> None:
    """All NVIDIA_REQUIRE_* are ANDed and NVIDIA_DISABLE_REQUIRE turns them off (requires.py):
    the image config reader keeps them, a bounded number, cut like NVIDIA_REQUIRE_CUDA."""
    env = [
        "CUDA_VERSION=12.8.1",
        f"NVIDIA_REQUIRE_CUDA={REQUIRE_12_8}",
        "NVIDIA_REQUIRE_ARCH=arch=x86_64",
        "NVIDIA_DISABLE_REQUIRE=true",
        *(f"NVIDIA_REQUIRE_X{i}=cuda>=1.0" for i in range(20)),
    ]
    body = json.dumps({"config": {"Env": env}}).encode()
    found = read_config(body, "sha256:" + hashlib.sha256(body).hexdigest())
    assert found["NVIDIA_REQUIRE_ARCH"] == "arch=x86_64"
    assert found["NVIDIA_DISABLE_REQUIRE"] == "true"
    assert found["NVIDIA_REQUIRE_CUDA"] == REQUIRE_12_8
    # NVIDIA_REQUIRE_CUDA and at most MAX_REQUIRE_VARIABLES (8) others.
    assert len([n for n in found if n.startswith("NVIDIA_REQUIRE_")]) == 9


# --- 4. what the metrics count: Decision.placements, gpu_containers, cuda_unknown --------------


def test_placements_name_the_rule_of_each_injected_part() -> None:
    assert run(gpu_pod("nvidia/cuda:12.4.1")).placements == ("backward",)
    assert run(gpu_pod("nvidia/cuda:12.4.1"), config=MV).placements == ("minorVersion",)
    # Under minorVersion an x.0 image needs the same nodes as under backward: said as backward.
    assert run(gpu_pod("nvidia/cuda:12.0.0"), config=MV).placements == ("backward",)
    assert run(pod(fc_container()), config=FC).placements == ("backward", "forward")
    inventory = nodes(gfd("13", "0") | V100, gfd("13", "0") | L4)
    floor = run(gpu_pod(CUDA13), inventory=inventory)
    assert floor.placements == ("backward", "architecture-floor")
    annotated = gpu_pod(CUDA13, annotations={"features.alauda.io/min-compute-capability": "8.0"})
    assert run(annotated, inventory=inventory).placements == ("backward", "compute")


def test_nothing_placed_nothing_counted_but_the_containers() -> None:
    opted_out = gpu_pod(annotations={"features.alauda.io/cuda-affinity": "false"})
    decision = run(opted_out)
    assert (decision.placements, decision.gpu_containers, decision.cuda_unknown) == ((), 1, ())
    # No GPU: nothing evaluated.
    plain = run(pod(container("c", "nvidia/cuda:12.4.1")))
    assert (plain.placements, plain.gpu_containers, plain.cuda_unknown) == ((), 0, ())


def test_cuda_unknown_lists_each_container_whose_version_nothing_told() -> None:
    obj = pod(
        container("a", "registry.example/team/app:1", limits={"nvidia.com/gpu": "1"}),
        container("b", "registry.example/team/app:1", limits={"nvidia.com/gpu": "1"}),
        container("c", "nvidia/cuda:12.4.1", limits={"nvidia.com/gpu": "1"}),
        container("d", "registry.example/team/other:2"),  # no GPU: not counted
    )
    decision = run(obj)
    assert decision.gpu_containers == 3
    assert decision.cuda_unknown == (
        "registry.example/team/app:1",
        "registry.example/team/app:1",
    )
    assert decision.placements == ("backward",)
