"""export-policies: the generated objects and the command's output (no API server needed;
tests/native compares their verdicts with the webhook's on a real one)."""

from __future__ import annotations

import io
import json

from webhook.cli import main
from webhook.core.policies.crl import crl_configmap, parse_configmap
from webhook.core.policies.native import export, group_keys
from webhook.core.policies.native_cost import PER_CALL_LIMIT, cost_problem, estimated_cost


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
    policy, binding = export([], exempt_namespaces=("kube-system", "ops")).objects
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
    policy = export(lims).objects[0]  # type: ignore[arg-type]
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
