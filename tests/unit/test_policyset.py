"""PolicySet: index by key and group, conflicts with a deterministic winner, file source."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import GPU, VCORE, VMEM, crl, policies
from webhook.core.base.errors import ManifestError
from webhook.core.base.manifests import parse_documents
from webhook.core.policies.policyset import PolicySet
from webhook.sources.files import load_policy_dir

G = "gpu-manager"


def test_empty() -> None:
    empty = PolicySet.empty()
    assert empty.limitations == ()
    assert empty.keys == frozenset()
    assert empty.to_json() == {
        "policies": [],
        "groups": {},
        "invalid": [],
        "conflicts": [],
        "inactive": [],
        "warnings": {},
    }


def test_index_by_key_and_group() -> None:
    ps = policies(crl(VCORE, G), crl(VMEM, G), crl(GPU, "nvidia", name="cf-crl-nvidia-gpu"))
    assert ps.keys == frozenset({VCORE, VMEM, GPU})
    assert ps.by_key[VCORE].configmap == "kube-public/cf-crl-gpu-manager-vcuda-core"
    assert [lim.key for lim in ps.by_group[G]] == [VCORE, VMEM]
    assert [lim.key for lim in ps.by_group["nvidia"]] == [GPU]
    assert {lim.key for lim in ps.limitations} == {VCORE, VMEM, GPU}


def test_invalid_inactive_and_non_crl_configmaps() -> None:
    ps = policies(
        crl(VCORE, G),
        crl(VMEM, G, enabled="false"),
        crl(GPU, "nvidia", name="cf-crl-nvidia-gpu", limits="sometimes"),
        crl("example.com/x", "ex", type_label=None),  # not a CRL: not reported at all
        {"kind": "ConfigMap", "metadata": {"name": "kube-root-ca.crt", "namespace": "kube-public"}},
    )
    assert ps.keys == frozenset({VCORE})
    assert [(i.name, i.errors) for i in ps.invalid] == [
        (
            "kube-public/cf-crl-nvidia-gpu",
            ("data.limits 'sometimes' is not one of: disabled, required, optional",),
        )
    ]
    assert ps.inactive == ("kube-public/cf-crl-gpu-manager-vcuda-memory",)
    assert dict(ps.warnings) == {
        "kube-public/cf-crl-gpu-manager-vcuda-memory": (
            "label features.alauda.io/enabled is 'false', not \"true\": this policy is inactive",
        )
    }


def test_crl_outside_kube_public_is_invalid() -> None:
    ps = policies(crl(VCORE, G, namespace="default"))
    assert ps.keys == frozenset()
    assert [i.name for i in ps.invalid] == ["default/cf-crl-gpu-manager-vcuda-core"]


CONFLICTING = [
    crl(GPU, "nvidia", name="cf-crl-b-gpu", created="2024-03-01T00:00:00Z"),
    crl(GPU, "nvidia", name="cf-crl-a-gpu", created="2024-05-01T00:00:00Z"),
    crl(GPU, "nvidia", name="cf-crl-c-gpu", created="2024-03-01T00:00:00Z"),
    crl(GPU, "nvidia", name="cf-crl-0-gpu"),  # no timestamp (file source): after dated ones
]


@pytest.mark.parametrize("order", list(itertools.permutations(range(4))))
def test_conflict_winner_is_oldest_then_by_name_whatever_the_order(order: tuple[int, ...]) -> None:
    ps = policies(*(CONFLICTING[i] for i in order))
    assert ps.by_key[GPU].configmap == "kube-public/cf-crl-b-gpu"
    assert len(ps.conflicts) == 1
    conflict = ps.conflicts[0]
    assert conflict.key == GPU
    assert conflict.winner == "kube-public/cf-crl-b-gpu"
    assert conflict.losers == (
        "kube-public/cf-crl-c-gpu",
        "kube-public/cf-crl-a-gpu",
        "kube-public/cf-crl-0-gpu",
    )
    assert conflict.message() == (
        "4 enabled CRL ConfigMaps define nvidia.com/gpu: kube-public/cf-crl-b-gpu is in force "
        "(oldest, then first by name); ignored: kube-public/cf-crl-c-gpu, "
        "kube-public/cf-crl-a-gpu, kube-public/cf-crl-0-gpu"
    )


def test_conflict_without_timestamps_goes_by_name() -> None:
    ps = policies(crl(GPU, "nvidia", name="cf-crl-z-gpu"), crl(GPU, "nvidia", name="cf-crl-y-gpu"))
    assert ps.by_key[GPU].name == "cf-crl-y-gpu"
    assert [lim.key for lim in ps.by_group["nvidia"]] == [GPU]  # the loser is not indexed


def test_disabled_duplicate_is_not_a_conflict() -> None:
    ps = policies(
        crl(GPU, "nvidia", name="cf-crl-z-gpu"),
        crl(GPU, "nvidia", name="cf-crl-y-gpu", enabled="false"),
    )
    assert ps.conflicts == ()
    assert ps.by_key[GPU].name == "cf-crl-z-gpu"


def test_to_json_shape() -> None:
    ps = policies(
        crl(VCORE, G, defaultValue="10", wholeUnit="100", descriptionEn="vGPU compute"),
        crl(
            GPU,
            "nvidia",
            name="cf-crl-b-gpu",
            requests="fromLimits",
            created="2024-01-01T00:00:00Z",
        ),
        crl(
            GPU,
            "nvidia",
            name="cf-crl-a-gpu",
            requests="fromLimits",
            created="2024-02-01T00:00:00Z",
        ),
        crl(VMEM, G, dataType="float"),
        crl("example.com/x", "ex", name="cf-crl-ex-x", enabled="false", extra="1"),
    )
    data = ps.to_json()
    assert data["policies"] == [
        {
            "key": GPU,
            "group": "nvidia",
            "configMap": "kube-public/cf-crl-b-gpu",
            "dataType": "integer",
            "defaultValue": None,
            "limits": "optional",
            "requests": "fromLimits",
            "min": None,
            "max": None,
            "wholeUnit": None,
            "descriptionEn": "",
        },
        {
            "key": VCORE,
            "group": G,
            "configMap": "kube-public/cf-crl-gpu-manager-vcuda-core",
            "dataType": "integer",
            "defaultValue": "10",
            "limits": "optional",
            "requests": "disabled",
            "min": None,
            "max": None,
            "wholeUnit": 100,
            "descriptionEn": "vGPU compute",
        },
    ]
    assert data["groups"] == {G: [VCORE], "nvidia": [GPU]}
    assert data["invalid"] == [
        {
            "configMap": "kube-public/cf-crl-gpu-manager-vcuda-memory",
            "errors": ["data.dataType 'float' is not supported (supported: \"integer\")"],
        }
    ]
    assert data["conflicts"] == [
        {"key": GPU, "winner": "kube-public/cf-crl-b-gpu", "ignored": ["kube-public/cf-crl-a-gpu"]}
    ]
    assert data["inactive"] == ["kube-public/cf-crl-ex-x"]
    assert set(data["warnings"]) == {"kube-public/cf-crl-ex-x"}
    assert len(data["warnings"]["kube-public/cf-crl-ex-x"]) == 2


def _write(path: Path, *docs: Any) -> None:
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")


def test_load_policy_dir_reads_yaml_yml_json_and_lists(tmp_path: Path) -> None:
    _write(tmp_path / "a.yaml", crl(VCORE, G), {"kind": "Secret", "metadata": {"name": "s"}})
    _write(tmp_path / "b.yml", {"kind": "ConfigMapList", "items": [crl(VMEM, G)]})
    (tmp_path / "c.json").write_text(
        __import__("json").dumps(crl(GPU, "nvidia", name="cf-crl-nvidia-gpu")), encoding="utf-8"
    )
    (tmp_path / "README.md").write_text("not: [valid", encoding="utf-8")  # ignored by suffix
    ps = load_policy_dir(tmp_path)
    assert ps.keys == frozenset({VCORE, VMEM, GPU})
    assert ps.invalid == ()


def test_load_policy_file(tmp_path: Path) -> None:
    _write(tmp_path / "one.yaml", crl(VCORE, G), crl(VMEM, G))
    assert load_policy_dir(tmp_path / "one.yaml").keys == frozenset({VCORE, VMEM})


def test_load_policy_dir_bad_yaml(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("data: [unclosed\n", encoding="utf-8")
    with pytest.raises(ManifestError, match=r"^.*bad\.yaml is not valid YAML: "):
        load_policy_dir(tmp_path)


def test_load_policy_dir_bad_json(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    with pytest.raises(ManifestError, match=r"bad\.json is not valid JSON: "):
        load_policy_dir(tmp_path)


def test_load_policy_dir_missing_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ManifestError) as info:
        load_policy_dir(missing)
    assert str(info.value) == f"{missing} is neither a file nor a directory"


def test_load_policy_dir_unreadable_file(tmp_path: Path) -> None:
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ManifestError, match=r"^cannot read .*bin\.yaml: "):
        load_policy_dir(tmp_path)


def test_parse_documents_skips_empty_documents() -> None:
    assert parse_documents("---\n---\na: 1\n---\n", "x.yaml") == [{"a": 1}]
