"""Every field the evaluation reads (Pods, templates, CRL ConfigMaps), set to every JSON type in
turn: the evaluation answers or refuses with a WebhookError (a clear denial), never another
exception (an "internal error").

Run by `make test` twice, on the source and on the mypyc-compiled core (tests/conftest.py):
compiled code checks declared types at run time, so a value typed `str` that is really an int
is a TypeError there and passes silently in Python. This walks each field the rules read.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.helpers import GPU, VCORE, standard_policies
from webhook.core.base.errors import WebhookError
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.placement.inventory import NodeInventory
from webhook.core.policies.crl import crl_configmap

POLICIES = standard_policies()
CONFIGS = [WebhookConfig(), load_config({"mutateTemplates": True, "noCompatibleNode": "deny"})]
INVENTORY = NodeInventory.build(
    {
        "gpu-1": {
            "nvidia.com/cuda.runtime-version.major": "12",
            "nvidia.com/cuda.runtime-version.minor": "4",
            "nvidia.com/gpu.compute.major": "8",
            "nvidia.com/gpu.compute.minor": "0",
        }
    }
)
VALUES: list[Any] = [None, 0, -1, 1.5, True, "", "x", [], ["a"], [1], {}, {"a": 1}]


def _container() -> dict[str, Any]:
    return {
        "name": "c",
        "image": "nvcr.io/nvidia/tritonserver:24.05-py3",
        "command": ["python"],
        "args": ["--x"],
        "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {}}],
        "envFrom": [],
        "resources": {
            "limits": {GPU: "1", VCORE: "50", "cpu": "1"},
            "requests": {GPU: "1"},
            "claims": [{"name": "gpu"}],
        },
    }


def _spec() -> dict[str, Any]:
    return {
        "nodeSelector": {"zone": "a"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [],
            }
        },
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
        "initContainers": [_container()],
        "containers": [_container()],
    }


def _metadata() -> dict[str, Any]:
    return {
        "name": "p",
        "namespace": "ml",
        "generateName": "p-",
        "labels": {"app": "p"},
        "annotations": {"gpu.alauda.io/cuda-version": "12.4"},
        "ownerReferences": [{"kind": "ReplicaSet", "name": "r", "controller": True}],
    }


def pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": _metadata(), "spec": _spec()}


def pod_template() -> dict[str, Any]:
    return {"metadata": _metadata(), "spec": _spec()}


def deployment() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ml"},
        "spec": {"template": pod_template()},
    }


def pytorchjob() -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j", "namespace": "ml"},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"template": pod_template()}}},
    }


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in `obj` (objects and list items), the leaves included."""
    found: list[tuple[Any, ...]] = []
    if not isinstance(obj, (dict, list)):
        return found
    items: Any = obj.items() if isinstance(obj, dict) else enumerate(obj)
    for key, value in items:
        found.append((*prefix, key))
        found += _paths(value, (*prefix, key))
    return found


def _with(obj: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    node: Any = changed
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return changed


def _crashes(obj: dict[str, Any]) -> list[str]:
    found = []
    for config in CONFIGS:
        for violations_only in (False, True):
            for inventory in (None, INVENTORY):
                try:
                    decision = evaluate(
                        obj,
                        POLICIES,
                        config,
                        violations_only=violations_only,
                        inventory=inventory,
                    )
                    decision.denial_message()
                    _ = decision.patch
                except WebhookError:
                    pass
                except Exception as exc:  # what this test is for
                    found.append(f"{type(exc).__name__}: {exc}")
    return found


def crl() -> dict[str, Any]:
    """A CRL ConfigMap (its own admission path, SPEC §6)."""
    return crl_configmap(
        "cf-crl-x",
        {"key": "example.com/x", "dataType": "integer", "limits": "optional", "default": "1"},
    )


@pytest.mark.parametrize("make", [pod, deployment, pytorchjob, crl], ids=lambda f: f.__name__)
def test_every_field_of_every_type_is_answered_or_refused_cleanly(make: Any) -> None:
    base = make()
    assert not _crashes(base)
    failures = []
    for path in _paths(base):
        for value in VALUES:
            for problem in _crashes(_with(base, path, value)):
                failures.append(f"{'/'.join(map(str, path))} = {value!r}: {problem}")
    assert not failures, "\n".join(failures[:30])


def test_a_namespace_that_is_not_a_string_is_no_namespace() -> None:
    obj = _with(pod(), ("metadata", "namespace"), 7)
    decision = evaluate(obj, POLICIES, WebhookConfig())
    assert decision.object_ref.startswith("Pod ")
    assert decision.allowed
