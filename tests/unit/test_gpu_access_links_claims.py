"""Issue 46 item 2 (rest) and the Service-link route, tried as an attacker would (SPEC §12):

- a Service named `docker-resource-gpu` makes DOCKER_RESOURCE_GPU_SERVICE_PORT, which AMD's
  runtime reads as a device selection after the written void: under `enforce` a pod with an AMD
  device container gets `enableServiceLinks: false`;
- a DRA claim whose `firstAvailable` request may fall back to a class of no vendor gives no
  device: its container gets the voids of a container without one;
- a gated pod whose claim is replaced while it waits is judged again when its last scheduling
  gate goes (env cannot change then: the gate removal is denied).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.helpers import apply, container, get, pod, standard_policies
from webhook.core.access.links import SERVICE_LINK_FAMILIES, service_link_name
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.outcome.decision import Decision
from webhook.core.workloads.claims import ClaimIndex

ENFORCE = load_config({"gpuAccess": {"mode": "enforce"}})
WARN = load_config({"gpuAccess": {"mode": "warn"}})
LINKS_NOTE = (
    "set enableServiceLinks to false: a Service's DOCKER_RESOURCE_* variables could choose its "
    "AMD GPUs"
)
LINKS_FINDING = (
    "enableServiceLinks lets a Service's DOCKER_RESOURCE_* variables choose AMD GPUs: set it to "
    "false"
)
VOIDS = [
    {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
    {"name": "AMD_VISIBLE_DEVICES", "value": "void"},
    {"name": "ASCEND_VISIBLE_DEVICES", "value": ""},
]


def check(obj: dict[str, Any], config: WebhookConfig = ENFORCE, **kw: Any) -> Decision:
    return evaluate(obj, standard_policies(), config, **kw)


def with_limits(c: dict[str, Any], resource: str) -> dict[str, Any]:
    c["resources"] = {"limits": {resource: 1}}
    return c


def amd_container(name: str = "app") -> dict[str, Any]:
    c = container(name, "rocm/pytorch:latest")
    c["resources"] = {"limits": {"amd.com/gpu": 1}}
    return c


# --- Service links --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "made"),
    [
        # kubernetes pkg/kubelet/envvars/envvars_test.go's names for Services "foo-bar", "abc-123"
        ("FOO_BAR_SERVICE_HOST", True),
        ("FOO_BAR_SERVICE_PORT", True),
        ("FOO_BAR_SERVICE_PORT_HTTP", True),
        ("FOO_BAR_PORT", True),
        ("FOO_BAR_PORT_8080_TCP", True),
        ("FOO_BAR_PORT_8080_TCP_PROTO", True),
        ("FOO_BAR_PORT_8080_TCP_PORT", True),
        ("FOO_BAR_PORT_8080_TCP_ADDR", True),
        ("ABC_123_PORT_8081_SCTP_ADDR", True),
        ("DOCKER_RESOURCE_GPU_SERVICE_PORT", True),
        ("NVIDIA_VISIBLE_DEVICES", False),
        ("AMD_VISIBLE_DEVICES", False),
        ("CUDA_DEVICE_MEMORY_LIMIT_0", False),
        ("FOO_PORT_80_HTTP", False),
    ],
)
def test_the_names_a_service_link_makes(name: str, made: bool) -> None:
    assert service_link_name(name) is made


def test_only_amds_runtime_reads_a_name_a_service_link_makes() -> None:
    """AMD's runtime reads any DOCKER_RESOURCE_* name; NVIDIA's, Ascend's and the other
    vendors' read fixed names, and HAMi-core's limits are ..._LIMIT and ..._LIMIT_<index>."""
    assert frozenset({"amd"}) == SERVICE_LINK_FAMILIES


@pytest.mark.parametrize("links", [None, True])
def test_an_amd_device_pod_gets_service_links_switched_off(links: bool | None) -> None:
    """The API server defaults enableServiceLinks to true before admission: unset and true are
    the same to the webhook, and both are written false."""
    obj = pod(amd_container())
    if links is not None:
        obj["spec"]["enableServiceLinks"] = links
    decision = check(obj)
    assert decision.allowed
    assert get(apply(decision), "spec", "enableServiceLinks") is False
    assert LINKS_NOTE in decision.notes


def test_an_amd_init_container_counts_too() -> None:
    obj = pod(container("app", "busybox"), init=[amd_container("setup")])
    decision = check(obj)
    assert get(apply(decision), "spec", "enableServiceLinks") is False


def test_a_pod_with_links_off_is_left_alone() -> None:
    obj = pod(amd_container(), enableServiceLinks=False)
    decision = check(obj)
    assert LINKS_NOTE not in decision.notes
    assert get(apply(decision), "spec", "enableServiceLinks") is False


@pytest.mark.parametrize(
    "c",
    [
        container("app", "busybox"),
        with_limits(
            container("app", "nvcr.io/nvidia/cuda:12.4.0-base-ubuntu22.04"), "nvidia.com/gpu"
        ),
        with_limits(container("app", "ascendhub/mindspore:2.3"), "huawei.com/Ascend910"),
    ],
    ids=["cpu", "nvidia", "ascend"],
)
def test_pods_without_an_amd_device_keep_their_service_links(c: dict[str, Any]) -> None:
    obj = pod(c)
    decision = check(obj)
    assert LINKS_NOTE not in decision.notes
    assert "enableServiceLinks" not in get(apply(decision), "spec")


def test_the_validating_entry_judges_as_the_mutating_one_denies() -> None:
    """As the voids: /validate answers what /mutate denies (nothing here: it writes false)."""
    obj = pod(amd_container(), enableServiceLinks=True)
    assert check(obj).allowed
    assert check(obj, violations_only=True).allowed


def test_warn_lists_it_in_the_audit_without_a_warning() -> None:
    obj = pod(amd_container(), enableServiceLinks=True)
    decision = check(obj, WARN)
    assert decision.allowed
    assert "enableServiceLinks" not in get(apply(decision), "spec") or (
        get(apply(decision), "spec", "enableServiceLinks") is True
    )
    assert not [w for w in decision.warnings if "enableServiceLinks" in str(w)]
    assert any(LINKS_FINDING in v.message for v in decision.access)


def test_off_does_nothing() -> None:
    obj = pod(amd_container(), enableServiceLinks=True)
    decision = check(obj, load_config({"gpuAccess": {"mode": "off"}}))
    assert get(apply(decision), "spec", "enableServiceLinks") is True


# --- firstAvailable -------------------------------------------------------------------------


def template(name: str, *classes: str, exactly: bool = False) -> dict[str, Any]:
    if exactly:
        request: dict[str, Any] = {"name": "gpu", "exactly": {"deviceClassName": classes[0]}}
    else:
        request = {
            "name": "gpu",
            "firstAvailable": [
                {"name": f"s{i}", "deviceClassName": c} for i, c in enumerate(classes)
            ],
        }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


CLAIMS = ClaimIndex.from_objects(
    [
        template("nvidia-or-cpu", "gpu.nvidia.com", "cpu.example.com"),
        template("nvidia-or-mig", "gpu.nvidia.com", "mig.nvidia.com"),
        template("amd-or-cpu", "gpu.amd.com", "cpu.example.com"),
        template("amd-only", "gpu.amd.com"),
        template("nvidia-or-amd", "gpu.nvidia.com", "gpu.amd.com"),
    ]
)


def claim_pod(name: str, request: str | None = None, env: Any = None) -> dict[str, Any]:
    c = container("app", "nvcr.io/nvidia/pytorch:24.01-py3", env=env or [])
    c["resources"] = {"claims": [{"name": "dev", **({"request": request} if request else {})}]}
    return pod(c, resourceClaims=[{"name": "dev", "resourceClaimTemplateName": name}])


def envs(decision: Decision) -> Any:
    return get(apply(decision), "spec", "containers", 0, "env")


@pytest.mark.parametrize("template_name", ["nvidia-or-cpu", "nvidia-or-amd"])
def test_a_claim_that_may_fall_back_to_another_class_gives_no_device(template_name: str) -> None:
    """The GPU subrequest matches nothing, the fallback is allocated: no GPU, and the image's
    NVIDIA_VISIBLE_DEVICES=all would stand without the void."""
    decision = check(claim_pod(template_name), claims=CLAIMS)
    assert decision.allowed
    assert envs(decision) == VOIDS


def test_the_subrequest_named_by_the_container_is_judged_alone() -> None:
    decision = check(claim_pod("nvidia-or-cpu", request="gpu/s0"), claims=CLAIMS)
    assert envs(decision) == VOIDS[1:]


def test_a_claim_whose_every_subrequest_is_nvidias_is_a_gpu() -> None:
    decision = check(claim_pod("nvidia-or-mig"), claims=CLAIMS)
    assert envs(decision) == VOIDS[1:]


def test_an_amd_claim_with_a_fallback_is_no_amd_device() -> None:
    decision = check(claim_pod("amd-or-cpu"), claims=CLAIMS)
    assert envs(decision) == VOIDS
    assert LINKS_NOTE not in decision.notes
    sure = check(claim_pod("amd-only"), claims=CLAIMS)
    assert get(apply(sure), "spec", "enableServiceLinks") is False


def test_a_fallback_claim_container_choosing_gpus_is_denied_as_one_without_a_device() -> None:
    visible = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    decision = check(claim_pod("nvidia-or-cpu", env=visible), claims=CLAIMS)
    assert not decision.allowed
    assert (
        'container "app" sets NVIDIA_VISIBLE_DEVICES=all but requests no GPU'
        in decision.denial_message()
    )
    warned = check(claim_pod("nvidia-or-cpu", env=visible), WARN, claims=CLAIMS)
    assert warned.allowed
    assert any("requests no GPU" in str(w) for w in warned.warnings)


# --- claims replaced while a pod is gated ----------------------------------------------------


def claim(device_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "mine", "namespace": "ml"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]}
        },
    }


GPU_CLAIM = ClaimIndex.from_objects([claim("gpu.nvidia.com")])
CPU_CLAIM = ClaimIndex.from_objects([claim("cpu.example.com")])


def gated(*gates: str) -> dict[str, Any]:
    c = container("app", "nvcr.io/nvidia/pytorch:24.01-py3")
    c["resources"] = {"claims": [{"name": "dev"}]}
    return pod(
        c,
        resourceClaims=[{"name": "dev", "resourceClaimName": "mine"}],
        schedulingGates=[{"name": g} for g in gates],
    )


def created(*gates: str) -> dict[str, Any]:
    decision = check(gated(*gates), claims=GPU_CLAIM)
    assert decision.allowed
    obj = apply(decision)
    assert get(obj, "spec", "containers", 0, "env") == VOIDS[1:]  # a GPU container
    return obj


def update(old: dict[str, Any], gates: list[str], claims: ClaimIndex, **kw: Any) -> Decision:
    new = copy.deepcopy(old)
    new["spec"]["schedulingGates"] = [{"name": g} for g in gates]
    if not gates:
        del new["spec"]["schedulingGates"]
    return check(new, claims=claims, operation="UPDATE", old_object=old, **kw)


def test_removing_the_last_gate_after_the_claim_was_replaced_is_denied() -> None:
    decision = update(created("wait"), [], CPU_CLAIM)
    assert not decision.allowed
    assert (
        'container "app" may get no device from its claims now, and its device variables are not '
        "void: recreate the pod" in decision.denial_message()
    )
    validated = update(created("wait"), [], CPU_CLAIM, violations_only=True)
    assert not validated.allowed


def test_removing_the_last_gate_with_the_gpu_claim_still_there_is_allowed() -> None:
    decision = update(created("wait"), [], GPU_CLAIM)
    assert decision.allowed
    assert decision.mutated is None


def test_removing_one_gate_of_two_is_not_yet_judged() -> None:
    decision = update(created("a", "b"), ["b"], CPU_CLAIM)
    assert decision.allowed


def test_a_claim_container_voided_at_create_passes_the_gate_removal() -> None:
    """A pod created with the CPU claim got every void: nothing is left open."""
    first = check(gated("wait"), claims=CPU_CLAIM)
    obj = apply(first)
    assert get(obj, "spec", "containers", 0, "env") == VOIDS
    assert update(obj, [], CPU_CLAIM).allowed


def test_warn_does_not_deny_the_gate_removal() -> None:
    old = created("wait")
    decision = update(old, [], CPU_CLAIM, config=WARN)
    assert decision.allowed


# --- spec.nodeName: the kubelet drops a resource its node does not advertise ----------------

# The kubelet's reason is in the docs (docs/concepts/gpu-access.md); a warning is one line.
BOUND = "requests {key} with spec.nodeName: use a nodeSelector on kubernetes.io/hostname instead"


@pytest.mark.parametrize(
    ("resource", "image"),
    [
        ("nvidia.com/gpu", "nvcr.io/nvidia/cuda:12.4.0-base-ubuntu22.04"),
        ("nvidia.com/mig-1g.5gb", "nvcr.io/nvidia/cuda:12.4.0-base-ubuntu22.04"),
        ("amd.com/gpu", "rocm/pytorch:latest"),
        ("huawei.com/Ascend910", "ascendhub/mindspore:2.3"),
    ],
)
def test_a_device_container_in_a_pod_naming_its_node_is_denied(resource: str, image: str) -> None:
    obj = pod(with_limits(container("app", image), resource), nodeName="gpu-node-1")
    decision = check(obj)
    assert not decision.allowed
    text = f'container "app" {BOUND.format(key=resource)}'
    assert text in decision.denial_message()
    # /validate denies the same; `warn` admits it and lists it in the audit, as the image
    # finding of a container without a device (no warning: a pinned pod's others stay read).
    assert check(obj, violations_only=True).denial_message() == decision.denial_message()
    warned = check(obj, WARN)
    assert warned.allowed
    assert not [w for w in warned.warnings if "spec.nodeName" in str(w)]
    assert any(text in v.message for v in warned.access)


def test_an_init_container_naming_its_node_counts_too() -> None:
    setup = with_limits(
        container("setup", "nvcr.io/nvidia/cuda:12.4.0-base-ubuntu22.04"), "nvidia.com/gpu"
    )
    obj = pod(container("app", "busybox"), init=[setup], nodeName="gpu-node-1")
    decision = check(obj)
    assert (
        f'init container "setup" {BOUND.format(key="nvidia.com/gpu")}' in decision.denial_message()
    )


@pytest.mark.parametrize(
    "obj",
    [
        pod(container("app", "busybox"), nodeName="gpu-node-1"),
        pod(with_limits(container("app", "busybox"), "nvidia.com/gpu")),
        pod(with_limits(container("app", "busybox"), "example.com/fpga"), nodeName="n1"),
    ],
    ids=["cpu-on-named-node", "gpu-scheduled", "other-resource"],
)
def test_no_device_request_on_a_named_node_or_a_scheduled_one_passes(obj: dict[str, Any]) -> None:
    decision = check(obj)
    assert decision.allowed, decision.denial_message()


def test_a_zero_request_on_a_named_node_passes() -> None:
    c = container("app", "busybox")
    c["resources"] = {"limits": {"nvidia.com/gpu": 0}}
    assert check(pod(c, nodeName="gpu-node-1")).allowed


def test_removing_the_last_gate_while_the_claim_is_gone_is_denied() -> None:
    """Deleted and not made again yet (or not in the cache yet): the scheduler would wait for a
    claim made later on any class, so the removal fails closed."""
    decision = update(created("wait"), [], ClaimIndex.from_objects([]))
    assert not decision.allowed
    assert 'container "app" may get no device from its claims now' in decision.denial_message()
