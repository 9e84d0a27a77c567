"""Which containers are GPU containers (SPEC §4 "Which containers", issue 17 item 3): every GPU
resource kind GPU clusters really use, by name or pattern, with the rule each one follows; an
unknown resource that says GPU gets one warning per pod, so a new device plugin is never
silently unchecked."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import (
    PREFERRED_12_4_TERMS,
    REQUIRED_12_4_TERMS,
    apply,
    container,
    crl,
    expr,
    pod,
    policies,
    run,
    workload,
)
from webhook.core.base.errors import ConfigError
from webhook.core.base.names import ResourceNames
from webhook.core.config.model import load_config

MAJOR, MINOR = "cuda-major-version", "cuda-minor-version"
IMAGE = "nvidia/cuda:12.4.1"
PGPU_NOTE = f"required GPU nodes with CUDA ≥ 12.4 (image {IMAGE}), preferably < 14.0"
VGPU_NOTE = f"required vGPU nodes with CUDA ≥ 12.4 (image {IMAGE})"
PGPU_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": REQUIRED_12_4_TERMS
        },
        "preferredDuringSchedulingIgnoredDuringExecution": PREFERRED_12_4_TERMS,
    }
}
VGPU_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        expr(MAJOR, "Gt", 11),
                        expr(MAJOR, "Lt", 13),
                        expr(MINOR, "Gt", 3),
                    ]
                }
            ]
        }
    }
}


# With the shipped config every accelerator pod also gets a memory-backed /dev/shm (issue 39).
SHM_NOTE = 'mounted a 16Gi memory-backed /dev/shm in container "c" (shm fix)'


def with_shm(spec: dict[str, Any]) -> dict[str, Any]:
    """`spec` (one container) as stored after the /dev/shm fix."""
    mount = {"name": "dshm", "mountPath": "/dev/shm"}
    return {
        **spec,
        "containers": [{**spec["containers"][0], "volumeMounts": [mount]}],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}],
    }


def limits_pod(limits: dict[str, str], image: str = IMAGE) -> dict[str, Any]:
    """A pod whose one container asks for `limits` (requests equal: nothing to default)."""
    return pod(container(image=image, limits=limits, requests=dict(limits)))


@pytest.mark.parametrize(
    ("limits", "affinity", "note"),
    [
        pytest.param({"nvidia.com/gpu": "1"}, PGPU_AFFINITY, PGPU_NOTE, id="whole GPU"),
        pytest.param({"nvidia.com/mig-1g.5gb": "1"}, PGPU_AFFINITY, PGPU_NOTE, id="MIG mixed"),
        pytest.param(
            {"nvidia.com/mig-3g.40gb.shared": "1"}, PGPU_AFFINITY, PGPU_NOTE, id="MIG shared"
        ),
        pytest.param(
            {"nvidia.com/gpu.shared": "1"}, PGPU_AFFINITY, PGPU_NOTE, id="time-slicing renamed"
        ),
        pytest.param(
            {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "2048"},
            VGPU_AFFINITY,
            VGPU_NOTE,
            id="Volcano vGPU",
        ),
        pytest.param({"volcano.sh/vgpu-cores": "50"}, VGPU_AFFINITY, VGPU_NOTE, id="Volcano cores"),
        pytest.param(
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"},
            VGPU_AFFINITY,
            VGPU_NOTE,
            id="HAMi memory",
        ),
        pytest.param(
            {"nvidia.com/gpumem-percentage": "50"}, VGPU_AFFINITY, VGPU_NOTE, id="HAMi share"
        ),
        pytest.param({"nvidia.com/gpucores": "30"}, VGPU_AFFINITY, VGPU_NOTE, id="HAMi cores"),
    ],
)
def test_every_gpu_resource_kind_gets_its_rule(
    limits: dict[str, str], affinity: dict[str, Any], note: str
) -> None:
    original = limits_pod(limits)
    decision = run(original, policies())  # no CRL: the config's names alone decide
    assert apply(decision)["spec"] == with_shm({**original["spec"], "affinity": affinity})
    assert decision.notes == (note, SHM_NOTE)
    assert decision.warnings == ()


@pytest.mark.parametrize(
    "limits",
    [
        {"nvidia.com/mig-1g.5gb": "0"},
        {"volcano.sh/vgpu-number": "0", "volcano.sh/vgpu-memory": "0"},
        {"example.com/gpu-foo": "0"},  # asks for nothing: no warning either
        # amd.com/gpu and HAMi's amd.com/gpumem are no CUDA device either, but the ROCm gate
        # checks them (SPEC §13): tests/unit/test_vendor_gate.py.
        {"cpu": "1", "memory": "1Gi"},
    ],
)
def test_resources_that_ask_for_no_cuda_device_are_untouched(limits: dict[str, str]) -> None:
    decision = run(limits_pod(limits), policies())
    assert (decision.patch, decision.notes, decision.warnings) == ([], (), ())
    assert decision.allowed


@pytest.mark.parametrize("limits", [{"gpu.intel.com/i915": "1"}, {"mthreads.com/vgpu": "1"}])
def test_other_vendors_devices_get_no_cuda_rule_but_their_runtime_fixes(
    limits: dict[str, str],
) -> None:
    # Intel's and Moore Threads' devices are accelerators (SPEC §14): /dev/shm, no CUDA rule.
    original = limits_pod(limits)
    decision = run(original, policies())
    assert apply(decision)["spec"] == with_shm(original["spec"])
    assert (decision.notes, decision.warnings) == ((SHM_NOTE,), ())
    assert decision.allowed


def test_an_unknown_resource_that_says_gpu_gets_one_warning() -> None:
    decision = run(limits_pod({"example.com/gpu-foo": "1"}), policies())
    assert decision.warnings == (
        "resource example.com/gpu-foo is not a known GPU resource: add it to gpuResourceNames "
        "to check it",
    )
    assert (decision.patch, decision.notes) == ([], ())


def test_several_unknown_gpu_resources_in_several_containers_make_one_warning() -> None:
    obj = pod(
        container("a", limits={"example.com/gpu-foo": "1", "example.com/GPU-bar": "2"}),
        container("b", limits={"example.com/gpu-foo": "1"}),
        init=[container("i", limits={"vendor.io/vgpu": "1"})],
    )
    decision = run(obj, policies())
    # the full sentence would pass 120 characters: the fixed words are shortened, not the names
    assert decision.warnings == (
        "unknown GPU resources example.com/GPU-bar, example.com/gpu-foo, vendor.io/vgpu: add "
        "them to gpuResourceNames",
    )


def test_an_unknown_gpu_resource_in_each_template_is_named_once_per_pod() -> None:
    obj = workload("Deployment", pod(container(limits={"example.com/gpu-foo": "1"})))
    assert run(obj, policies()).warnings == (
        "resource example.com/gpu-foo is not a known GPU resource: add it to gpuResourceNames "
        "to check it",
    )


def test_a_long_unknown_resource_keeps_its_name_within_120_characters() -> None:
    key = "accelerators.example-corporation.com/gpu-partition-with-a-long-name"
    (warning,) = run(limits_pod({key: "1"}), policies()).warnings
    assert warning == f"unknown GPU resource {key}: add it to gpuResourceNames"
    assert len(warning) <= 120


def test_a_gpu_container_next_to_an_unknown_gpu_resource_is_still_placed() -> None:
    decision = run(limits_pod({"nvidia.com/gpu": "1", "example.com/gpu-nic": "1"}), policies())
    assert decision.notes == (PGPU_NOTE, SHM_NOTE)
    assert decision.warnings == (
        "resource example.com/gpu-nic is not a known GPU resource: add it to gpuResourceNames "
        "to check it",
    )


def test_a_crl_key_that_says_gpu_is_known() -> None:
    ps = policies(crl("example.com/gpu-foo", "foo", requests="fromLimits"))
    assert list(ps.by_key) == ["example.com/gpu-foo"]
    decision = run(limits_pod({"example.com/gpu-foo": "1"}), ps)
    assert decision.warnings == ()
    assert decision.notes == (PGPU_NOTE, SHM_NOTE)


def test_configured_names_and_patterns() -> None:
    config = load_config(
        {
            "gpuResourceNames": ["example.com/npu-*"],
            "vgpuResourceNames": ["example.com/share?"],
            "ignoredGpuResourceNames": ["example.com/gpu-*"],
        }
    )
    placed = run(limits_pod({"example.com/npu-large": "1"}), policies(), config)
    assert placed.notes == (PGPU_NOTE, SHM_NOTE)
    shared = run(limits_pod({"example.com/share2": "1"}), policies(), config)
    assert shared.notes == (VGPU_NOTE, SHM_NOTE)
    # the defaults are replaced, not extended: nvidia.com/gpu is no longer a GPU name here
    assert run(limits_pod({"nvidia.com/gpu": "1"}), policies(), config).warnings == (
        "resource nvidia.com/gpu is not a known GPU resource: add it to gpuResourceNames to "
        "check it",
    )
    ignored = run(limits_pod({"example.com/gpu-foo": "1"}), policies(), config)
    assert (ignored.notes, ignored.warnings) == ((), ())


@pytest.mark.parametrize(
    ("names", "key", "match"),
    [
        (["nvidia.com/gpu"], "nvidia.com/gpu", True),
        (["nvidia.com/gpu"], "nvidia.com/gpus", False),
        (["nvidia.com/mig-*"], "nvidia.com/mig-1g.5gb", True),
        (["nvidia.com/mig-*"], "nvidia.com/mig-", True),
        (["nvidia.com/mig-*"], "nvidia.com/migx", False),
        (["nvidia.com/mig-*"], "xnvidia.com/mig-1g", False),
        (["nvidia.com/gpumem*"], "nvidia.com/gpumem-percentage", True),
        (["nvidia.com/gpumem*"], "nvidia.com/gpu", False),
        (["*.example.com/gpu"], "a.example.com/gpu", True),
        (["*.example.com/gpu"], "aexample.com/gpu", False),  # "." is literal
        (["vendor.io/gpu?"], "vendor.io/gpu1", True),
        (["vendor.io/gpu?"], "vendor.io/gpu12", False),
        ([], "nvidia.com/gpu", False),
    ],
)
def test_resource_names_match_exactly_or_by_glob(names: list[str], key: str, match: bool) -> None:
    assert (key in ResourceNames(names)) is match
    assert ResourceNames(names).any_of({"cpu", key}) is match


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (
            ["nvidia.com/gpu", "bad name"],
            "webhook config is invalid: gpuResourceNames: Value error, 'bad name' is not a "
            "resource name or pattern (letters, digits, '.', '_', '-', '/', and the wildcards "
            "'*' and '?')",
        ),
        (
            [""],
            "webhook config is invalid: gpuResourceNames: Value error, '' is not a resource "
            "name or pattern (letters, digits, '.', '_', '-', '/', and the wildcards '*' and "
            "'?')",
        ),
    ],
)
def test_resource_names_are_checked_when_the_config_loads(names: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config({"gpuResourceNames": names})
    assert str(exc.value) == message
