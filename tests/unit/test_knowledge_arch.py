"""Shipped knowledge whose images differ by architecture (one tag, a multi-platform index: vLLM
v0.11.0 is CUDA 12.8 on linux/amd64 and 12.9 on linux/arm64): the pod's architecture decides
which version its node affinity requires, as it decides which entry a registry lookup reads."""

from __future__ import annotations

import io
from typing import Any

import pytest

# Tests of per-architecture image knowledge: evaluated without the /dev/shm fix (on by default),
# whose volume and warning would be in every pod here (tests/helpers.py `without_shm`; the rule's
# own tests: test_runtime_fixes.py).
from tests.helpers import GPU, apply, container, expr, node_terms, pod, standard_policies
from tests.helpers import (
    run_without_shm as run,
)
from tests.unit.test_knowledge import ARCH_GROUP, GOOD
from webhook.cli import main
from webhook.core.base.versions import CudaVersion
from webhook.core.config.image_rules import ImageRules
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.images.facts import ImageQuery
from webhook.core.images.knowledge import ImageKnowledge
from webhook.core.placement.cuda import Requirement

VLLM = "vllm/vllm-openai:v0.11.0"
ARCH = "kubernetes.io/arch"


def terms(minor: int) -> list[dict[str, Any]]:
    """Required terms on the manual labels for CUDA ≥ 12.<minor> (no upper bound)."""
    return [
        {
            "matchExpressions": [
                expr("cuda-major-version", "Gt", 11),
                expr("cuda-major-version", "Lt", 13),
                expr("cuda-minor-version", "Gt", minor - 1),
            ]
        },
        {"matchExpressions": [expr("cuda-major-version", "Gt", 12)]},
    ]


def vllm_pod(image: str = VLLM, **spec: Any) -> dict[str, Any]:
    return pod(container("server", image, limits={GPU: "1"}, requests={GPU: "1"}), **spec)


def arch_affinity(*archs: str) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expr(ARCH, "In", *archs)]}]
            }
        }
    }


def test_a_pod_that_pins_nothing_gets_the_amd64_version() -> None:
    decision = run(vllm_pod())
    assert node_terms(apply(decision)) == terms(8)
    # (120 characters at most: the fixed words are shortened, the source kept)
    assert decision.notes == (
        "required CUDA ≥ 12.8 (shipped knowledge: vLLM 0.11.0 for linux/amd64, "
        "vLLM release pipeline), preferably < 14.0",
    )
    assert decision.warnings == ()


def test_an_arm64_pod_gets_the_arm64_version() -> None:
    decision = run(vllm_pod(nodeSelector={ARCH: "arm64"}))
    assert node_terms(apply(decision)) == terms(9)
    assert decision.notes == (
        "required CUDA ≥ 12.9 (shipped knowledge: vLLM 0.11.0 for linux/arm64, "
        "vLLM release pipeline), preferably < 14.0",
    )


def test_a_pod_that_may_run_on_either_gets_the_strictest() -> None:
    decision = run(vllm_pod(affinity=arch_affinity("amd64", "arm64")))
    result = apply(decision)
    # the pod's own arch term is kept in every injected term, with the CUDA bound added
    for term in node_terms(result):
        assert expr(ARCH, "In", "amd64", "arm64") in term["matchExpressions"]
    assert "CUDA ≥ 12.9 (shipped knowledge: vLLM 0.11.0 for linux/arm64" in decision.notes[0]


def test_an_architecture_the_release_was_not_built_for_is_unknown() -> None:
    decision = run(vllm_pod(nodeSelector={ARCH: "ppc64le"}))
    assert node_terms(apply(decision)) is None
    assert decision.unresolved_images == (ImageQuery(VLLM, "ppc64le"),)
    assert decision.warnings == (
        f"CUDA version of {VLLM} unknown, no affinity: set features.alauda.io/cuda-version "
        "or imageCudaTable",
    )


def with_knowledge(text: str) -> WebhookConfig:
    """The default config with its shipped knowledge replaced (the rules are one cached,
    identity-hashed object: the test sets that object)."""
    config = WebhookConfig()
    knowledge = ImageKnowledge.from_yaml(text, "test knowledge")
    config.__dict__["image_rules"] = ImageRules(config.image_patterns, (), knowledge)
    return config


AMD64_ONLY = GOOD.replace("cuda: '12.4'", "arch: {amd64: '12.8'}")
TEAM = "example.com/fam:v1.0"


def test_a_release_known_for_amd64_only_is_looked_up_for_arm64() -> None:
    config = with_knowledge(AMD64_ONLY)
    amd64 = run(vllm_pod(TEAM), config=config)
    assert amd64.notes == (
        "required GPU nodes with CUDA ≥ 12.8 (shipped knowledge: Fam 1.0 for linux/amd64, notes), "
        "preferably < 14.0",
    )
    arm64_pod = vllm_pod(TEAM, nodeSelector={ARCH: "arm64"})
    arm64 = run(arm64_pod, config=config)
    assert arm64.notes == ()
    assert arm64.unresolved_images == (ImageQuery(TEAM, "arm64"),)
    # what the registry then reads for linux/arm64 decides it
    looked_up = {ImageQuery(TEAM, "arm64"): Requirement(CudaVersion(12, 9), "image config X")}
    answered = evaluate(arm64_pod, standard_policies(), config, images=looked_up)
    assert node_terms(apply(answered)) == terms(9)
    assert answered.notes[0].startswith("required GPU nodes with CUDA ≥ 12.9 (image config X)")


def test_a_multi_arch_pod_is_unknown_while_one_architecture_is() -> None:
    config = with_knowledge(AMD64_ONLY)
    decision = run(vllm_pod(TEAM, affinity=arch_affinity("amd64", "arm64")), config=config)
    assert node_terms(apply(decision)) == [
        {"matchExpressions": [expr(ARCH, "In", "amd64", "arm64")]}
    ]
    assert decision.unresolved_images == (ImageQuery(TEAM, "amd64"), ImageQuery(TEAM, "arm64"))


@pytest.mark.parametrize(
    ("arch", "line"),
    [
        ("amd64", "CUDA 12.8 from the shipped knowledge (vLLM 0.11.0 for linux/amd64, "),
        ("arm64", "CUDA 12.9 from the shipped knowledge (vLLM 0.11.0 for linux/arm64, "),
    ],
)
def test_the_images_command_answers_for_the_architecture_asked(arch: str, line: str) -> None:
    out = io.StringIO()
    code = main(["images", VLLM, "--no-lookup", "--arch", arch], out=out)
    assert code == 0
    version = line.split()[1]
    assert out.getvalue() == (
        f"{VLLM}: {line}vLLM release pipeline)\n"
        f"  GPUs with compute capability ≥ 5.0 (architecture floor of CUDA {version})\n"
    )


def test_the_images_command_says_unknown_for_an_architecture_not_built() -> None:
    out = io.StringIO()
    code = main(["images", VLLM, "--no-lookup", "--arch", "s390x"], out=out)
    assert code == 1
    assert out.getvalue() == f"{VLLM}: CUDA unknown (nothing offline names it)\n"


def test_an_ignored_env_version_does_not_lose_the_architecture() -> None:
    """An implausible CUDA_VERSION env is warned about and ignored; the image still decides,
    for the pod's architecture."""
    the_pod = vllm_pod(nodeSelector={ARCH: "arm64"})
    the_pod["spec"]["containers"][0]["env"] = [{"name": "CUDA_VERSION", "value": "999.1"}]
    decision = run(the_pod)
    assert node_terms(apply(decision)) == terms(9)
    assert "vLLM 0.11.0 for linux/arm64" in decision.notes[0]
    assert len(decision.warnings) == 1 and "999.1" in decision.warnings[0]


# --- single-architecture tags (`v0.11.0-aarch64`): the image's architecture decides ----------


def test_a_single_architecture_tag_decides_whatever_the_pod_pins() -> None:
    aarch64 = "vllm/vllm-openai:v0.11.0-aarch64"
    decision = run(vllm_pod(aarch64))  # pins nothing, which alone would mean linux/amd64
    assert node_terms(apply(decision)) == terms(9)
    assert decision.notes == (
        "required CUDA ≥ 12.9 (shipped knowledge: vLLM 0.11.0 for linux/arm64, "
        "vLLM release pipeline), preferably < 14.0",
    )
    assert decision.unresolved_images == ()
    x86 = run(vllm_pod("vllm/vllm-openai:v0.11.0-x86_64", affinity=arch_affinity("amd64", "arm64")))
    assert [t["matchExpressions"][-1] for t in node_terms(apply(x86))] == [
        expr("cuda-minor-version", "Gt", 7),
        expr("cuda-major-version", "Gt", 12),
    ]


SPLIT = ARCH_GROUP.replace("  releases:", "  arches: {x86_64: amd64, aarch64: arm64}\n  releases:")


def test_a_single_architecture_tag_of_an_architecture_the_release_lacks_is_unknown() -> None:
    knowledge = ImageKnowledge.from_yaml(
        SPLIT.replace("cuda: '12.4'", "arch: {amd64: '12.8'}"), "t"
    )
    x86 = knowledge.lookup("example.com/fam", "v1.0-x86_64")
    assert x86 is not None and (x86.version, x86.text) == (
        CudaVersion(12, 8),
        "shipped knowledge: Fam 1.0 for linux/amd64, notes",
    )
    assert knowledge.lookup("example.com/fam", "v1.0-aarch64") is None
    # a release the same for every architecture names none
    same = ImageKnowledge.from_yaml(SPLIT, "t").lookup("example.com/fam", "v1.0-aarch64")
    assert same is not None and (same.version, same.text, same.by_arch) == (
        CudaVersion(12, 4),
        "shipped knowledge: Fam 1.0, notes",
        (),
    )


@pytest.mark.parametrize(
    ("image", "arch", "line"),
    [
        # the x86 image's CUDA is known over the whole window, the arm64 one's is not
        ("vllm/vllm-openai:v0.10.2", "amd64", "CUDA 12.8 from the shipped knowledge (vLLM 0.10.2 "),
        ("vllm/vllm-openai:v0.10.2", "arm64", "CUDA unknown (nothing offline names it)"),
        # and the other way round
        ("vllm/vllm-openai:v0.11.2", "amd64", "CUDA unknown (nothing offline names it)"),
        ("vllm/vllm-openai:v0.11.2", "arm64", "CUDA 12.9 from the shipped knowledge (vLLM 0.11.2 "),
        (
            "vllm/vllm-openai:v0.11.2-aarch64",
            "amd64",
            "CUDA 12.9 from the shipped knowledge (vLLM ",
        ),
    ],
)
def test_releases_known_for_one_architecture_only(image: str, arch: str, line: str) -> None:
    out = io.StringIO()
    code = main(["images", image, "--no-lookup", "--arch", arch], out=out)
    assert out.getvalue().startswith(f"{image}: {line}")
    assert code == (1 if "unknown" in line else 0)
