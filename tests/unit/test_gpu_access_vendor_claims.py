"""AMD's and Intel's DRA device classes (SPEC §12 and §13, issue 36 leftover): a container that
gets devices through a claim on `gpu.amd.com` has AMD devices for the access checks, as one
requesting `amd.com/gpu` — setting its AMD variable is the device container's finding, and its
AMD_VISIBLE_DEVICES gets the void as a device container's (issue 46: the DRA driver hands the
GPUs as device nodes and sets no variable, so the image's `all` would stand) — and nothing else
a claim names (another class, a look-alike name, the claim's other request) counts. Tried as an
attacker would."""

from __future__ import annotations

from typing import Any

from tests.helpers import apply, container, get, pod, standard_policies
from tests.unit.test_vendor_gate import AMD, ROCM_64, required
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.outcome.decision import Decision
from webhook.core.workloads.claims import ClaimIndex

ENFORCE = load_config({"gpuAccess": {"mode": "enforce"}})


def claim_template(name: str, **requests: str) -> dict[str, Any]:
    """A ResourceClaimTemplate in namespace ml; `requests`: request name -> device class."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": r, "exactly": {"deviceClassName": c}} for r, c in requests.items()
                    ]
                }
            }
        },
    }


CLAIMS = ClaimIndex.from_objects(
    [
        claim_template("amd", gpu="gpu.amd.com"),
        claim_template("intel", gpu="gpu.intel.com"),
        claim_template("look-alike", gpu="gpu.amd.com.example.org"),
        claim_template("prefixed", gpu="evil-gpu.amd.com"),
        claim_template("gpu-and-nic", gpu="gpu.amd.com", nic="rdma.example.com"),
    ]
)


def claimed(
    name: str = "app",
    *,
    request: str | None = None,
    env: list[dict[str, Any]] | None = None,
    image: str = "registry.corp/team/app:1",
) -> dict[str, Any]:
    c = container(name, image, env=env or [])
    c["resources"] = {"claims": [{"name": "dev", **({"request": request} if request else {})}]}
    return c


def claim_pod(template_name: str, *containers: dict[str, Any]) -> dict[str, Any]:
    return pod(
        *containers,
        resourceClaims=[{"name": "dev", "resourceClaimTemplateName": template_name}],
    )


def check(obj: dict[str, Any], config: WebhookConfig = ENFORCE, **kw: Any) -> Decision:
    return evaluate(obj, standard_policies(), config, claims=CLAIMS, **kw)


def envs(decision: Decision, index: int = 0) -> Any:
    return get(apply(decision), "spec", "containers", index, "env")


def amd_all() -> list[dict[str, Any]]:
    return [{"name": "AMD_VISIBLE_DEVICES", "value": "all"}]


DEVICE_NOTE = (
    'set AMD_VISIBLE_DEVICES=void in container "app": its AMD GPUs come as device nodes, not '
    "from its image"
)


def test_an_amd_claim_makes_an_amd_device_container_whose_image_value_is_voided() -> None:
    """ROCm/k8s-gpu-dra-driver cmd/gpu-kubeletplugin/state.go (at 2622427) gives the claimed
    GPU as CDI device nodes (/dev/kfd, card, renderD) and no AMD_VISIBLE_DEVICES: the void is
    written as a device container's, after the other vendors' voids, with its own note."""
    decision = check(claim_pod("amd", claimed()))
    assert decision.allowed
    assert envs(decision) == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
        {"name": "ASCEND_VISIBLE_DEVICES", "value": ""},
        {"name": "AMD_VISIBLE_DEVICES", "value": "void"},
    ]
    assert DEVICE_NOTE in decision.notes


def test_an_amd_claim_container_choosing_its_own_gpus_is_the_device_containers_finding() -> None:
    decision = check(claim_pod("amd", claimed(env=amd_all())))
    assert not decision.allowed
    assert (
        'container "app" sets AMD_VISIBLE_DEVICES=all: remove it: the device plugin sets the '
        "AMD GPUs a container gets" in decision.denial_message()
    )


def test_an_amd_claim_gives_no_nvidia_gpu() -> None:
    visible = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    decision = check(claim_pod("amd", claimed(env=visible)))
    assert not decision.allowed
    assert (
        'container "app" sets NVIDIA_VISIBLE_DEVICES=all but requests no GPU'
        in decision.denial_message()
    )


def test_a_sidecar_not_naming_the_claim_has_no_amd_gpu() -> None:
    side = container("side", "busybox", env=amd_all())
    decision = check(claim_pod("amd", claimed(), side))
    assert not decision.allowed
    assert (
        'container "side" sets AMD_VISIBLE_DEVICES=all but requests no AMD GPU'
        in decision.denial_message()
    )
    # and it gets AMD's void as a container with no AMD GPU, the claimed one as a device
    # container.
    plain = check(claim_pod("amd", claimed(), container("side", "busybox")))
    assert {"name": "AMD_VISIBLE_DEVICES", "value": "void"} in envs(plain, 1)
    assert plain.notes == (
        DEVICE_NOTE,
        'set NVIDIA and Ascend device variables to void in container "app": it requests no such '
        "device",
        'set NVIDIA, AMD and Ascend device variables to void in container "side": it requests '
        "no such device",
        # A Service's DOCKER_RESOURCE_* variables come after the void (issue 46).
        "set enableServiceLinks to false: a Service's DOCKER_RESOURCE_* variables could choose "
        "its AMD GPUs",
        # Every vendor's accelerator container gets /dev/shm (SPEC §14).
        'mounted a 16Gi memory-backed /dev/shm in container "app" (shm fix)',
    )


def test_look_alike_classes_and_the_claims_other_request_count_nothing() -> None:
    for name in ("look-alike", "prefixed"):
        decision = check(claim_pod(name, claimed(env=amd_all())))
        assert "but requests no AMD GPU" in decision.denial_message(), name
    nic_only = check(claim_pod("gpu-and-nic", claimed(request="nic", env=amd_all())))
    assert "but requests no AMD GPU" in nic_only.denial_message()
    missing = check(claim_pod("gpu-and-nic", claimed(request="no-such", env=amd_all())))
    assert "but requests no AMD GPU" in missing.denial_message()
    gpu = check(claim_pod("gpu-and-nic", claimed(request="gpu")))
    assert gpu.allowed
    assert DEVICE_NOTE in gpu.notes


def test_a_claim_the_cache_has_not_seen_makes_no_amd_device_container() -> None:
    decision = check(claim_pod("not-cached-yet", claimed(env=amd_all())))
    assert "but requests no AMD GPU" in decision.denial_message()


def test_an_intel_claim_makes_an_intel_device_container() -> None:
    def mounting_dri(template_name: str) -> dict[str, Any]:
        c = claimed()
        c["volumeMounts"] = [{"name": "dri", "mountPath": "/dev/dri"}]
        obj = claim_pod(template_name, c)
        obj["spec"]["volumes"] = [{"name": "dri", "hostPath": {"path": "/dev/dri"}}]
        return obj

    # The device container's own finding (its devices come from the DRA driver), not the
    # "requests no GPU" of a container without one.
    device = 'container "app" mounts host path /dev/dri: remove it: the device plugin gives'
    assert device in check(mounting_dri("intel")).denial_message()
    assert "but requests no" in check(mounting_dri("not-cached-yet")).denial_message()


def test_an_amd_claim_container_gets_the_rocm_gate() -> None:
    decision = check(claim_pod("amd", claimed(image=ROCM_64)), WebhookConfig(), inventory=AMD)
    # The claim's container is an accelerator container: /dev/shm too (SPEC §14).
    assert decision.notes == (
        f"required nodes whose amdgpu driver runs ROCm 6.4 (image {ROCM_64})",
        'mounted a 16Gi memory-backed /dev/shm in container "app" (shm fix)',
    )
    assert required(apply(decision)) is not None
