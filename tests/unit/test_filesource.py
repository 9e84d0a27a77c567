"""The file policy source behind `serve --policies DIR`: load, poll, reload, keep last good."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import VCORE, VMEM, crl, eventually
from webhook.core.base.errors import ManifestError
from webhook.sources.files import FileSource
from webhook.sources.store import PolicyStore

CORE = VCORE
MEMORY = VMEM


def core_cm(**data: str) -> dict[str, Any]:
    return crl(CORE, "gpu-manager", **data)


def memory_cm(**data: str) -> dict[str, Any]:
    return crl(MEMORY, "gpu-manager", **data)


@pytest.fixture
def store() -> PolicyStore:
    return PolicyStore()


@contextlib.asynccontextmanager
async def polling(source: FileSource, store: PolicyStore) -> AsyncIterator[None]:
    task = asyncio.create_task(source.run(store))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def write_cm(path: Path, cm: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(cm))


def test_file_source_loads_the_directory_and_logs_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="webhook")
    write_cm(tmp_path / "core.yaml", core_cm())
    write_cm(tmp_path / "memory.yml", memory_cm(dataType="float"))
    (tmp_path / "notes.txt").write_text("not a policy")

    policies = FileSource(tmp_path).load()

    assert list(policies.by_key) == [CORE]
    assert [i.name for i in policies.invalid] == ["kube-public/cf-crl-gpu-manager-vcuda-memory"]
    assert caplog.messages == [
        f"Loaded 1 CRL policies from {tmp_path}: "
        "kube-public/cf-crl-gpu-manager-vcuda-core (tencent.com/vcuda-core)",
        "Skipping invalid CRL ConfigMap kube-public/cf-crl-gpu-manager-vcuda-memory: "
        "data.dataType 'float' is not supported (supported: \"integer\")",
    ]


def test_file_source_reports_a_broken_file(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text("data: [unclosed\n")
    with pytest.raises(ManifestError, match=r"broken\.yaml is not valid YAML"):
        FileSource(tmp_path).load()


async def test_file_source_reloads_changes_and_keeps_the_last_good_set(
    tmp_path: Path, store: PolicyStore, caplog: pytest.LogCaptureFixture
) -> None:
    write_cm(tmp_path / "core.yaml", core_cm(defaultValue="10"))
    source = FileSource(tmp_path, interval=0.01)
    async with polling(source, store):
        await eventually(lambda: store.ready, "the directory is loaded")
        assert store.current.by_key[CORE].default == 10

        write_cm(tmp_path / "core.yaml", core_cm(defaultValue="20"))
        await eventually(
            lambda: store.current.by_key[CORE].default == 20, "the changed file is reloaded"
        )

        good = store.current
        (tmp_path / "memory.yaml").write_text("kind: ConfigMap\ndata: [unclosed\n")
        await eventually(lambda: store.stats.errors == 1, "the broken file is reported")
        assert store.current is good
        assert store.stats.last_error is not None
        assert store.stats.last_error.startswith(f"cannot reload policies from {tmp_path}: ")
        assert "memory.yaml is not valid YAML" in store.stats.last_error

        write_cm(tmp_path / "memory.yaml", memory_cm())
        await eventually(lambda: MEMORY in store.current.by_key, "the fixed file is loaded")
    # The broken state was reported once, not on every poll.
    assert store.stats.errors == 1
    assert any(m.endswith("keeping the policies loaded before") for m in caplog.messages)


async def test_file_source_run_after_load_does_not_reload_unchanged_files(
    tmp_path: Path, store: PolicyStore
) -> None:
    write_cm(tmp_path / "core.yaml", core_cm())
    source = FileSource(tmp_path, interval=0.01)
    store.replace(source.load())
    async with polling(source, store):
        write_cm(tmp_path / "memory.yaml", memory_cm())
        await eventually(lambda: MEMORY in store.current.by_key, "the new file is loaded")
    # One sync from load(), one from the change: unchanged polls replace nothing.
    assert store.stats.syncs == 2


def test_the_local_serve_path_does_not_import_the_kubernetes_client() -> None:
    # `serve --policies DIR` must stay small: the kubernetes client adds ~13 MiB of RSS.
    code = (
        "import sys, webhook.cli, webhook.admission.app, webhook.sources.files; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    assert done.stdout == "[]\n"
