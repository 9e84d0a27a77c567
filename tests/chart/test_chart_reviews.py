"""One review where one suffices (docs/operations/server.md "Reviews per pod"): under an access
entry that fails closed, the pods entries keep only the namespaces it exempts; under an access
entry that is Ignore (`warn`), it leaves to the pods entries (Fail) the pod CREATEs they review.
A GPU pod gets one mutating and one validating call, every pod is reviewed wherever it was, and
no pod a Fail entry reviewed is left to fail open."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import DATA

from .conftest import NAMESPACE, Render
from .test_chart import WEBHOOK_KINDS, webhooks
from .test_chart_cel import ODD_POD_SPECS, corpus_objects, matches, pod_spec, uses_extended_resource

MUTATING, VALIDATING = WEBHOOK_KINDS
OPT_OUT = "gpu-admission-webhook.io/ignore"
# Namespaces as the API server labels them (kubernetes.io/metadata.name), and one opted out.
NAMESPACES: dict[str, dict[str, str]] = {
    name: {"kubernetes.io/metadata.name": name}
    for name in ("default", "ml-team", "gpu-operator", "nvidia-gpu-operator", "dcgm", "kube-system")
}
NAMESPACES[NAMESPACE] = {"kubernetes.io/metadata.name": NAMESPACE}
NAMESPACES["opted-out"] = {"kubernetes.io/metadata.name": "opted-out", OPT_OUT: "true"}


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A namespaceSelector of matchExpressions (In/NotIn/Exists) against a namespace's labels,
    as apimachinery's LabelSelectorAsSelector reads them (NotIn matches a missing label)."""
    for expression in selector.get("matchExpressions", []):
        value = labels.get(expression["key"])
        operator = expression["operator"]
        if operator == "In" and value not in expression["values"]:
            return False
        if operator == "NotIn" and value in expression["values"]:
            return False
        if operator == "Exists" and value is None:
            return False
    return True


# A pod asking for a GPU, one asking for none, one with a DRA claim (SPEC §6), one with nothing.
PODS: dict[str, dict[str, Any]] = {
    "gpu": {
        "metadata": {"name": "train"},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ]
        },
    },
    "cpu": {
        "metadata": {"name": "web"},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "nginx",
                    "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
                }
            ]
        },
    },
    "claim": {
        "metadata": {"name": "dra"},
        "spec": {"containers": [{"name": "app"}], "resourceClaims": [{"name": "gpu"}]},
    },
    "bare": {"metadata": {"name": "bare"}},
}


def reaches(hook: dict[str, Any], pod: dict[str, Any], operation: str) -> bool:
    """Whether the API server calls `hook` for `operation` on `pod` (rules on `pods`, and every
    matchCondition true, evaluated as the API server's CEL would)."""
    if not any("pods" in r["resources"] and operation in r["operations"] for r in hook["rules"]):
        return False
    return all(
        matches(condition["expression"], pod, operation)
        for condition in hook.get("matchConditions", [])
    )


def pod_create_reviews(
    hooks: dict[tuple[str, str], dict[str, Any]],
    namespace: str,
    pod: dict[str, Any] = PODS["gpu"],
    operation: str = "CREATE",
) -> list[Any]:
    """(kind, purpose, failurePolicy) of each entry a pod's CREATE (or `operation`) in
    `namespace` reaches."""
    found = []
    for (kind, purpose), hook in hooks.items():
        if reaches(hook, pod, operation) and selects(
            hook["namespaceSelector"], NAMESPACES[namespace]
        ):
            found.append((kind, purpose, hook["failurePolicy"]))
    return sorted(found)


def as_on_main(render: Render, values: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """The entries as the chart had them before one review sufficed: the pods entries in every
    namespace with their plain condition (as with GPU access control off), the access entry
    with no condition."""
    access = values.get("config", {}).get("gpuAccess", {})
    off = {**values, "config": {"gpuAccess": {**access, "mode": "off"}}}
    hooks = {k: v for k, v in webhooks(render(off)).items() if k[1] == "pods"}
    for key, hook in webhooks(render(values)).items():
        if key[1] == "gpu-access":
            hooks[key] = {k: v for k, v in hook.items() if k != "matchConditions"}
    return hooks


def same_but_namespaces(hook: dict[str, Any]) -> dict[str, Any]:
    kept = {k: v for k, v in hook.items() if k not in ("namespaceSelector", "clientConfig")}
    return {**kept, "service": hook["clientConfig"]["service"]}


@pytest.mark.parametrize(
    ("values", "narrowed_to"),
    [
        ({"config": {"gpuAccess": {"mode": "enforce"}}}, ["gpu-operator", "nvidia-gpu-operator"]),
        ({"config": {"gpuAccess": {"mode": "enforce", "exemptNamespaces": ["dcgm"]}}}, ["dcgm"]),
        # Fail set by hand under warn: the same reasoning holds.
        (
            {
                "config": {"gpuAccess": {"mode": "warn"}},
                "webhooks": {"gpuAccess": {"failurePolicy": "Fail"}},
            },
            ["gpu-operator", "nvidia-gpu-operator"],
        ),
    ],
)
def test_under_a_fail_closed_access_entry_pods_entries_keep_only_its_exempt_namespaces(
    render: Render, values: dict[str, Any], narrowed_to: list[str]
) -> None:
    # The pods entries as they are without GPU access control (plain condition, everywhere).
    warn = webhooks(render({"config": {"gpuAccess": {"mode": "off"}}}))
    hooks = webhooks(render(values))
    for kind in WEBHOOK_KINDS:
        pods, before = hooks[(kind, "pods")], warn[(kind, "pods")]
        # Everything but the namespaces as before: rules, failurePolicy, matchConditions...
        # (each render makes its own self-signed CA: the caBundle differs).
        assert same_but_namespaces(pods) == same_but_namespaces(before)
        assert pods["namespaceSelector"]["matchExpressions"] == [
            *before["namespaceSelector"]["matchExpressions"],
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": narrowed_to},
        ]
        assert hooks[(kind, "gpu-access")]["failurePolicy"] == "Fail"
        # A Fail access entry reviews every pod: no condition.
        assert "matchConditions" not in hooks[(kind, "gpu-access")]


@pytest.mark.parametrize(
    "access",
    [
        {"mode": "enforce", "exemptNamespaces": []},
        # Exempt only where no entry goes anyway.
        {"mode": "enforce", "exemptNamespaces": ["kube-system", NAMESPACE]},
    ],
)
def test_with_nothing_left_to_them_the_pods_entries_are_left_out(
    render: Render, access: dict[str, Any]
) -> None:
    hooks = webhooks(render({"config": {"gpuAccess": access}}))
    assert (MUTATING, "pods") not in hooks
    assert (VALIDATING, "pods") not in hooks
    assert {purpose for _, purpose in hooks} == {
        "workloads",
        "operators",
        "gpu-access",
        "crl-configmaps",
    }


ACCESS_CONDITION = "not-reviewed-by-the-pods-entry"


@pytest.mark.parametrize(
    "values",
    [
        {"config": {"gpuAccess": {"mode": "warn"}}},
        # The native access policies enforce while the webhook is down: the access entry is
        # Ignore under enforce too.
        {
            "config": {"gpuAccess": {"mode": "enforce"}},
            "nativePolicies": {"access": {"enabled": True}},
        },
    ],
)
def test_an_ignore_access_entry_leaves_the_pods_entries_their_pod_creates(
    render: Render, values: dict[str, Any]
) -> None:
    """The pods entries (Fail) keep their namespaces; the access entry's only condition is theirs
    negated, so theirs costs one operation more than its own on the same object: an object that
    costs the access entry's condition past the API server's CEL budget (the entry, Ignore, is
    then skipped) costs the pods entry's past it too, and the pods entry, Fail, rejects it."""
    hooks = webhooks(render(values, kube_version="v1.36.2"))
    for kind in WEBHOOK_KINDS:
        pods, access = hooks[(kind, "pods")], hooks[(kind, "gpu-access")]
        assert (pods["failurePolicy"], access["failurePolicy"]) == ("Fail", "Ignore")
        assert [e["operator"] for e in pods["namespaceSelector"]["matchExpressions"]] == [
            "NotIn",
            "NotIn",
        ]
        ((condition,), (theirs,)) = (access["matchConditions"], pods["matchConditions"])
        assert condition["name"] == ACCESS_CONDITION
        assert theirs == {
            "name": "uses-extended-resources",
            "expression": f"!({condition['expression']})",
        }
        assert access["timeoutSeconds"] == pods["timeoutSeconds"]
        assert access["clientConfig"]["service"]["path"] == pods["clientConfig"]["service"]["path"]


@pytest.mark.parametrize(
    ("values", "kube_version"),
    [
        # The pods entries at Ignore: a pod padded past their condition's budget is skipped by
        # them, so the access entry keeps every pod (docs/operations/deploy.md).
        ({"webhooks": {"pods": {"failurePolicy": "Ignore"}}}, "v1.30.0"),
        # No matchConditions before 1.28: nothing to narrow with.
        ({}, "v1.27.0"),
        ({"webhooks": {"matchConditions": {"enabled": False}}}, "v1.30.0"),
    ],
)
def test_otherwise_the_access_entry_keeps_every_pod(
    render: Render, values: dict[str, Any], kube_version: str
) -> None:
    hooks = webhooks(render(values, kube_version=kube_version))
    plain = webhooks(
        render({**values, "config": {"gpuAccess": {"mode": "off"}}}, kube_version=kube_version)
    )
    for kind in WEBHOOK_KINDS:
        assert "matchConditions" not in hooks[(kind, "gpu-access")]
        assert hooks[(kind, "pods")].get("matchConditions") == plain[(kind, "pods")].get(
            "matchConditions"
        )


def test_under_warn_every_pod_reaches_exactly_one_of_the_two_entries_on_create(
    render: Render,
) -> None:
    """On the repository's manifests and odd pods: a CREATE reaches the pods entry exactly when
    it asks for an extended resource (or a DRA claim), the access entry exactly otherwise; every
    UPDATE (the pods entry never sees one) reaches the access entry."""
    hooks = webhooks(render(kube_version="v1.30.0"))
    pods = [obj for _, obj in corpus_objects(DATA / "manifests") if obj["kind"] == "Pod"]
    pods += [{"spec": spec} for spec in ODD_POD_SPECS] + list(PODS.values())
    assert {
        uses_extended_resource(pod_spec({"kind": "Pod", **p})) for p in pods if "spec" in p
    } == {
        True,
        False,
    }
    for kind in WEBHOOK_KINDS:
        pods_entry, access = hooks[(kind, "pods")], hooks[(kind, "gpu-access")]
        for pod in pods:
            gpu = uses_extended_resource(pod.get("spec", {}))
            assert reaches(pods_entry, pod, "CREATE") is gpu, pod
            assert reaches(access, pod, "CREATE") is not gpu, pod
            assert reaches(access, pod, "UPDATE"), pod
            assert not reaches(pods_entry, pod, "UPDATE"), pod


@pytest.mark.parametrize(
    "access",
    [
        {"mode": "enforce"},
        {"mode": "enforce", "exemptNamespaces": []},
        {"mode": "enforce", "exemptNamespaces": ["dcgm", "kube-system"]},
        {"mode": "warn"},
        {"mode": "warn", "exemptNamespaces": []},
        {"mode": "warn", "exemptNamespaces": ["dcgm", "kube-system"]},
    ],
)
@pytest.mark.parametrize("pods_policy", ["Fail", "Ignore"])
@pytest.mark.parametrize("pod", sorted(PODS))
def test_a_gpu_pod_gets_one_call_per_configuration_and_never_loses_a_fail_review(
    render: Render, access: dict[str, Any], pods_policy: str, pod: str
) -> None:
    """In every namespace, for each kind of pod: at most one mutating and one validating call
    for a GPU pod's CREATE (unless the pods entries are Ignore under warn); every pod CREATE
    and UPDATE reviewed wherever it was before; and wherever an entry with failurePolicy Fail
    reviewed it before (the pods entry, or the access entry), one still does, on each
    configuration."""
    values: dict[str, Any] = {
        "config": {"gpuAccess": access},
        "webhooks": {"pods": {"failurePolicy": pods_policy}},
    }
    hooks = webhooks(render(values, kube_version="v1.30.0"))
    whole = as_on_main(lambda v: render(v, kube_version="v1.30.0"), values)
    for namespace in NAMESPACES:
        for operation in ("CREATE", "UPDATE"):
            after = pod_create_reviews(hooks, namespace, PODS[pod], operation)
            before = pod_create_reviews(whole, namespace, PODS[pod], operation)
            for kind in WEBHOOK_KINDS:
                calls = [review for review in after if review[0] == kind]
                # (Under warn with the pods entries at Ignore both entries stay.)
                one = pods_policy == "Fail" or access["mode"] == "enforce"
                if pod in ("gpu", "claim") and one:
                    assert len(calls) <= 1, (namespace, after)
                had_fail = any(r[0] == kind and r[2] == "Fail" for r in before)
                assert any(r[2] == "Fail" for r in calls) == had_fail, (namespace, before, after)
                # Reviewed at all wherever it was before.
                assert bool(calls) == any(r[0] == kind for r in before), (
                    namespace,
                    before,
                    after,
                )
