"""Inventory-aware placement (SPEC §4): label schemes in use, no/some/none compatible nodes,
padded labels, compute capability, DaemonSet pods pinned to one node."""

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

# Tests of placement with a node inventory: evaluated without the /dev/shm fix (on by default),
# whose volume and warning would be in every pod here (tests/helpers.py `without_shm`; the rule's
# own tests: test_runtime_fixes.py).
from tests.helpers import (
    assert_idempotent_without_shm as assert_idempotent,
)
from tests.helpers import (
    load_without_shm as load_config,
)
from tests.helpers import (
    run_without_shm as run,
)
from webhook.core.base.versions import CudaVersion
from webhook.core.config.model import WebhookConfig
from webhook.core.placement.inventory import NodeInventory

MAJOR, MINOR = "cuda-major-version", "cuda-minor-version"
GMAJ, GMIN = "nvidia.com/cuda.runtime-version.major", "nvidia.com/cuda.runtime-version.minor"
OMAJ, OMIN = "nvidia.com/cuda.runtime.major", "nvidia.com/cuda.runtime.minor"
CMAJ, CMIN = "nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor"
DENY = load_config({"noCompatibleNode": "deny"})
NOT_ENFORCED = "CUDA placement is not enforced: no node advertises its CUDA version"


def gpu_pod(image: str = "nvidia/cuda:12.4.1", **kw: Any) -> dict[str, Any]:
    args = kw.pop("args", None)
    c = container(image=image, limits={GPU: "1"}, requests={GPU: "1"})
    if args is not None:
        c["args"] = args
    return pod(c, **kw)


def nodes(*labels: dict[str, str], unlabelled: int = 0) -> NodeInventory:
    named = {f"node-{i}": dict(node) for i, node in enumerate(labels)}
    named.update({f"plain-{i}": {} for i in range(unlabelled)})
    return NodeInventory.build(named)


def manual(major: str, minor: str) -> dict[str, str]:
    return {MAJOR: major, MINOR: minor}


def gfd(major: str, minor: str) -> dict[str, str]:
    return {GMAJ: major, GMIN: minor}


def cuda_terms(
    major: str, minor: str, low: tuple[int, int], top: int | None = None
) -> list[list[Any]]:
    """Expressions for CUDA ≥ low (with a driver major ≤ top when set) on one scheme."""
    upper = [] if top is None else [expr(major, "Lt", top + 1)]
    return [
        [
            expr(major, "Gt", low[0] - 1),
            expr(major, "Lt", low[0] + 1),
            expr(minor, "Gt", low[1] - 1),
        ],
        [expr(major, "Gt", low[0]), *upper],
    ]


def as_terms(groups: list[list[Any]]) -> list[dict[str, Any]]:
    return [{"matchExpressions": g} for g in groups]


# --- the inventory itself -----------------------------------------------------------------------


def test_inventory_precomputes_counts_per_version_and_scheme() -> None:
    inventory = nodes(
        manual("12", "4"),
        manual("012", "04"),  # padded: the same version, as Gt/Lt read it
        gfd("12", "6") | {CMAJ: "8", CMIN: "0"},
        {OMAJ: "11", OMIN: "8", CMAJ: "7", CMIN: "5"},
        {MAJOR: "12"},  # half-labelled: not counted
        {MAJOR: "twelve", MINOR: "4"},  # Gt/Lt would not match it either
        unlabelled=3,
    )
    assert inventory.to_json() == {
        "nodes": 9,
        "labelledNodes": 4,
        "schemes": ["manual", "gfd", "gfd-legacy"],
        "cuda": {"12.6": 1, "12.4": 2, "11.8": 1},
        "computeCapability": {"8.0": 1, "7.5": 1},
    }
    facts = inventory.facts(WebhookConfig())
    assert facts.by_scheme[0] == {CudaVersion(12, 4): 2}
    assert facts.nodes["node-1"].cuda == ((0, CudaVersion(12, 4)),)
    assert "plain-0" not in facts.nodes  # nothing kept for nodes that advertise nothing


def test_inventory_facts_follow_the_config_schemes() -> None:
    config = load_config(
        {"cudaLabelSchemes": [{"name": "corp", "major": "c/maj", "minor": "c/min"}]}
    )
    inventory = NodeInventory.build({"a": {"c/maj": "12", "c/min": "2"}}, config=config)
    assert inventory.to_json(config)["cuda"] == {"12.2": 1}
    assert inventory.to_json()["labelledNodes"] == 0  # not a default scheme


def test_one_inventory_reviewed_under_configs_with_other_schemes_in_turn() -> None:
    # The inventory answers the config it saw last by identity (no hashing per review): a
    # config reload with other schemes must get its own facts, and then the first ones again.
    corp = load_config({"cudaLabelSchemes": [{"name": "corp", "major": "c/maj", "minor": "c/min"}]})
    inventory = nodes(gfd("12", "4"), {"c/maj": "12", "c/min": "6"})
    default_terms = as_terms(cuda_terms(GMAJ, GMIN, (12, 4)))
    corp_terms = as_terms(cuda_terms("c/maj", "c/min", (12, 4)))
    for config, terms in [
        (None, default_terms),
        (corp, corp_terms),
        (None, default_terms),
        (WebhookConfig(), default_terms),  # an equal config, another object
        (corp, corp_terms),
    ]:
        decision = run(gpu_pod(), config=config, inventory=inventory)
        assert node_terms(apply(decision)) == terms
    assert inventory.to_json(corp)["cuda"] == {"12.6": 1}
    assert inventory.to_json()["cuda"] == {"12.4": 1}


# --- CUDA with an inventory ----------------------------------------------------------------------


def test_no_labelled_node_injects_nothing_and_says_placement_is_not_enforced() -> None:
    decision = run(gpu_pod(), inventory=nodes(unlabelled=5))
    assert decision.patch == []
    assert decision.warnings == (NOT_ENFORCED,)


def test_some_compatible_nodes_inject_silently_on_the_scheme_in_use() -> None:
    inventory = nodes(gfd("12", "4"), gfd("11", "8"))
    decision = run(gpu_pod(), inventory=inventory)
    assert decision.warnings == ()
    assert decision.allowed
    # only the GFD scheme is carried: no terms on the manual labels nobody has
    assert node_terms(apply(decision)) == as_terms(cuda_terms(GMAJ, GMIN, (12, 4)))
    assert preferred_terms(apply(decision)) == preferred(13, GMAJ)
    assert_idempotent(decision, inventory=inventory)


def test_mixed_schemes_get_the_union_of_their_terms() -> None:
    inventory = nodes(manual("12", "4"), gfd("12", "8"), {OMAJ: "13", OMIN: "0"})
    decision = run(gpu_pod(), inventory=inventory)
    assert node_terms(apply(decision)) == as_terms(
        cuda_terms(MAJOR, MINOR, (12, 4))
        + cuda_terms(GMAJ, GMIN, (12, 4))
        + cuda_terms(OMAJ, OMIN, (12, 4))
    )
    # the skew preference on each scheme carried
    assert preferred_terms(apply(decision)) == preferred(13, MAJOR, GMAJ, OMAJ)
    assert decision.warnings == ()
    assert_idempotent(decision, inventory=inventory)


def test_padded_label_values_count_as_compatible() -> None:
    inventory = nodes(manual("012", "06"))
    decision = run(gpu_pod("nvidia/cuda:12.6.0"), config=DENY, inventory=inventory)
    assert decision.allowed
    assert decision.warnings == ()


def test_no_compatible_node_warns_by_default() -> None:
    inventory = nodes(*[manual("12", "4")] * 12, manual("11", "8"))
    decision = run(gpu_pod("nvidia/cuda:12.6.1"), inventory=inventory)
    assert decision.allowed
    assert decision.warnings == (
        "no node supports CUDA 12.6; highest available is 12.4 (12 nodes)",
    )
    # an autoscaler may still add such a node: the affinity is injected anyway
    assert node_terms(apply(decision)) == as_terms(cuda_terms(MAJOR, MINOR, (12, 6)))


def test_no_compatible_node_denies_by_config() -> None:
    inventory = nodes(*[manual("12", "4")] * 12, manual("11", "8"))
    decision = run(gpu_pod("nvidia/cuda:12.6.1"), config=DENY, inventory=inventory)
    assert decision.denial_message() == (
        "Pod ml/train: no node supports CUDA 12.6; highest available is 12.4 (12 nodes)."
    )
    assert decision.patch == []
    only = run(
        gpu_pod("nvidia/cuda:12.6.1"), config=DENY, inventory=inventory, violations_only=True
    )
    assert only.violations == decision.violations


def test_no_compatible_vgpu_node() -> None:
    inventory = nodes(manual("13", "4"), manual("11", "8"))
    decision = run(
        pod(container(image="nvidia/cuda:12.2.0", limits={VCORE: "50", VMEM: "4"})),
        config=DENY,
        inventory=inventory,
    )
    assert [v.message for v in decision.violations] == [
        "Pod ml/train: no node supports CUDA 12.2 on vGPU; highest available is 13.4 (1 node)."
    ]


def test_too_new_drivers_only_are_not_compatible_when_the_skew_is_required() -> None:
    inventory = nodes(manual("14", "0"))  # 11.8 with skew 1 needs a driver below 13
    config = load_config({"majorSkew": "require"})
    decision = run(gpu_pod("nvidia/cuda:11.8.0"), config=config, inventory=inventory)
    assert decision.warnings == ("no node supports CUDA 11.8; highest available is 14.0 (1 node)",)


def test_inventory_is_ignored_for_non_gpu_pods() -> None:
    decision = run(pod(container(limits={"cpu": "1"})), inventory=nodes())
    assert (decision.patch, decision.warnings) == ([], ())


# --- compute capability --------------------------------------------------------------------------

VLLM = "vllm/vllm-openai:v0.6.3"
BF16 = ["--model", "meta-llama/Llama-3.1-8B", "--dtype", "bfloat16"]


@pytest.mark.parametrize(
    "args",
    [
        BF16,
        ["--dtype=bfloat16"],
        ["--dtype", "bf16"],
        ["python3 -m sglang.launch_server --model-path m --dtype bfloat16"],
    ],
)
def test_bfloat16_servers_need_compute_capability_8(args: list[str]) -> None:
    decision = run(
        gpu_pod(VLLM, args=args, annotations={"features.alauda.io/cuda-version": "12.4"})
    )
    cc = [expr(CMAJ, "Gt", 7)]
    assert node_terms(apply(decision)) == as_terms(
        [[*t, *cc] for t in cuda_terms(MAJOR, MINOR, (12, 4))]
    )
    assert decision.notes == (
        "required GPU nodes with CUDA ≥ 12.4 "
        "(annotation features.alauda.io/cuda-version), preferably < 14.0",
        'required compute capability ≥ 8.0 (rule bfloat16-servers for container "c")',
    )
    assert_idempotent(decision)


def test_opt_out_skips_compute_capability_too() -> None:
    obj = gpu_pod(VLLM, args=BF16, annotations={"features.alauda.io/cuda-affinity": "Off"})
    decision = run(obj)
    assert apply(decision) == obj
    assert (decision.patch, decision.notes, decision.warnings) == ([], (), ())


def test_opt_out_also_skips_the_intersection_check() -> None:
    containers = (
        container("old", "nvidia/cuda:11.8.0", limits={VCORE: "50", VMEM: "4"}),
        container("new", "nvidia/cuda:12.2.0", limits={GPU: "1"}, requests={GPU: "1"}),
    )
    # Without the annotation no driver suits both (vGPU 11.x and CUDA ≥ 12.2): denied.
    assert not run(pod(*containers)).allowed
    obj = pod(*containers, annotations={"features.alauda.io/cuda-affinity": "false"})
    decision = run(obj)
    assert decision.allowed
    assert apply(decision) == obj
    assert (decision.violations, decision.notes, decision.warnings) == ((), (), ())


def test_float16_server_needs_no_compute_capability() -> None:
    decision = run(gpu_pod(VLLM, args=["--dtype", "float16"]))
    assert decision.notes == ()


def test_tgi_dtype_env_rule() -> None:
    c = container(
        # a tag the shipped image knowledge does not know (2.4.0 is known: CUDA 12.4)
        image="ghcr.io/huggingface/text-generation-inference:latest",
        limits={GPU: "1"},
        requests={GPU: "1"},
        env=[{"name": "DTYPE", "value": "bfloat16"}],
    )
    decision = run(pod(c))
    assert node_terms(apply(decision)) == as_terms([[expr(CMAJ, "Gt", 7)]])
    # the CUDA version is unknown (warned), the compute capability still placed
    assert decision.warnings == (
        "CUDA of ghcr.io/huggingface/text-generation-inference:latest unknown: set "
        "features.alauda.io/cuda-version",
    )


def test_compute_capability_annotation_with_minor() -> None:
    decision = run(
        gpu_pod("busybox", annotations={"features.alauda.io/min-compute-capability": "7.5"})
    )
    assert node_terms(apply(decision)) == as_terms(
        [
            [expr(CMAJ, "Gt", 6), expr(CMAJ, "Lt", 8), expr(CMIN, "Gt", 4)],
            [expr(CMAJ, "Gt", 7)],
        ]
    )
    assert decision.notes == (
        "required compute capability ≥ 7.5 (annotation features.alauda.io/min-compute-capability)",
    )


def test_no_node_with_the_compute_capability() -> None:
    inventory = nodes(
        manual("12", "4") | {CMAJ: "7", CMIN: "5"}, manual("12", "4") | {CMAJ: "7", CMIN: "0"}
    )
    obj = gpu_pod("nvidia/cuda:12.4.1", args=BF16)
    warned = run(obj, inventory=inventory)
    assert warned.warnings == ("no node has compute capability ≥ 8.0; highest is 7.5 (1 node)",)
    denied = run(obj, config=DENY, inventory=inventory)
    assert denied.denial_message() == (
        "Pod ml/train: no node has compute capability ≥ 8.0; highest is 7.5 (1 node)."
    )


def test_cuda_and_compute_capability_met_on_different_nodes_only() -> None:
    inventory = nodes(
        manual("12", "4") | {CMAJ: "7", CMIN: "0"},  # new driver, old GPU
        manual("11", "8") | {CMAJ: "8", CMIN: "0"},  # old driver, new GPU
    )
    obj = gpu_pod("nvidia/cuda:12.4.1", args=BF16)
    assert run(obj, inventory=inventory).warnings == (
        "no node supports CUDA ≥ 12.4 with compute capability ≥ 8.0",
    )
    assert run(obj, config=DENY, inventory=inventory).denial_message() == (
        "Pod ml/train: no node supports CUDA ≥ 12.4 with compute capability ≥ 8.0."
    )
    both = nodes(
        manual("12", "4") | {CMAJ: "7", CMIN: "0"}, manual("13", "0") | {CMAJ: "9", CMIN: "0"}
    )
    assert run(obj, config=DENY, inventory=both).warnings == ()


def test_no_node_advertises_compute_capability() -> None:
    decision = run(gpu_pod("nvidia/cuda:12.4.1", args=BF16), inventory=nodes(manual("12", "4")))
    assert decision.warnings == (
        "compute capability placement is not enforced: no node advertises it",
    )
    assert node_terms(apply(decision)) == as_terms(cuda_terms(MAJOR, MINOR, (12, 4)))


# --- DaemonSet pods -----------------------------------------------------------------------------


def daemon_pod(node: str, image: str = "nvidia/cuda:12.4.1", **kw: Any) -> dict[str, Any]:
    """A pod as the DaemonSet controller creates it: owned by the DaemonSet, pinned to `node`."""
    obj = gpu_pod(
        image,
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                }
            }
        },
        **kw,
    )
    obj["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": "dcgm",
            "uid": "u",
            "controller": True,
        }
    ]
    return obj


def test_daemonset_pod_gets_no_affinity_without_inventory() -> None:
    decision = run(daemon_pod("node-0"))
    assert (decision.patch, decision.notes, decision.warnings) == ([], (), ())


def test_daemonset_pod_on_a_compatible_node_is_silent() -> None:
    decision = run(daemon_pod("node-0"), inventory=nodes(manual("12", "6")))
    assert (decision.patch, decision.warnings, decision.violations) == ([], (), ())


def test_daemonset_pod_on_an_incompatible_node_warns_or_denies() -> None:
    inventory = nodes(manual("12", "2"), manual("12", "6"))
    warned = run(daemon_pod("node-0"), inventory=inventory)
    assert warned.patch == []
    assert warned.warnings == (
        "node node-0 supports CUDA 12.2; this DaemonSet pod needs CUDA ≥ 12.4",
    )
    denied = run(daemon_pod("node-0"), config=DENY, inventory=inventory)
    assert denied.denial_message() == (
        "Pod ml/train: node node-0 supports CUDA 12.2; this DaemonSet pod needs CUDA ≥ 12.4."
    )


def test_daemonset_pod_on_a_node_with_a_too_old_gpu() -> None:
    inventory = nodes(manual("12", "6") | {CMAJ: "7", CMIN: "0"})
    decision = run(daemon_pod("node-0", args=BF16), inventory=inventory)
    assert decision.warnings == (
        "node node-0 has compute capability 7.0; this DaemonSet pod needs ≥ 8.0",
    )


def test_daemonset_pod_pinned_by_node_name_and_unknown_nodes() -> None:
    obj = gpu_pod()
    obj["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "d", "controller": True}]
    obj["spec"]["nodeName"] = "node-0"
    assert run(obj, inventory=nodes(manual("11", "8"))).warnings == (
        "node node-0 supports CUDA 11.8; this DaemonSet pod needs CUDA ≥ 12.4",
    )
    # a node the inventory does not know (or that advertises nothing): nothing to say
    assert run(daemon_pod("elsewhere"), inventory=nodes(manual("11", "8"))).warnings == ()


def test_a_pod_merely_owned_by_a_daemonset_without_controller_flag_is_placed() -> None:
    obj = gpu_pod()
    obj["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "d"}]
    assert run(obj).notes == (
        "required GPU nodes with CUDA ≥ 12.4 (image nvidia/cuda:12.4.1), preferably < 14.0",
    )


# A pod bound with spec.nodeName, not a DaemonSet's (issue 28 item 5 e; SPEC §4 "DaemonSet
# pods"): the kubelet enforces required node affinity on it and fails it with NodeAffinity, so
# it gets none; with an inventory the named node is checked.


def bound_pod(node: str, **kw: Any) -> dict[str, Any]:
    obj = gpu_pod(**kw)
    obj["spec"]["nodeName"] = node
    return obj


def test_a_pod_bound_by_node_name_gets_no_affinity() -> None:
    decision = run(bound_pod("node-0"))
    assert (decision.patch, decision.notes, decision.warnings) == ([], (), ())
    assert run(bound_pod("node-0"), inventory=nodes(manual("12", "6"))).patch == []


def test_a_pod_bound_to_an_incompatible_node_warns_or_denies() -> None:
    inventory = nodes(manual("12", "2"), manual("12", "6"))
    warned = run(bound_pod("node-0"), inventory=inventory)
    assert warned.patch == []
    assert warned.warnings == ("node node-0 supports CUDA 12.2; this pod needs CUDA ≥ 12.4",)
    denied = run(bound_pod("node-0"), config=DENY, inventory=inventory)
    assert denied.denial_message() == (
        "Pod ml/train: node node-0 supports CUDA 12.2; this pod needs CUDA ≥ 12.4."
    )
    compute = run(
        bound_pod("node-0", args=BF16), inventory=nodes(manual("12", "6") | {CMAJ: "7", CMIN: "0"})
    )
    assert compute.warnings == ("node node-0 has compute capability 7.0; this pod needs ≥ 8.0",)
