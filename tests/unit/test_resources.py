"""CRL resource rules through evaluate() (SPEC §3): defaulting, every check, exact messages."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers import (
    CM_GPU,
    CM_VCORE,
    CM_VMEM,
    GPU,
    GPUCORES,
    VCORE,
    VMEM,
    apply,
    container,
    crl,
    get,
    pod,
    policies,
    standard_policies,
    workload,
)

# Tests of the CRL resource rules: evaluated without the /dev/shm fix (on by default), whose volume
# and warning would be in every pod here (tests/helpers.py `without_shm`; the rule's own tests:
# test_runtime_fixes.py).
from tests.helpers import (
    assert_idempotent_without_shm as assert_idempotent,
)
from tests.helpers import (
    run_without_shm as run,
)
from webhook.core.config.model import WebhookConfig
from webhook.core.policies.policyset import PolicySet

# CUDA affinity off: these tests look at resource rules only (no CUDA notes or warnings).
NO_CUDA = WebhookConfig(cuda_affinity=False)
VCORE_DESC = "vGPU compute, 100 per card"
VMEM_DESC = "vGPU memory in 256 MiB units"
EX = "example.com/widget"
CM_EX = "kube-public/cf-crl-ex-widget"


def ex_policies(**data: Any) -> PolicySet:
    """One policy for example.com/widget in group ex, plus whatever data is given."""
    return policies(crl(EX, "ex", **data))


def violation(
    field: str,
    value: str | None,
    problem: str,
    rule: str,
    cm: str = CM_EX,
    *,
    where: str = 'Pod ml/train, container "c"',
    description: str = "",
) -> str:
    shown = "" if value is None else f"={value!r}"
    text = f"{where}: {field}{shown} {problem} ({rule} in ConfigMap {cm})"
    if description:
        text += f". {description}"
    return text + "."


def messages(decision: Any) -> list[str]:
    return [v.message for v in decision.violations]


# --- defaulting --------------------------------------------------------------------------------


def test_default_limit_set_when_both_absent() -> None:
    original = pod(container(limits={VCORE: "50"}))
    decision = run(original, config=NO_CUDA)
    assert decision.allowed
    assert apply(decision)["spec"]["containers"][0]["resources"] == {
        "limits": {VCORE: "50", VMEM: "4"}
    }
    assert decision.patch == [
        {
            "op": "add",
            "path": "/spec/containers/0/resources/limits/tencent.com~1vcuda-memory",
            "value": "4",
        }
    ]
    assert decision.notes == ('defaulted tencent.com/vcuda-memory=4 in container "c"',)
    assert decision.mutation_kinds == ("resource-default",)
    assert decision.warnings == ()
    assert_idempotent(decision, config=NO_CUDA)


def test_default_applies_when_only_another_key_of_the_group_is_requested() -> None:
    decision = run(pod(container(limits={VMEM: "8"})), config=NO_CUDA)
    assert get(apply(decision), "spec", "containers", 0, "resources", "limits") == {
        VMEM: "8",
        VCORE: "10",
    }
    assert decision.notes == ('defaulted tencent.com/vcuda-core=10 in container "c"',)


@pytest.mark.parametrize("limits_policy", ["optional", "required"])
def test_default_written_to_limits_for_optional_and_required(limits_policy: str) -> None:
    ps = policies(
        crl(EX, "ex", name="cf-crl-ex-widget", limits=limits_policy, defaultValue="2"),
        crl("example.com/other", "ex", name="cf-crl-ex-other"),
    )
    decision = run(pod(container(limits={"example.com/other": "1"})), ps, NO_CUDA)
    assert decision.allowed
    assert get(apply(decision), "spec", "containers", 0, "resources", "limits", EX) == "2"


def test_no_default_when_limits_disabled() -> None:
    ps = policies(
        crl(
            EX,
            "ex",
            name="cf-crl-ex-widget",
            limits="disabled",
            requests="disabled",
            defaultValue="2",
        ),
        crl("example.com/other", "ex", name="cf-crl-ex-other"),
    )
    decision = run(pod(container(limits={"example.com/other": "1"})), ps, NO_CUDA)
    assert decision.patch == []
    assert decision.notes == ()
    assert decision.allowed


def test_no_default_when_a_request_is_present() -> None:
    # The key is "present" (in requests): rule 1 only fills a key that is absent from both.
    ps = policies(crl(EX, "ex", name="cf-crl-ex-widget", requests="required", defaultValue="2"))
    decision = run(pod(container(requests={EX: "1"}, limits={"cpu": "1"})), ps, NO_CUDA)
    assert get(apply(decision), "spec", "containers", 0, "resources") == {
        "requests": {EX: "1"},
        "limits": {"cpu": "1"},
    }


def test_requests_from_limits_copied() -> None:
    decision = run(pod(container(limits={GPU: "2"})), config=NO_CUDA)
    assert decision.allowed
    assert apply(decision)["spec"]["containers"][0]["resources"] == {
        "limits": {GPU: "2"},
        "requests": {GPU: "2"},
    }
    assert decision.notes == ('set requests.nvidia.com/gpu=2 from limits in container "c"',)
    assert decision.mutation_kinds == ("requests-from-limits",)
    assert_idempotent(decision, config=NO_CUDA)


def test_requests_from_limits_keeps_the_original_value_form() -> None:
    decision = run(pod(container(limits={GPU: 1})), config=NO_CUDA)  # a YAML integer
    assert get(apply(decision), "spec", "containers", 0, "resources", "requests") == {GPU: 1}


def test_requests_from_a_defaulted_limit() -> None:
    ps = policies(
        crl(EX, "ex", name="cf-crl-ex-widget", requests="fromLimits", defaultValue="3"),
        crl("example.com/other", "ex", name="cf-crl-ex-other"),
    )
    decision = run(pod(container(limits={"example.com/other": "1"})), ps, NO_CUDA)
    assert apply(decision)["spec"]["containers"][0]["resources"] == {
        "limits": {"example.com/other": "1", EX: "3"},
        "requests": {EX: "3"},
    }
    assert decision.notes == (
        'defaulted example.com/widget=3 in container "c"',
        'set requests.example.com/widget=3 from limits in container "c"',
    )
    assert decision.mutation_kinds == ("resource-default", "requests-from-limits")
    assert_idempotent(decision, ps, NO_CUDA)


def test_existing_request_not_overwritten_by_from_limits() -> None:
    decision = run(pod(container(limits={GPU: "1"}, requests={GPU: "1"})), config=NO_CUDA)
    assert decision.patch == []
    assert decision.notes == ()


# --- checks ------------------------------------------------------------------------------------


def test_limits_required_missing() -> None:
    ps = ex_policies(name="cf-crl-ex-widget", limits="required", requests="fromLimits")
    decision = run(pod(container(requests={EX: "1"})), ps, NO_CUDA)
    assert messages(decision) == [
        violation("limits.example.com/widget", None, "is required but not set", "limits: required")
    ]


def test_limits_required_message_exact() -> None:
    ps = policies(
        crl(
            EX,
            "ex",
            name="cf-crl-ex-widget",
            limits="required",
            requests="required",
            descriptionEn="Widgets, whole ones.",
        )
    )
    decision = run(pod(container(requests={EX: "1"})), ps, NO_CUDA)
    assert decision.denial_message() == (
        'Pod ml/train, container "c": limits.example.com/widget is required but not set '
        "(limits: required in ConfigMap kube-public/cf-crl-ex-widget). Widgets, whole ones."
    )


def test_limits_disabled_present() -> None:
    ps = ex_policies(name="cf-crl-ex-widget", limits="disabled", requests="disabled")
    decision = run(pod(container(limits={EX: "1"})), ps, NO_CUDA)
    assert messages(decision) == [
        violation("limits.example.com/widget", "1", "is not allowed", "limits: disabled")
    ]


@pytest.mark.parametrize(
    ("limits", "requests", "ok"),
    [
        ({EX: "1"}, None, True),  # limits satisfy requests: required (API server defaulting)
        (None, {EX: "1"}, True),
        ({EX: "1"}, {EX: "1"}, True),
        ({"cpu": "1"}, None, False),
    ],
)
def test_requests_required(
    limits: dict[str, str] | None, requests: dict[str, str] | None, ok: bool
) -> None:
    ps = policies(
        crl(EX, "ex", name="cf-crl-ex-widget", requests="required"),
        crl("example.com/other", "ex", name="cf-crl-ex-other"),
    )
    lim = {**(limits or {}), "example.com/other": "1"}
    decision = run(pod(container(limits=lim, requests=requests)), ps, NO_CUDA)
    if ok:
        assert decision.violations == ()
    else:
        assert messages(decision) == [
            violation(
                "requests.example.com/widget",
                None,
                "is required but not set (a limit also satisfies it)",
                "requests: required",
            )
        ]


@pytest.mark.parametrize(
    ("limit", "req"),
    [("100", "100"), ("1", "1000m"), ("1000m", "1"), (2, "2"), ("1k", "1000")],
)
def test_requests_disabled_pod_request_equal_to_limit_is_accepted(limit: Any, req: Any) -> None:
    # The API server copies limits into requests for Pods before admission (SetDefaults_Pod),
    # so req == lim on a Pod means "not set".
    decision = run(
        pod(container(limits={VCORE: limit, VMEM: "4"}, requests={VCORE: req})), config=NO_CUDA
    )
    assert decision.violations == ()
    assert decision.patch == []


@pytest.mark.parametrize(
    "kind", ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"]
)
def test_requests_disabled_template_request_equal_to_limit_is_judged_as_its_pods(kind: str) -> None:
    """Every pod made from the template has requests = limits, which the API server makes of
    a pod's limits anyway (SetDefaults_Pod): the pods are admitted, so the template is too
    (SPEC §6: a template is judged as its pods will be judged)."""
    obj = workload(kind, pod(container(limits={VCORE: "1", VMEM: "4"}, requests={VCORE: "1000m"})))
    assert messages(run(obj, config=NO_CUDA)) == []


def test_requests_disabled_request_without_limit_on_a_pod() -> None:
    decision = run(pod(container(limits={VMEM: "4"}, requests={VCORE: "50"})), config=NO_CUDA)
    assert messages(decision) == [
        violation(
            "requests.tencent.com/vcuda-core",
            "50",
            "is not allowed",
            "requests: disabled",
            CM_VCORE,
            description=VCORE_DESC,
        )
    ]


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("1", True),
        ("0", True),
        ("8", True),
        (8, True),
        ("1k", True),  # 1000
        ("1e1", True),
        ("500m", False),
        ("0.5", False),
        (0.5, False),
        ("-1", False),
        ("1.5", False),
    ],
)
def test_integer_data_type(value: Any, ok: bool) -> None:
    decision = run(pod(container(limits={VMEM: value, VCORE: "10"})), config=NO_CUDA)
    if ok:
        assert decision.violations == ()
    else:
        shown = value if isinstance(value, str) else str(value)
        assert messages(decision) == [
            violation(
                "limits.tencent.com/vcuda-memory",
                shown,
                "is not a whole number ≥ 0",
                "dataType: integer",
                CM_VMEM,
                description=VMEM_DESC,
            )
        ]


@pytest.mark.parametrize("value", ["abc", "$GPU_PER_NODE", True, [1]])
def test_not_a_quantity(value: Any) -> None:
    decision = run(pod(container(limits={VMEM: value, VCORE: "10"})), config=NO_CUDA)
    # Shown as written in the manifest (JSON spelling: true, not Python's True).
    shown = value if isinstance(value, str) else json.dumps(value)
    assert messages(decision) == [
        violation(
            "limits.tencent.com/vcuda-memory",
            shown,
            "is not a valid quantity",
            "dataType: integer",
            CM_VMEM,
            description=VMEM_DESC,
        )
    ]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        # Kubernetes rejects a number without a digit where its slow path reads it (issue 18).
        ("Pi", "is not a valid quantity"),
        ("e-10", "is not a valid quantity"),
        # Kubernetes keeps 1e4000 exactly; the webhook does not build a 4001-digit number.
        ("1e4000", "is too large to evaluate"),
    ],
)
def test_values_kubernetes_rejects_or_too_large(value: str, problem: str) -> None:
    decision = run(pod(container(limits={VMEM: value, VCORE: "10"})), config=NO_CUDA)
    assert messages(decision) == [
        violation(
            "limits.tencent.com/vcuda-memory",
            value,
            problem,
            "dataType: integer",
            CM_VMEM,
            description=VMEM_DESC,
        )
    ]


WHOLE_UNIT_PROBLEM = (
    "is above 100 but not a multiple of 100 (values up to 100 are fractional shares; above it "
    "only whole units 100, 200, 300… are allowed)"
)


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("1", True),
        ("50", True),
        ("100", True),
        ("150", False),
        ("200", True),
        ("250", False),
        ("1k", True),
    ],
)
def test_whole_unit_vcuda_core(value: str, ok: bool) -> None:
    decision = run(pod(container(limits={VCORE: value, VMEM: "4"})), config=NO_CUDA)
    if ok:
        assert decision.violations == ()
    else:
        assert messages(decision) == [
            violation(
                "limits.tencent.com/vcuda-core",
                value,
                WHOLE_UNIT_PROBLEM,
                "wholeUnit: 100",
                CM_VCORE,
                description=VCORE_DESC,
            )
        ]


@pytest.mark.parametrize(
    ("value", "problem", "rule"),
    [
        ("1", "is below the minimum 2", "min: 2"),
        ("2", "", ""),
        ("8", "", ""),
        ("9", "is above the maximum 8", "max: 8"),
    ],
)
def test_min_max(value: str, problem: str, rule: str) -> None:
    ps = ex_policies(name="cf-crl-ex-widget", min="2", max="8")
    decision = run(pod(container(limits={EX: value})), ps, NO_CUDA)
    expected = [violation("limits.example.com/widget", value, problem, rule)] if problem else []
    assert messages(decision) == expected


def test_hami_gpucores_max_from_standard_policies() -> None:
    decision = run(pod(container(limits={GPUCORES: "101"})), config=NO_CUDA)
    assert messages(decision) == [
        violation(
            "limits.nvidia.com/gpucores",
            "101",
            "is above the maximum 100",
            "max: 100",
            "kube-public/cf-crl-hami-gpucores",
        )
    ]


@pytest.mark.parametrize(("limit", "req"), [("2", "1"), ("1", "2"), ("1", "999m")])
def test_limit_and_request_differ(limit: str, req: str) -> None:
    decision = run(pod(container(limits={GPU: limit}, requests={GPU: req})), config=NO_CUDA)
    messages_ = messages(decision)
    overcommit = violation(
        "requests.nvidia.com/gpu",
        req,
        f"differs from limits ({limit}): extended resources cannot be overcommitted, set "
        "requests equal to limits or omit them",
        "requests = limits",
        CM_GPU,
    )
    assert overcommit in messages_


def test_limit_and_request_compared_by_value() -> None:
    decision = run(pod(container(limits={GPU: "1"}, requests={GPU: "1000m"})), config=NO_CUDA)
    assert decision.violations == ()


# --- scope -------------------------------------------------------------------------------------


def test_pod_without_gpu_resources_is_untouched() -> None:
    original = pod(
        container(limits={"cpu": "2", "memory": "4Gi"}, requests={"cpu": "1"}),
        annotations={"features.alauda.io/cuda-version": "12.4"},
    )
    decision = run(original)  # default config: CUDA affinity on
    assert decision.handled and decision.allowed
    assert decision.patch == []
    assert decision.mutated is None
    assert decision.notes == ()
    assert decision.warnings == ()
    assert decision.mutation_kinds == ()


def test_pod_with_unknown_extended_resource_is_untouched() -> None:
    decision = run(pod(container(limits={"example.org/fpga": "1"})))
    assert (decision.patch, decision.notes, decision.warnings) == ([], (), ())


def test_only_used_groups_are_evaluated() -> None:
    ps = policies(
        crl(EX, "ex", name="cf-crl-ex-widget", limits="required"),  # would fail if evaluated
        crl(VCORE, "gpu-manager", defaultValue="10"),
        crl(VMEM, "gpu-manager", defaultValue="4"),
    )
    decision = run(pod(container(limits={VCORE: "20"})), ps, NO_CUDA)
    assert decision.violations == ()
    assert get(apply(decision), "spec", "containers", 0, "resources", "limits") == {
        VCORE: "20",
        VMEM: "4",
    }


def test_init_containers_are_evaluated() -> None:
    original = pod(
        container("main", limits={GPU: "1"}, requests={GPU: "1"}),
        init=[container("warmup", limits={VCORE: "150"})],
    )
    decision = run(original, config=NO_CUDA)
    assert messages(decision) == [
        violation(
            "limits.tencent.com/vcuda-core",
            "150",
            WHOLE_UNIT_PROBLEM,
            "wholeUnit: 100",
            CM_VCORE,
            where='Pod ml/train, init container "warmup"',
            description=VCORE_DESC,
        )
    ]
    mutated = apply(decision)
    assert mutated["spec"]["initContainers"][0]["resources"]["limits"] == {VCORE: "150", VMEM: "4"}
    assert mutated["spec"]["containers"] == original["spec"]["containers"]
    assert decision.notes == ('defaulted tencent.com/vcuda-memory=4 in init container "warmup"',)


def test_ephemeral_containers_are_ignored() -> None:
    original = pod(
        container(limits={"cpu": "1"}),
        ephemeralContainers=[container("debug", limits={VCORE: "150"})],
    )
    decision = run(original)
    assert decision.allowed
    assert (decision.patch, decision.notes, decision.warnings) == ([], (), ())


def test_second_container_patched_at_its_index() -> None:
    original = pod(container("a", limits={"cpu": "1"}), container("b", limits={GPU: "1"}))
    decision = run(original, config=NO_CUDA)
    assert decision.patch == [
        {"op": "add", "path": "/spec/containers/1/resources/requests", "value": {GPU: "1"}}
    ]


def test_denial_lists_all_violations_of_all_containers() -> None:
    original = pod(
        container("a", limits={VCORE: "150", VMEM: "0.5"}),
        container("b", limits={GPU: "2"}, requests={GPU: "1"}),
    )
    decision = run(original, config=NO_CUDA)
    expected = [
        violation(
            "limits.tencent.com/vcuda-core",
            "150",
            WHOLE_UNIT_PROBLEM,
            "wholeUnit: 100",
            CM_VCORE,
            where='Pod ml/train, container "a"',
            description=VCORE_DESC,
        ),
        violation(
            "limits.tencent.com/vcuda-memory",
            "0.5",
            "is not a whole number ≥ 0",
            "dataType: integer",
            CM_VMEM,
            where='Pod ml/train, container "a"',
            description=VMEM_DESC,
        ),
        violation(
            "requests.nvidia.com/gpu",
            "1",
            "differs from limits (2): extended resources cannot be overcommitted, set requests "
            "equal to limits or omit them",
            "requests = limits",
            CM_GPU,
            where='Pod ml/train, container "b"',
        ),
    ]
    assert messages(decision) == expected
    assert not decision.allowed
    # SPEC §7: each policy's description appears once, after the list, not per violation.
    details = [m.removesuffix(f" {VCORE_DESC}.").removesuffix(f" {VMEM_DESC}.") for m in expected]
    assert decision.denial_message() == "\n".join(
        [
            "Pod ml/train: 3 GPU policy violations:",
            *(f"- {d}" for d in details),
            "About these policies:",
            f"- {CM_VCORE}: {VCORE_DESC}.",
            f"- {CM_VMEM}: {VMEM_DESC}.",
        ]
    )


def test_violation_fields_name_everything() -> None:
    decision = run(pod(container("train", limits={VCORE: "150"})), config=NO_CUDA)
    (v,) = decision.violations
    assert (v.object_ref, v.container, v.field, v.rule, v.configmap) == (
        "Pod ml/train",
        'container "train"',
        "limits.tencent.com/vcuda-core",
        "wholeUnit: 100",
        CM_VCORE,
    )
    # object, container, field, value, rule, ConfigMap and descriptionEn all in one sentence
    for part in (
        "Pod ml/train",
        '"train"',
        "limits.tencent.com/vcuda-core",
        "'150'",
        "wholeUnit: 100",
        CM_VCORE,
        VCORE_DESC,
    ):
        assert part in v.message


def test_generate_name_and_namespace_argument_in_messages() -> None:
    original = pod(container(limits={VCORE: "150"}), namespace=None)
    del original["metadata"]["name"]
    original["metadata"]["generateName"] = "job-"
    from webhook.core.evaluation.evaluate import evaluate

    decision = evaluate(original, standard_policies(), NO_CUDA, namespace="team")
    assert decision.violations[0].message.startswith('Pod team/job-*, container "c": ')


def test_pod_update_is_not_handled() -> None:
    decision = run(pod(container(limits={VCORE: "150"})), operation="UPDATE")
    assert not decision.handled
    assert decision.allowed


def test_exempt_namespace_is_untouched() -> None:
    decision = run(pod(container(limits={VCORE: "150"}), namespace="kube-system"))
    assert decision.handled
    assert decision.allowed
    assert decision.patch == []


# --- a key set to zero asks for nothing (SPEC §3) -----------------------------------------------

PADDLE = "paddlepaddle/paddle:2.6.1-gpu-cuda12.0-cudnn8.9-trt8.6"


@pytest.mark.parametrize(
    ("limits", "requests"),
    [
        ({VCORE: "0"}, None),
        ({VMEM: "0m"}, None),
        ({GPU: "0"}, None),
        ({GPU: 0}, None),
        ({GPU: "0"}, {GPU: "0"}),
        ({GPU: None}, None),  # JSON null: the API server reads it as zero
        ({VCORE: "0", VMEM: "0", GPU: "0", "cpu": "1"}, None),
    ],
)
def test_zero_uses_no_group_and_makes_no_gpu_container(
    limits: dict[str, Any], requests: dict[str, Any] | None
) -> None:
    # The default config: CUDA affinity and the Paddle env fix would both apply to a GPU
    # container with this image; a zero asks for no device, so nothing happens at all.
    original = pod(container(image=PADDLE, limits=limits, requests=requests))
    decision = run(original)
    assert decision.allowed
    assert apply(decision) == original
    assert decision.patch == []
    assert (decision.notes, decision.warnings) == ((), ())


def test_zero_in_a_used_group_is_a_value_not_a_default() -> None:
    original = pod(container(limits={VCORE: "50", VMEM: "0"}))
    decision = run(original, config=NO_CUDA)
    assert decision.allowed
    assert get(apply(decision), "spec", "containers", 0, "resources") == {
        "limits": {VCORE: "50", VMEM: "0"}
    }


@pytest.mark.parametrize(
    ("data", "resources", "expected"),
    [
        # Its own value checks still apply ...
        (
            {"min": "1"},
            {"limits": {EX: "0"}},
            [violation("limits.example.com/widget", "0", "is below the minimum 1", "min: 1")],
        ),
        (
            {"requests": "fromLimits"},
            {"limits": {EX: "0"}, "requests": {EX: "0.0001"}},
            [
                violation(
                    "requests.example.com/widget",
                    "0.0001",
                    "is not a whole number ≥ 0",
                    "dataType: integer",
                ),
                violation(
                    "requests.example.com/widget",
                    "0.0001",
                    "differs from limits (0): extended resources cannot be overcommitted, set "
                    "requests equal to limits or omit them",
                    "requests = limits",
                ),
            ],
        ),
        # ... but not the rules about asking for the key at all.
        ({"limits": "disabled", "requests": "disabled"}, {"limits": {EX: "0"}}, []),
        ({"limits": "required"}, {"limits": {"cpu": "1"}, "requests": {EX: "0"}}, []),
    ],
)
def test_zero_keeps_only_its_own_value_checks(
    data: dict[str, str], resources: dict[str, Any], expected: list[str]
) -> None:
    c = container(**resources)
    decision = run(pod(c), ex_policies(**data), NO_CUDA)
    assert messages(decision) == expected
    assert decision.patch == []


# --- a template request without a limit (kubernetes pkg/apis/core/validation) -----------------

NO_LIMIT = (
    "is not set but requests.{key} is: the API server rejects every pod made from this "
    'template ("Limit must be set for non overcommitable resources"); set limits instead'
)


@pytest.mark.parametrize("kind", ["Deployment", "Job", "CronJob"])
@pytest.mark.parametrize("value", ["1", "0"])
def test_template_request_without_limit_is_a_violation(kind: str, value: str) -> None:
    obj = workload(kind, pod(container(requests={GPU: value})))
    decision = run(obj, config=NO_CUDA)
    assert messages(decision) == [
        violation(
            "limits.nvidia.com/gpu",
            None,
            NO_LIMIT.format(key=GPU),
            "requests need limits",
            CM_GPU,
            where=f'{kind} ml/app, container "c"',
        )
    ]


def test_template_request_without_required_limit_is_reported_once() -> None:
    obj = workload("Deployment", pod(container(requests={EX: "1"})))
    decision = run(obj, ex_policies(limits="required", requests="fromLimits"), NO_CUDA)
    assert messages(decision) == [
        violation(
            "limits.example.com/widget",
            None,
            "is required but not set",
            "limits: required",
            where='Deployment ml/app, container "c"',
        )
    ]


def test_pod_request_without_limit_is_left_to_the_api_server() -> None:
    # On a Pod the API server's own validation says it, with its own message.
    decision = run(pod(container(requests={GPU: "1"})), config=NO_CUDA)
    assert decision.violations == ()


# --- a problem is reported once, on the field the user wrote -----------------------------------


@pytest.mark.parametrize(
    ("kind", "limits", "requests"),
    [
        ("Pod", {GPU: "1.5"}, None),  # request copied by the webhook (fromLimits)
        ("Deployment", {GPU: "1.5"}, None),  # same, template mutation off
        ("Pod", {GPU: "1.5"}, {GPU: "1.5"}),  # on a Pod the API server copies it
        ("Deployment", {GPU: "1.5"}, {GPU: "1500m"}),  # equal values, one problem
    ],
)
def test_problem_reported_once_on_the_limit(
    kind: str, limits: dict[str, str], requests: dict[str, str] | None
) -> None:

    the_pod = pod(container(limits=limits, requests=requests))
    obj = the_pod if kind == "Pod" else workload(kind, the_pod)
    where = 'Pod ml/train, container "c"' if kind == "Pod" else f'{kind} ml/app, container "c"'
    decision = run(obj, config=NO_CUDA)
    assert messages(decision) == [
        violation(
            "limits.nvidia.com/gpu",
            "1.5",
            "is not a whole number ≥ 0",
            "dataType: integer",
            CM_GPU,
            where=where,
        )
    ]


def test_different_request_keeps_its_own_problems() -> None:
    decision = run(pod(container(limits={GPU: "1.5"}, requests={GPU: "2.5"})), config=NO_CUDA)
    assert [v.field for v in decision.violations] == [
        "limits.nvidia.com/gpu",
        "requests.nvidia.com/gpu",
        "requests.nvidia.com/gpu",
    ]
    assert [v.rule for v in decision.violations] == [
        "dataType: integer",
        "dataType: integer",
        "requests = limits",
    ]


def test_zero_ungoverned_gpu_key_makes_no_gpu_container() -> None:
    # nvidia.com/gpu without any CRL is a GPU key by config (gpuResourceNames); "0" asks for none.
    original = pod(container(image="nvidia/cuda:12.4.1-base", limits={GPU: "0"}))
    decision = run(original, policies())
    assert (decision.patch, decision.notes, decision.warnings) == ([], (), ())
    asking = run(pod(container(image="nvidia/cuda:12.4.1-base", limits={GPU: "1"})), policies())
    assert asking.patch != []  # the same container asking for one GPU gets node affinity
