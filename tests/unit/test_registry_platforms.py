"""An image index's platforms (SPEC §14): read on the way to the config a CUDA lookup needs,
carried in the lookup's answer and the review's Resolution, and used by the image-architecture
runtime fix."""

from __future__ import annotations

import json
from typing import Any

from tests.helpers import GPU, apply, container, pod
from tests.unit.test_registry_resolver import ScriptedClient, resolver
from webhook.core.config.model import load_config
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.images.facts import ImageQuery
from webhook.core.placement.inventory import NodeInventory
from webhook.core.policies.policyset import PolicySet
from webhook.registry.documents import OCI_INDEX, read_manifest
from webhook.registry.results import NO_CUDA, LookupResult

D = "sha256:" + "a" * 64


def entry(os: str, arch: str, **extra: str) -> dict[str, Any]:
    return {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": D,
        "size": 100,
        "platform": {"os": os, "architecture": arch, **extra},
    }


def test_an_index_lists_its_linux_architectures() -> None:
    index = {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [
            entry("linux", "arm64", variant="v8"),
            entry("linux", "amd64"),
            entry("unknown", "unknown"),  # BuildKit's attestation manifest
            entry("windows", "amd64"),
            entry("linux", "amd64", variant="v3"),
        ],
    }
    manifest = read_manifest(json.dumps(index).encode(), OCI_INDEX, "", "amd64", True)
    assert manifest.index and manifest.platforms == ("amd64", "arm64")


async def test_the_resolution_carries_the_platforms_even_without_a_cuda_version() -> None:
    image = "registry.example.com/team/trainer:1"
    answer = LookupResult(NO_CUDA, detail="its config sets no CUDA_VERSION", platforms=("amd64",))
    found = await resolver(ScriptedClient(lambda i, a: answer)).resolve([ImageQuery(image)])
    assert found.platforms == {image: ("amd64",)}
    assert found.facts == {}


def test_registry_platforms_place_the_pod() -> None:
    image = "registry.example.com/team/trainer:1"
    # The architecture fix alone: CUDA placement and the /dev/shm fix (on by default; its own
    # tests are in test_runtime_fixes.py) switched off.
    config = load_config({"cudaAffinity": False, "runtimeFixes": {"shm": {"enabled": False}}})
    nodes = NodeInventory.build(
        {"a": {"kubernetes.io/arch": "amd64"}, "b": {"kubernetes.io/arch": "arm64"}},
        config=config,
    )
    obj = pod(container("trainer", image, limits={GPU: 1}))
    policies = PolicySet.empty()
    decision = evaluate(obj, policies, config, inventory=nodes, image_platforms={image: ("amd64",)})
    node = apply(decision)["spec"]["affinity"]["nodeAffinity"]
    assert node["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}
    ]
    assert decision.notes == (
        "required nodes of architecture amd64: registry.example.com/team/trainer:1 has no "
        "linux/arm64 (architecture fix)",
    )
    # An index of both: nothing; no answer: nothing.
    both = evaluate(
        obj, policies, config, inventory=nodes, image_platforms={image: ("amd64", "arm64")}
    )
    assert both.patch == []
    assert evaluate(obj, policies, config, inventory=nodes).patch == []
