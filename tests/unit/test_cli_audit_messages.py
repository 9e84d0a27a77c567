"""`gpu-webhook audit` without a usable kubeconfig says what to do (pass --kubeconfig, set
KUBECONFIG, review files offline) instead of the client's "Invalid kube-config file ...
current-context"; no cluster is needed, nothing is contacted."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from webhook.cli import main


def audit(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(["audit", *argv], out), out.getvalue()


@pytest.fixture
def no_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Not in a pod, no KUBECONFIG, and a home without ~/.kube/config."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_audit_without_any_kubeconfig_names_the_ways_out(
    no_kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert audit() == (2, "")
    assert capsys.readouterr().err == (
        "gpu-webhook audit: no cluster to audit: no --kubeconfig given, not in a pod, and "
        "~/.kube/config does not exist; pass --kubeconfig FILE or set KUBECONFIG, or review "
        "manifests offline with `gpu-webhook review -f FILE`\n"
    )


def test_a_kubeconfig_variable_naming_no_file_is_named(
    no_kubeconfig: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = no_kubeconfig / "gone.yaml"
    monkeypatch.setenv("KUBECONFIG", str(missing))
    assert audit("-o", "json") == (2, "")
    err = capsys.readouterr().err
    assert f"and KUBECONFIG={missing} does not exist; pass --kubeconfig FILE" in err
    assert "current-context" not in err


def test_a_kubeconfig_without_a_current_context_says_how_to_set_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n",
        encoding="utf-8",
    )
    assert audit("--kubeconfig", str(kubeconfig)) == (2, "")
    assert capsys.readouterr().err == (
        f"gpu-webhook audit: cannot use the kubeconfig {kubeconfig}: Invalid kube-config file. "
        f"Expected key current-context in {kubeconfig}; it names no current context: set one "
        "with `kubectl config use-context NAME`, or pass another --kubeconfig FILE\n"
    )
