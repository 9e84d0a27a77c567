"""One review where one suffices (docs/operations/server.md "Reviews per pod"): under an access
entry that fails closed, the pods entries keep only the namespaces it exempts; a GPU pod gets
one mutating and one validating call, and no pod a Fail entry reviewed is left to fail open."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import NAMESPACE, Render
from .test_chart import WEBHOOK_KINDS, webhooks

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


def pod_create_reviews(hooks: dict[tuple[str, str], dict[str, Any]], namespace: str) -> list[Any]:
    """(kind, purpose, failurePolicy) of each entry a GPU pod's CREATE in `namespace` reaches
    (a GPU pod passes every pod matchCondition)."""
    found = []
    for (kind, purpose), hook in hooks.items():
        creates_pods = any(
            "pods" in rule["resources"] and "CREATE" in rule["operations"] for rule in hook["rules"]
        )
        if creates_pods and selects(hook["namespaceSelector"], NAMESPACES[namespace]):
            found.append((kind, purpose, hook["failurePolicy"]))
    return sorted(found)


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
    warn = webhooks(render({"config": {"gpuAccess": {"mode": "warn"}}}))
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


def test_under_warn_both_entries_stay_as_they_were(render: Render) -> None:
    """An Ignore access entry cannot take over the GPU pods' Fail review."""
    hooks = webhooks(render({"config": {"gpuAccess": {"mode": "warn"}}}))
    for kind in WEBHOOK_KINDS:
        assert hooks[(kind, "pods")]["failurePolicy"] == "Fail"
        assert hooks[(kind, "gpu-access")]["failurePolicy"] == "Ignore"
        assert [
            e["operator"] for e in hooks[(kind, "pods")]["namespaceSelector"]["matchExpressions"]
        ] == [
            "NotIn",
            "NotIn",
        ]


@pytest.mark.parametrize(
    "access",
    [
        {"mode": "enforce"},
        {"mode": "enforce", "exemptNamespaces": []},
        {"mode": "enforce", "exemptNamespaces": ["dcgm", "kube-system"]},
    ],
)
@pytest.mark.parametrize("pods_policy", ["Fail", "Ignore"])
def test_a_gpu_pod_gets_one_call_per_configuration_and_never_loses_a_fail_review(
    render: Render, access: dict[str, Any], pods_policy: str
) -> None:
    """In every namespace: at most one mutating and one validating call for a GPU pod's
    CREATE, and wherever an entry with failurePolicy Fail reviewed it before (the pods entry,
    or the access entry), one still does, on each configuration."""
    values: dict[str, Any] = {
        "config": {"gpuAccess": access},
        "webhooks": {"pods": {"failurePolicy": pods_policy}},
    }
    hooks = webhooks(render(values))
    # The chart as it was: the pods entries everywhere the namespace selector lets them.
    whole = {
        key: hook
        for key, hook in webhooks(
            render({**values, "config": {"gpuAccess": {**access, "mode": "warn"}}})
        ).items()
        if key[1] == "pods"
    }
    for namespace in NAMESPACES:
        after = pod_create_reviews(hooks, namespace)
        before = pod_create_reviews({**hooks, **whole}, namespace)
        for kind in WEBHOOK_KINDS:
            calls = [review for review in after if review[0] == kind]
            assert len(calls) <= 1, (namespace, after)
            had_fail = any(r[0] == kind and r[2] == "Fail" for r in before)
            assert any(r[2] == "Fail" for r in calls) == had_fail, (namespace, before, after)
            # Reviewed at all wherever it was before.
            assert bool(calls) == any(r[0] == kind for r in before), (namespace, before, after)
