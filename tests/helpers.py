"""Builders shared by the unit tests: CRL ConfigMaps, pods, workloads, evaluate + apply patch."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jsonpatch

from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import Decision, evaluate
from webhook.core.placement.inventory import NodeInventory
from webhook.core.policies.policyset import PolicySet

ROOT = Path(__file__).resolve().parents[1]
CONFIGMAPS = ROOT / "configmaps"
EXAMPLES = ROOT / "examples"
# The product's own fixtures: small manifests and AdmissionReviews written for these tests.
DATA = ROOT / "tests" / "data"
# The external corpus of upstream manifests and AdmissionReviews (not part of the repository):
# $GPU_WEBHOOK_CORPUS, else shared/corpus beside the clone. Tests that read it skip without it.
CORPUS = Path(os.environ.get("GPU_WEBHOOK_CORPUS") or ROOT.parent / "shared" / "corpus")
CORPUS_MISSING = (
    f"external corpus not found at {CORPUS}: set GPU_WEBHOOK_CORPUS=DIR or put shared/corpus "
    "beside the clone (the repository's own fixtures in tests/data run without it)"
)

VCORE = "tencent.com/vcuda-core"
VMEM = "tencent.com/vcuda-memory"
GPU = "nvidia.com/gpu"
GPUMEM = "nvidia.com/gpumem"
GPUCORES = "nvidia.com/gpucores"

CM_VCORE = "kube-public/cf-crl-gpu-manager-vcuda-core"
CM_VMEM = "kube-public/cf-crl-gpu-manager-vcuda-memory"
CM_GPU = "kube-public/cf-crl-nvidia-gpu"

_DEFAULT_DATA = {"dataType": "integer", "limits": "optional", "requests": "disabled"}


def short_key(key: str) -> str:
    return key.rsplit("/", 1)[-1].lower().replace(".", "-").replace("_", "-")


def crl(
    key: str,
    group: str,
    *,
    name: str | None = None,
    namespace: str | None = "kube-public",
    enabled: str | None = "true",
    type_label: str | None = "CustomResourceLimitation",
    group_label: str | None = None,
    created: str | None = None,
    **data: Any,
) -> dict[str, Any]:
    """A CRL ConfigMap for `key`; data fields as keyword arguments, None removes a field.

    Defaults: dataType integer, limits optional, requests disabled, data.group = group, and
    the name cf-crl-{group}-{short key}. A label argument of None removes that label.
    """
    fields: dict[str, Any] = {"key": key, "group": group, **_DEFAULT_DATA}
    fields.update(data)
    fields = {k: v for k, v in fields.items() if v is not None}
    labels = {
        "features.alauda.io/type": type_label,
        "features.alauda.io/group": group if group_label is None else group_label,
        "features.alauda.io/enabled": enabled,
    }
    meta: dict[str, Any] = {
        "name": name or f"cf-crl-{group}-{short_key(key)}",
        "labels": {k: v for k, v in labels.items() if v is not None},
    }
    if namespace is not None:
        meta["namespace"] = namespace
    if created is not None:
        meta["creationTimestamp"] = created
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": fields}


def policies(*configmaps: Mapping[str, Any]) -> PolicySet:
    return PolicySet.from_configmaps(configmaps)


def standard_policies() -> PolicySet:
    """Test-owned policies shaped like the shipped ones (so configmaps/ edits do not break tests).

    gpu-manager: vcuda-core (default 10, wholeUnit 100, requests disabled) + vcuda-memory
    (default 4, requests disabled); nvidia: nvidia.com/gpu (fromLimits, no default);
    hami: gpumem + gpucores (max 100).
    """
    return policies(
        crl(
            VCORE,
            "gpu-manager",
            defaultValue="10",
            wholeUnit="100",
            descriptionEn="vGPU compute, 100 per card",
        ),
        crl(VMEM, "gpu-manager", defaultValue="4", descriptionEn="vGPU memory in 256 MiB units"),
        crl(GPU, "nvidia", name="cf-crl-nvidia-gpu", requests="fromLimits"),
        crl(GPUMEM, "hami"),
        crl(GPUCORES, "hami", max="100"),
    )


def container(
    name: str = "c",
    image: str | None = "busybox:1.36",
    *,
    limits: Mapping[str, Any] | None = None,
    requests: Mapping[str, Any] | None = None,
    env: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name}
    if image is not None:
        c["image"] = image
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = dict(limits)
    if requests is not None:
        resources["requests"] = dict(requests)
    if resources:
        c["resources"] = resources
    if env is not None:
        c["env"] = env
    c.update(extra)
    return c


def pod(
    *containers: dict[str, Any],
    name: str = "train",
    namespace: str | None = "ml",
    annotations: Mapping[str, str] | None = None,
    init: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    body: dict[str, Any] = {"containers": list(containers)}
    if init is not None:
        body["initContainers"] = init
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


_API_VERSIONS = {
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "DaemonSet": "apps/v1",
    "ReplicaSet": "apps/v1",
    "Job": "batch/v1",
    "CronJob": "batch/v1",
}


def workload(kind: str, the_pod: Mapping[str, Any], name: str = "app") -> dict[str, Any]:
    """Wrap a pod (from `pod()`) as the template of a workload of `kind`."""
    meta = dict(the_pod["metadata"])
    namespace = meta.pop("namespace", None)
    meta.pop("name", None)
    template = {"metadata": meta, "spec": the_pod["spec"]}
    outer_meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        outer_meta["namespace"] = namespace
    if kind == "CronJob":
        spec: dict[str, Any] = {
            "schedule": "0 * * * *",
            "jobTemplate": {"spec": {"template": template}},
        }
    else:
        spec = {"template": template}
        if kind != "Job":
            spec["selector"] = {"matchLabels": {"app": name}}
    return {"apiVersion": _API_VERSIONS[kind], "kind": kind, "metadata": outer_meta, "spec": spec}


def run(
    obj: Mapping[str, Any],
    policy_set: PolicySet | None = None,
    config: WebhookConfig | None = None,
    *,
    inventory: NodeInventory | None = None,
    operation: str = "CREATE",
    violations_only: bool = False,
) -> Decision:
    """evaluate() with the standard test policies and the default config unless given."""
    return evaluate(
        obj,
        standard_policies() if policy_set is None else policy_set,
        config or WebhookConfig(),
        operation=operation,
        inventory=inventory,
        violations_only=violations_only,
    )


# The /dev/shm runtime fix is on by default (issue 39): every accelerator pod that mounts nothing
# at /dev/shm gets a `dshm` volume, its mount and one warning line. Tests of another rule (CUDA
# placement, env fixes, resources, workload kinds, ...) compare whole objects, patches and warning
# tuples, and a pod with nothing to do for that rule must show no change: they evaluate without
# the shm rule, through these helpers, and say so at the top of the module. What the rule adds
# with the shipped config is asserted in test_runtime_fixes.py, the CLI, audit and admission tests.
def without_shm(config: WebhookConfig | None = None) -> WebhookConfig:
    """`config` (default: the shipped one) with the /dev/shm fix switched off."""
    config = config or WebhookConfig()
    fixes = config.runtime_fixes
    shm = fixes.shm.model_copy(update={"enabled": False})
    return config.model_copy(update={"runtime_fixes": fixes.model_copy(update={"shm": shm})})


def load_without_shm(source: Any) -> WebhookConfig:
    """load_config(source) with the /dev/shm fix switched off (see `without_shm`)."""
    from webhook.core.config.model import load_config

    return without_shm(load_config(source))


def run_without_shm(
    obj: Mapping[str, Any],
    policy_set: PolicySet | None = None,
    config: WebhookConfig | None = None,
    **kw: Any,
) -> Decision:
    """run() with the /dev/shm fix switched off (see `without_shm`)."""
    return run(obj, policy_set, without_shm(config), **kw)


def assert_idempotent_without_shm(
    decision: Decision,
    policy_set: PolicySet | None = None,
    config: WebhookConfig | None = None,
    **kw: Any,
) -> None:
    """assert_idempotent() with the /dev/shm fix switched off (see `without_shm`)."""
    assert_idempotent(decision, policy_set, without_shm(config), **kw)


def apply(decision: Decision) -> dict[str, Any]:
    """The object the API server would store: the original with decision.patch applied."""
    assert decision.original is not None
    result: dict[str, Any] = jsonpatch.apply_patch(decision.original, decision.patch)
    return result


def get(obj: Any, *path: str | int) -> Any:
    """obj[path[0]][path[1]]...; None when a step is missing."""
    for part in path:
        if isinstance(obj, Mapping):
            obj = obj.get(part)
        elif isinstance(obj, list) and isinstance(part, int) and part < len(obj):
            obj = obj[part]
        else:
            return None
    return obj


def expr(key: str, operator: str, *values: int | str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": [str(v) for v in values]}


# The manual-label terms for CUDA ≥ 12.4 on a physical GPU: required D ≥ 12.4, with integer
# operators for the major too (SPEC §4); the default skew of 1 is a preference (below).
REQUIRED_12_4_TERMS = [
    {
        "matchExpressions": [
            expr("cuda-major-version", "Gt", 11),
            expr("cuda-major-version", "Lt", 13),
            expr("cuda-minor-version", "Gt", 3),
        ]
    },
    {"matchExpressions": [expr("cuda-major-version", "Gt", 12)]},
]


def preferred(max_major: int, *keys: str) -> list[dict[str, Any]]:
    """The major-skew preference: driver major ≤ `max_major`, weight 100, one term per scheme's
    major label key (default: the manual labels)."""
    return [
        {"weight": 100, "preference": {"matchExpressions": [expr(key, "Lt", max_major + 1)]}}
        for key in keys or ("cuda-major-version",)
    ]


# CUDA ≥ 12.4 with the default skew of 1: nodes with a driver major ≤ 13 are preferred.
PREFERRED_12_4_TERMS = preferred(13)


def preferred_terms(obj: Mapping[str, Any], *spec_path: str) -> Any:
    """preferredDuringScheduling node affinity of the pod spec at `spec_path` (default spec)."""
    return get(
        obj,
        *(spec_path or ("spec",)),
        "affinity",
        "nodeAffinity",
        "preferredDuringSchedulingIgnoredDuringExecution",
    )


def node_terms(obj: Mapping[str, Any], *spec_path: str) -> Any:
    """requiredDuringScheduling nodeSelectorTerms of the pod spec at `spec_path` (default spec)."""
    return get(
        obj,
        *(spec_path or ("spec",)),
        "affinity",
        "nodeAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
        "nodeSelectorTerms",
    )


def assert_idempotent(
    decision: Decision,
    policy_set: PolicySet | None = None,
    config: WebhookConfig | None = None,
    *,
    inventory: NodeInventory | None = None,
) -> None:
    """Evaluating the mutated object again yields no patch and no notes."""
    again = run(apply(decision), policy_set, config, inventory=inventory)
    assert again.patch == []
    assert again.notes == ()


def assert_stable(doc: Mapping[str, Any], policy_set: PolicySet, config: WebhookConfig) -> None:
    """evaluate() of a manifest document: its patch yields `mutated`, a second pass changes nothing.

    A WebhookError propagates: a document that cannot be evaluated fails the caller's test
    unless the caller expects exactly that error.
    """
    decision = evaluate(doc, policy_set, config)
    assert decision.handled or decision.patch == []
    if decision.mutated is None:
        assert decision.patch == []
        return
    mutated = apply(decision)
    assert mutated == decision.mutated
    again = evaluate(mutated, policy_set, config)
    assert again.patch == []
    assert again.notes == ()
    assert again.allowed == decision.allowed


async def eventually(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll until `check()` holds; the deadline only bounds a failing test."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.005)
