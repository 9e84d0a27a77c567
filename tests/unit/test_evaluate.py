"""evaluate() routing and Decision, CRL ConfigMap admission (SPEC §6), idempotence of examples."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import (
    CONFIGMAPS,
    EXAMPLES,
    GPU,
    VCORE,
    VMEM,
    apply,
    container,
    crl,
    pod,
    policies,
    run,
    standard_policies,
)
from webhook.core.config import WebhookConfig, load_config
from webhook.core.errors import ObjectShapeError, WebhookError
from webhook.core.evaluate import Decision, evaluate, evaluate_configmap, handles_kind
from webhook.sources.files import load_policy_dir, read_documents

G = "gpu-manager"


def admit_cm(cm: dict[str, Any], operation: str = "CREATE") -> Decision:
    return evaluate_configmap(cm, standard_policies(), operation=operation)


# --- CRL ConfigMap admission ---------------------------------------------------------------------


def test_valid_new_crl_allowed() -> None:
    decision = admit_cm(crl("example.com/npu", "npu", name="cf-crl-npu-npu"))
    assert decision.handled and decision.allowed
    assert decision.warnings == ()
    assert decision.patch == []


def test_invalid_crl_denied_with_every_error() -> None:
    cm = crl(
        "example.com/npu",
        "npu",
        name="cf-crl-npu-npu",
        limits="maybe",
        dataType="float",
        defaultValue="-1",
    )
    decision = admit_cm(cm)
    ref = "ConfigMap kube-public/cf-crl-npu-npu"
    assert [v.message for v in decision.violations] == [
        f"{ref}: data.dataType 'float' is not supported (supported: \"integer\").",
        f"{ref}: data.limits 'maybe' is not one of: disabled, required, optional.",
        f"{ref}: data.defaultValue must be a whole number ≥ 0, got '-1'.",
    ]
    assert decision.denial_message().startswith(f"{ref}: 3 GPU policy violations:\n- ")


def test_contradictory_limits_disabled_denied() -> None:
    decision = admit_cm(
        crl(
            "example.com/npu",
            "npu",
            name="cf-crl-npu-npu",
            limits="disabled",
            requests="fromLimits",
        )
    )
    assert decision.denial_message() == (
        "ConfigMap kube-public/cf-crl-npu-npu: limits: disabled with requests: fromLimits is "
        "contradictory: the API server requires a limit for every extended resource, so a "
        "disabled limit only makes sense with requests: disabled."
    )


def test_cf_crl_without_type_label_allowed_with_warning() -> None:
    decision = admit_cm(
        crl("example.com/npu", "npu", name="cf-crl-npu-npu", type_label=None, limits="bad")
    )
    assert decision.allowed
    assert decision.warnings == (
        "ConfigMap kube-public/cf-crl-npu-npu has no features.alauda.io/type label: it is not "
        "a CRL and is inactive",
    )


def test_crl_labelled_outside_kube_public_allowed_with_warning() -> None:
    decision = admit_cm(
        crl("example.com/npu", "npu", name="cf-crl-npu-npu", namespace="team", limits="bad")
    )
    assert decision.allowed
    assert decision.warnings == (
        "ConfigMap team/cf-crl-npu-npu is labelled as a CRL but CRLs are read from kube-public "
        "only: ignored",
    )


def test_unrelated_configmap_not_handled() -> None:
    decision = admit_cm(
        {"kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "kube-public"}}
    )
    assert not decision.handled and decision.allowed and decision.warnings == ()
    other_ns = admit_cm(
        {"kind": "ConfigMap", "metadata": {"name": "cf-crl-a-b", "namespace": "team"}}
    )
    assert not other_ns.handled


def test_duplicate_key_of_an_enabled_crl_denied() -> None:
    decision = admit_cm(crl(VCORE, "other", name="cf-crl-other-vcuda-core"))
    assert decision.denial_message() == (
        "ConfigMap kube-public/cf-crl-other-vcuda-core: key tencent.com/vcuda-core is already "
        "defined by the enabled ConfigMap kube-public/cf-crl-gpu-manager-vcuda-core; edit that "
        'one, disable it first, or set features.alauda.io/enabled: "false" here.'
    )
    assert decision.violations[0].rule == "unique key"


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_update_of_the_same_configmap_allowed(operation: str) -> None:
    decision = admit_cm(crl(VCORE, G, defaultValue="20", wholeUnit="100"), operation)
    assert decision.allowed


def test_disabled_duplicate_allowed_with_inactive_warning() -> None:
    decision = admit_cm(crl(VCORE, "other", name="cf-crl-other-vcuda-core", enabled="false"))
    assert decision.allowed
    assert decision.warnings == (
        "label features.alauda.io/enabled is 'false', not \"true\": this policy is inactive",
    )


def test_configmap_namespace_from_the_request() -> None:
    cm = crl("example.com/npu", "npu", name="cf-crl-npu-npu", namespace=None)
    decision = evaluate_configmap(
        cm, standard_policies(), operation="CREATE", namespace="kube-public"
    )
    assert decision.allowed and decision.warnings == ()
    # through evaluate() too, which routes ConfigMaps to evaluate_configmap
    routed = evaluate(cm, standard_policies(), WebhookConfig(), namespace="kube-public")
    assert routed.handled and routed.allowed


def test_configmap_unknown_field_warning_through_evaluate() -> None:
    decision = evaluate(
        crl("example.com/npu", "npu", name="cf-crl-npu-npu", unit="x"), policies(), WebhookConfig()
    )
    assert decision.allowed
    assert len(decision.warnings) == 1
    assert decision.warnings[0].startswith(
        "data.unit is not a CRL field and is ignored (known fields: "
    )
    assert len(decision.warnings[0]) <= 120


# --- routing and Decision ------------------------------------------------------------------------


def test_handles_kind_reexported() -> None:
    assert handles_kind("Pod") and handles_kind("CronJob") and not handles_kind("Service")


def test_kind_argument_overrides_object_kind() -> None:
    obj = pod(container(limits={VCORE: "150", VMEM: "4"}))
    del obj["kind"]
    assert not evaluate(obj, standard_policies(), WebhookConfig()).handled
    decision = evaluate(obj, standard_policies(), WebhookConfig(cuda_affinity=False), kind="Pod")
    assert decision.handled and not decision.allowed


@pytest.mark.parametrize("bad", [[], "pod", None, 1])
def test_non_object_raises_webhook_error(bad: Any) -> None:
    with pytest.raises(ObjectShapeError, match="the object must be a JSON object"):
        evaluate(bad, standard_policies(), WebhookConfig())


@pytest.mark.parametrize(
    "spec_change",
    [
        {"containers": [{"name": "c", "resources": []}]},
        {"containers": [{"name": "c", "resources": {"limits": ["x"]}}]},
        {"containers": [{"name": "c", "resources": {"requests": "1"}}]},
        {
            "containers": [
                {
                    "name": "c",
                    "image": "paddle",
                    "env": {"A": "1"},
                    "resources": {"limits": {VCORE: "1"}},
                }
            ]
        },
        {
            "affinity": "x",
            "containers": [
                {"name": "c", "image": "nvidia/cuda:12.0.0", "resources": {"limits": {GPU: "1"}}}
            ],
        },
    ],
)
def test_malformed_pods_raise_webhook_errors_only(spec_change: dict[str, Any]) -> None:
    obj = pod()
    obj["spec"] = spec_change
    with pytest.raises(WebhookError):
        run(obj)


def test_exempt_namespaces_from_config() -> None:
    config = load_config({"exemptNamespaces": ["gpu-ops"]})
    obj = pod(container(limits={VCORE: "150"}), namespace="gpu-ops")
    decision = run(obj, config=config)
    assert decision.allowed and decision.patch == [] and decision.notes == ()
    # kube-system is no longer exempt once the list is replaced
    assert not run(
        pod(container(limits={VCORE: "150"}), namespace="kube-system"), config=config
    ).allowed


def test_decision_of_an_untouched_pod() -> None:
    decision = run(pod(container()))
    assert decision == Decision(object_ref="Pod ml/train", original=decision.original, mutated=None)
    assert decision.patch == []


def test_mutated_equals_patched_original() -> None:
    decision = run(
        pod(
            container(
                image="paddlepaddle/paddle:2.6.1-gpu-cuda12.0-cudnn8.9-trt8.6", limits={VCORE: "50"}
            )
        )
    )
    assert decision.mutated is not None
    assert apply(decision) == decision.mutated


def test_warnings_are_deduplicated() -> None:
    obj = pod(
        container("a", "busybox", limits={GPU: "1"}, requests={GPU: "1"}),
        annotations={"features.alauda.io/cuda-version": "x"},
    )
    decision = run(obj)
    assert len(decision.warnings) == len(set(decision.warnings))


# --- idempotence of the shipped examples ---------------------------------------------------------


def _example_documents() -> list[dict[str, Any]]:
    return [d for d in read_documents(EXAMPLES / "pods.yaml") if isinstance(d, dict)]


@pytest.mark.parametrize("mutate_templates", [False, True])
@pytest.mark.parametrize("index", range(len(_example_documents())))
def test_examples_are_idempotent(index: int, mutate_templates: bool) -> None:
    shipped = load_policy_dir(CONFIGMAPS)
    config = load_config({"mutateTemplates": mutate_templates})
    doc = _example_documents()[index]
    decision = evaluate(doc, shipped, config)
    again = evaluate(apply(decision), shipped, config)
    assert again.patch == []
    if decision.mutated is not None:
        assert again.notes == ()
    assert [v.message for v in again.violations] == [v.message for v in decision.violations]


def test_examples_outcome() -> None:
    shipped = load_policy_dir(CONFIGMAPS)
    verdicts = [evaluate(d, shipped, WebhookConfig()).allowed for d in _example_documents()]
    assert verdicts == [True, True, False]


def test_cf_crl_with_a_misspelt_type_label_is_denied() -> None:
    # A typo in the type value must not leave a policy silently inactive.
    cm = crl(VCORE, G, name="cf-crl-gpu-manager-vcuda-core", type_label="CustomResourceLimitaion")
    decision = admit_cm(cm)
    assert [v.message for v in decision.violations] == [
        "ConfigMap kube-public/cf-crl-gpu-manager-vcuda-core: label features.alauda.io/type must "
        "be 'CustomResourceLimitation', got 'CustomResourceLimitaion'."
    ]


def test_other_feature_type_configmap_not_handled() -> None:
    # features.alauda.io/type is shared with other feature types: only its CRL value (or a
    # cf-crl-* name, see above) makes the webhook treat a ConfigMap as a policy.
    cm = {
        "kind": "ConfigMap",
        "metadata": {
            "name": "feature-flags",
            "namespace": "kube-public",
            "labels": {"features.alauda.io/type": "SomethingElse"},
        },
        "data": {"anything": "goes"},
    }
    decision = admit_cm(cm)
    assert not decision.handled and decision.allowed and decision.warnings == ()


# --- turning a CRL off is always allowed (SPEC §6, CRL ConfigMap updates) -------------------------


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
@pytest.mark.parametrize("enabled", ["false", "False", "", None])
def test_disabling_a_broken_crl_is_allowed_with_its_errors_as_warnings(
    operation: str, enabled: str | None
) -> None:
    cm = crl("example.com/npu", "npu", name="cf-crl-npu-npu", enabled=enabled, defaultValue="４")
    decision = admit_cm(cm, operation)
    assert decision.handled and decision.allowed
    assert decision.patch == []
    label = (
        'label features.alauda.io/enabled: "true" is missing (use "false" to disable)'
        if enabled is None
        else f'label features.alauda.io/enabled is {enabled!r}, not "true": this policy is inactive'
    )
    # Each warning is cut at 120 characters (the API server's limits, SPEC §6).
    assert decision.warnings == (
        label,
        "data.defaultValue: '４' is not a Kubernetes quantity (expected a number with an optional "
        "suffix such as 1, 100, 1k, 500m…",
    )


def test_enabled_crl_with_a_unicode_digit_default_is_denied() -> None:
    cm = crl("example.com/npu", "npu", name="cf-crl-npu-npu", defaultValue="４")
    decision = admit_cm(cm)
    assert decision.denial_message() == (
        "ConfigMap kube-public/cf-crl-npu-npu: data.defaultValue: '４' is not a Kubernetes "
        "quantity (expected a number with an optional suffix such as 1, 100, 1k, 500m, 1e3 or "
        "2Gi)."
    )
