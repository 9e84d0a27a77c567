"""The admin's image table in a watched ConfigMap (SPEC §4 step 3): serve's reflector against
the fake API server, the real app answering /mutate; the table changes without a restart."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer

from tests.fakekube import FakeKube, crl_configmap
from tests.helpers import eventually
from tests.integration.test_admission import admission_review
from webhook.admission.app import create_app
from webhook.cli import main
from webhook.cli.serve import _policy_source
from webhook.core.config.model import WebhookConfig, load_config
from webhook.sources.store import PolicyStore

TRITON = "nvcr.io/nvidia/tritonserver:24.05-py3"
CONFIG_DATA: dict[str, Any] = {
    "imageCudaTable": [{"image": "team/serving:*", "cudaVersion": "11.8"}],
    "imageCudaTableConfigMap": {"name": "gpu-image-table"},
    # Without a node inventory the note names the requirement as it is.
    "nodeInventory": False,
    "claimTemplateCache": False,
}
CONFIG = load_config(CONFIG_DATA)


def table_configmap(table: str, name: str = "gpu-image-table") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "kube-public"},
        "data": {"imageCudaTable": table},
    }


def gpu_pod(image: str) -> dict[str, Any]:
    gpu = {"nvidia.com/gpu": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "serve", "namespace": "ml"},
        "spec": {"containers": [{"name": "c", "image": image, "resources": {"limits": gpu}}]},
    }


@pytest.fixture
async def kube() -> AsyncIterator[FakeKube]:
    async with FakeKube() as server:
        server.put(crl_configmap("cf-crl-nvidia-gpu", "nvidia.com/gpu", group="nvidia"))
        yield server


@pytest.fixture
async def served(
    kube: FakeKube, tmp_path: Path
) -> AsyncIterator[tuple[TestClient[Any, Any], PolicyStore]]:
    store = PolicyStore()
    args = argparse.Namespace(policies=None, kubeconfig=str(kube.write_kubeconfig(tmp_path)))
    app = create_app(CONFIG, store, policy_source=_policy_source(args, store, CONFIG))
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield client, store
    finally:
        await client.close()


async def cuda_note(client: TestClient[Any, Any], image: str) -> str:
    """The placement note /mutate returns for a one-GPU pod running `image`."""
    response = await client.post("/mutate", json=admission_review(gpu_pod(image)))
    assert response.status == 200
    warnings = (await response.json())["response"].get("warnings") or []
    notes = [w for w in warnings if "CUDA" in w]
    assert len(notes) == 1, warnings
    return str(notes[0])


async def test_the_configmap_table_applies_and_changes_without_a_restart(
    kube: FakeKube, served: tuple[TestClient[Any, Any], PolicyStore]
) -> None:
    client, store = served
    kube.put(table_configmap(f'- image: "{TRITON}"\n  cudaVersion: "12.2"\n'))
    await eventually(lambda: store.config is not None, "the image table is loaded")
    # The ConfigMap's entry overrides the shipped knowledge (Triton 24.05: 12.4) ...
    assert await cuda_note(client, TRITON) == (
        f"required GPU nodes with CUDA ≥ 12.2 (image table entry for {TRITON}), preferably < 14.0"
    )
    # ... and the config file's table still applies to the images it names.
    assert await cuda_note(client, "team/serving:3") == (
        "required GPU nodes with CUDA ≥ 11.8 (image table entry for team/serving:3), "
        "preferably < 13.0"
    )
    (listing,) = kube.lists("configmaps")[-1:]
    assert {r.query.get("fieldSelector") for r in kube.requests if r.resource == "configmaps"} >= {
        "metadata.name=gpu-image-table"
    }
    assert listing.path == "/api/v1/namespaces/kube-public/configmaps"

    # An edit is picked up by the watch.
    kube.put(table_configmap(f'- image: "{TRITON}"\n  cudaVersion: "12.6"\n'))
    await eventually(
        lambda: (
            store.config is not None and store.config.image_cuda_table[0].cuda_version == "12.6"
        ),
        "the edited table is loaded",
    )
    assert await cuda_note(client, TRITON) == (
        f"required GPU nodes with CUDA ≥ 12.6 (image table entry for {TRITON}), preferably < 14.0"
    )

    # A broken edit keeps the last good table, and says why.
    kube.put(table_configmap(f'- image: "{TRITON}"\n  cudaVersion: "twelve"\n'))
    stats = store.watched["ImageCudaTable"]
    await eventually(lambda: stats.source_error is not None, "the broken table is reported")
    assert stats.source_error == (
        "ConfigMap kube-public/gpu-image-table key imageCudaTable entry 0: cudaVersion: "
        "Value error, cudaVersion must look like 12.4 or 12.4.1, got 'twelve'"
    )
    assert await cuda_note(client, TRITON) == (
        f"required GPU nodes with CUDA ≥ 12.6 (image table entry for {TRITON}), preferably < 14.0"
    )

    # Deleted: the config file's table and the shipped knowledge again.
    kube.delete("gpu-image-table")
    await eventually(lambda: store.config is None, "the table is dropped")
    assert await cuda_note(client, TRITON) == (
        "required GPU nodes with CUDA ≥ 12.4 "
        "(shipped knowledge: NGC Triton 24.05, NVIDIA release notes), preferably < 14.0"
    )


async def test_an_offline_review_against_the_cluster_gives_the_servers_answer(
    kube: FakeKube,
    served: tuple[TestClient[Any, Any], PolicyStore],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    client, store = served
    kube.put(
        table_configmap(
            f'- image: "{TRITON}"\n  cudaVersion: "12.2"\n'
            '- image: "team/serving:*"\n  cudaVersion: "12.1"\n'
        )
    )
    await eventually(lambda: store.config is not None, "the image table is loaded")
    images = [TRITON, "team/serving:3", "team/other:1"]
    server_notes = [await cuda_note(client, image) for image in images[:2]]
    # The ConfigMap's entries win over the shipped knowledge and over the config file's table.
    assert server_notes == [
        f"required GPU nodes with CUDA ≥ 12.2 (image table entry for {TRITON}), preferably < 14.0",
        "required GPU nodes with CUDA ≥ 12.1 (image table entry for team/serving:3), "
        "preferably < 14.0",
    ]

    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG_DATA))
    manifest = tmp_path / "pods.yaml"
    pods = []
    for i, image in enumerate(images):
        doc = gpu_pod(image)
        doc["metadata"]["name"] = f"p{i}"
        pods.append(doc)
    manifest.write_text(yaml.safe_dump_all(pods))
    kubeconfig = str(kube.write_kubeconfig(tmp_path))
    out = io.StringIO()
    argv = ["review", "-f", str(manifest), "--kubeconfig", kubeconfig, "--config", str(config)]
    code = await asyncio.to_thread(main, [*argv, "-o", "json"], out)
    assert code == 0
    results = json.loads(out.getvalue())
    review_notes = [[c for c in r["changes"] if "CUDA" in c] for r in results]
    assert review_notes[:2] == [[note] for note in server_notes]
    # An image neither table names stays unknown, in both.
    assert review_notes[2] == []
    assert (
        "gpu-webhook review: image table: 2 entries from ConfigMap kube-public/gpu-image-table "
        f"in the cluster at {kube.url}\n" in capsys.readouterr().err
    )


async def test_other_configmaps_of_the_namespace_are_ignored(
    kube: FakeKube, served: tuple[TestClient[Any, Any], PolicyStore]
) -> None:
    client, store = served
    kube.put(table_configmap(f'- image: "{TRITON}"\n  cudaVersion: "12.2"\n', name="other"))
    stats = store.watched["ImageCudaTable"]
    await eventually(lambda: stats.synced, "the image table source listed")
    assert store.config is None
    assert "shipped knowledge: NGC Triton 24.05" in await cuda_note(client, TRITON)


async def test_without_rbac_the_config_file_table_applies(kube: FakeKube, tmp_path: Path) -> None:
    kube.forbid("configmaps")
    store = PolicyStore()
    args = argparse.Namespace(policies=None, kubeconfig=str(kube.write_kubeconfig(tmp_path)))
    source = _policy_source(args, store, CONFIG)
    assert source is not None
    app = create_app(CONFIG, store, policy_source=source)
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        stats = store.watched["ImageCudaTable"]
        await eventually(lambda: stats.errors > 0, "the refusal is counted")
        assert store.config is None
        assert "403" in (stats.last_error or "") or "refused" in (stats.last_error or "")
    finally:
        await client.close()


def test_no_configmap_named_no_source(tmp_path: Path) -> None:
    store = PolicyStore()
    args = argparse.Namespace(policies=None, kubeconfig=str(tmp_path / "kubeconfig"))
    _policy_source(args, store, WebhookConfig())
    assert "ImageCudaTable" not in store.watched
