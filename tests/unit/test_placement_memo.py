"""Placement's memos (issue 40) answer what the general path computes: every decision made
with them warm (after every other object, config and inventory below ran) is the decision
made with them emptied first, on the benchmark's objects and on pods that reach each branch of
the CUDA terms (vGPU, minorVersion, the 11.0 driver terms, major skew, forward compatibility,
DRA-described nodes, an inventory and none)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from bench.harness.objects import _mix_objects
from tests.helpers import GPU, VCORE, container, pod, standard_policies, workload
from webhook.core.config.labels import ANNOTATION_CUDA_COMPATIBILITY, ANNOTATION_CUDA_VERSION
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.outcome.decision import Decision
from webhook.core.placement import cuda, needs, ranges
from webhook.core.placement.inventory import NodeInventory
from webhook.core.policies.policyset import PolicySet

POLICIES = standard_policies()
FORWARD = {
    "forwardCompatibleNodes": {
        "matchExpressions": [
            {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100"]}
        ]
    }
}
CONFIGS = [
    load_config({"registryLookups": {"publicRegistries": False}}),
    load_config(
        {"registryLookups": {"publicRegistries": False}, "cudaCompatibility": "minorVersion"}
    ),
    load_config({"registryLookups": {"publicRegistries": False}, "majorSkew": "prefer"}),
    load_config({"registryLookups": {"publicRegistries": False}, "majorSkew": "require"}),
    load_config({"registryLookups": {"publicRegistries": False}, **FORWARD}),
]


def _gfd(major: str, minor: str, **more: str) -> dict[str, str]:
    return {
        "nvidia.com/cuda.runtime-version.major": major,
        "nvidia.com/cuda.runtime-version.minor": minor,
        **more,
    }


INVENTORIES: list[NodeInventory | None] = [
    None,
    NodeInventory.build(
        {
            "a": _gfd("12", "4", **{"nvidia.com/gpu.compute.major": "8"}),
            "b": _gfd(
                "11",
                "0",
                **{"nvidia.com/gpu.compute.major": "3", "nvidia.com/gpu.compute.minor": "7"},
            ),
            "c": _gfd(
                "12",
                "2",
                **{
                    "nvidia.com/gpu.product": "NVIDIA-A100",
                    "nvidia.com/cuda.driver-version.major": "535",
                },
            ),
            "d": _gfd(
                "11",
                "0",
                **{
                    "nvidia.com/cuda.driver-version.major": "450",
                    "nvidia.com/cuda.driver-version.minor": "80",
                    "nvidia.com/cuda.driver-version.revision": "02",
                },
            ),
        }
    ),
]


def _env(**values: str) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in values.items()]


def _pods() -> Iterator[Mapping[str, Any]]:
    for obj, _, _ in _mix_objects():
        yield obj
    images = [
        "nvidia/cuda:12.4.1-runtime-ubuntu22.04",
        "nvidia/cuda:11.8.0-base-ubuntu22.04",
        "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime",
        "nvidia/cuda:13.0.0-base-ubuntu24.04",
        "python:3.12",
    ]
    for image in images:
        for key, value in ((GPU, "1"), (VCORE, "50"), (VCORE, "100"), (VCORE, "150")):
            yield pod(container("main", image, limits={key: value}))
        yield pod(
            container("a", image, limits={GPU: "1"}),
            container("b", "nvidia/cuda:12.8.0-base-ubuntu22.04", limits={GPU: "1"}),
        )
        yield workload("Deployment", pod(container("main", image, limits={GPU: "1"})))
    forward = "cuda>=12.8 brand=tesla,driver>=470,driver<471 brand=tesla,driver>=535,driver<536"
    yield pod(
        container(
            "fc",
            "x/y:1",
            limits={GPU: "1"},
            env=_env(CUDA_VERSION="12.8.1", NVIDIA_REQUIRE_CUDA=forward),
        )
    )
    yield pod(container("old", "x/y:1", limits={GPU: "1"}, env=_env(CUDA_VERSION="11.4")))
    yield pod(container("new", "x/y:1", limits={GPU: "1"}, env=_env(CUDA_VERSION="12.9")))
    annotated = pod(container("main", "x/y:1", limits={GPU: "1"}))
    annotated["metadata"]["annotations"] = {
        ANNOTATION_CUDA_VERSION: "12.2",
        ANNOTATION_CUDA_COMPATIBILITY: "backward",
    }
    yield annotated


def _seen(decision: Decision) -> str:
    return json.dumps(
        [
            decision.allowed,
            decision.patch,
            [str(w) for w in decision.warnings],
            [str(n) for n in decision.notes],
            [v.message for v in decision.violations],
            decision.placements,
            decision.cuda_unknown,
        ],
        default=str,
    )


def _evaluate(
    obj: Mapping[str, Any], config: WebhookConfig, inventory: NodeInventory | None
) -> str:
    policies: PolicySet = POLICIES
    return _seen(evaluate(obj, policies, config, inventory=inventory))


def _clear() -> None:
    ranges._PARTS.clear()
    cuda._RANGES.clear()
    cuda._DETECTIONS.clear()
    needs._LAST_UNITS.clear()


CASES = [
    (obj, config, inventory) for config in CONFIGS for inventory in INVENTORIES for obj in _pods()
]


def test_warm_memos_answer_as_emptied_ones() -> None:
    fresh = []
    for obj, config, inventory in CASES:
        _clear()
        fresh.append(_evaluate(obj, config, inventory))
    _clear()
    for obj, config, inventory in CASES:
        _evaluate(obj, config, inventory)  # every memo warm with every case
    warm = [_evaluate(obj, config, inventory) for obj, config, inventory in CASES]
    assert warm == fresh
    assert ranges._PARTS  # the memo was used
    # The cases reach each part of the CUDA terms.
    text = "\n".join(fresh)
    for said in ("on vGPU", "minorVersion", "450.80.02", "preferably <", "forwardCompatibleNodes"):
        assert said in text, said


@pytest.mark.parametrize("bound", [1, 2])
def test_memos_stay_bounded(bound: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ranges, "_MAX_PARTS", bound)
    monkeypatch.setattr(cuda, "_MAX_RANGES", bound)
    monkeypatch.setattr(cuda, "_MAX_DETECTIONS", bound)
    monkeypatch.setattr(needs, "_MAX_UNITS", bound)
    _clear()
    seen = [_evaluate(obj, config, inventory) for obj, config, inventory in CASES[:40]]
    assert len(ranges._PARTS) <= bound and len(cuda._RANGES) <= bound
    assert len(cuda._DETECTIONS) <= bound and len(needs._LAST_UNITS[0].units) <= bound
    _clear()
    assert seen == [_evaluate(obj, config, inventory) for obj, config, inventory in CASES[:40]]
