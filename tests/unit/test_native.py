"""export-policies: the generated objects and the command's output (no API server needed;
tests/native compares their verdicts with the webhook's on a real one)."""

from __future__ import annotations

import io
import json
from typing import Any

import yaml

from webhook.cli import main
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.updates import update_reads
from webhook.core.policies.crl import crl_configmap, parse_configmap
from webhook.core.policies.native import export, group_keys
from webhook.core.policies.native_cost import (
    PER_CALL_LIMIT,
    cost_problem,
    estimated_cost,
    estimated_update_cost,
)

READS = update_reads(WebhookConfig())


def limitation(key: str, group: str) -> object:
    cm = crl_configmap(
        f"cf-crl-{group}-{key.rsplit('/', 1)[-1]}",
        {
            "key": key,
            "dataType": "integer",
            "group": group,
            "limits": "optional",
            "requests": "fromLimits",
        },
    )
    parsed = parse_configmap(cm)
    assert parsed.limitation is not None, parsed.errors
    return parsed.limitation


def test_binding_reads_every_enabled_crl_of_kube_public_as_params() -> None:
    policy, binding = export([], reads=READS, exempt_namespaces=("kube-system", "ops")).objects
    assert policy["spec"]["paramKind"] == {"apiVersion": "v1", "kind": "ConfigMap"}
    assert binding["spec"]["paramRef"] == {
        "namespace": "kube-public",
        "selector": {
            "matchLabels": {
                "features.alauda.io/type": "CustomResourceLimitation",
                "features.alauda.io/enabled": "true",
            }
        },
        "parameterNotFoundAction": "Allow",
    }
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"] == [
        {
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": ["kube-system", "ops"],
        }
    ]
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert {r: rule["operations"] for rule in rules for r in rule["resources"]} == {
        "pods": ["CREATE"],
        **{
            r: ["CREATE", "UPDATE"]
            for r in (
                "deployments",
                "statefulsets",
                "daemonsets",
                "replicasets",
                "jobs",
                "cronjobs",
            )
        },
    }


def test_only_groups_of_several_keys_are_written_into_the_policy() -> None:
    lims = [
        limitation("example.com/a", "two"),
        limitation("example.com/b", "two"),
        limitation("example.com/c", "one"),
    ]
    assert group_keys(lims) == {"two": ["example.com/a", "example.com/b"]}  # type: ignore[arg-type]
    policy = export(lims, reads=READS).objects[0]  # type: ignore[arg-type]
    (table,) = [v["expression"] for v in policy["spec"]["variables"] if v["name"] == "groupKeys"]
    assert '{"two": ["example.com/a", "example.com/b"]}' in table
    assert "example.com/c" not in table
    assert json.loads(policy["metadata"]["annotations"]["gpu-webhook.dev/groups"]) == {
        "two": ["example.com/a", "example.com/b"]
    }


def test_cost_refuses_a_group_too_large_for_the_per_expression_limit() -> None:
    assert cost_problem({"gpu-manager": ["a", "b"]}) == ""
    assert estimated_cost({"gpu-manager": ["a", "b"]}) < PER_CALL_LIMIT
    huge = {"huge": [f"example.com/k{i}" for i in range(600)]}
    assert cost_problem(huge).startswith("group 'huge' has 600 keys: a Pod of 64 containers")


def test_command_lists_what_is_not_expressed_and_exits_0() -> None:
    out = io.StringIO()
    assert main(["export-policies", "--policies", "configmaps"], out) == 0
    text = out.getvalue()
    assert "gpu-manager (2 keys), hami (3 keys)" in text
    assert "#  - CUDA node affinity" in text and "#  - DRA resource claims" in text
    assert "kind: ValidatingAdmissionPolicyBinding" in text


def test_json_output_is_a_list() -> None:
    out = io.StringIO()
    assert main(["export-policies", "--policies", "configmaps", "-o", "json"], out) == 0
    kinds = [o["kind"] for o in json.loads(out.getvalue())["items"]]
    assert kinds == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]


def test_a_folder_without_crls_is_unusable_input(tmp_path: object, capsys: object) -> None:
    assert main(["export-policies", "--policies", str(tmp_path)], io.StringIO()) == 2


def _variable(policy: dict[str, Any], name: str) -> str:
    (expression,) = [v["expression"] for v in policy["spec"]["variables"] if v["name"] == name]
    return str(expression)


def test_requests_equal_to_limits_pass_requests_disabled_on_templates_too() -> None:
    """SPEC §3: a template is judged as its pods, and a Pod's request equal to its limit is
    the API server's defaulting: the requests: disabled rule exempts requests = limits on every
    kind (it did on Pods only, denying every Deployment written with requests = limits)."""
    problems = _variable(export([], reads=READS).objects[0], "containerProblems")
    rule = problems[: problems.index('"requests: disabled"')]
    rule = rule[rule.rindex("params.data.requests == 'disabled'") :]
    assert rule.startswith(
        "params.data.requests == 'disabled' && (variables.key in c.?resources.?requests"
        ".orValue({})) && !((variables.key in c.?resources.?limits.orValue({})) && quantity("
    )
    assert "isPod" not in rule
    # The one rule that still tells Pods from templates: a template request without a limit.
    assert problems.count("variables.isPod") == 1


def test_update_check_is_linear_position_by_position() -> None:
    """The unchanged-template check pairs containers by index (a two-variable comprehension),
    never one container list against the other with `in` (quadratic in the containers)."""
    policy = export([], reads=READS).objects[0]
    check = _variable(policy, "unchanged")
    assert ".all(i, c, c.name == variables.oldTemplate.spec.containers[i].name && " in check
    assert ".all(i, c, c.name == variables.oldTemplate.spec.initContainers[i].name && " in check
    assert ".map(" not in check and ".join(" not in check
    # Part of the validation (it short-circuits the checks), no longer a matchCondition.
    assert policy["spec"]["validations"][0]["expression"].startswith("variables.unchanged || ")
    assert [c["name"] for c in policy["spec"]["matchConditions"]] == [
        "not-being-deleted",
        "not-made-by-a-checked-owner",
    ]


def test_update_check_reads_what_the_webhook_reads_under_the_config() -> None:
    """Env names from the config (env fixes, access checks), the webhook's annotations and the
    exact GPU names are compared; cpu and other env are not (SPEC §6)."""
    check = _variable(export([], reads=READS).objects[0], "unchanged")
    # Every vendor's device variables and the limiters' controls (GPU access control reads
    # them: workloads/devices.py access_env), by name and by prefix.
    assert 'c.?env.orValue([]).filter(e, e.name in ["ACTIVE_OOM_KILLER", ' in check
    assert '"AMD_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES", ' in check
    assert '"CUDA_VERSION", ' in check
    assert (
        '"NVIDIA_VISIBLE_DEVICES"] || ["NVIDIA_REQUIRE_", "DOCKER_RESOURCE_", '
        '"CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT"].exists(p, e.name.startsWith(p)))'
        in check
    )
    assert 'a in ["features.alauda.io/cuda-version", ' in check
    assert "!(k.contains('/') || k in [\"nvidia.com/gpu\", ".replace("\\", "") in check
    assert "securityContext.?privileged" in check  # gpuAccess checks are on by default
    off = update_reads(WebhookConfig.model_validate({"gpuAccess": {"mode": "off"}}))
    assert "privileged" not in _variable(export([], reads=off).objects[0], "unchanged")


def test_policy_and_binding_are_named_by_the_caller() -> None:
    policy, binding = export([], reads=READS, name="team-a-crl").objects
    assert policy["metadata"]["name"] == "team-a-crl"
    assert binding["metadata"]["name"] == "team-a-crl"
    assert binding["spec"]["policyName"] == "team-a-crl"


def test_command_takes_the_name() -> None:
    out = io.StringIO()
    args = ["export-policies", "--policies", "configmaps", "--name", "team-a-crl"]
    assert main(args, out) == 0
    docs = [d for d in yaml.safe_load_all(out.getvalue()) if d]
    assert [d["metadata"]["name"] for d in docs] == ["team-a-crl", "team-a-crl"]
    assert docs[1]["spec"]["policyName"] == "team-a-crl"


def test_update_check_cost_grows_linearly_and_is_shown() -> None:
    assert estimated_update_cost(2000, 10) == 2 * estimated_update_cost(1000, 10)
    assert estimated_update_cost(1750, 10) < PER_CALL_LIMIT < estimated_update_cost(1875, 10)
    out = io.StringIO()
    assert main(["export-policies", "--policies", "configmaps"], out) == 0
    assert (
        f"and {estimated_update_cost():,} for the UPDATE check of such a template (linear"
        in out.getvalue()
    )
