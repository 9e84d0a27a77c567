"""`gpu-webhook test`: the shipped suite passes; failing expectations print exactly what failed;
the test-file schema is strict (exit 2, one line naming file and field); JSON and JUnit."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest
import yaml

from tests.helpers import CONFIGMAPS, EXAMPLES
from webhook.cli import main

SUITE = EXAMPLES / "tests"


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def write(path: Path, *docs: Any) -> Path:
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False), encoding="utf-8")
    return path


MPS_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "mps-over", "namespace": "team-b"},
    "spec": {
        "containers": [
            {
                "name": "app",
                "image": "registry.example/app:1.0",
                "resources": {"limits": {"nvidia.com/mps-core": "120"}},
            }
        ]
    },
}
HAMI_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "half", "namespace": "team-a"},
    "spec": {
        "containers": [
            {
                "name": "app",
                "image": "registry.example/app:1.0",
                "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "50"}},
            }
        ]
    },
}


def with_shm(pod: dict[str, Any]) -> dict[str, Any]:
    """A copy of `pod` with what the /dev/shm fix (on by default) adds to its one container,
    and the annotation that marks the volume as the webhook's."""
    patched: dict[str, Any] = json.loads(json.dumps(pod))
    patched["spec"]["containers"][0]["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    volume = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}
    patched["spec"]["volumes"] = [volume]
    patched["metadata"].setdefault("annotations", {})["features.alauda.io/injected-shm"] = "dshm"
    return patched


def suite(tmp_path: Path, results: list[dict[str, Any]], **extra: Any) -> Path:
    """A test directory: resources.yaml (the two pods) and a gpu-webhook-test.yaml."""
    write(tmp_path / "resources.yaml", MPS_POD, HAMI_POD)
    test = {
        "apiVersion": "gpu-webhook.dev/v1alpha1",
        "kind": "Test",
        "metadata": {"name": "t"},
        "policies": str(CONFIGMAPS),
        "resources": ["resources.yaml"],
        **extra,
        "results": results,
    }
    return write(tmp_path / "gpu-webhook-test.yaml", test)


# --- the shipped suite --------------------------------------------------------------------------


def test_the_shipped_suite_passes() -> None:
    code, text = cli("test", str(SUITE))
    assert code == 0, text
    assert text.endswith("\nTest summary: 14 passed, 0 failed\n")
    assert "FAIL" not in text
    assert text.count("  PASS  ") == 14


def test_the_shipped_suite_as_json_counts_every_result() -> None:
    code, text = cli("test", str(SUITE), "-o", "json")
    assert code == 0
    answer = json.loads(text)
    assert answer["summary"] == {"pass": 14, "fail": 0}
    checks = {c["check"] for r in answer["results"] for c in r["checks"]}
    assert checks == {"verdict", "violations", "messages", "warnings", "changes", "patchedResource"}
    by_test = [(r["test"], r["resource"]) for r in answer["results"]]
    assert ("image-table", "Pod team-a/hami-half-card (resources.yaml#2)") in by_test


def test_the_shipped_suite_fails_when_a_policy_changes(tmp_path: Path) -> None:
    """The suite is a real check: a loosened CRL (mps-core max 200) fails its expectation."""
    policies = tmp_path / "configmaps"
    policies.mkdir()
    for file in CONFIGMAPS.iterdir():
        text = file.read_text(encoding="utf-8")
        if file.name == "cf-crl-mps-mps-core.yaml":
            text = text.replace('max: "100"', 'max: "200"')
        (policies / file.name).write_text(text, encoding="utf-8")
    tests = tmp_path / "examples" / "tests"
    tests.mkdir(parents=True)
    for file in SUITE.iterdir():
        (tests / file.name).write_text(file.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "examples" / "pods.yaml").write_text(
        (EXAMPLES / "pods.yaml").read_text(encoding="utf-8"), encoding="utf-8"
    )
    code, text = cli("test", str(tests), "--fail-only")
    assert code == 1
    assert text == (
        "ID  TEST              RESOURCE                                RESULT  REASON\n"
        "6   shipped-policies  Pod team-b/mps-over (resources.yaml#3)  FAIL    verdict: expected "
        "denied, got allowed; violations: expected 1 violation(s), got 0; no violation message "
        "matches 'mps-core=.120. is above the maximum 100'\n"
        "\nTest summary: 13 passed, 1 failed\n"
    )


# --- failing expectations -----------------------------------------------------------------------


def test_failing_expectations_print_the_table_and_exit_1(tmp_path: Path) -> None:
    suite(
        tmp_path,
        [
            {"kind": "Pod", "name": "mps-over", "verdict": "allowed", "violations": False},
            {"name": "half", "namespace": "team-a", "verdict": "allowed", "warnings": ["^nope"]},
            {"name": "absent", "verdict": "denied"},
            {"file": "resources.yaml", "document": 1, "verdict": "denied", "messages": ["mps"]},
        ],
    )
    code, text = cli("test", str(tmp_path))
    assert code == 1
    assert text == (
        "ID  TEST  RESOURCE                                RESULT  REASON\n"
        "1   t     Pod team-b/mps-over (resources.yaml#1)  FAIL    verdict: expected allowed, got "
        "denied; violations: expected no violation, got 1\n"
        "2   t     Pod team-a/half (resources.yaml#2)      FAIL    no warning matches '^nope'\n"
        "3   t     * absent                                FAIL    no resource matches * absent\n"
        "4   t     Pod team-b/mps-over (resources.yaml#1)  PASS    denied as expected "
        "(1 violation(s))\n"
        "\nTest summary: 1 passed, 3 failed\n"
    )
    code, only = cli("test", str(tmp_path), "--fail-only")
    assert code == 1
    assert "PASS" not in only and only.count("FAIL") == 3


def test_detailed_results_list_each_check_and_the_answer(tmp_path: Path) -> None:
    suite(tmp_path, [{"name": "mps-over", "verdict": "denied", "violations": 2}])
    code, text = cli("test", str(tmp_path), "--detailed-results")
    assert code == 1
    test_file = tmp_path / "gpu-webhook-test.yaml"
    assert (
        f"\n--- 1: Pod team-b/mps-over (resources.yaml#1) ({test_file})\n"
        "  PASS verdict: expected denied, got denied\n"
        "  FAIL violations: expected 2 violation(s), got 1\n"
        "  answered: denied\n"
        "  violation: Pod team-b/mps-over, container \"app\": limits.nvidia.com/mps-core='120' is "
        "above the maximum 100 (max: 100 in ConfigMap kube-public/cf-crl-mps-mps-core). NVIDIA "
        "MPS compute share in percent of one GPU (0-100).\n"
        "  warning: CUDA version of registry.example/app:1.0 unknown, no affinity: set "
        "features.alauda.io/cuda-version or imageCudaTable\n"
    ) in text


def test_a_patched_object_that_differs_shows_a_unified_diff(tmp_path: Path) -> None:
    # The author forgot that requests are set from limits (CRL requests: fromLimits).
    write(tmp_path / "expected.yaml", with_shm(HAMI_POD))
    suite(
        tmp_path,
        [{"name": "half", "verdict": "allowed", "patchedResource": "expected.yaml"}],
    )
    code, text = cli("test", str(tmp_path))
    assert code == 1
    assert "FAIL    the patched object differs from expected.yaml\n" in text
    assert text.endswith(
        "--- expected (expected.yaml)\n"
        "+++ patched by the webhook\n"
        "@@ -13,6 +13,9 @@\n"  # below the two lines of the mark's annotation
        "       limits:\n"
        "         nvidia.com/gpu: '1'\n"
        "         nvidia.com/gpucores: '50'\n"
        "+      requests:\n"
        "+        nvidia.com/gpu: '1'\n"
        "+        nvidia.com/gpucores: '50'\n"
        "     volumeMounts:\n"
        "     - mountPath: /dev/shm\n"
        "       name: dshm\n"
        "\nTest summary: 0 passed, 1 failed\n"
    )
    # Written as the webhook patches it, the same object passes (compared as a document: key
    # order and YAML style do not matter).
    patched = with_shm(HAMI_POD)
    patched["spec"]["containers"][0]["resources"]["requests"] = {
        "nvidia.com/gpucores": "50",
        "nvidia.com/gpu": "1",
    }
    write(tmp_path / "expected.yaml", patched)
    code, text = cli("test", str(tmp_path))
    assert (code, text.splitlines()[-1]) == (0, "Test summary: 1 passed, 0 failed")


@pytest.mark.parametrize(
    ("field", "actual", "written", "shown"),
    [
        ("hostNetwork", True, 1, ("-  hostNetwork: 1\n", "+  hostNetwork: true\n")),
        ("hostIPC", False, 0, ("-  hostIPC: 0\n", "+  hostIPC: false\n")),
        ("priority", 1, True, ("-  priority: true\n", "+  priority: 1\n")),
        ("priority", 1, "1", ("-  priority: '1'\n", "+  priority: 1\n")),
    ],
)
def test_a_patched_object_is_compared_as_json_types(
    tmp_path: Path, field: str, actual: Any, written: Any, shown: tuple[str, str]
) -> None:
    """`true` is not `1` and `"1"` is not `1`, as the API server stores them: an expectation
    that writes the other type fails, with the line in the diff."""
    pod = json.loads(json.dumps(HAMI_POD))
    pod["spec"][field] = actual
    write(tmp_path / "resources.yaml", pod)
    patched = with_shm(pod)
    patched["spec"]["containers"][0]["resources"]["requests"] = {
        "nvidia.com/gpucores": "50",
        "nvidia.com/gpu": "1",
    }
    expected = json.loads(json.dumps(patched))
    expected["spec"][field] = written
    test = {
        "apiVersion": "gpu-webhook.dev/v1alpha1",
        "kind": "Test",
        "metadata": {"name": "t"},
        "policies": str(CONFIGMAPS),
        "resources": ["resources.yaml"],
        "results": [{"name": "half", "verdict": "allowed", "patchedResource": "expected.yaml"}],
    }
    write(tmp_path / "gpu-webhook-test.yaml", test)
    write(tmp_path / "expected.yaml", expected)
    code, text = cli("test", str(tmp_path))
    assert code == 1
    assert "FAIL    the patched object differs from expected.yaml\n" in text
    assert shown[0] in text and shown[1] in text
    assert text.endswith("\nTest summary: 0 passed, 1 failed\n")
    # The same value with its own type passes; a float equal to the integer is the same JSON.
    expected["spec"][field] = (
        1.0 if isinstance(actual, int) and not isinstance(actual, bool) else actual
    )
    write(tmp_path / "expected.yaml", expected)
    code, text = cli("test", str(tmp_path))
    assert (code, text.splitlines()[-1]) == (0, "Test summary: 1 passed, 0 failed")


def test_junit_output(tmp_path: Path) -> None:
    suite(
        tmp_path,
        [
            {"name": "mps-over", "verdict": "denied", "violations": True},
            {"name": "half", "verdict": "denied"},
        ],
    )
    code, text = cli("test", str(tmp_path), "-o", "junit")
    assert code == 1
    root = ET.fromstring(text.split("\n", 1)[1])
    assert (root.tag, root.get("tests"), root.get("failures")) == ("testsuites", "2", "1")
    (testsuite,) = root
    assert (testsuite.get("name"), testsuite.get("tests"), testsuite.get("failures")) == (
        "t",
        "2",
        "1",
    )
    passed, failed = testsuite
    assert passed.get("name") == "Pod team-b/mps-over (resources.yaml#1)"
    assert passed.find("failure") is None
    failure = failed.find("failure")
    assert failure is not None
    assert failure.get("message") == "verdict: expected denied, got allowed"
    assert (failure.text or "").startswith(
        "verdict: expected denied, got allowed\nanswered: allowed\n"
    )


def test_the_inventory_is_read_like_review_reads_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nodes go through review's loader: a node file holding something else is review's own
    one-line error (exit 2)."""
    write(tmp_path / "nodes.yaml", {"apiVersion": "v1", "kind": "Service", "metadata": {}})
    path = suite(
        tmp_path, [{"name": "half", "verdict": "allowed"}], inventory={"nodes": "nodes.yaml"}
    )
    assert cli("test", str(tmp_path)) == (2, "")
    assert capsys.readouterr().err == (
        f"gpu-webhook test: {path}: {tmp_path / 'nodes.yaml'}: item 1 is a Service, not a Node; "
        "pass the output of `kubectl get nodes -o yaml` (or -o json)\n"
    )


# --- unusable input: exit 2, one line -----------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"policy": "x"}, "policy: Extra inputs are not permitted"),
        ({"resources": "resources.yaml"}, "resources: Input should be a valid list"),
        ({"inventory": {"node": "n.yaml"}}, "inventory.node: Extra inputs are not permitted"),
        ({"apiVersion": "gpu-webhook.dev/v1"}, "apiVersion: Input should be "),
        ({"results": []}, "results: List should have at least 1 item after validation, not 0"),
        (
            {"results": [{"name": "half", "verdict": "ok"}]},
            "results[0].verdict: Input should be 'allowed', 'denied' or 'skipped'",
        ),
        (
            {"results": [{"name": "half", "verdict": "allowed", "violations": "2"}]},
            "results[0].violations: expected a count (0, 1, ...) or yes/no, got '2'",
        ),
        (
            {"results": [{"name": "half", "verdict": "allowed", "messages": ["("]}]},
            "results[0].messages: '(' is not a regular expression: missing ), unterminated "
            "subpattern at position 0",
        ),
        (
            {"results": [{"file": "resources.yaml", "verdict": "allowed"}]},
            "results[0]: `file` takes `document` (1 for the first), not kind or namespace",
        ),
        (
            {"results": [{"kind": "Pod", "verdict": "allowed"}]},
            "results[0]: name the resource by `name` (with `kind`, `namespace`) or by `file`",
        ),
        (
            {"results": [{"name": "half", "verdict": "allowed", "extra": 1}]},
            "results[0].extra: Extra inputs are not permitted",
        ),
    ],
)
def test_a_wrong_test_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], problem: str
) -> None:
    path = suite(tmp_path, [{"name": "half", "verdict": "allowed"}])
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    write(path, {**doc, **change})
    code, text = cli("test", str(path))
    err = capsys.readouterr().err
    assert (code, text) == (2, "")
    assert err.startswith(f"gpu-webhook test: {path}: {problem}")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_paths_without_tests_are_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("test", str(CONFIGMAPS)) == (2, "")
    assert capsys.readouterr().err == (
        f"gpu-webhook test: no test file (*gpu-webhook-test.yaml) under {CONFIGMAPS}\n"
    )
    write(tmp_path / "cm.yaml", {"apiVersion": "v1", "kind": "ConfigMap"})
    assert cli("test", str(tmp_path / "cm.yaml")) == (2, "")
    assert capsys.readouterr().err == (
        f"gpu-webhook test: {tmp_path / 'cm.yaml'}: not a test file: expected apiVersion "
        "gpu-webhook.dev/v1alpha1, kind Test\n"
    )


def test_a_policies_folder_without_crl_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = suite(tmp_path, [{"name": "half", "verdict": "allowed"}])
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    empty = tmp_path / "empty"
    empty.mkdir()
    write(path, {**doc, "policies": "empty"})
    assert cli("test", str(tmp_path)) == (2, "")
    assert capsys.readouterr().err == (
        f"gpu-webhook test: {path}: no CRL ConfigMap in {empty} (0 ConfigMap(s), none a CRL): "
        "pass CRL ConfigMaps (cf-crl-*): the project's configmaps/, or your cluster's: "
        "kubectl get configmaps -n kube-public -o yaml > crl.yaml\n"
    )


def broken_policies(tmp_path: Path) -> Path:
    """The shipped CRLs plus one whose `max` is not a quantity: lint says so (exit 1)."""
    folder = tmp_path / "policies"
    folder.mkdir()
    for file in CONFIGMAPS.glob("*.yaml"):
        (folder / file.name).write_text(file.read_text(encoding="utf-8"), encoding="utf-8")
    crl = yaml.safe_load((CONFIGMAPS / "cf-crl-hami-gpucores.yaml").read_text(encoding="utf-8"))
    crl["metadata"]["name"] = "cf-crl-capped-gpucores"
    crl["data"]["max"] = "half"
    write(folder / "cap.yaml", crl)
    return folder


def test_a_crl_that_does_not_parse_is_exit_2_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not left out silently (the pods it limits would pass without it): exit 2, naming it."""
    folder = broken_policies(tmp_path)
    assert cli("lint", str(folder))[0] == 1
    capsys.readouterr()
    path = suite(tmp_path, [{"name": "half", "verdict": "allowed"}], policies="policies")
    assert cli("test", str(tmp_path)) == (2, "")
    assert capsys.readouterr().err == (
        f"gpu-webhook test: {path}: 1 CRL ConfigMap(s) in {folder} do not parse: "
        f"{folder / 'cap.yaml'}: kube-public/cf-crl-capped-gpucores: data.max: 'half' is not "
        "a Kubernetes quantity (expected a number with an optional suffix such as 1, 100, 1k, "
        f"500m, 1e3 or 2Gi); fix or remove them (`gpu-webhook lint {folder}` lists every error)\n"
    )
    assert cli("review", "-f", str(tmp_path / "resources.yaml"), "--policies", str(folder)) == (
        2,
        "",
    )
    assert capsys.readouterr().err == (
        f"gpu-webhook review: 1 CRL ConfigMap(s) in {folder} do not parse: "
        f"{folder / 'cap.yaml'}: kube-public/cf-crl-capped-gpucores: data.max: 'half' is not "
        "a Kubernetes quantity (expected a number with an optional suffix such as 1, 100, 1k, "
        f"500m, 1e3 or 2Gi); fix or remove them (`gpu-webhook lint {folder}` lists every error)\n"
    )
