"""The ROCm facts of an image's configuration (SPEC §13, issue 38 item 2): ROCM_VERSION and
PYTORCH_ROCM_ARCH read from the config a registry lookup fetches, listed for lookup only when
nothing else tells the version, and used by the ROCm gate as the tag's facts are."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tests.helpers import apply, pod, standard_policies, without_shm
from tests.unit.test_placement_invariants import schedulable
from tests.unit.test_registry_resolver import ScriptedClient, resolver
from tests.unit.test_vendor_gate import (
    AMD,
    DEVICE,
    MODULE,
    RELEASE,
    ROCM_64,
    UNKNOWN_LEFT_OUT,
    absent,
    amd,
    among,
    notin,
    required,
    term,
)
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.images.facts import ImageEnv, ImageQuery
from webhook.core.outcome.decision import Decision
from webhook.core.placement.inventory import NodeInventory
from webhook.core.placement.vendors import shipped_vendors
from webhook.registry.documents import ACCELERATOR_VARIABLES, read_config, read_image_config
from webhook.registry.results import NO_CUDA, NOT_FOUND, LookupResult

CUSTOM = "registry.corp/team/train:v3"  # a tag that says nothing
ROCM_CONFIG = {"ROCM_VERSION": "6.4.1", "PYTORCH_ROCM_ARCH": "gfx90a;gfx942"}


def blob(document: dict[str, Any]) -> tuple[bytes, str]:
    body = json.dumps(document).encode()
    return body, "sha256:" + hashlib.sha256(body).hexdigest()


def config_document(env: list[str], **platform: str) -> dict[str, Any]:
    return {
        "architecture": "amd64",
        "os": "linux",
        **platform,
        "config": {"Env": ["PATH=/usr/bin", *env]},
        "rootfs": {"type": "layers", "diff_ids": []},
    }


def check(
    obj: dict[str, Any], image_env: ImageEnv | None, inventory: NodeInventory | None = AMD
) -> Decision:
    # The ROCm gate alone: the /dev/shm fix (SPEC §14) is test_runtime_fixes_vendors.py's.
    return evaluate(
        obj, standard_policies(), without_shm(), inventory=inventory, image_env=image_env
    )


# --- the config as read --------------------------------------------------------------------


def test_the_config_keeps_the_rocm_variables_and_its_platform() -> None:
    # What PyTorch's ROCm images set (pytorch/pytorch .ci/docker/ubuntu-rocm/Dockerfile).
    body, digest = blob(
        config_document(
            ["ROCM_VERSION=6.4.1 ", "PYTORCH_ROCM_ARCH=gfx90a;gfx942", "HSA_NO_SCRATCH=1"]
        )
    )
    found = read_image_config(body, digest)
    assert found.variables == {"ROCM_VERSION": "6.4.1", "PYTORCH_ROCM_ARCH": "gfx90a;gfx942"}
    assert found.architecture == "amd64"
    assert read_config(body, digest) == found.variables


def test_a_long_target_list_is_cut_and_an_odd_platform_is_none() -> None:
    body, digest = blob(
        config_document(["PYTORCH_ROCM_ARCH=" + "gfx942;" * 200], architecture="arm64")
    )
    found = read_image_config(body, digest)
    assert len(found.variables["PYTORCH_ROCM_ARCH"]) == ACCELERATOR_VARIABLES["PYTORCH_ROCM_ARCH"]
    assert found.architecture == "arm64"
    for platform in ({"os": "windows"}, {"architecture": "AMD64; rm"}, {"architecture": ""}):
        body, digest = blob(config_document([], **platform))
        assert read_image_config(body, digest).architecture == ""


def test_every_shipped_vendor_variable_is_read_from_configs() -> None:
    names = {n for v in shipped_vendors() for n in (*v.env_version, *v.env_devices)}
    assert names == set(ACCELERATOR_VARIABLES)


# --- what the evaluation asks, and what it does with the answer ----------------------------


def test_an_image_whose_rocm_nothing_tells_is_listed_for_a_lookup() -> None:
    unknown = check(pod(amd(CUSTOM)), None)
    assert unknown.unresolved_images == (ImageQuery(CUSTOM, "amd64", "rocm"),)
    assert unknown.warnings == (
        f"ROCm version of {CUSTOM} unknown: "
        "set features.alauda.io/rocm-version or accelerators.rocm.imageTable",
    )
    # Known from the tag, or annotated: never asked.
    assert check(pod(amd(ROCM_64)), None).unresolved_images == ()
    annotated = pod(amd(CUSTOM), annotations={"features.alauda.io/rocm-version": "6.4"})
    assert check(annotated, None).unresolved_images == ()
    # The architectures the pod may run on, as for CUDA.
    arm = pod(amd(CUSTOM), nodeSelector={"kubernetes.io/arch": "arm64"})
    assert check(arm, None).unresolved_images == (ImageQuery(CUSTOM, "arm64", "rocm"),)


def test_the_config_version_and_targets_place_the_pod() -> None:
    decision = check(pod(amd(CUSTOM)), {CUSTOM: ROCM_CONFIG})
    # ROCm 6.4 runs on both drivers; gfx90a (MI210, 740f) and gfx942 (MI300X, 74a1): the
    # device ids the inventory has seen with each driver label.
    assert required(apply(decision)) == [
        term(among(RELEASE, "30.10.1"), among(DEVICE, "74a1")),
        term(absent(RELEASE), among(MODULE, "6.12.12", "6.14.14"), among(DEVICE, "740f", "74a1")),
    ]
    assert decision.notes == (
        "required nodes whose amdgpu driver runs ROCm 6.4 on GPU target gfx90a/gfx942 "
        "(image config ROCM_VERSION=6.4.1)",
    )
    assert decision.warnings == (UNKNOWN_LEFT_OUT,)
    assert decision.mutation_kinds == ("rocm-affinity",)


def test_the_config_targets_the_nodes_lack_are_warned_about() -> None:
    # MI350X/MI355X only, ROCm 7.14 (amdgpu 30.10 and newer, AMD's matrix)
    config = {"ROCM_VERSION": "7.14.0", "PYTORCH_ROCM_ARCH": "gfx950"}
    decision = check(pod(amd(CUSTOM)), {CUSTOM: config})
    assert decision.warnings == (
        "no node whose amdgpu driver runs ROCm 7.14 has GPU target gfx950; "
        "they have gfx942 (2 nodes), gfx90a (1 node)",
    )
    # Warned, and kept off the MI210 and MI300X nodes the image has no code objects for (and
    # the ROCm 6.4 driver), never required onto the rows' own spellings (issue 45 item 2): an
    # MI355X added on amdgpu 30.10.1, a patch release of the 30.10 row, may run it.
    assert required(apply(decision)) == [
        term({"key": RELEASE, "operator": "Exists"}, notin(DEVICE, "740f", "74a1")),
        term(absent(RELEASE), notin(MODULE, "6.12.12"), notin(DEVICE, "740f", "74a1")),
    ]
    added = {"mi355-new": {RELEASE: "30.10.1", DEVICE: "75a3"}}
    nodes = {**{name: dict(labels) for name, labels in AMD.nodes.items()}, **added}
    assert schedulable(apply(decision)["spec"], nodes) == ["mi355-new"]
    assert decision.notes == (
        "kept off nodes whose amdgpu driver cannot run ROCm 7.14 on GPU target gfx950 "
        "(image config ROCM_VERSION=7.14.0)",
    )


def test_the_container_env_wins_over_the_config() -> None:
    env = [{"name": "PYTORCH_ROCM_ARCH", "value": "gfx942"}]
    decision = check(pod(amd(CUSTOM, env=env)), {CUSTOM: ROCM_CONFIG})
    assert decision.notes == (
        "required nodes whose amdgpu driver runs ROCm 6.4 on GPU target gfx942 "
        "(image config ROCM_VERSION=6.4.1)",
    )
    env = [{"name": "ROCM_VERSION", "value": "7.0"}]
    decision = check(pod(amd(CUSTOM, env=env)), {CUSTOM: ROCM_CONFIG})
    assert decision.notes == (
        "required nodes whose amdgpu driver runs ROCm 7.0 (env ROCM_VERSION=7.0)",
    )


def test_the_reference_wins_over_a_config_answer() -> None:
    # A tag that names the version is never looked up; an answer for it changes nothing.
    decision = check(pod(amd(ROCM_64)), {ROCM_64: {"ROCM_VERSION": "7.0"}})
    assert decision.notes == (
        f"required nodes whose amdgpu driver runs ROCm 6.4 (image {ROCM_64})",
    )


def test_a_config_version_that_is_no_version_is_unknown() -> None:
    decision = check(pod(amd(CUSTOM)), {CUSTOM: {"ROCM_VERSION": "nightly"}})
    assert decision.patch == []
    assert decision.warnings == (
        f"ROCm version of {CUSTOM} unknown: "
        "set features.alauda.io/rocm-version or accelerators.rocm.imageTable",
    )


# --- the resolver's answer ----------------------------------------------------------------


async def test_the_resolution_carries_the_config_variables_of_rocm_queries() -> None:
    env = (("ROCM_VERSION", "6.4.1"), ("PYTORCH_ROCM_ARCH", "gfx942"))
    answer = LookupResult(NO_CUDA, detail="its config sets no CUDA_VERSION", env=env)
    found = await resolver(ScriptedClient(lambda i, a: answer)).resolve(
        [ImageQuery(CUSTOM, "amd64", "rocm")]
    )
    assert found.env == {CUSTOM: dict(env)}
    assert (found.facts, found.warnings) == ({}, [])


async def test_a_rocm_lookup_that_finds_nothing_says_so_as_rocm() -> None:
    plain = LookupResult(NO_CUDA, detail="its config sets no CUDA_VERSION")
    found = await resolver(ScriptedClient(lambda i, a: plain)).resolve(
        [ImageQuery(CUSTOM, "amd64", "rocm")]
    )
    assert found.env == {}
    assert found.warnings == [f"ROCm lookup of {CUSTOM}: its config sets no ROCM_VERSION"]
    missing = LookupResult(NOT_FOUND, detail="manifest not found")
    found = await resolver(ScriptedClient(lambda i, a: missing)).resolve(
        [ImageQuery(CUSTOM, "amd64", "rocm")]
    )
    assert found.warnings == [f"ROCm lookup of {CUSTOM}: manifest not found"]
    assert found.failed == {CUSTOM: NOT_FOUND}
