"""The chart's registry lookup settings (SPEC §4 step 6, §10): credentials from a mounted
kubernetes.io/dockerconfigjson Secret, extra CAs, proxies, and the lookup config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python
import pytest

from webhook.core.config.model import load_config

from .conftest import NAMESPACE, RELEASE, Render
from .test_chart import FULLNAME, container, find, one

REGISTRY = {
    "registryAuth": {"secretName": "registry-pull"},
    "registryCA": {"configMapName": "corp-ca", "key": "bundle.pem"},
    "extraEnv": [
        {"name": "HTTPS_PROXY", "value": "http://proxy.corp:3128"},
        {"name": "NO_PROXY", "value": ".svc,.cluster.local"},
    ],
}


def _mounts(objects: Any) -> dict[str, dict[str, Any]]:
    web = container(objects)
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    return {
        m["mountPath"]: {**volumes[m["name"]], "readOnly": m.get("readOnly")}
        for m in web["volumeMounts"]
    }


def test_no_registry_files_by_default(render: Render) -> None:
    objects = render()
    args = container(objects)["args"]
    assert "--registry-auth" not in args and "--registry-ca" not in args
    assert "env" not in container(objects)
    assert set(_mounts(objects)) == {"/etc/webhook/tls", "/etc/webhook/config", "/tmp"}


def test_the_pull_secret_and_the_ca_are_mounted_and_passed(render: Render) -> None:
    objects = render(REGISTRY)
    web = container(objects)
    args = web["args"]
    auth = args[args.index("--registry-auth") + 1]
    ca = args[args.index("--registry-ca") + 1]
    assert (auth, ca) == (
        "/etc/webhook/registry-auth/.dockerconfigjson",
        "/etc/webhook/registry-ca/bundle.pem",
    )
    mounts = _mounts(objects)
    secret = mounts["/etc/webhook/registry-auth"]
    assert secret["secret"] == {
        "secretName": "registry-pull",
        "items": [{"key": ".dockerconfigjson", "path": ".dockerconfigjson"}],
    }
    assert secret["readOnly"] is True
    assert mounts["/etc/webhook/registry-ca"]["configMap"] == {"name": "corp-ca"}
    # Directory mounts: a rotated Secret reaches the running webhook, which reads it again.
    assert all("subPath" not in m for m in web["volumeMounts"])
    assert web["env"] == REGISTRY["extraEnv"]


def test_the_webhook_never_reads_secrets_through_the_api(render: Render) -> None:
    objects = render(REGISTRY)
    for kind in ("Role", "ClusterRole"):
        for role in find(objects, kind):
            for rule in role.get("rules", []):
                assert "secrets" not in rule.get("resources", []), role["metadata"]["name"]


def test_lookup_settings_reach_the_webhook(render: Render, tmp_path: Path) -> None:
    objects = render(
        {
            "config": {
                "registryLookups": {
                    "budgetSeconds": 1.5,
                    "negativeTtlSeconds": 120,
                    "allowedRegistries": ["harbor.corp.example", "10.0.0.5:5000"],
                    "insecureRegistries": ["build-cache:5000"],
                }
            }
        }
    )
    path = tmp_path / "config.yaml"
    path.write_text(one(objects, "ConfigMap", FULLNAME)["data"]["config.yaml"], encoding="utf-8")
    lookups = load_config(path).registry_lookups
    assert lookups.budget_seconds == 1.5 and lookups.negative_ttl_seconds == 120
    assert lookups.allowed_registries == ("harbor.corp.example", "10.0.0.5:5000")
    assert lookups.insecure_registries == ("build-cache:5000",)
    assert lookups.enabled and lookups.public_registries  # chart defaults kept


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"registryAuth": {"secret": "x"}}, "additional properties 'secret' not allowed"),
        (
            {"config": {"registryLookups": {"budgetSeconds": 0}}},
            "at '/config/registryLookups/budgetSeconds'",
        ),
        (
            {"config": {"registryLookups": {"alowedRegistries": []}}},
            "additional properties 'alowedRegistries' not allowed",
        ),
        ({"extraEnv": [{"value": "x"}]}, "at '/extraEnv/0': missing property 'name'"),
    ],
)
def test_bad_registry_values_fail_naming_the_key(
    chart: helm_python.Chart, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm_python.HelmValuesError) as excinfo:
        chart.render(values, name=RELEASE, namespace=NAMESPACE)
    assert message in str(excinfo.value)


def test_a_budget_the_api_server_would_not_wait_for_is_refused(chart: helm_python.Chart) -> None:
    webhooks = {"timeoutSeconds": 5}
    too_long = {"config": {"registryLookups": {"budgetSeconds": 5}}, "webhooks": webhooks}
    with pytest.raises(helm_python.HelmRenderError) as excinfo:
        chart.render(too_long, name=RELEASE, namespace=NAMESPACE)
    assert (
        "config.registryLookups.budgetSeconds (5) must be below webhooks.timeoutSeconds (5): "
        "admission waits that long for registry lookups" in str(excinfo.value)
    )
    off = {"config": {"registryLookups": {"enabled": False, "budgetSeconds": 5}}}
    chart.render({**off, "webhooks": webhooks}, name=RELEASE, namespace=NAMESPACE)
