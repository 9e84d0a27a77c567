"""Hostile or broken files never give a traceback or a wrong exit code (SPEC §9).

Each is a one-line message on stderr and exit 2 ("the input is unusable"), never exit 1 (which
means "denied") and never a Python traceback; and it is refused in every place that reads YAML.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import CONFIGMAPS, EXAMPLES, container, pod
from webhook.cli import main
from webhook.core.base.errors import ConfigError, ManifestError
from webhook.core.config.model import load_config
from webhook.sources.files import load_policy_dir

POLICIES = str(CONFIGMAPS)
EXAMPLE = str(EXAMPLES / "pods.yaml")

# The classic "billion laughs": 9 levels of 9 aliases, 561 bytes that expand to 9^9 strings.
ALIAS_BOMB = "".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n',
        *(
            f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n"
            for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
        ),
    ]
)
RECURSIVE_ALIAS = "a: &a [*a]\n"
DEEP = "[" * 100_000 + "]" * 100_000


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def one_line_exit_2(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    started = time.monotonic()
    code, out = cli(*argv)
    err = capsys.readouterr().err
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err
    assert time.monotonic() - started < 10
    return err


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (ALIAS_BOMB, "document contains excessive aliasing"),
        (RECURSIVE_ALIAS, "an anchor's value contains itself"),
        (DEEP, "is nested too deeply to be a Kubernetes object"),
        ("kind: List\napiVersion: v1\nitems: 5\n", "is a List whose items is a int, not a list"),
        ("x: .inf\n", "number '.inf' is out of range for JSON"),
        ("x: " + "9" * 30 + "\n", "is out of range for JSON"),
        ("x: " + "9" * 5000 + "\n", "is out of range for JSON"),
        ("a: [\n", "is not valid YAML: "),
    ],
)
def test_hostile_manifests_are_refused_by_review_and_lint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, reason: str
) -> None:
    manifest = tmp_path / "hostile.yaml"
    manifest.write_text(text, encoding="utf-8")
    err = one_line_exit_2(capsys, "review", "-f", str(manifest), "--policies", POLICIES)
    assert err.startswith(f"gpu-webhook review: {manifest}")
    assert reason in err
    # The same file as a CRL file: lint, and the file source behind `serve --policies`.
    err = one_line_exit_2(capsys, "lint", str(manifest))
    assert reason in err
    with pytest.raises(ManifestError, match=r"hostile\.yaml"):
        load_policy_dir(tmp_path)


def test_an_alias_bomb_as_config_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(ALIAS_BOMB, encoding="utf-8")
    err = one_line_exit_2(
        capsys, "review", "-f", EXAMPLE, "--policies", POLICIES, "--config", str(config)
    )
    assert "document contains excessive aliasing" in err
    with pytest.raises(ConfigError, match="excessive aliasing"):
        load_config(config)


@pytest.mark.parametrize("flag", ["--config", "-f", "--policies"])
def test_binary_files_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    binary = tmp_path / "blob.yaml"
    binary.write_bytes(bytes(range(256)) * 4)
    argv = {
        "--config": ["-f", EXAMPLE, "--policies", POLICIES, "--config", str(binary)],
        "-f": ["-f", str(binary), "--policies", POLICIES],
        "--policies": ["-f", EXAMPLE, "--policies", str(binary)],
    }[flag]
    err = one_line_exit_2(capsys, "review", *argv)
    assert str(binary) in err


def test_a_json_manifest_with_nan_or_huge_numbers_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, text, reason in [
        ("nan.json", '{"kind": "Pod", "x": NaN}', "NaN is not valid JSON"),
        ("big.json", '{"kind": "Pod", "x": 1' + "0" * 30 + "}", "out of range"),
        ("deep.json", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ]:
        manifest = tmp_path / name
        manifest.write_text(text, encoding="utf-8")
        err = one_line_exit_2(capsys, "review", "-f", str(manifest), "--policies", POLICIES)
        assert reason in err


def test_unquoted_timestamps_stay_strings_in_json_output(tmp_path: Path) -> None:
    doc = pod(container(limits={"nvidia.com/gpu": "1"}))
    text = yaml.safe_dump(doc).replace(
        "metadata:\n", "metadata:\n  creationTimestamp: 2024-05-01T10:00:00Z\n"
    )
    manifest = tmp_path / "ts.yaml"
    manifest.write_text(text, encoding="utf-8")
    code, out = cli("review", "-f", str(manifest), "--policies", POLICIES, "-o", "json")
    assert code == 0
    mutated = json.loads(out)[0]["mutated"]
    assert mutated["metadata"]["creationTimestamp"] == "2024-05-01T10:00:00Z"


def test_policies_holding_no_crl_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "other.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: default}\n",
        encoding="utf-8",
    )
    err = one_line_exit_2(capsys, "review", "-f", EXAMPLE, "--policies", str(tmp_path))
    assert err == (
        f"gpu-webhook review: no CRL ConfigMap in {tmp_path} (1 ConfigMap(s), none a CRL): pass "
        "CRL ConfigMaps (cf-crl-*): the project's configmaps/, or your cluster's: "
        "kubectl get configmaps -n kube-public -o yaml > crl.yaml\n"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    err = one_line_exit_2(capsys, "review", "-f", EXAMPLE, "--policies", str(empty))
    assert "no CRL ConfigMap in" in err


def test_lint_of_a_path_without_configmaps_says_so(tmp_path: Path) -> None:
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(pod(container())), encoding="utf-8")
    code, out = cli("lint", str(tmp_path))
    assert code == 2
    assert out == (
        f"no ConfigMaps in {tmp_path}: expected CRL ConfigMap YAML files (kind: ConfigMap)\n"
    )


def test_the_console_script_prints_no_traceback_for_an_alias_bomb(tmp_path: Path) -> None:
    manifest = tmp_path / "bomb.yaml"
    manifest.write_text(ALIAS_BOMB, encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from webhook.cli import main; sys.exit(main())",
            "review",
            "-f",
            str(manifest),
            "--policies",
            POLICIES,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "excessive aliasing" in done.stderr


def test_ordinary_anchors_and_merge_keys_are_still_read() -> None:
    from webhook.core.base.manifests import parse_documents

    text = (
        "defaults: &defaults\n"
        "  {image: nvidia/cuda:12.4.1, resources: {limits: {nvidia.com/gpu: '1'}}}\n"
        "containers:\n" + "".join(f"- <<: *defaults\n  name: c{i}\n" for i in range(200))
    )
    [doc] = parse_documents(text, "compose-style.yaml")
    assert len(doc["containers"]) == 200
    assert doc["containers"][199] == {
        "image": "nvidia/cuda:12.4.1",
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
        "name": "c199",
    }


def test_the_alias_ratio_follows_go_yaml() -> None:
    from webhook.core.base.manifests import _allowed_alias_ratio

    # go-yaml decode.go allowedAliasRatio: 0.99 up to 400,000 decodes, 0.10 from 4,000,000,
    # linear in between.
    assert _allowed_alias_ratio(1_000) == 0.99
    assert _allowed_alias_ratio(400_000) == 0.99
    assert _allowed_alias_ratio(2_200_000) == pytest.approx(0.545)
    assert _allowed_alias_ratio(4_000_000) == 0.10
    assert _allowed_alias_ratio(10_000_000) == 0.10
