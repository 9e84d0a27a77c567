"""`gpu-webhook export-policies --access` (SPEC §12 "Enforcement that survives the webhook"): what
it prints and what it is generated from. Whether the policies agree with the webhook is proven
on a real API server (tests/native/test_native_access.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import yaml

from webhook.cli import main
from webhook.core.config.model import load_config
from webhook.core.evaluation.native_access import (
    NOT_EXPRESSED,
    export_access,
    voids,
)
from webhook.core.evaluation.native_access_cel import CEL_LIMITER_PARSERS, CEL_PARSERS, unbind
from webhook.core.families.catalog import FAMILIES
from webhook.core.families.visible import LIMITER_PARSERS, PARSERS


def _kinds(text: str) -> list[str]:
    return [doc["kind"] for doc in yaml.safe_load_all(text) if doc]


def test_command_writes_both_policies_and_their_bindings_and_what_it_cannot_express() -> None:
    out = io.StringIO()
    assert main(["export-policies", "--access"], out) == 0
    text = out.getvalue()
    assert _kinds(text) == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    ]
    for item in NOT_EXPRESSED:
        assert f"#  - {item}\n" in text
    # The chart's default mode is warn: the export says what it enforces.
    assert "# Note: gpuAccess.mode is warn: the policies enforce what `enforce` would" in text
    names = {doc["metadata"]["name"] for doc in yaml.safe_load_all(text) if doc}
    assert names == {"gpu-webhook-access"}


def test_voids_known_only_write_no_mutating_policy_and_deny_env_from(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("gpuAccess: {mode: enforce, voidImageDevices: known}\n", encoding="utf-8")
    out = io.StringIO()
    args = ["export-policies", "--access", "--config", str(config), "--name", "x", "-o", "json"]
    assert main(args, out) == 0
    items = json.loads(out.getvalue())["items"]
    assert [i["kind"] for i in items] == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    messages = [v["message"] for v in items[0]["spec"]["validations"]]
    assert (
        "gpuAccess: a container's envFrom can choose devices no void closes: set an envFrom "
        "prefix or list its variables in env." in messages
    )


def test_bindings_skip_both_exempt_lists() -> None:
    config = load_config(
        {"exemptNamespaces": ["kube-system", "ops"], "gpuAccess": {"mode": "enforce"}}
    )
    for obj in export_access(config).objects:
        if obj["kind"].endswith("Binding"):
            (expression,) = obj["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
            assert expression == {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": ["gpu-operator", "kube-system", "nvidia-gpu-operator", "ops"],
            }


def test_every_runtime_parser_has_its_cel_twin() -> None:
    """A parser added to core/families/visible.py without its CEL twin would make the policy
    read that vendor's values as `any` (every value names devices): a difference the
    differential would show only for the vendor's cases. This keeps the two tables together."""
    assert set(CEL_PARSERS) == set(PARSERS)
    assert set(CEL_LIMITER_PARSERS) == set(LIMITER_PARSERS)
    assert {f.selection for f in FAMILIES} <= set(CEL_PARSERS)


def test_the_mutating_policy_writes_every_familys_void_and_share_value() -> None:
    written = {(name, value) for name, value, _, _ in voids()}
    expected = {(n, f.void or "") for f in FAMILIES if f.void is not None for n in f.void_env}
    expected |= {pair for f in FAMILIES for pair in f.share_env}
    assert written == expected
    assert ("NVIDIA_VISIBLE_DEVICES", "void") in written
    assert ("ASCEND_VISIBLE_DEVICES", "") in written


def test_bindings_are_rewritten_as_one_item_lists() -> None:
    """The API server's CEL has no bindings library (`cel.bind` does not compile)."""
    assert unbind("cel.bind(x, a.b(1, 2), x + cel.bind(y, ')', y))") == (
        "[a.b(1, 2)].exists(x, x + [')'].exists(y, y))"
    )
    for obj in export_access(load_config({"gpuAccess": {"mode": "enforce"}})).objects:
        assert "cel.bind" not in json.dumps(obj)
