"""`gpu-webhook review` and `lint`: output formats, exit codes 0/1/2, stdin, error messages."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import CONFIGMAPS, EXAMPLES, GPU, VCORE, container, crl, pod
from webhook.cli import main

EXAMPLE = str(EXAMPLES / "pods.yaml")
POLICIES = str(CONFIGMAPS)


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def write(path: Path, *docs: Any) -> Path:
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False), encoding="utf-8")
    return path


# --- review ---------------------------------------------------------------------------------------


def test_review_text_output_of_the_examples() -> None:
    code, text = cli("review", "-f", EXAMPLE, "--policies", POLICIES)
    assert code == 1  # the third example is denied
    # SPEC §9: every result names its file and document.
    assert f"--- Pod ml/paddle-train ({EXAMPLE}, document 1): ALLOWED\n" in text
    assert f"--- Pod ml/torch-infer ({EXAMPLE}, document 2): ALLOWED\n" in text
    assert f"--- Deployment ml/bad-share ({EXAMPLE}, document 3): DENIED\n" in text
    assert '  - defaulted tencent.com/vcuda-memory=4 in container "train"\n' in text
    assert "  - will apply to pods: required vGPU nodes with CUDA ≥ 12.2" in text
    assert (
        "  - Deployment ml/bad-share, container \"app\": limits.tencent.com/vcuda-core='150' is "
        "above 100 but not a multiple of 100"
    ) in text
    assert "mutated object:\n" in text
    assert "&id" not in text and "*id" not in text  # shared subtrees printed in full, no anchors
    assert text.endswith("\n3 document(s): 1 denied, 3 with changes, 0 skipped\n")


def test_review_json_output() -> None:
    code, text = cli("review", "-f", EXAMPLE, "--policies", POLICIES, "-o", "json")
    assert code == 1
    results = json.loads(text)
    assert [(r["document"], r["kind"], r["object"], r["verdict"]) for r in results] == [
        (1, "Pod", "Pod ml/paddle-train", "allowed"),
        (2, "Pod", "Pod ml/torch-infer", "allowed"),
        (3, "Deployment", "Deployment ml/bad-share", "denied"),
    ]
    first = results[0]
    assert set(first) == {
        "file",
        "reason",
        "document",
        "kind",
        "object",
        "verdict",
        "violations",
        "warnings",
        "changes",
        "patch",
        "mutated",
        "templates",
        "unknownRuntimes",
    }
    assert first["templates"] == []  # a Pod has no template: its own patch is what it gets
    assert first["patch"][0] == {
        "op": "add",
        "path": "/spec/containers/0/resources/limits/tencent.com~1vcuda-memory",
        "value": "4",
    }
    env = first["mutated"]["spec"]["containers"][0]["env"]
    assert env == [{"name": "FLAGS_allocator_strategy", "value": "naive_best_fit"}]
    assert results[2]["mutated"] is None and results[2]["patch"] == []
    assert len(results[2]["violations"]) == 1
    # Its pods would be denied as it is: not created, so not mutated either.
    assert results[2]["templates"] == [
        {"template": "spec.template", "role": "", "verdict": "denied", "patch": [], "mutated": None}
    ]


def test_review_yaml_output_matches_json() -> None:
    _, as_json = cli("review", "-f", EXAMPLE, "--policies", POLICIES, "-o", "json")
    _, as_yaml = cli("review", "-f", EXAMPLE, "--policies", POLICIES, "-o", "yaml")
    assert yaml.safe_load(as_yaml) == json.loads(as_json)


def test_review_allowed_exits_0(tmp_path: Path) -> None:
    manifest = write(
        tmp_path / "ok.yaml", pod(container(image="nvidia/cuda:12.4.1", limits={GPU: "1"}))
    )
    code, text = cli("review", "-f", str(manifest), "--policies", POLICIES)
    assert code == 0
    assert f"--- Pod ml/train ({manifest}, document 1): ALLOWED\n" in text
    assert '  - set requests.nvidia.com/gpu=1 from limits in container "c"\n' in text


def test_review_skips_other_kinds_and_non_objects(tmp_path: Path) -> None:
    manifest = tmp_path / "mixed.yaml"
    manifest.write_text("kind: Service\nmetadata: {name: s}\n---\n- 1\n---\n", encoding="utf-8")
    code, text = cli("review", "-f", str(manifest), "--policies", POLICIES, "-o", "json")
    assert code == 0
    results = json.loads(text)
    assert [(r["verdict"], r["reason"], r["warnings"]) for r in results] == [
        ("skipped", "Service (no apiVersion) is not a kind the webhook checks", []),
        ("skipped", "not a Kubernetes object (no kind)", []),
    ]


def test_review_malformed_object_is_denied_not_a_crash(tmp_path: Path) -> None:
    manifest = write(
        tmp_path / "m.yaml", {"kind": "Pod", "metadata": {"name": "x"}, "spec": {"containers": {}}}
    )
    code, text = cli("review", "-f", str(manifest), "--policies", POLICIES, "-o", "json")
    assert code == 1
    assert json.loads(text)[0]["violations"] == [
        "cannot evaluate: Pod.spec.containers must be a list"
    ]


def test_review_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = yaml.safe_dump(pod(container(limits={VCORE: "150"})))
    monkeypatch.setattr(sys, "stdin", io.StringIO(doc))
    code, text = cli("review", "-f", "-", "--policies", POLICIES, "-o", "json")
    assert code == 1
    assert json.loads(text)[0]["verdict"] == "denied"


def test_review_directory_of_manifests(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", pod(container(limits={GPU: "1"}), name="a"))
    write(tmp_path / "b.yml", pod(container(limits={GPU: "1"}), name="b"))
    code, text = cli("review", "-f", str(tmp_path), "--policies", POLICIES, "-o", "json")
    assert code == 0
    assert [(r["file"], r["document"], r["object"]) for r in json.loads(text)] == [
        (str(tmp_path / "a.yaml"), 1, "Pod ml/a"),
        (str(tmp_path / "b.yml"), 1, "Pod ml/b"),
    ]


def test_review_with_config_file(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("mutateTemplates: true\n", encoding="utf-8")
    code, text = cli(
        "review", "-f", EXAMPLE, "--policies", POLICIES, "--config", str(config), "-o", "json"
    )
    assert code == 1
    deployment = json.loads(text)[2]
    assert deployment["changes"] == [
        "required vGPU nodes with CUDA ≥ 12.2 (image nvidia/cuda:12.2.0-runtime-ubuntu22.04)",
        'mounted a 16Gi memory-backed /dev/shm in container "app" (shm fix)',
    ]
    assert deployment["patch"][0]["path"] == "/spec/template/spec/affinity"


def test_review_default_policies_from_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(CONFIGMAPS, tmp_path / "configmaps")
    monkeypatch.chdir(tmp_path)
    code, _ = cli("review", "-f", EXAMPLE)
    assert code == 1


@pytest.mark.parametrize(
    ("setup", "argv", "message"),
    [
        (
            None,
            ["-f", "{tmp}/nope.yaml", "--policies", POLICIES],
            "gpu-webhook review: cannot read {tmp}/nope.yaml: [Errno "
            "2] No such file or directory: '{tmp}/nope.yaml'\n",
        ),
        (
            ("bad.yaml", "a: [\n"),
            ["-f", "{tmp}/bad.yaml", "--policies", POLICIES],
            "gpu-webhook review: {tmp}/bad.yaml is not valid YAML: expected the node content, "
            "but found '<stream end>' (while parsing a flow node) at line 2, column 1\n",
        ),
        (
            None,
            ["-f", EXAMPLE, "--policies", "{tmp}/none"],
            "gpu-webhook review: {tmp}/none is neither a file nor a directory\n",
        ),
        (
            ("config.yaml", "maxMajorSkew: 9\n"),
            ["-f", EXAMPLE, "--policies", POLICIES, "--config", "{tmp}/config.yaml"],
            "gpu-webhook review: webhook config {tmp}/config.yaml is invalid: "
            "maxMajorSkew: Input should be less than or equal to 5\n",
        ),
    ],
)
def test_review_usage_errors_exit_2_with_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    setup: tuple[str, str] | None,
    argv: list[str],
    message: str,
) -> None:
    if setup:
        (tmp_path / setup[0]).write_text(setup[1], encoding="utf-8")
    code, out = cli("review", *(a.format(tmp=tmp_path) for a in argv))
    assert code == 2
    assert out == ""
    assert capsys.readouterr().err == message.format(tmp=tmp_path)


def test_review_without_policies_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _ = cli("review", "-f", EXAMPLE)
    assert code == 2
    assert capsys.readouterr().err == (
        "gpu-webhook review: no policies: pass --policies PATH (a folder or file of CRL "
        "ConfigMaps: the project's configmaps/, or your cluster's: kubectl get configmaps -n "
        "kube-public -o yaml > crl.yaml)\n"
    )


def test_review_reads_the_policies_as_kubectl_exports_them(tmp_path: Path) -> None:
    # The way out the message above names: `kubectl get configmaps -n kube-public -o yaml` is a
    # List holding the CRLs beside other ConfigMaps; reviewed as the shipped folder is.
    items = [
        yaml.safe_load(f.read_text(encoding="utf-8")) for f in sorted(CONFIGMAPS.glob("*.yaml"))
    ]
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cluster-info"}}
    exported = write(
        tmp_path / "crl.yaml", {"apiVersion": "v1", "kind": "List", "items": [other, *items]}
    )
    assert cli("review", "-f", EXAMPLE, "--policies", str(exported)) == cli(
        "review", "-f", EXAMPLE, "--policies", POLICIES
    )


def test_missing_required_argument_is_argparse_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli("review")
    assert info.value.code == 2
    assert "the following arguments are required: -f/--file" in capsys.readouterr().err


# --- lint -----------------------------------------------------------------------------------------


def test_lint_shipped_configmaps() -> None:
    code, text = cli("lint", POLICIES)
    assert code == 0
    assert (
        f"OK    {CONFIGMAPS}/cf-crl-gpu-manager-vcuda-core.yaml: "
        "kube-public/cf-crl-gpu-manager-vcuda-core "
        "(tencent.com/vcuda-core, group gpu-manager, enabled)\n" in text
    )
    assert text.endswith(" ConfigMap(s), 0 error(s)\n")


def test_lint_broken_configmap(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.yaml", crl(VCORE, "gpu-manager", limits="maybe", color="red"))
    code, text = cli("lint", str(path))
    assert code == 1
    assert text.startswith(f"ERROR {path}: kube-public/cf-crl-gpu-manager-vcuda-core\n")
    assert "  error: data.limits 'maybe' is not one of: disabled, required, optional\n" in text
    assert "  warning: data.color is not a CRL field and is ignored" in text
    assert text.endswith("\n1 ConfigMap(s), 1 error(s)\n")


def test_lint_disabled_and_non_crl(tmp_path: Path) -> None:
    path = write(
        tmp_path / "x.yaml",
        crl(VCORE, "gpu-manager", enabled="false"),
        {"kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "default"}},
    )
    code, text = cli("lint", str(path))
    assert code == 0
    assert (
        f"OK    {path}: kube-public/cf-crl-gpu-manager-vcuda-core "
        "(tencent.com/vcuda-core, group gpu-manager, disabled)\n" in text
    )
    assert f"SKIP  {path}: default/settings is not a CRL ConfigMap\n" in text


def test_lint_conflicting_keys(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", crl(VCORE, "gpu-manager"))
    write(tmp_path / "b.yaml", crl(VCORE, "other", name="cf-crl-other-vcuda-core"))
    code, text = cli("lint", str(tmp_path))
    assert code == 1
    assert (
        "ERROR 2 enabled CRL ConfigMaps define tencent.com/vcuda-core: "
        "kube-public/cf-crl-gpu-manager-vcuda-core is in force (oldest, then first by name); "
        "ignored: kube-public/cf-crl-other-vcuda-core\n"
    ) in text
    assert text.endswith("\n2 ConfigMap(s), 1 error(s)\n")


def test_lint_invalid_yaml_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.yaml").write_text("data: [\n", encoding="utf-8")
    code, _ = cli("lint", str(tmp_path))
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpu-webhook lint: {tmp_path}/bad.yaml is not valid YAML: ")
    assert err.count("\n") == 1


# --- the installed console script -----------------------------------------------------------------


def _script() -> str:
    found = shutil.which("gpu-webhook", path=str(Path(sys.executable).parent)) or shutil.which(
        "gpu-webhook"
    )
    if found is None:
        pytest.skip("the gpu-webhook console script is not installed (pip install -e .)")
    return found


def test_console_script_review_from_stdin() -> None:
    doc = yaml.safe_dump(pod(container(limits={VCORE: "150"})))
    proc = subprocess.run(
        [_script(), "review", "-f", "-", "--policies", POLICIES, "-o", "json"],
        input=doc,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == ""
    assert json.loads(proc.stdout)[0]["verdict"] == "denied"


def test_console_script_bad_file_has_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [\n", encoding="utf-8")
    proc = subprocess.run(
        [_script(), "review", "-f", str(bad), "--policies", POLICIES],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(f"gpu-webhook review: {bad} is not valid YAML: ")


def _pod_yaml(name: str, vcore: str) -> str:
    doc = pod(container(limits={VCORE: vcore}), name=name)
    return yaml.safe_dump(doc, sort_keys=False)


def test_console_script_reviews_a_directory_despite_unreadable_files(tmp_path: Path) -> None:
    # Issue 17 item 6: each unreadable file is one line; the others are reviewed; exit 2.
    (tmp_path / "a-good.yaml").write_text(_pod_yaml("good", "50"), encoding="utf-8")
    (tmp_path / "b-binary.yaml").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (tmp_path / "c-broken.yaml").write_text("a: [\n", encoding="utf-8")
    (tmp_path / "d-folder.yaml").mkdir()
    (tmp_path / "e-bad.yaml").write_text(_pod_yaml("bad", "150"), encoding="utf-8")
    proc = subprocess.run(
        [_script(), "review", "-f", str(tmp_path), "--policies", POLICIES, "-o", "summary"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )
    assert proc.returncode == 2  # not 1: the review is incomplete
    assert proc.stdout == (
        f"ALLOWED  {tmp_path}/a-good.yaml#1 Pod ml/good: 0 violation(s), 2 change(s), "
        "1 warning(s)\n"
        f"DENIED   {tmp_path}/e-bad.yaml#1 Pod ml/bad: 1 violation(s), 2 change(s), "
        "1 warning(s)\n"
    )
    assert proc.stderr == (
        f"gpu-webhook review: cannot read {tmp_path}/b-binary.yaml: not UTF-8 text (byte 0x89 "
        "at offset 0); a manifest is YAML or JSON\n"
        f"gpu-webhook review: {tmp_path}/c-broken.yaml is not valid YAML: expected the node "
        "content, but found '<stream end>' (while parsing a flow node) at line 2, column 1\n"
        f"gpu-webhook review: cannot read {tmp_path}/d-folder.yaml: [Errno 21] Is a directory: "
        f"'{tmp_path}/d-folder.yaml'\n"
    )


def test_review_of_a_directory_says_how_many_files_were_not_read(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(_pod_yaml("good", "50"), encoding="utf-8")
    (tmp_path / "b.yaml").write_text("a: [\n", encoding="utf-8")
    code, text = cli("review", "-f", str(tmp_path), "--policies", POLICIES)
    assert code == 2
    assert f"--- Pod ml/good ({tmp_path}/a.yaml, document 1): ALLOWED\n" in text
    assert text.endswith(
        "\n1 document(s): 0 denied, 1 with changes, 0 skipped; 1 file(s) not readable, "
        "listed on stderr\n"
    )


@pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0,
    reason="running as root: a file without read permission is still readable",
)
def test_review_of_a_directory_reports_a_file_without_permission(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.yaml").write_text(_pod_yaml("good", "50"), encoding="utf-8")
    locked = tmp_path / "b.yaml"
    locked.write_text(_pod_yaml("locked", "50"), encoding="utf-8")
    locked.chmod(0)
    code, text = cli("review", "-f", str(tmp_path), "--policies", POLICIES, "-o", "summary")
    assert code == 2
    assert text.startswith(f"ALLOWED  {tmp_path}/a.yaml#1 Pod ml/good")
    assert capsys.readouterr().err == (
        f"gpu-webhook review: cannot read {locked}: [Errno 13] Permission denied: '{locked}'\n"
    )


@pytest.mark.parametrize(
    ("value", "why"),
    [
        # Kubernetes rejects these (issue 18): the webhook would write them into every pod.
        ("Pi", "no digit before 'Pi'"),
        ("e-10", "no digit before 'e-10'"),
        ("+Pi", "no digit before 'Pi'"),
    ],
)
def test_console_script_lint_rejects_a_default_kubernetes_cannot_parse(
    tmp_path: Path, value: str, why: str
) -> None:
    path = tmp_path / "cf-crl-gpu-manager-vcuda-core.yaml"
    path.write_text(
        "apiVersion: v1\n"
        "kind: ConfigMap\n"
        "metadata:\n"
        "  name: cf-crl-gpu-manager-vcuda-core\n"
        "  namespace: kube-public\n"
        "  labels:\n"
        "    features.alauda.io/type: CustomResourceLimitation\n"
        "    features.alauda.io/group: gpu-manager\n"
        '    features.alauda.io/enabled: "true"\n'
        "data:\n"
        "  key: tencent.com/vcuda-core\n"
        "  group: gpu-manager\n"
        "  dataType: integer\n"
        "  limits: optional\n"
        "  requests: disabled\n"
        f'  defaultValue: "{value}"\n',
        encoding="utf-8",
    )
    proc = subprocess.run(
        [_script(), "lint", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout == (
        f"ERROR {path}: kube-public/cf-crl-gpu-manager-vcuda-core\n"
        f"  error: data.defaultValue: {value!r} is not a Kubernetes quantity: {why} (expected a "
        "number with an optional suffix such as 1, 100, 1k, 500m, 1e3 or 2Gi)\n"
        "\n1 ConfigMap(s), 1 error(s)\n"
    )


# --- skipped documents, quoting, summary, version -------------------------------------------------


def test_exempt_namespaces_are_skipped_with_the_reason_never_allowed(tmp_path: Path) -> None:
    exempt = pod(container(limits={GPU: "1"}))
    exempt["metadata"]["namespace"] = "kube-system"
    manifest = write(tmp_path / "sys.yaml", exempt)
    code, text = cli("review", "-f", str(manifest), "--policies", POLICIES)
    assert code == 0
    assert text.startswith(
        f"--- Pod kube-system/train ({manifest}, document 1): SKIPPED "
        "(namespace kube-system is exempt)\n"
    )
    assert "ALLOWED" not in text
    assert text.endswith("1 document(s): 0 denied, 0 with changes, 1 skipped\n")


def test_other_kinds_are_skipped_naming_kind_and_api_version(tmp_path: Path) -> None:
    manifest = tmp_path / "svc.yaml"
    manifest.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n", encoding="utf-8")
    code, text = cli("review", "-f", str(manifest), "--policies", POLICIES, "-o", "summary")
    assert code == 0
    assert text == (
        f"SKIPPED  {manifest}#1 Service s: Service (v1) is not a kind the webhook checks\n"
    )


def test_unquoted_annotation_and_label_values_say_quote_it(tmp_path: Path) -> None:
    manifest = tmp_path / "unquoted.yaml"
    manifest.write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: ml}\n"
        "spec:\n  template:\n    metadata:\n      labels: {enabled: true}\n"
        "      annotations: {features.alauda.io/cuda-version: 12.4}\n"
        "    spec:\n      containers:\n      - name: c\n        image: nvidia/cuda:12.4.1\n"
        "        resources: {limits: {nvidia.com/gpu: '1'}}\n",
        encoding="utf-8",
    )
    code, text = cli("review", "-f", str(manifest), "--policies", POLICIES, "-o", "json")
    assert code == 1
    assert sorted(json.loads(text)[0]["violations"]) == [
        "spec.template.metadata.annotations['features.alauda.io/cuda-version'] is a number "
        "(12.4), but annotation values are strings and Kubernetes refuses it: quote it "
        '(features.alauda.io/cuda-version: "12.4")',
        "spec.template.metadata.labels['enabled'] is a boolean (true), but label values are "
        'strings and Kubernetes refuses it: quote it (enabled: "true")',
    ]


def test_lint_says_quote_it_for_an_unquoted_enabled_label(tmp_path: Path) -> None:
    cm = crl(GPU, "nvidia", name="cf-crl-nvidia-gpu", requests="fromLimits")
    cm["metadata"]["labels"]["features.alauda.io/enabled"] = True
    write(tmp_path / "cm.yaml", cm)
    code, text = cli("lint", str(tmp_path))
    assert code == 1
    assert (
        "  error: metadata.labels['features.alauda.io/enabled'] is a boolean (true), but label "
        "values are strings and Kubernetes refuses it: quote it (features.alauda.io/enabled: "
        '"true")\n'
    ) in text


def test_summary_is_one_line_per_document_without_objects() -> None:
    code, text = cli("review", "-f", EXAMPLE, "--policies", POLICIES, "-o", "summary")
    assert code == 1
    assert text.splitlines() == [
        f"ALLOWED  {EXAMPLE}#1 Pod ml/paddle-train: 0 violation(s), 4 change(s), 0 warning(s)",
        f"ALLOWED  {EXAMPLE}#2 Pod ml/torch-infer: 0 violation(s), 3 change(s), 0 warning(s)",
        f"DENIED   {EXAMPLE}#3 Deployment ml/bad-share: 1 violation(s), 2 change(s), 0 warning(s)",
    ]


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli("--version")
    assert info.value.code == 0
    assert capsys.readouterr().out == "gpu-webhook 0.1.0\n"
