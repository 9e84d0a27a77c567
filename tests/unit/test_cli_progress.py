"""Progress on stderr for `audit` and `review -f DIR`: one line rewritten in place (`\\r`) when
stderr is a terminal, erased at the end; nothing when it is not a terminal, nothing in -o json."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from tests.auditdata import populate
from tests.fakekube import FakeKube
from tests.unit.test_cli_audit import cli as audit_cli
from webhook.cli import main
from webhook.cli.progress import Progress

POLICIES = str(Path(__file__).resolve().parents[2] / "configmaps")


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def frames(written: str) -> list[str]:
    """The successive states of the line: what each `\\r` starts, trailing padding removed."""
    return [part.rstrip(" ") for part in written.split("\r")]


def test_the_line_is_rewritten_padded_and_erased() -> None:
    tty = Tty()
    progress = Progress(tty, "review")
    progress.update("read 10 file(s)")
    progress.update("reviewed 1/2 file(s)")
    progress.update("reviewed 2/2 file(s)")
    progress.done()
    last = "gpu-webhook review: reviewed 2/2 file(s)"
    assert tty.getvalue() == (
        "\rgpu-webhook review: read 10 file(s)"
        "\rgpu-webhook review: reviewed 1/2 file(s)"
        f"\r{last}"
        f"\r{' ' * len(last)}\r"
    )


def test_a_longer_line_is_covered_by_spaces() -> None:
    tty = Tty()
    progress = Progress(tty, "audit")
    progress.update("listing pods (v1): 10 page(s), 5000 object(s)")
    progress.update("done")
    first = "gpu-webhook audit: listing pods (v1): 10 page(s), 5000 object(s)"
    second = "gpu-webhook audit: done"
    assert tty.getvalue() == f"\r{first}\r{second}{' ' * (len(first) - len(second))}"


def test_nothing_on_a_stream_that_is_not_a_terminal_or_when_disabled() -> None:
    for stream, enabled in ((io.StringIO(), True), (Tty(), False)):
        progress = Progress(stream, "audit", enabled=enabled)
        progress.update("listing pods (v1): 1 page(s), 3 object(s)")
        progress.done()
        assert stream.getvalue() == ""


def _tree(root: Path, files: int) -> None:
    for n in range(files):
        (root / f"pod-{n}.yaml").write_text(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: ml\n"
            "spec:\n  containers:\n  - name: c\n    image: busybox:1.36\n",
            encoding="utf-8",
        )


def test_review_of_a_directory_shows_files_read_then_reviewed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(tmp_path, 3)
    tty = Tty()
    monkeypatch.setattr("sys.stderr", tty)
    out = io.StringIO()
    assert main(["review", "-f", str(tmp_path), "--policies", POLICIES], out) == 0
    assert frames(tty.getvalue()) == [
        "",
        "gpu-webhook review: read 1 file(s)",
        "gpu-webhook review: read 2 file(s)",
        "gpu-webhook review: read 3 file(s)",
        "gpu-webhook review: reviewed 1/3 file(s)",
        "gpu-webhook review: reviewed 2/3 file(s)",
        "gpu-webhook review: reviewed 3/3 file(s)",
        "",  # erased
        "",
    ]
    assert "\r" not in out.getvalue()


@pytest.mark.parametrize(
    ("stream", "argv"),
    [
        (io.StringIO, []),  # not a terminal
        (Tty, ["-o", "json"]),
        (Tty, ["-o", "yaml"]),
    ],
)
def test_review_writes_no_progress_off_a_terminal_or_in_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stream: type[io.StringIO], argv: list[str]
) -> None:
    _tree(tmp_path, 2)
    err = stream()
    monkeypatch.setattr("sys.stderr", err)
    assert main(["review", "-f", str(tmp_path), "--policies", POLICIES, *argv], io.StringIO()) == 0
    assert "\r" not in err.getvalue()


def test_review_of_one_file_shows_no_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(tmp_path, 1)
    tty = Tty()
    monkeypatch.setattr("sys.stderr", tty)
    assert main(["review", "-f", str(tmp_path / "pod-0.yaml"), "--policies", POLICIES]) == 0
    assert tty.getvalue() == ""


@pytest.fixture
def cluster(kube: FakeKube) -> FakeKube:
    populate(kube)
    return kube


async def test_audit_shows_pages_listed_per_kind(
    cluster: FakeKube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig = str(cluster.write_kubeconfig(tmp_path))
    tty = Tty()
    monkeypatch.setattr("sys.stderr", tty)
    code, out = await audit_cli("audit", "--kubeconfig", kubeconfig, "--page-size", "2")
    assert code == 0
    assert "\r" not in out
    # Every kind the fake serves, in the audit's order; Pods two a page (8 running, 1 finished).
    listing = "gpu-webhook audit: listing"
    assert frames(tty.getvalue()) == [
        "",
        f"{listing} cronjobs (batch/v1): 1 page(s), 0 object(s)",
        f"{listing} daemonsets (apps/v1): 1 page(s), 0 object(s)",
        f"{listing} deployments (apps/v1): 1 page(s), 2 object(s)",
        f"{listing} jobs (batch/v1): 1 page(s), 0 object(s)",
        f"{listing} replicasets (apps/v1): 1 page(s), 2 object(s)",
        f"{listing} statefulsets (apps/v1): 1 page(s), 0 object(s)",
        f"{listing} pytorchjobs (kubeflow.org/v1): 1 page(s), 1 object(s)",
        f"{listing} pods (v1): 1 page(s), 2 object(s)",
        f"{listing} pods (v1): 2 page(s), 4 object(s)",
        f"{listing} pods (v1): 3 page(s), 6 object(s)",
        f"{listing} pods (v1): 4 page(s), 8 object(s)",
        f"{listing} pods (v1): 5 page(s), 9 object(s)",
        "",  # erased before the report
        "",
    ]


@pytest.mark.parametrize(("stream", "argv"), [(io.StringIO, []), (Tty, ["-o", "json"])])
async def test_audit_writes_no_progress_off_a_terminal_or_in_json(
    cluster: FakeKube,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stream: type[io.StringIO],
    argv: list[str],
) -> None:
    kubeconfig = str(cluster.write_kubeconfig(tmp_path))
    err = stream()
    monkeypatch.setattr("sys.stderr", err)
    code, _ = await audit_cli("audit", "--kubeconfig", kubeconfig, "--page-size", "2", *argv)
    assert code == 0
    assert "\r" not in err.getvalue()
