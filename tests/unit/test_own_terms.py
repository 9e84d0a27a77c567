"""The webhook's own terms are its own (SPEC §4, issue 28 item 5 a and b): affinity the webhook
injected earlier is recognised and recomputed, never taken for the user's own CUDA affinity.

a. With `mutateTemplates: true`, `kubectl set image` from a CUDA 12.4 image to a 12.8 one must
   replace the template's "≥ 12.4" terms (it kept them, with a "kept as is" warning).
b. After another mutating webhook appends an expression to each term, the reinvoked webhook must
   see its own terms (it warned that the user's node affinity was "kept as is").
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.helpers import (
    GPU,
    PREFERRED_12_4_TERMS,
    REQUIRED_12_4_TERMS,
    apply,
    container,
    expr,
    node_terms,
    pod,
    preferred,
    preferred_terms,
    workload,
)
from tests.unit.test_cuda_rules import (
    AT_LEAST_12_4,
    FC,
    FC_EXPR,
    PRODUCT,
    REQUIRE_12_8,
    fc_term,
    terms,
)
from webhook.core.base.versions import CudaVersion
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.evaluation.evaluate import Decision, evaluate
from webhook.core.images.facts import ImageQuery, Requirement
from webhook.core.images.requires import forward_branches
from webhook.core.policies.policyset import PolicySet

MUTATING = load_config({"mutateTemplates": True})
MAJOR, MINOR = "cuda-major-version", "cuda-minor-version"
MARK = "features.alauda.io/injected-node-affinity"
TPL = ("spec", "template", "spec")
ZONE = expr("topology.kubernetes.io/zone", "In", "a")
POOL = expr("pool", "In", "gpu")  # what "another mutating webhook" appends to every term

REQUIRED_12_8_TERMS = [
    {"matchExpressions": [expr(MAJOR, "Gt", 11), expr(MAJOR, "Lt", 13), expr(MINOR, "Gt", 7)]},
    {"matchExpressions": [expr(MAJOR, "Gt", 12)]},
]
REQUIRED_13_0_TERMS = [{"matchExpressions": [expr(MAJOR, "Gt", 12)]}]
NOTE_12_8 = "required GPU nodes with CUDA ≥ 12.8 (image nvidia/cuda:12.8.0), preferably < 14.0"


def review(
    obj: dict[str, Any],
    config: WebhookConfig = MUTATING,
    *,
    old: dict[str, Any] | None = None,
) -> Decision:
    return evaluate(
        obj,
        PolicySet.empty(),
        config,
        operation="UPDATE" if old is not None else "CREATE",
        old_object=old,
    )


def deployment(image: str, **spec: Any) -> dict[str, Any]:
    c = container(image=image, limits={GPU: "1"})
    return workload("Deployment", pod(c, **spec), name="serve")


def set_image(obj: dict[str, Any], image: str) -> dict[str, Any]:
    """`kubectl set image deployment/serve c=<image>`: only the image changes."""
    new = copy.deepcopy(obj)
    new["spec"]["template"]["spec"]["containers"][0]["image"] = image
    return new


def made_pod(deploy: dict[str, Any]) -> dict[str, Any]:
    """The pod the ReplicaSet makes from the Deployment's template (owner reference aside)."""
    template = copy.deepcopy(deploy["spec"]["template"])
    meta = {**template.get("metadata", {}), "name": "serve-abc", "namespace": "ml"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}


def test_set_image_replaces_the_terms_the_webhook_injected_into_the_template() -> None:
    created = apply(review(deployment("nvidia/cuda:12.4.1")))
    assert node_terms(created, *TPL) == REQUIRED_12_4_TERMS
    assert preferred_terms(created, *TPL) == PREFERRED_12_4_TERMS
    assert MARK in created["spec"]["template"]["metadata"]["annotations"]

    updated = set_image(created, "nvidia/cuda:12.8.0")
    decision = review(updated, old=created)
    assert decision.allowed
    assert decision.warnings == ()
    assert decision.notes == (NOTE_12_8,)
    stored = apply(decision)
    assert node_terms(stored, *TPL) == REQUIRED_12_8_TERMS
    assert preferred_terms(stored, *TPL) == PREFERRED_12_4_TERMS  # same major: preferably < 14
    # Every pod made from it keeps exactly those terms: no patch, no warning.
    again = review(made_pod(stored))
    assert again.patch == [] and again.warnings == () and again.notes == ()
    # Applying the template again changes nothing either.
    assert review(stored, old=updated).patch == []


def test_a_new_major_replaces_the_preference_too_and_keeps_the_users_own_terms() -> None:
    user = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [ZONE]}]}}}  # fmt: skip
    created = apply(review(deployment("nvidia/cuda:12.4.1", affinity=user)))
    updated = set_image(created, "nvidia/cuda:13.0.0")
    decision = review(updated, old=created)
    assert decision.warnings == ()
    stored = apply(decision)
    assert node_terms(stored, *TPL) == [{"matchExpressions": [ZONE, expr(MAJOR, "Gt", 12)]}]
    assert preferred_terms(stored, *TPL) == preferred(14)


def test_the_users_own_cuda_affinity_is_still_kept_as_is() -> None:
    """Terms of exactly the webhook's shape, written by the user (no mark): the user's."""
    user = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": REQUIRED_12_4_TERMS}}}  # fmt: skip
    decision = review(deployment("nvidia/cuda:12.8.0", affinity=user))
    assert decision.warnings == (
        f"your node affinity on {MAJOR} is kept as is; this pod needs CUDA ≥ 12.8, "
        "preferably < 14.0",
    )
    assert node_terms(apply(decision), *TPL) == REQUIRED_12_4_TERMS


def test_a_stale_mark_does_not_make_the_users_edited_terms_ours() -> None:
    created = apply(review(deployment("nvidia/cuda:12.4.1")))
    edited = copy.deepcopy(created)
    terms = node_terms(edited, *TPL)
    terms[1]["matchExpressions"] = [expr(MAJOR, "In", "13")]  # the user narrowed one term
    updated = set_image(edited, "nvidia/cuda:12.8.0")
    decision = review(updated, old=edited)
    assert decision.warnings == (
        f"your node affinity on {MAJOR} is kept as is; this pod needs CUDA ≥ 12.8, "
        "preferably < 14.0",
    )
    assert node_terms(apply(decision), *TPL) == terms


def with_pool(obj: dict[str, Any], *spec_path: str) -> dict[str, Any]:
    """Another mutating webhook appends its expression to every required term."""
    new = copy.deepcopy(obj)
    for term in node_terms(new, *spec_path):
        term["matchExpressions"].append(POOL)
    return new


def test_reinvocation_after_another_webhook_appended_to_each_term() -> None:
    c = container(image="nvidia/cuda:12.4.1", limits={GPU: "1"})
    user = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [ZONE]}]}}}  # fmt: skip
    specs: list[dict[str, Any]] = [{}, {"affinity": user}]
    for spec in specs:
        first = apply(review(pod(c, **spec), WebhookConfig()))
        reinvoked = review(with_pool(first), WebhookConfig())
        assert reinvoked.warnings == ()
        assert reinvoked.patch == []


def test_reinvocation_on_a_mutated_template_after_another_webhook() -> None:
    created = apply(review(deployment("nvidia/cuda:12.4.1")))
    reinvoked = review(with_pool(created, *TPL))
    assert reinvoked.warnings == ()
    assert reinvoked.patch == []


# --- the forward-compatibility term is the webhook's own too (issue 37 defect 2) --------------

FC_MUTATING = FC.model_copy(update={"mutate_templates": True})
REQUIRE_12_4 = (
    "cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=tesla,driver>=525,driver<526 "
    "brand=tesla,driver>=535,driver<536"
)
APP = "registry.example/team/app"
# What the images' registries say (SPEC §4 step 6): v1 is built on CUDA 12.4, v2 on 12.8.
IMAGES = {
    ImageQuery(f"{APP}:v1"): Requirement(
        CudaVersion(12, 4),
        "image config CUDA_VERSION=12.4.1",
        forward_branches({"NVIDIA_REQUIRE_CUDA": REQUIRE_12_4}),
    ),
    ImageQuery(f"{APP}:v2"): Requirement(
        CudaVersion(12, 8),
        "image config CUDA_VERSION=12.8.1",
        forward_branches({"NVIDIA_REQUIRE_CUDA": REQUIRE_12_8}),
    ),
}
PRODUCT_A100 = expr(PRODUCT, "In", "NVIDIA-A100-SXM4-80GB")  # a user's, on a key FC uses


def review_fc(
    obj: dict[str, Any], config: WebhookConfig = FC_MUTATING, old: dict[str, Any] | None = None
) -> Decision:
    return evaluate(
        obj,
        PolicySet.empty(),
        config,
        operation="UPDATE" if old is not None else "CREATE",
        old_object=old,
        images=IMAGES,
    )


def fc_deployment(image: str, **spec: Any) -> dict[str, Any]:
    c = container(image=image, limits={GPU: "1"})
    return workload("Deployment", pod(c, **spec), name="serve")


@pytest.mark.parametrize("user", [None, [PRODUCT_A100], [ZONE]])
def test_set_image_replaces_the_forward_compatibility_term_too(user: list[Any] | None) -> None:
    affinity = None
    if user is not None:
        affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": user}]}}}  # fmt: skip
    spec = {"affinity": affinity} if affinity else {}
    created = apply(review_fc(fc_deployment(f"{APP}:v1", **spec)))
    ours_12_4 = [*terms(*AT_LEAST_12_4), {"matchExpressions": fc_term(470, 525, 535)}]
    user_exprs = user or []
    assert node_terms(created, *TPL) == [
        {"matchExpressions": [*user_exprs, *t["matchExpressions"]]} for t in ours_12_4
    ]

    updated = set_image(created, f"{APP}:v2")
    decision = review_fc(updated, old=created)
    assert decision.warnings == ()
    assert decision.notes == (
        "required GPU nodes with CUDA ≥ 12.8 (image config CUDA_VERSION=12.8.1), preferably < 14.0",
        "or driver 470, 535, 550, 560, 565 on forwardCompatibleNodes (forward compatibility the "
        "image declares)",
    )
    stored = apply(decision)
    ours_12_8 = [*REQUIRED_12_8_TERMS, {"matchExpressions": fc_term(470, 535, 550, 560, 565)}]
    assert node_terms(stored, *TPL) == [
        {"matchExpressions": [*user_exprs, *t["matchExpressions"]]} for t in ours_12_8
    ]
    # The pods made from it keep exactly those terms; applying it again changes nothing.
    again = review_fc(made_pod(stored))
    assert again.patch == [] and again.warnings == ()
    assert review_fc(stored, old=updated).patch == []


@pytest.mark.parametrize("user", [[PRODUCT_A100], [expr(PRODUCT, "In", *FC_EXPR["values"])]])
def test_reinvocation_with_the_users_affinity_on_a_forward_compatible_nodes_key(
    user: list[Any],
) -> None:
    """A user's expression on nvidia.com/gpu.product (even one equal to forwardCompatibleNodes'
    own) is the user's: no "kept as is" when the webhook is invoked again."""
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": user}]}}}  # fmt: skip
    c = container(image=f"{APP}:v2", limits={GPU: "1"})
    first = review_fc(pod(c, affinity=affinity), FC)
    mutated = apply(first)
    assert node_terms(mutated)[-1] == {
        "matchExpressions": [*user, *fc_term(470, 535, 550, 560, 565)]
    }
    for again in (mutated, with_pool(mutated)):
        reinvoked = review_fc(again, FC)
        assert reinvoked.warnings == ()
        assert reinvoked.patch == []


def test_set_image_under_minor_version_replaces_the_multi_expression_preference() -> None:
    """minorVersion prefers "12.x with x ≥ 4": a preferred term of three expressions, which is
    the webhook's own too (it was taken for the user's: "kept as is" after the image change)."""
    config = load_config({"mutateTemplates": True, "cudaCompatibility": "minorVersion"})
    created = apply(review(deployment("nvidia/cuda:12.4.1"), config))
    updated = set_image(created, "nvidia/cuda:12.8.0")
    decision = review(updated, config, old=created)
    assert decision.warnings == ()
    stored = apply(decision)
    assert node_terms(stored, *TPL) == [{"matchExpressions": [expr(MAJOR, "Gt", 11)]}]
    assert preferred_terms(stored, *TPL)[0]["preference"]["matchExpressions"] == [
        expr(MAJOR, "Gt", 11),
        expr(MAJOR, "Lt", 13),
        expr(MINOR, "Gt", 7),
    ]
    assert review(made_pod(stored), config).patch == []
