"""Static checks of the Dockerfile and .dockerignore (no Docker daemon here to build them)."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
VALUES = ROOT / "charts" / "gpu-admission-webhook" / "values.yaml"


@dataclass
class Instruction:
    stage: int
    keyword: str
    argument: str


def instructions() -> list[Instruction]:
    """Dockerfile instructions with line continuations joined and comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    parsed: list[Instruction] = []
    stage = -1
    for line in logical:
        keyword, _, argument = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        parsed.append(Instruction(stage, keyword, argument.strip()))
    return parsed


def stage_of(stage: int) -> list[Instruction]:
    return [i for i in instructions() if i.stage == stage]


def final_stage() -> list[Instruction]:
    return stage_of(max(i.stage for i in instructions()))


def exec_form(argument: str) -> list[str]:
    value = json.loads(argument)
    assert isinstance(value, list), f"{argument} is not the exec (JSON array) form"
    return [str(v) for v in value]


def test_multi_stage_build_on_python_311_slim() -> None:
    froms = [i.argument for i in instructions() if i.keyword == "FROM"]
    assert len(froms) >= 2
    assert all(f.split()[0] == "python:3.11-slim" for f in froms)
    assert froms[0].split()[-2:] == ["AS", "builder"]


def test_final_stage_copies_only_the_virtualenv_from_the_builder() -> None:
    final = final_stage()
    copies = [i.argument for i in final if i.keyword in ("COPY", "ADD")]
    assert copies == ["--from=builder /opt/venv /opt/venv"]
    # No package manager or compiler runs in the final stage: nothing is installed there.
    assert [i for i in final if i.keyword == "RUN"] == []


def _commands(stage: int) -> list[list[str]]:
    return [
        shlex.split(cmd)
        for i in stage_of(stage)
        if i.keyword == "RUN"
        for cmd in i.argument.split("&&")
    ]


def test_builder_installs_the_project_like_the_readme_and_leaves_no_pip_cache() -> None:
    commands = _commands(0)
    # The virtualenv is made without pip (the runtime stage ships no pip: tests/image) and
    # filled by the system interpreter's pip (`--python`): one install, the wheel built below,
    # with runtime extras defined in pyproject.toml, never the test tools; no .pyc written.
    system_pip = ["python", "-m", "pip"]
    assert ["python", "-m", "venv", "--without-pip", "/opt/venv"] in commands
    installs = [
        c for c in commands if c[:6] == [*system_pip, "--python", "/opt/venv/bin/python", "install"]
    ]
    assert len(installs) == 1
    args = installs[0]
    assert "--no-compile" in args
    targets = [a for a in args[6:] if not a.startswith("-")]
    assert len(targets) == 1
    # (shlex has taken the shell's quotes off.)
    match = re.fullmatch(
        r"\$\(ls /wheels/gpu_admission_webhook-\*\.whl\)(?:\[([a-z0-9_,-]+)\])?", targets[0]
    )
    assert match, f"expected the built wheel with extras, got {targets[0]!r}"
    extras = set(filter(None, (match.group(1) or "").split(",")))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert extras <= set(project.get("optional-dependencies", {}))
    assert "test" not in extras
    assert project["scripts"]["gpu-webhook"]  # the ENTRYPOINT below exists after the install
    # No pip cache in any layer: the builder's environment says so for every pip call.
    env = " ".join(i.argument for i in stage_of(0) if i.keyword == "ENV")
    assert "PIP_NO_CACHE_DIR=1" in env


def test_builder_compiles_the_core_with_pinned_tools_outside_the_virtualenv() -> None:
    commands = _commands(0)
    system_pip = ["python", "-m", "pip"]
    # The builder's `python` is the base image's system interpreter: no stage ENV puts the
    # virtualenv first on PATH.
    assert not any("PATH=" in i.argument for i in stage_of(0) if i.keyword == "ENV")
    tools = [c for c in commands if c[:4] == [*system_pip, "install"]]
    assert len(tools) == 1
    assert any(re.fullmatch(r"mypy==[0-9.]+", a) for a in tools[0]), "mypyc's version is pinned"
    # mypyc type-checks what it compiles: the interpreter that compiles needs every import the
    # compiled modules' imports reach, orjson (jsoncodec.py) included, so the project goes in
    # with its `fast` extra (without it the build stopped at 'Cannot find implementation or
    # library stub for module named "orjson"'; tests/image builds the image for real).
    assert ".[fast]" in tools[0]
    wheels = [c for c in commands if c[:1] == ["GPU_WEBHOOK_COMPILE=1"]]
    assert len(wheels) == 1
    assert wheels[0][1:5] == [*system_pip, "wheel"]
    assert "--no-build-isolation" in wheels[0]  # the pinned tools above, not PyPI's newest
    assert wheels[0][-1] == "."
    assert "setup.py" in {t for i in stage_of(0) if i.keyword == "COPY" for t in i.argument.split()}


def test_runs_as_a_numeric_non_root_user() -> None:
    users = [i.argument for i in final_stage() if i.keyword == "USER"]
    assert users, "the final stage must set USER"
    uid, _, gid = users[-1].partition(":")
    # Numeric, so the kubelet can enforce runAsNonRoot without resolving a name.
    assert uid.isdigit()
    assert int(uid) != 0
    assert gid == "" or (gid.isdigit() and int(gid) != 0)
    # The chart runs the image as the same user.
    chart_deployment = (
        ROOT / "charts" / "gpu-admission-webhook" / "templates" / "deployment.yaml"
    ).read_text(encoding="utf-8")
    assert f"runAsUser: {uid}" in chart_deployment


def test_read_only_root_filesystem_friendly() -> None:
    final = final_stage()
    env = " ".join(i.argument for i in final if i.keyword == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    volumes = [exec_form(i.argument) for i in final if i.keyword == "VOLUME"]
    assert volumes == [["/tmp"]]


def test_entrypoint_is_gpu_webhook_serve() -> None:
    final = final_stage()
    (entrypoint,) = [exec_form(i.argument) for i in final if i.keyword == "ENTRYPOINT"]
    (cmd,) = [exec_form(i.argument) for i in final if i.keyword == "CMD"]
    assert entrypoint == ["gpu-webhook"]
    assert cmd[0] == "serve"
    assert cmd[cmd.index("--port") + 1] == "8443"
    assert cmd[cmd.index("--metrics-port") + 1] == "9090"


def test_exposed_ports_match_the_chart_container_ports() -> None:
    exposed = {
        int(port.split("/")[0])
        for i in final_stage()
        if i.keyword == "EXPOSE"
        for port in i.argument.split()
    }
    values = yaml.safe_load(VALUES.read_text(encoding="utf-8"))
    assert exposed == {values["webhookPort"], values["metrics"]["port"]}


def test_dockerignore_keeps_local_state_out_of_the_build_context() -> None:
    patterns = {
        line.strip().rstrip("/")
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {
        ".venv",
        ".git",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        "**/__pycache__",
    } <= patterns
    # What the build copies must not be excluded.
    copied = {
        token
        for i in stage_of(0)
        if i.keyword == "COPY"
        for token in i.argument.split()[:-1]
        if not token.startswith("--")
    }
    # LICENSE: pyproject.toml declares it as license-files, so the build needs it.
    # setup.py: the mypyc build of the evaluation core.
    assert copied == {"pyproject.toml", "setup.py", "README.md", "LICENSE", "webhook"}
    assert not copied & patterns
