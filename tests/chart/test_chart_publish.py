"""The chart, publishable: Artifact Hub annotations that say what the chart holds, and the
chart packaged, pushed as an OCI artifact to a real registry (the CNCF distribution registry of
shared/tools/registry on 127.0.0.1 with TLS), pulled back from `oci://` and installed (rendered)
from the pulled archive: what `helm push` and `helm install oci://...` do.

helm-python-sdk is Helm's Go SDK in-process. Go reads SSL_CERT_FILE once per process, so the
push and the pull run in a child process whose SSL_CERT_FILE is the test CA: the registry's
certificate is verified, not skipped.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import tarfile
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from tests.realregistry import Registry, registry_binary, skip_reason
from webhook.tls.certs import write_certificates

from .conftest import Render, manifests_of
from .test_chart import container, one

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / "charts" / "gpu-admission-webhook"
CHART = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text(encoding="utf-8"))
ANNOTATIONS = CHART["annotations"]
BINARY = registry_binary()
CHANGE_KINDS = {"added", "changed", "deprecated", "removed", "fixed", "security"}


def annotation(name: str) -> Any:
    return yaml.safe_load(ANNOTATIONS[f"artifacthub.io/{name}"])


def test_artifact_hub_license_is_the_projects() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert ANNOTATIONS["artifacthub.io/license"] == project["license"]


def test_artifact_hub_images_are_what_the_chart_deploys(render: Render) -> None:
    images = annotation("images")
    assert [i["image"] for i in images] == [container(render())["image"]]


def test_artifact_hub_crds_are_the_charts_crds() -> None:
    shipped: list[tuple[str, str, str]] = []
    for path in sorted((CHART_DIR / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        shipped.extend(
            (crd["spec"]["names"]["kind"], version["name"], crd["metadata"]["name"])
            for version in crd["spec"]["versions"]
        )
    listed = [(c["kind"], c["version"], c["name"]) for c in annotation("crds")]
    assert sorted(listed) == sorted(shipped)
    assert all(c["displayName"] and c["description"] for c in annotation("crds"))


def test_artifact_hub_changes_and_links_are_well_formed() -> None:
    changes = annotation("changes")
    assert changes and all(c["kind"] in CHANGE_KINDS and c["description"] for c in changes)
    links = annotation("links")
    assert {link["name"] for link in links} >= {"Source", "Runbooks"}
    assert all(link["url"].startswith("https://") for link in links)


_PUSH_PULL = """
import json, sys
import helm_python
archive, remote, ref, version, out = sys.argv[1:]
pushed = helm_python.push(archive, remote)
pulled = helm_python.pull(ref, version=version, destination=out)
print(json.dumps({"pushed": pushed, "pulled": pulled}))
"""


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    if BINARY is None:
        pytest.skip(skip_reason())
    work = tmp_path_factory.mktemp("oci")
    tls = write_certificates(work / "tls", ["localhost"], ["127.0.0.1"], days=2)
    running = Registry(BINARY, tls, work / "storage")
    running.start(work)
    try:
        yield running
    finally:
        running.stop()


def test_chart_is_pushed_as_oci_artifact_and_installed_from_oci(
    registry: Registry, tmp_path: Path
) -> None:
    archive = Path(helm_python.package(CHART_DIR, destination=tmp_path))
    assert archive.name == f"gpu-admission-webhook-{CHART['version']}.tgz"
    pulled_dir = tmp_path / "pulled"
    pulled_dir.mkdir()
    remote = f"oci://{registry.host}/charts"
    ref = f"{remote}/gpu-admission-webhook"
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            _PUSH_PULL,
            str(archive),
            remote,
            ref,
            CHART["version"],
            str(pulled_dir),
        ],
        env={**os.environ, "SSL_CERT_FILE": str(registry.tls.ca_cert)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    # In the registry: an OCI manifest whose config is Helm's chart config and whose one layer
    # is the chart archive (what `helm pull` and Artifact Hub read).
    request = urllib.request.Request(
        f"https://{registry.host}/v2/charts/gpu-admission-webhook/manifests/{CHART['version']}",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
    )
    context = ssl.create_default_context(cafile=str(registry.tls.ca_cert))
    with urllib.request.urlopen(request, context=context, timeout=10) as reply:
        manifest = json.loads(reply.read())
    assert manifest["config"]["mediaType"] == "application/vnd.cncf.helm.config.v1+json"
    assert [layer["mediaType"] for layer in manifest["layers"]] == [
        "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
    ]
    assert manifest["layers"][0]["size"] == archive.stat().st_size
    (pulled,) = pulled_dir.glob("*.tgz")
    assert pulled.name == archive.name
    # The same chart came back: every file of the package, byte for byte.
    with tarfile.open(archive) as sent, tarfile.open(pulled) as received:
        sent_files = {m.name: sent.extractfile(m).read() for m in sent if m.isfile()}  # type: ignore[union-attr]
        received_files = {
            m.name: received.extractfile(m).read()  # type: ignore[union-attr]
            for m in received
            if m.isfile()
        }
    assert received_files == sent_files
    assert "gpu-admission-webhook/dashboards/gpu-admission-webhook.json" in received_files
    # `helm install oci://...` renders the pulled chart: the release's objects.
    with helm_python.Chart.load(pulled) as chart:
        assert chart.metadata["annotations"] == ANNOTATIONS
        objects = manifests_of(
            chart.render(
                {"prometheusRule": {"enabled": True}}, name="gaw", namespace="gpu-webhook-system"
            )
        )
    assert one(objects, "Deployment")["metadata"]["name"] == "gaw-gpu-admission-webhook"
    one(objects, "PrometheusRule")
