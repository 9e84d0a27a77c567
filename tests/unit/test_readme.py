"""Every command the README shows in its shell blocks is run here, with the exit code and the
output the README shows, or listed in NOT_RUN with the reason; a command that is neither fails
`test_every_readme_command_is_run_or_listed`, so the README cannot gain an untested command."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SHELL_BLOCKS = {"sh", "bash", "shell", "console"}

# The command `make demo` wraps (the README's comment names it; the Makefile's recipe runs it).
DEMO_REVIEW = "gpu-webhook review -f examples/pods.yaml --policies configmaps/"
# Commands run here, with the exit code the README's text gives them.
RUN = {
    "make demo": 0,  # review exits 1 (the third example is denied on purpose); the target says so
    "gpu-webhook review -f examples/pods.yaml --policies configmaps/ -o summary": 1,
    "gpu-webhook lint configmaps/": 0,
    "gpu-webhook test examples/tests/": 0,
}
# Commands the README shows that are not run here, and why.
NOT_RUN = {
    "helm install gaw charts/gpu-admission-webhook --namespace gpu-admission-webhook "
    "--create-namespace --set image.repository=registry.example.com/gpu-admission-webhook "
    "--set image.tag=0.1.0 --set policies.install=true": (
        "needs a Kubernetes cluster and a pushed image (tests/chart renders the chart instead)"
    ),
    "pip install .": "installs into the environment, and its dependencies from the package index",
    "pip install '.[fast]'": "installs into the environment, and its dependencies from the index",
    "gpu-webhook serve --self-signed --policies configmaps/ --kubeconfig ~/.kube/config "
    "--register-url https://HOST:8443": (
        "needs a cluster whose API server reaches this machine: tests/e2e/test_e2e_try.py runs "
        "it against the real kube-apiserver (make test-real)"
    ),
    "make test": (
        "the test suite itself cannot run inside itself; test_make_test_is_what_ci_runs checks "
        "that it is what CI runs"
    ),
}


def readme() -> str:
    return README.read_text(encoding="utf-8")


def blocks(text: str, kinds: set[str]) -> list[str]:
    """The contents of the fenced blocks whose info string is one of `kinds`."""
    found = re.findall(r"^```([\w-]*)[^\n]*\n(.*?)^```", text, flags=re.M | re.S)
    return [body for info, body in found if info in kinds]


def commands(block: str) -> list[str]:
    """One string per command: continuation lines joined, comments and `$ ` prompts removed,
    whitespace collapsed."""
    out: list[str] = []
    pending = ""
    for raw in block.splitlines():
        line = re.sub(r"\s+#.*$", "", raw).strip()
        if line.startswith("#") or not (line or pending):
            continue
        line = line.removeprefix("$ ")
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append(" ".join((pending + line).split()))
        pending = ""
    return out


def readme_commands() -> list[str]:
    return [c for block in blocks(readme(), SHELL_BLOCKS) for c in commands(block)]


def gpu_webhook() -> str:
    """The installed console script: beside the running interpreter (a venv), else on PATH."""
    beside = Path(sys.executable).parent / "gpu-webhook"
    found = str(beside) if beside.exists() else shutil.which("gpu-webhook")
    assert found, "the gpu-webhook console script is not installed (make install)"
    return found


def run(command: str) -> subprocess.CompletedProcess[str]:
    if command.startswith("make "):
        # The venv this test runs in stands for .venv; -o keeps make from reinstalling it.
        venv = Path(gpu_webhook()).parent.parent
        argv = ["make", "--no-print-directory", "-o", f"{venv}/.installed", f"VENV={venv}"]
        argv += command.split()[1:]
    else:
        argv = [gpu_webhook(), *command.split()[1:]]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


def test_every_readme_command_is_run_or_listed() -> None:
    shown = readme_commands()
    unknown = [c for c in shown if c not in RUN and c not in NOT_RUN]
    assert not unknown, f"README commands neither run by this test nor listed in NOT_RUN: {unknown}"
    # The lists follow the README: a command it no longer shows is taken out of them too.
    gone = [c for c in [*RUN, *NOT_RUN] if c not in shown]
    assert not gone, f"listed here but no longer in the README: {gone}"


def test_the_readme_says_what_make_demo_runs_and_the_makefile_runs_it() -> None:
    assert f"make demo    # {DEMO_REVIEW}" in readme()
    recipe = re.search(r"^demo:.*?\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), flags=re.M)
    assert recipe is not None
    assert "$(BIN)/" + DEMO_REVIEW in recipe.group(1)


def test_make_test_is_what_ci_runs() -> None:
    assert "make test" in readme_commands()
    ci = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert ci[-1] == "make test", ci
    assert re.search(r"^test: ", (ROOT / "Makefile").read_text(), flags=re.M)


def shown_output(text: str) -> list[str]:
    """The lines of the README's `text` blocks but the diagram: what it says the commands print
    ('…' marks where it cuts a line)."""
    return [
        line
        for block in blocks(text, {"text"})
        if "│" not in block
        for line in block.splitlines()
        if line.strip()
    ]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_readme_commands_exit_as_shown_and_print_what_the_readme_shows() -> None:
    output = ""
    for command, code in RUN.items():
        done = run(command)
        assert done.returncode == code, (command, done.returncode, done.stdout, done.stderr)
        output += done.stdout
    shown = shown_output(readme())
    assert len(shown) >= 8, shown  # the demo's denial and the three commands' output
    for line in shown:
        head = line.split("…")[0].rstrip()
        assert head in output, f"the README shows {line!r}, the commands did not print it"
