"""The Helm chart, rendered offline: what a cluster admin gets from `helm install`."""

from __future__ import annotations

import base64
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml
from cryptography import x509
from kubernetes_validate.utils import all_versions

from webhook.core.config.model import WebhookConfig, load_config

from .conftest import NAMESPACE, RELEASE, Manifest, Render

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / "charts" / "gpu-admission-webhook"
FULLNAME = f"{RELEASE}-gpu-admission-webhook"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
# Kinds that are CustomResourceDefinitions, absent from the Kubernetes OpenAPI schema that
# kubernetes-validate ships: they cannot be schema-checked here (cert-manager and the
# Prometheus Operator validate them with their own CRD schemas at apply time).
CRD_KINDS = {
    ("cert-manager.io/v1", "Issuer"): "cert-manager CRD",
    ("cert-manager.io/v1", "Certificate"): "cert-manager CRD",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "Prometheus Operator CRD",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "Prometheus Operator CRD",
    ("grafana.integreatly.org/v1beta1", "GrafanaDashboard"): "grafana-operator CRD",
}


def find(objects: list[Manifest], kind: str, name: str | None = None) -> list[Manifest]:
    """Objects of `kind` (and `name` when given)."""
    return [
        obj
        for obj in objects
        if obj["kind"] == kind and (name is None or obj["metadata"]["name"] == name)
    ]


def one(objects: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    """The single object of `kind`; the failure says how many were found."""
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def container(objects: list[Manifest]) -> dict[str, Any]:
    """The webhook container of the Deployment."""
    deployment = one(objects, "Deployment")
    containers: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["webhook"]
    return containers[0]


def webhooks(objects: list[Manifest]) -> dict[tuple[str, str], dict[str, Any]]:
    """(configuration kind, webhook purpose) -> webhook, e.g. ("Validating...", "pods")."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for kind in WEBHOOK_KINDS:
        for hook in one(objects, kind)["webhooks"]:
            found[(kind, hook["name"].split(".", 1)[0])] = hook
    return found


def supported_schema_versions() -> list[str]:
    """Oldest and newest Kubernetes schema shipped by kubernetes-validate that the chart allows
    (Chart.yaml kubeVersion >= 1.23)."""

    def numeric(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in version.split("."))

    versions = sorted((v for v in all_versions() if numeric(v) >= (1, 23)), key=numeric)
    return [versions[0], versions[-1]]


VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "cert-manager": {"certManager": {"enabled": True}},
    "policies": {"policies": {"install": True}},
    "single-replica": {"replicaCount": 1},
    "registry": {
        "registryAuth": {"secretName": "registry-pull"},
        "registryCA": {"configMapName": "corp-ca", "key": "bundle.pem"},
        "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy.corp:3128"}],
    },
    "servicemonitor": {
        "metrics": {"serviceMonitor": {"enabled": True}},
        "prometheusRule": {"enabled": True},
        "grafanaDashboard": {"enabled": True, "grafanaOperator": {"enabled": True}},
        "priorityClassName": "system-cluster-critical",
        "webhooks": {"excludeNamespaces": ["batch-legacy"]},
    },
}


def test_chart_lints_clean_in_strict_mode() -> None:
    for kube_version in (None, "v1.23.0", "v1.28.0"):
        report = helm_python.lint(CHART_DIR, strict=True, kube_version=kube_version)
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        assert report["errors"] == []
        assert problems == []


@pytest.mark.parametrize("schema_version", supported_schema_versions())
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_manifest_is_valid_for_kubernetes(
    render: Render, variant: str, schema_version: str
) -> None:
    objects = render(VARIANTS[variant], kube_version=f"v{schema_version}")
    validated, skipped = [], []
    for obj in objects:
        crd_reason = CRD_KINDS.get((obj["apiVersion"], obj["kind"]))
        if crd_reason:
            skipped.append((obj["kind"], crd_reason))
            continue
        # strict: unknown fields (a typo, or a field newer than this version) are errors.
        kubernetes_validate.validate(obj, schema_version, strict=True)
        validated.append(obj["kind"])
    assert {"Deployment", "Service", "ConfigMap", *WEBHOOK_KINDS} <= set(validated)
    # Skipping is explicit: only the CRD kinds this variant is expected to render.
    expected_skips = {
        "cert-manager": {"Issuer", "Certificate"},
        "servicemonitor": {"ServiceMonitor", "PrometheusRule", "GrafanaDashboard"},
    }.get(variant, set())
    assert {kind for kind, _ in skipped} == expected_skips


def test_default_values_pass_the_values_schema(chart: helm_python.Chart) -> None:
    chart.validate_schema(chart.values)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicaCount": 0}, "at '/replicaCount': minimum: got 0, want 1"),
        (
            {"webhooks": {"pods": {"failurePolicy": "Sometimes"}}},
            "at '/webhooks/pods/failurePolicy': value must be one of 'Fail', 'Ignore'",
        ),
        ({"webhooks": {"timeoutSeconds": 60}}, "at '/webhooks/timeoutSeconds': maximum"),
        (
            {"webhooks": {"matchConditions": {"enabled": "maybe"}}},
            "at '/webhooks/matchConditions/enabled': value must be one of 'auto'",
        ),
        ({"config": {"maxMajorSkew": 9}}, "at '/config/maxMajorSkew': maximum: got 9, want 5"),
        ({"config": {"cudaLable": {}}}, "at '/config': additional properties 'cudaLable'"),
        (
            {"config": {"noCompatibleNode": "explode"}},
            "at '/config/noCompatibleNode': value must be one of 'deny', 'warn'",
        ),
        (
            {"config": {"envFixes": [{"name": "x"}]}},
            "at '/config/envFixes/0': missing property 'env'",
        ),
        ({"certManager": {"enabled": "yes"}}, "at '/certManager/enabled': got string, want"),
        ({"webhooks": {"excludeNamespaces": ["Bad_NS"]}}, "at '/webhooks/excludeNamespaces/0'"),
        ({"imagePullPolicy": "Always"}, "additional properties 'imagePullPolicy' not allowed"),
        ({"drainSeconds": 900}, "at '/drainSeconds': maximum: got 900, want 300"),
        (
            {
                "webhooks": {
                    "operators": {
                        "rules": [{"apiGroup": "x.io", "resources": ["as"], "scope": "Global"}]
                    }
                }
            },
            "at '/webhooks/operators/rules/0/scope': value must be one of 'Namespaced'",
        ),
        (
            {
                "config": {
                    "workloads": [
                        {
                            "group": "x.io",
                            "kind": "A",
                            "templates": [{"path": "spec.t", "form": "container", "container": {}}],
                        }
                    ]
                }
            },
            "at '/config/workloads/0/templates/0/container': missing properties 'name', "
            "'resources'",
        ),
    ],
)
def test_bad_values_fail_with_a_message_naming_the_key(
    chart: helm_python.Chart, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm_python.HelmValuesError) as excinfo:
        chart.render(values, name=RELEASE, namespace=NAMESPACE)
    assert message in str(excinfo.value)


def test_config_schema_is_generated_from_the_webhook_config_model() -> None:
    # A change to webhook/core/config/model.py must be reflected in values.schema.json, or `helm
    # install` would reject (or let through) keys the webhook reads differently.
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "sync_chart_schema.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_deployment_is_hardened_and_highly_available(render: Render) -> None:
    objects = render({"priorityClassName": "system-cluster-critical"})
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert one(objects, "Deployment")["spec"]["replicas"] == 2
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container(objects)["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["runAsUser"] == 65532
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    # Read-only root: /tmp is the only writable path, an emptyDir.
    mounts = {m["mountPath"]: m for m in container(objects)["volumeMounts"]}
    tmp_volume = next(v for v in pod["volumes"] if v["name"] == mounts["/tmp"]["name"])
    assert "emptyDir" in tmp_volume
    # Holds 1,500 slow clients (bench/bench_slow_clients.py, SPEC §7) with margin.
    assert container(objects)["resources"]["limits"]["memory"] == "640Mi"
    assert container(objects)["resources"]["requests"]["cpu"] == "100m"
    # Replicas spread over nodes (and zones), softly so a small cluster can still run them.
    spread = pod["topologySpreadConstraints"]
    assert {c["topologyKey"] for c in spread} == {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    }
    assert {c["whenUnsatisfiable"] for c in spread} == {"ScheduleAnyway"}
    anti = pod["affinity"]["podAntiAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti
    term = anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert (
        term["labelSelector"]["matchLabels"]
        == one(objects, "Deployment")["spec"]["selector"]["matchLabels"]
    )


def test_probes_use_healthz_and_readyz_over_https_on_the_webhook_port(render: Render) -> None:
    web = container(render())
    ports = {p["name"]: p["containerPort"] for p in web["ports"]}
    assert ports == {"webhook": 8443, "metrics": 9090}
    assert web["livenessProbe"]["httpGet"] == {
        "path": "/healthz",
        "port": "webhook",
        "scheme": "HTTPS",
    }
    assert web["readinessProbe"]["httpGet"] == {
        "path": "/readyz",
        "port": "webhook",
        "scheme": "HTTPS",
    }


def test_container_args_are_the_serve_contract_pointing_at_mounted_files(render: Render) -> None:
    objects = render()
    web = container(objects)
    assert web["args"] == [
        "serve",
        "--port",
        "8443",
        "--metrics-port",
        "9090",
        "--tls-cert",
        "/etc/webhook/tls/tls.crt",
        "--tls-key",
        "/etc/webhook/tls/tls.key",
        "--config",
        "/etc/webhook/config/config.yaml",
        "--drain-seconds",
        "5",
        "--log-format",
        "json",
        "--audit-interval",
        "3600",
        "--audit-reports",
        "wgpolicyk8s",
        "--report-owner",
        FULLNAME,
        "--audit-lease",
        f"{NAMESPACE}/{FULLNAME}-audit",
    ]
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in web["volumeMounts"]}
    # --config: the file is the "config.yaml" key of the rendered ConfigMap.
    config_map = one(objects, "ConfigMap", mounts["/etc/webhook/config"]["configMap"]["name"])
    assert "config.yaml" in config_map["data"]
    # --tls-cert/--tls-key: a directory mount (no subPath), so renewed certificates reach the
    # running server, which reloads them.
    secret_name = mounts["/etc/webhook/tls"]["secret"]["secretName"]
    assert one(objects, "Secret", secret_name)["type"] == "kubernetes.io/tls"
    assert all("subPath" not in m for m in web["volumeMounts"])


def test_termination_grace_covers_the_drain_and_the_in_flight_grace(render: Render) -> None:
    # SPEC §7: drain delay (answering with Connection: close), then 10 s for reviews in flight.
    for drain, grace in ((5, 20), (30, 45), (0, 15)):
        objects = render({"drainSeconds": drain})
        pod = one(objects, "Deployment")["spec"]["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] == grace
        args = container(objects)["args"]
        assert args[args.index("--drain-seconds") + 1] == str(drain)


def test_extra_args_are_appended_after_the_contract(render: Render) -> None:
    args = container(render({"extraArgs": ["--log-level", "debug"]}))["args"]
    assert args[0] == "serve"
    assert args[-2:] == ["--log-level", "debug"]


def test_rendered_webhook_config_loads_and_equals_the_built_in_defaults(render: Render) -> None:
    config_map = one(render(), "ConfigMap", FULLNAME)
    document = yaml.safe_load(config_map["data"]["config.yaml"])
    # values.yaml spells the defaults out for admins: they must be the model's defaults.
    assert load_config(document) == WebhookConfig()


def test_config_values_reach_the_webhook(render: Render, tmp_path: Path) -> None:
    objects = render(
        {
            "config": {
                "cudaLabels": {
                    "major": "nvidia.com/cuda.runtime-version.major",
                    "minor": "nvidia.com/cuda.runtime-version.minor",
                },
                "mutateTemplates": True,
                "imageCudaTable": [
                    {"image": "nvcr.io/nvidia/tritonserver:24.*", "cudaVersion": "12.4"}
                ],
            }
        }
    )
    path = tmp_path / "config.yaml"
    path.write_text(one(objects, "ConfigMap", FULLNAME)["data"]["config.yaml"], encoding="utf-8")
    config = load_config(path)
    assert config.cuda_labels.major == "nvidia.com/cuda.runtime-version.major"
    assert config.mutate_templates is True
    assert config.image_cuda_table[0].cuda_version == "12.4"
    # Keys not overridden keep the chart's (= the model's) defaults.
    assert config.gpu_resource_names == WebhookConfig().gpu_resource_names
    assert config.major_skew == "prefer"


def test_config_change_rolls_the_pods(render: Render) -> None:
    def checksum(values: dict[str, Any]) -> str:
        deployment = one(render(values), "Deployment")
        annotation: str = deployment["spec"]["template"]["metadata"]["annotations"][
            "checksum/config"
        ]
        return annotation

    assert checksum({}) != checksum({"config": {"maxMajorSkew": 2}})


def test_service_routes_443_to_the_webhook_port_and_exposes_metrics(render: Render) -> None:
    objects = render()
    service = one(objects, "Service")
    ports = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
    assert ports == {"https": (443, "webhook"), "metrics": (9090, "metrics")}
    assert (
        service["spec"]["selector"] == one(objects, "Deployment")["spec"]["selector"]["matchLabels"]
    )
    for hook in webhooks(objects).values():
        assert hook["clientConfig"]["service"] == {
            "name": service["metadata"]["name"],
            "namespace": NAMESPACE,
            "path": hook["clientConfig"]["service"]["path"],
            "port": 443,
        }


def test_webhooks_have_safe_defaults(render: Render) -> None:
    hooks = webhooks(render())
    mutating, validating = WEBHOOK_KINDS
    assert set(hooks) == {
        (mutating, "pods"),
        (mutating, "workloads"),
        (validating, "pods"),
        (validating, "workloads"),
        (validating, "crl-configmaps"),
        (mutating, "operators"),
        (validating, "operators"),
        # GPU access control (SPEC §12), on by default in `warn` mode.
        (mutating, "gpu-access"),
        (validating, "gpu-access"),
    }
    expected_failure = {
        "pods": "Fail",
        "workloads": "Ignore",
        "operators": "Ignore",
        "crl-configmaps": "Fail",
        # An outage of the entry that sees pods requesting no GPU never stops pod creation.
        "gpu-access": "Ignore",
    }
    for (kind, purpose), hook in hooks.items():
        assert hook["failurePolicy"] == expected_failure[purpose], (kind, purpose)
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["sideEffects"] == "None"
        assert hook["timeoutSeconds"] == 5
        path = "/mutate" if kind == mutating else "/validate"
        assert hook["clientConfig"]["service"]["path"] == path
        if kind == mutating:
            assert hook["reinvocationPolicy"] == "IfNeeded"
        else:
            assert "reinvocationPolicy" not in hook
    operations = {
        purpose: {op for rule in hook["rules"] for op in rule["operations"]}
        for (_, purpose), hook in hooks.items()
    }
    assert operations == {
        "pods": {"CREATE"},
        "workloads": {"CREATE", "UPDATE"},
        "operators": {"CREATE", "UPDATE"},
        "crl-configmaps": {"CREATE", "UPDATE"},
        # A pod UPDATE may change an image; kubectl debug adds ephemeral containers (UPDATE).
        "gpu-access": {"CREATE", "UPDATE"},
    }
    workload_resources = {
        (group, resource)
        for rule in hooks[(validating, "workloads")]["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert workload_resources == {
        ("apps", "deployments"),
        ("apps", "statefulsets"),
        ("apps", "daemonsets"),
        ("apps", "replicasets"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
    }


def test_operator_rules_come_from_values(render: Render) -> None:
    _, validating = WEBHOOK_KINDS
    hook = webhooks(render())[(validating, "operators")]
    resources = {
        (g, r) for rule in hook["rules"] for g in rule["apiGroups"] for r in rule["resources"]
    }
    assert {
        ("kubeflow.org", "pytorchjobs"),
        ("kubeflow.org", "mpijobs"),
        ("ray.io", "rayjobs"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets"),
        ("jobset.x-k8s.io", "jobsets"),
        ("batch.volcano.sh", "jobs"),
        ("serving.kserve.io", "inferenceservices"),
        ("serving.kserve.io", "llminferenceservices"),
        ("trainer.kubeflow.org", "trainjobs"),
        ("trainer.kubeflow.org", "trainingruntimes"),
        ("trainer.kubeflow.org", "clustertrainingruntimes"),
        ("serving.knative.dev", "services"),
    } <= resources
    assert ("batch", "jobs") not in resources  # batch/v1 Jobs go to the workloads webhook
    assert ("", "services") not in resources  # core Services are no workload
    assert all(rule["apiVersions"] == ["*"] for rule in hook["rules"])
    # A rule's scope limits it to namespaced or cluster-scoped objects: ClusterTrainingRuntime
    # is cluster-scoped (kubebuilder:resource:scope=Cluster), everything else is namespaced.
    scopes = {r: rule["scope"] for rule in hook["rules"] for r in rule["resources"]}
    assert scopes.pop("clustertrainingruntimes") == "Cluster"
    assert set(scopes.values()) == {"Namespaced"}
    custom = {
        "webhooks": {
            "operators": {
                "rules": [
                    {"apiGroup": "example.com", "resources": ["finetunes"]},
                    {"apiGroup": "example.com", "resources": ["presets"], "scope": "*"},
                ]
            }
        }
    }
    rule, preset = webhooks(render(custom))[(validating, "operators")]["rules"]
    assert (rule["apiGroups"], rule["resources"], rule["scope"]) == (
        ["example.com"],
        ["finetunes"],
        "Namespaced",
    )
    assert (preset["resources"], preset["scope"]) == (["presets"], "*")
    # no rules: no operator webhook at all
    assert (validating, "operators") not in webhooks(
        render({"webhooks": {"operators": {"rules": []}}})
    )


def test_failure_policies_and_timeout_are_configurable(render: Render) -> None:
    values = {
        "webhooks": {
            "timeoutSeconds": 3,
            "pods": {"failurePolicy": "Ignore"},
            "workloads": {"failurePolicy": "Fail"},
        }
    }
    for (_, purpose), hook in webhooks(render(values)).items():
        assert hook["timeoutSeconds"] == 3
        expected = {
            "pods": "Ignore",
            "workloads": "Fail",
            "operators": "Ignore",
            "gpu-access": "Ignore",
        }
        assert hook["failurePolicy"] == expected.get(purpose, "Fail")


def test_namespace_selectors_exclude_system_release_and_listed_namespaces(render: Render) -> None:
    hooks = webhooks(render({"webhooks": {"excludeNamespaces": ["batch-legacy"]}}))
    for (kind, purpose), hook in hooks.items():
        expressions = hook["namespaceSelector"]["matchExpressions"]
        if purpose == "crl-configmaps":
            assert expressions == [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["kube-public"]}
            ]
            continue
        # The GPU access entry also skips config.gpuAccess.exemptNamespaces.
        exempt = ["gpu-operator", "nvidia-gpu-operator"] if purpose == "gpu-access" else []
        assert expressions == [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": ["kube-system", NAMESPACE, "batch-legacy", *exempt],
            },
            # NotIn also matches namespaces without the label: only an explicit opt-out skips.
            {"key": "gpu-admission-webhook.io/ignore", "operator": "NotIn", "values": ["true"]},
        ], (kind, purpose)


@pytest.mark.parametrize(
    ("kube_version", "setting", "expected"),
    [
        ("v1.27.9", "auto", False),
        ("v1.28.0", "auto", True),
        ("v1.33.1", "auto", True),
        ("v1.33.1", False, False),
        ("v1.27.9", True, True),
    ],
)
def test_match_conditions_follow_the_cluster_version(
    render: Render, kube_version: str, setting: str | bool, expected: bool
) -> None:
    values = {"webhooks": {"matchConditions": {"enabled": setting}}}
    hooks = webhooks(render(values, kube_version=kube_version))
    for key, hook in hooks.items():
        # The GPU access entry has only the one that leaves to the pods entries the pod CREATEs
        # they review (default values: `warn`, pods entries Fail; test_chart_reviews.py).
        assert ("matchConditions" in hook) is expected, key
        if expected and key[1] == "gpu-access":
            assert [c["name"] for c in hook["matchConditions"]] == [
                "not-reviewed-by-the-pods-entry"
            ]
    crl = hooks[("ValidatingWebhookConfiguration", "crl-configmaps")]
    if expected:
        assert "objectSelector" not in crl
        assert [c["name"] for c in crl["matchConditions"]] == ["crl-candidate"]
    else:
        # Without CEL only labelled CRLs are sent: other kube-public ConfigMaps (cluster-info,
        # updated by the bootstrap signer) never depend on the webhook being up.
        assert crl["objectSelector"] == {
            "matchExpressions": [{"key": "features.alauda.io/type", "operator": "Exists"}]
        }


def _certificate(pem: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem.encode())


def test_generated_ca_signed_the_serving_certificate_and_is_every_ca_bundle(
    render: Render,
) -> None:
    objects = render()
    secret = one(objects, "Secret", f"{FULLNAME}-tls")
    data = {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}
    ca = _certificate(data["ca.crt"])
    serving = _certificate(data["tls.crt"])
    serving.verify_directly_issued_by(ca)  # raises if the CA did not sign it
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{FULLNAME}.{NAMESPACE}.svc" in names.get_values_for_type(x509.DNSName)
    assert "PRIVATE KEY" in data["tls.key"]
    hooks = webhooks(objects)
    assert len(hooks) == 9
    for hook in hooks.values():
        assert base64.b64decode(hook["clientConfig"]["caBundle"]).decode() == data["ca.crt"]
    for kind in WEBHOOK_KINDS:
        assert "cert-manager.io/inject-ca-from" not in one(objects, kind)["metadata"].get(
            "annotations", {}
        )


def test_cert_manager_issues_the_serving_certificate_and_injects_the_ca(render: Render) -> None:
    objects = render({"certManager": {"enabled": True}})
    assert find(objects, "Secret") == []  # cert-manager writes it
    issuers = {obj["metadata"]["name"]: obj["spec"] for obj in find(objects, "Issuer")}
    certificates = {obj["metadata"]["name"]: obj["spec"] for obj in find(objects, "Certificate")}
    # self-signed Issuer -> CA Certificate -> CA Issuer -> serving Certificate
    ca_cert = certificates[f"{FULLNAME}-ca"]
    assert "selfSigned" in issuers[ca_cert["issuerRef"]["name"]]
    assert ca_cert["isCA"] is True
    serving = certificates[f"{FULLNAME}-serving"]
    assert issuers[serving["issuerRef"]["name"]] == {"ca": {"secretName": ca_cert["secretName"]}}
    assert f"{FULLNAME}.{NAMESPACE}.svc" in serving["dnsNames"]
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    tls_volume = next(v for v in pod["volumes"] if v["name"] == "tls")
    assert tls_volume["secret"]["secretName"] == serving["secretName"]
    for kind in WEBHOOK_KINDS:
        configuration = one(objects, kind)
        assert configuration["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from": f"{NAMESPACE}/{FULLNAME}-serving"
        }
        for hook in configuration["webhooks"]:
            assert "caBundle" not in hook["clientConfig"]


def test_rbac_reads_configmaps_in_kube_public_only(render: Render) -> None:
    # With the node inventory, the claim cache and the audit off; their ClusterRoles:
    # test_chart_rbac.py and test_chart_audit.py.
    objects = render(
        {
            "policies": {"install": True},
            "metrics": {"serviceMonitor": {"enabled": True}},
            "config": {
                "nodeInventory": False,
                "claimTemplateCache": False,
                "runtimeFixes": {"namespaceLevels": False},
            },
            "audit": {"enabled": False},
        }
    )
    kinds = {obj["kind"] for obj in objects}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding"}
    role = one(objects, "Role")
    assert role["metadata"]["namespace"] == "kube-public"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}
    ]
    binding = one(objects, "RoleBinding")
    assert binding["metadata"]["namespace"] == "kube-public"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    account = one(objects, "ServiceAccount")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}
    ]
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]


def test_disruption_budget_keeps_one_replica_but_never_blocks_a_single_one(
    render: Render,
) -> None:
    budget = one(render(), "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1
    assert (
        budget["spec"]["selector"]["matchLabels"]
        == one(render(), "Deployment")["spec"]["selector"]["matchLabels"]
    )
    # minAvailable 1 on a single replica would make every node drain hang.
    assert find(render({"replicaCount": 1}), "PodDisruptionBudget") == []


def test_service_monitor_is_optional_and_scrapes_the_metrics_port(render: Render) -> None:
    assert find(render(), "ServiceMonitor") == []
    monitor = one(render({"metrics": {"serviceMonitor": {"enabled": True}}}), "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"


def test_notes_explain_how_to_check_the_webhook(render_text: Any) -> None:
    notes: str = render_text()["gpu-admission-webhook/templates/NOTES.txt"]
    assert f"kubectl -n {NAMESPACE} get pods -l app.kubernetes.io/instance={RELEASE}" in notes
    assert "curl -sk https://localhost:8443/policies" in notes
    assert "curl -s http://localhost:9090/metrics" in notes
    assert "kubectl apply --dry-run=server" in notes


def test_the_gpu_access_entry_sees_every_pod_update_and_ephemeral_container(
    render: Render,
) -> None:
    """SPEC §12, what reaches the webhook: Pod CREATE and UPDATE and the ephemeralcontainers
    subresource (a `pods` rule does not match a subresource), with no condition of its own
    that a padded pod could push past the API server's CEL budget, on every Kubernetes version
    (only the pods entries' one, negated: test_chart_reviews.py)."""
    for version in ("v1.27.0", "v1.30.0", "v1.36.2"):
        hooks = webhooks(render(kube_version=version))
        for kind in WEBHOOK_KINDS:
            hook = hooks[(kind, "gpu-access")]
            pods = hooks[(kind, "pods")]
            if "matchConditions" in hook:
                (condition,) = hook["matchConditions"]
                assert pods["matchConditions"][0]["expression"] == f"!({condition['expression']})"
            else:
                assert version == "v1.27.0", (version, kind)
            assert [
                (rule["apiGroups"], rule["operations"], rule["resources"], rule["scope"])
                for rule in hook["rules"]
            ] == [
                ([""], ["CREATE", "UPDATE"], ["pods"], "Namespaced"),
                ([""], ["UPDATE"], ["pods/ephemeralcontainers"], "Namespaced"),
            ]
        # The pods entry (CRL resources, placement) stays CREATE only: resources cannot change
        # on a pod UPDATE and an ephemeral container may have none.
        assert hooks[(WEBHOOK_KINDS[1], "pods")]["rules"][0]["resources"] == ["pods"]
        assert hooks[(WEBHOOK_KINDS[1], "pods")]["rules"][0]["operations"] == ["CREATE"]


@pytest.mark.parametrize(
    ("mode", "setting", "expected"),
    [
        ("warn", None, "Ignore"),
        ("enforce", None, "Fail"),
        ("warn", "auto", "Ignore"),
        ("enforce", "auto", "Fail"),
        ("warn", "Fail", "Fail"),
        ("enforce", "Fail", "Fail"),
    ],
)
def test_the_gpu_access_failure_policy_follows_the_mode(
    render: Render, mode: str, setting: str | None, expected: str
) -> None:
    values: dict[str, Any] = {"config": {"gpuAccess": {"mode": mode}}}
    if setting is not None:
        values["webhooks"] = {"gpuAccess": {"failurePolicy": setting}}
    hooks = webhooks(render(values))
    for kind in WEBHOOK_KINDS:
        assert hooks[(kind, "gpu-access")]["failurePolicy"] == expected
        assert hooks[(kind, "pods")]["failurePolicy"] == "Fail"


def test_ignore_under_enforce_is_refused_with_the_reason(chart: helm_python.Chart) -> None:
    values = {
        "config": {"gpuAccess": {"mode": "enforce"}},
        "webhooks": {"gpuAccess": {"failurePolicy": "Ignore"}},
    }
    with pytest.raises(helm_python.HelmRenderError) as excinfo:
        chart.render(values, name=RELEASE, namespace=NAMESPACE)
    expected = "webhooks.gpuAccess.failurePolicy: Ignore contradicts config.gpuAccess.mode: enforce"
    assert expected in str(excinfo.value)


@pytest.mark.parametrize(
    ("access", "exempt"),
    [
        ({}, ["gpu-operator", "nvidia-gpu-operator"]),
        ({"exemptNamespaces": []}, []),
        ({"exemptNamespaces": ["dcgm"]}, ["dcgm"]),
    ],
)
def test_the_gpu_access_entry_exempts_exactly_the_listed_namespaces(
    render: Render, access: dict[str, Any], exempt: list[str]
) -> None:
    hooks = webhooks(render({"config": {"gpuAccess": access}} if access else None))
    for kind in WEBHOOK_KINDS:
        names = hooks[(kind, "gpu-access")]["namespaceSelector"]["matchExpressions"][0]
        assert names["values"] == ["kube-system", NAMESPACE, *exempt]


def test_the_chart_default_runtime_classes_and_exempt_list_are_the_webhooks() -> None:
    """The chart's fallbacks (_helpers.tpl, used when a key is absent) and values.yaml are the
    config model's defaults."""
    values = yaml.safe_load((ROOT / "charts/gpu-admission-webhook/values.yaml").read_text())
    defaults = WebhookConfig().gpu_access
    assert tuple(values["config"]["gpuAccess"]["runtimeClasses"]) == defaults.runtime_classes
    assert tuple(values["config"]["gpuAccess"]["exemptNamespaces"]) == (defaults.exempt_namespaces)
    helpers = (ROOT / "charts/gpu-admission-webhook/templates/_helpers.tpl").read_text()
    assert "$classes := list " + " ".join(f'"{c}"' for c in defaults.runtime_classes) in helpers
    assert "$exempt := list " + " ".join(f'"{n}"' for n in defaults.exempt_namespaces) in helpers


def test_notes_say_when_gpu_access_control_fails_closed(
    render_text: Callable[..., dict[str, str]],
) -> None:
    notes = "gpu-admission-webhook/templates/NOTES.txt"
    enforce = render_text({"config": {"gpuAccess": {"mode": "enforce"}}})[notes]
    assert "GPU access control fails closed (webhooks.gpuAccess.failurePolicy=Fail)" in enforce
    assert "fails closed" not in render_text()[notes]
