"""`gpu-webhook test --init`: a test file written from the manifests and policies with today's
verdicts, that `gpu-webhook test` then passes, and fails once the policies answer otherwise."""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import CONFIGMAPS, EXAMPLES
from webhook.cli import main
from webhook.cli.testinit import escaped


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def pod(name: str, namespace: str, cores: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "nvidia/cuda:12.4.1-runtime-ubuntu22.04",
                    "resources": {"limits": {"tencent.com/vcuda-core": cores}},
                }
            ]
        },
    }


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A repository-like folder: the shipped policies, the demo's manifests, a tests folder."""
    shutil.copytree(CONFIGMAPS, tmp_path / "configmaps")
    (tmp_path / "manifests").mkdir()
    shutil.copy(EXAMPLES / "pods.yaml", tmp_path / "manifests" / "pods.yaml")
    (tmp_path / "tests").mkdir()
    return tmp_path


def test_init_writes_a_test_file_that_passes(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)
    code, out = cli(
        "test", "--init", "tests", "-f", "manifests/pods.yaml", "--policies", "configmaps"
    )
    target = Path("tests") / "gpu-webhook-test.yaml"
    assert (code, out) == (
        0,
        f"wrote {target}: 3 result(s) (2 allowed, 1 denied); check them, then run "
        f"`gpu-webhook test {target}`\n",
    )
    text = target.read_text(encoding="utf-8")
    assert text.startswith("# Written by `gpu-webhook test --init`")
    spec = yaml.safe_load(text)
    assert {k: spec[k] for k in ("apiVersion", "kind", "metadata", "policies", "resources")} == {
        "apiVersion": "gpu-webhook.dev/v1alpha1",
        "kind": "Test",
        "metadata": {"name": "pods"},
        "policies": "../configmaps",
        "resources": ["../manifests/pods.yaml"],
    }
    results = spec["results"]
    assert [(r["kind"], r["namespace"], r["name"], r["verdict"]) for r in results] == [
        ("Pod", "ml", "paddle-train", "allowed"),
        ("Pod", "ml", "torch-infer", "allowed"),
        ("Deployment", "ml", "bad-share", "denied"),
    ]
    denied = results[2]
    assert denied["violations"] == 1
    assert denied["messages"][0].startswith(
        "Deployment ml/bad-share, container \"app\": limits\\.tencent\\.com/vcuda-core='150' is "
        "above 100 but not a multiple of 100 \\(values up to 100"
    )
    assert 'defaulted tencent\\.com/vcuda-memory=4 in container "train"' in results[0]["changes"]

    code, out = cli("test", "tests")
    assert code == 0, out
    assert out.endswith("Test summary: 3 passed, 0 failed\n")


def test_the_written_test_fails_when_the_policies_answer_otherwise(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)
    assert cli("test", "--init", "tests", "-f", "manifests", "--policies", "configmaps")[0] == 0
    # vcuda-core without its wholeUnit rule: bad-share (150) is allowed now.
    policy = project / "configmaps" / "cf-crl-gpu-manager-vcuda-core.yaml"
    policy.write_text(
        policy.read_text(encoding="utf-8").replace('  wholeUnit: "100"\n', ""), encoding="utf-8"
    )
    code, out = cli("test", "tests", "--fail-only")
    assert code == 1
    assert "Deployment ml/bad-share" in out
    assert "verdict: expected denied, got allowed" in out
    assert out.endswith("Test summary: 2 passed, 1 failed\n")


def test_documents_that_share_a_name_or_have_none_are_named_by_file_and_number(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)
    Path("manifests/twice.yaml").write_text(
        yaml.safe_dump_all(
            [pod("same", "a", "50"), pod("same", "a", "150"), {"just": "data"}, pod("x", "b", "30")]
        ),
        encoding="utf-8",
    )
    code, _ = cli(
        "test", "--init", "tests/twice-gpu-webhook-test.yaml",
        "-f", "manifests/twice.yaml", "--policies", "configmaps",
    )  # fmt: skip
    assert code == 0
    spec = yaml.safe_load(Path("tests/twice-gpu-webhook-test.yaml").read_text(encoding="utf-8"))
    assert [{k: r[k] for k in r if k in ("file", "document", "kind", "name", "verdict")}
            for r in spec["results"]] == [
        {"file": "../manifests/twice.yaml", "document": 1, "verdict": "allowed"},
        {"file": "../manifests/twice.yaml", "document": 2, "verdict": "denied"},
        {"file": "../manifests/twice.yaml", "document": 3, "verdict": "skipped"},
        {"kind": "Pod", "name": "x", "verdict": "allowed"},
    ]  # fmt: skip
    assert "violations" not in spec["results"][2]
    code, out = cli("test", "tests")
    assert code == 0, out
    assert out.endswith("Test summary: 4 passed, 0 failed\n")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["test", "--init", "tests", "-f", "manifests/pods.yaml", "--policies", "configmaps"],
            "gpu-webhook test: tests/gpu-webhook-test.yaml exists: pass --force to overwrite it\n",
        ),
        (
            ["test", "--init", "tests/mine.yaml", "-f", "manifests", "--policies", "configmaps"],
            "gpu-webhook test: tests/mine.yaml: a test file's name ends in gpu-webhook-test.yaml "
            "(so that `gpu-webhook test DIR` finds it), e.g. tests/gpu-webhook-test.yaml\n",
        ),
        (
            ["test", "--init", "tests"],
            "gpu-webhook test: --init needs the manifests to test: -f FILE (repeatable)\n",
        ),
        (
            ["test", "--init", "tests/a-gpu-webhook-test.yaml", "-f", "missing.yaml"],
            "gpu-webhook test: missing.yaml: no such file or directory\n",
        ),
        (
            ["test", "tests", "-f", "manifests/pods.yaml"],
            "gpu-webhook test: --file go with --init (writing a test file)\n",
        ),
    ],
)
def test_unusable_init_arguments_are_exit_2(
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(project)
    Path("tests/gpu-webhook-test.yaml").write_text("kept\n", encoding="utf-8")
    assert cli(*argv) == (2, "")
    assert capsys.readouterr().err == message
    assert Path("tests/gpu-webhook-test.yaml").read_text(encoding="utf-8") == "kept\n"


def test_force_overwrites(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    Path("tests/gpu-webhook-test.yaml").write_text("old\n", encoding="utf-8")
    argv = ["test", "--init", "tests", "-f", "manifests", "--policies", "configmaps", "--force"]
    assert cli(*argv)[0] == 0
    assert cli("test", "tests")[0] == 0


@pytest.mark.parametrize(
    "line",
    ["a.b (c) [d] $x^ *+? {1} | back\\slash - # x", "limits.nvidia.com/gpucores='150' is …"],
)
def test_a_line_is_written_as_a_regex_that_matches_it_literally(line: str) -> None:
    assert re.fullmatch(escaped(line), line)
    assert not re.search(escaped(line), line.replace(".", "x", 1))
