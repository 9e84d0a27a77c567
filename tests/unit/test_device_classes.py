"""DeviceClasses known by their driver (SPEC §13 "DeviceClasses are watched", issue 47 item 4):
a class's vendor is the driver its selectors require, never its name; KEP-5004's
`extendedResourceName` and `deviceclass.resource.kubernetes.io/<class>` are that vendor's
device resources for placement, access control and the unknown-resource warning."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fakekube import (
    DEVICE_CLASSES,
    FakeKube,
    claim_template,
    device_class,
    fast_options,
    running,
)
from tests.helpers import (
    REQUIRED_12_4_TERMS,
    apply,
    container,
    eventually,
    get,
    node_terms,
    pod,
    standard_policies,
    without_shm,
)
from tests.unit.test_cli_inventory import (
    CLUSTER,
    GFD_MAJOR,
    GFD_MINOR,
    POLICIES,
    cli,
    dra_pod,
    node_keys,
    write_yaml,
)
from tests.unit.test_cli_inventory import claim_template as cli_template
from tests.unit.test_vendor_gate import AMD, ASCEND, CANN_83_910B, ROCM_64
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.outcome.decision import Decision
from webhook.core.workloads.claims import (
    ClaimIndex,
    DeviceClassFacts,
    device_class_facts,
)
from webhook.sources.claims import DeviceClassSource, claim_sources
from webhook.sources.store import PolicyStore

CUDA_12_4 = "nvidia/cuda:12.4.1-runtime-ubuntu22.04"
NVIDIA = "device.driver == 'gpu.nvidia.com'"
# NVIDIA/k8s-dra-driver-gpu's own gpu.nvidia.com class: the driver and a device type.
NVIDIA_GPU = (
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
)
# Project-HAMi/HAMi-DRA's class (charts/hami-dra/templates/hami-dra-driver/deviceclass.yaml).
HAMI = (
    'device.driver == "hami-core-gpu.project-hami.io" && '
    'device.attributes["hami-core-gpu.project-hami.io"].type == "hami-gpu"'
)
IMPLICIT = "deviceclass.resource.kubernetes.io/"
OTHER_VOIDS = [
    {"name": "AMD_VISIBLE_DEVICES", "value": "void"},
    {"name": "ASCEND_VISIBLE_DEVICES", "value": ""},
]
ENFORCE = without_shm(load_config({"gpuAccess": {"mode": "enforce"}}))


def facts(*expressions: str, extended: str | None = None) -> DeviceClassFacts:
    return device_class_facts(device_class("c", *expressions, extended_resource=extended))


def test_the_driver_is_read_from_the_simple_selector_forms() -> None:
    assert facts(NVIDIA) == DeviceClassFacts("gpu.nvidia.com")
    assert facts(NVIDIA_GPU).driver == "gpu.nvidia.com"
    assert facts(HAMI).driver == "hami-core-gpu.project-hami.io"
    assert facts('"gpu.amd.com" == device.driver').driver == "gpu.amd.com"
    # HAMi's Ascend class, a YAML block scalar over two lines.
    ascend = 'device.driver == "ascend.project-hami.io" &&\n  device.attributes["x"].type == "v"'
    assert facts(ascend).driver == "ascend.project-hami.io"
    # A second selector narrows the devices, the driver stays the one required.
    assert (
        facts(
            NVIDIA, "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) >= 0"
        ).driver
        == "gpu.nvidia.com"
    )
    assert facts(NVIDIA, extended="example.com/h100") == DeviceClassFacts(
        "gpu.nvidia.com", "example.com/h100"
    )


@pytest.mark.parametrize(
    "expressions",
    [
        ("device.driver == 'gpu.nvidia.com' || device.driver == 'gpu.amd.com'",),
        ("device.driver != 'gpu.nvidia.com'",),
        ("!(device.driver == 'gpu.nvidia.com')",),
        ("device.driver in ['gpu.nvidia.com']",),
        (NVIDIA, "device.driver == 'gpu.amd.com'"),
        ("device.attributes['gpu.nvidia.com'].type == 'gpu'",),
        (),
    ],
)
def test_anything_else_leaves_the_vendor_unknown(expressions: tuple[str, ...]) -> None:
    assert facts(*expressions).driver is None


def template(name: str, device_class_name: str) -> dict[str, Any]:
    return claim_template("ml", name, device_class_name)


def claim_pod(template_name: str, image: str = CUDA_12_4, **kw: Any) -> dict[str, Any]:
    train = container("train", image, resources={"claims": [{"name": "gpu"}]}, **kw)
    return pod(train, resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": template_name}])


def index(*objs: dict[str, Any]) -> ClaimIndex:
    return ClaimIndex.from_objects(objs)


def check(
    obj: dict[str, Any], claims: ClaimIndex | None, config: WebhookConfig | None = None, **kw: Any
) -> Decision:
    return evaluate(obj, standard_policies(), config or without_shm(), claims=claims, **kw)


@pytest.mark.parametrize(
    ("name", "expression"),
    [
        ("h100.example.com", NVIDIA),
        ("vfio.gpu.nvidia.com", NVIDIA),
        ("hami-core-gpu.project-hami.io", HAMI),
    ],
)
def test_a_claim_on_a_class_of_nvidias_driver_is_a_gpu_claim(name: str, expression: str) -> None:
    with_class = index(template("t", name), device_class(name, expression))
    decision = check(claim_pod("t"), with_class)
    assert node_terms(apply(decision)) == REQUIRED_12_4_TERMS
    # By name alone (no DeviceClass known) such a class is nobody's: no placement.
    assert check(claim_pod("t"), index(template("t", name))).patch == []


def test_a_built_in_name_on_another_driver_is_that_drivers() -> None:
    """The config's gpuDeviceClasses stay NVIDIA's; the built-in vendor names (gpu.amd.com)
    are the fallback only while the cluster has no such class."""
    renamed = index(template("t", "gpu.amd.com"), device_class("gpu.amd.com", NVIDIA))
    assert node_terms(apply(check(claim_pod("t"), renamed))) == REQUIRED_12_4_TERMS
    unknown = index(template("t", "gpu.nvidia.com"), device_class("gpu.nvidia.com", "true"))
    assert node_terms(apply(check(claim_pod("t"), unknown))) == REQUIRED_12_4_TERMS


def test_an_admin_class_of_amds_driver_gets_the_rocm_gate() -> None:
    claims = index(
        template("t", "mi300.example.com"),
        device_class("mi300.example.com", "device.driver == 'gpu.amd.com'"),
    )
    decision = check(claim_pod("t", ROCM_64), claims, WebhookConfig(), inventory=AMD)
    assert f"required nodes whose amdgpu driver runs ROCm 6.4 (image {ROCM_64})" in decision.notes


def test_hamis_ascend_class_gets_the_cann_gate() -> None:
    name = "npu-hamivnpucore.project-hami.io"
    expression = 'device.driver == "ascend.project-hami.io" && device.attributes["a"].type == "v"'
    claims = index(template("t", name), device_class(name, expression))
    decision = check(claim_pod("t", CANN_83_910B), claims, WebhookConfig(), inventory=ASCEND)
    assert decision.mutation_kinds == ("cann-affinity", "shm")
    bare = check(
        claim_pod("t", CANN_83_910B), index(template("t", name)), WebhookConfig(), inventory=ASCEND
    )
    assert "cann-affinity" not in bare.mutation_kinds


def kep(resource: str, image: str = CUDA_12_4, **kw: Any) -> dict[str, Any]:
    return pod(container("train", image, limits={resource: 1}, **kw))


def test_the_implicit_name_of_nvidias_class_is_a_gpu_resource_without_the_cluster() -> None:
    decision = check(kep(IMPLICIT + "gpu.nvidia.com"), None, ENFORCE)
    assert decision.allowed
    assert node_terms(apply(decision)) == REQUIRED_12_4_TERMS
    assert not any("not a known GPU resource" in w for w in decision.warnings)
    # An NVIDIA device container (as one requesting nvidia.com/gpu): no void over the
    # devices DRA gives it, the other vendors' variables voided.
    assert get(apply(decision), "spec", "containers", 0, "env") == OTHER_VOIDS


def test_an_unknown_class_name_keeps_the_warning() -> None:
    decision = check(kep(IMPLICIT + "gpu.example.com"), None)
    assert decision.warnings == (
        f"unknown GPU resource {IMPLICIT}gpu.example.com: add it to gpuResourceNames",
    )


def test_a_classes_extended_resource_name_and_implicit_name_are_its_vendors() -> None:
    claims = index(
        device_class("h100.example.com", NVIDIA, extended_resource="example.com/h100-gpu")
    )
    for resource in ("example.com/h100-gpu", IMPLICIT + "h100.example.com"):
        decision = check(kep(resource), claims, ENFORCE)
        assert decision.allowed, resource
        assert node_terms(apply(decision)) == REQUIRED_12_4_TERMS, resource
        assert decision.warnings == (), resource
        assert get(apply(decision), "spec", "containers", 0, "env") == OTHER_VOIDS, resource
    # Without the class the same names are unknown: the warning, and no placement.
    alone = check(kep("example.com/h100-gpu"), None)
    assert alone.warnings == (
        "resource example.com/h100-gpu is not a known GPU resource: add it to gpuResourceNames "
        "to check it",
    )


def test_an_extended_resource_name_two_vendors_claim_is_not_read() -> None:
    claims = index(
        device_class("a.example.com", NVIDIA, extended_resource="example.com/gpu"),
        device_class(
            "b.example.com", "device.driver == 'gpu.amd.com'", extended_resource="example.com/gpu"
        ),
    )
    assert "example.com/gpu" not in claims.classes.extended
    assert claims.classes.extended[IMPLICIT + "b.example.com"] == "amd"


def test_an_amd_implicit_name_gets_the_rocm_gate_and_is_an_amd_device_container() -> None:
    decision = check(kep(IMPLICIT + "gpu.amd.com", ROCM_64), None, WebhookConfig(), inventory=AMD)
    assert f"required nodes whose amdgpu driver runs ROCm 6.4 (image {ROCM_64})" in decision.notes
    assert not any("gpuResourceNames" in w for w in decision.warnings)
    enforce = check(
        kep(IMPLICIT + "gpu.amd.com", env=[{"name": "AMD_VISIBLE_DEVICES", "value": "all"}]),
        None,
        ENFORCE,
    )
    # The device container's finding, not the "requests no AMD GPU" of one without.
    assert (
        'container "train" sets AMD_VISIBLE_DEVICES=all: remove it: the device plugin sets the '
        "AMD GPUs a container gets" in enforce.denial_message()
    )


async def test_device_classes_are_watched_and_published_into_the_claim_index(
    kube: FakeKube, store: PolicyStore, tmp_path: Path
) -> None:
    kube.put(device_class("h100.example.com", NVIDIA, extended_resource="example.com/h100"))
    source = DeviceClassSource(store, **fast_options(kube, tmp_path))
    async with running(source):
        await eventually(lambda: kube.open_watches_of(DEVICE_CLASSES) == 1, "the watch is open")
        assert store.claims is not None
        assert store.claims.classes.facts == {
            "h100.example.com": DeviceClassFacts("gpu.nvidia.com", "example.com/h100")
        }
        kube.put(device_class("mi300.example.com", "device.driver == 'gpu.amd.com'"))
        await eventually(
            lambda: store.claims is not None and "mi300.example.com" in store.claims.classes.facts,
            "the new class",
        )
        assert store.claims.classes.families["mi300.example.com"] == "amd"
        assert "h100.example.com" in store.claims.classes.nvidia
    assert store.snapshot_status("DeviceClass") == {"available": True}


def test_claim_sources_include_device_classes(
    store: PolicyStore, kube: FakeKube, tmp_path: Path
) -> None:
    sources = claim_sources(store, **fast_options(kube, tmp_path))
    assert [s.watched.kind for s in sources] == [
        "ResourceClaimTemplate",
        "ResourceClaim",
        "DeviceClass",
    ]


def test_review_claims_reads_device_classes(tmp_path: Path) -> None:
    """`gpu-webhook review --claims` takes DeviceClasses beside the templates: a pod on an
    admin's class of NVIDIA's driver gets CUDA placement, the header counts the classes."""

    claims = write_yaml(
        tmp_path / "claims.yaml",
        cli_template("single-gpu", "h100.example.com"),
        device_class("h100.example.com", NVIDIA),
    )
    nodes = write_yaml(tmp_path / "nodes.yaml", CLUSTER)
    manifest = write_yaml(tmp_path / "dra.yaml", dra_pod())
    argv = ["review", "-f", str(manifest), "--policies", POLICIES, "--nodes", str(nodes)]
    code, text = cli(*argv, "--claims", str(claims))
    assert code == 0
    assert (
        f"DRA claims: 1 ResourceClaimTemplate(s), 0 ResourceClaim(s), 1 DeviceClass(es) from "
        f"{claims}\n" in text
    )
    code, out = cli(*argv, "--claims", str(claims), "-o", "json")
    (result,) = json.loads(out)
    assert node_keys(result["mutated"]) == {GFD_MAJOR, GFD_MINOR}
    # Without the class the template's class is nobody's: no placement.
    bare = write_yaml(tmp_path / "bare.yaml", cli_template("single-gpu", "h100.example.com"))
    code, out = cli(*argv, "--claims", str(bare), "-o", "json")
    (result,) = json.loads(out)
    assert result["mutated"] is None
