"""The try-it path on the real API server: `gpu-webhook serve --self-signed --register-url`
registers itself (replacing a registration a crashed run left), the API server calls it, and
Ctrl-C removes both configurations.

The session's webhook stays registered meanwhile, so this run's own policy is one only it has:
a CRL ConfigMap for a resource the shipped ones do not know, written to a folder it reads with
--policies. A pod asking 150 of that resource is denied naming that ConfigMap only while this
run's registration is in place.
"""

from __future__ import annotations

import base64
import datetime
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import Cluster, api_error
from .test_e2e_admission import gpu_pod

NAME = "gpu-webhook-try-e2e"
RESOURCE = "example.com/tryit-e2e"
POLICY = "cf-crl-tryit-tryit-e2e"
KINDS = ("mutating", "validating")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _policy_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "policies"
    folder.mkdir()
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": POLICY,
            "namespace": "kube-public",
            "labels": {
                "features.alauda.io/type": "CustomResourceLimitation",
                "features.alauda.io/group": "tryit",
                "features.alauda.io/enabled": "true",
            },
        },
        "data": {
            "key": RESOURCE,
            "group": "tryit",
            "dataType": "integer",
            "limits": "optional",
            "requests": "disabled",
            "wholeUnit": "100",
        },
    }
    (folder / f"{POLICY}.yaml").write_text(yaml.safe_dump(configmap), encoding="utf-8")
    return folder


def _denial(core: Any, namespace: str) -> str | None:
    """This run's denial of the probe pod (a server dry run), or None when it is admitted."""
    from kubernetes.client.exceptions import ApiException

    try:
        core.create_namespaced_pod(
            namespace, gpu_pod("tryit-probe", {RESOURCE: "150"}, "busybox:1.36"), dry_run="All"
        )
    except ApiException as exc:
        if exc.status != 403:
            raise
        message: str = api_error(exc).get("message", "")
        return message
    return None


def _configuration(registration: Any, kind: str) -> Any:
    """The registration of `kind` named NAME, or None when there is none."""
    from kubernetes.client.exceptions import ApiException

    try:
        return getattr(registration, f"read_{kind}_webhook_configuration")(NAME)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


@pytest.fixture
def registration(cluster: Cluster) -> Iterator[Any]:
    from kubernetes import client

    if cluster.mode != "url":
        pytest.skip(
            "the try-it command registers a webhook on this machine's loopback: only an API "
            "server on this machine (E2E_MODE=url, scripts/e2e-kapi.sh) can call it"
        )
    api = client.AdmissionregistrationV1Api(cluster.api)
    yield api
    # Whatever happened, no registration of this test outlives it.
    for kind in KINDS:
        if _configuration(api, kind) is not None:
            getattr(api, f"delete_{kind}_webhook_configuration")(NAME)


def _stale_registration(registration: Any) -> None:
    """What a killed earlier run leaves: a configuration of the name, calling a dead URL."""
    registration.create_mutating_webhook_configuration(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": NAME},
            "webhooks": [
                {
                    "name": "stale.gpu-webhook-try-e2e.example.com",
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Ignore",
                    "clientConfig": {"url": "https://127.0.0.1:1/mutate"},
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                        }
                    ],
                }
            ],
        }
    )


def _wait(what: str, check: Any, server: subprocess.Popen[str], log: Path) -> Any:
    deadline = time.monotonic() + 60
    while True:
        found = check()
        if found:
            return found
        assert server.poll() is None or what.startswith("after"), log.read_text()
        assert time.monotonic() < deadline, f"{what}: not within 60 s\n{log.read_text()}"
        time.sleep(0.5)


def serve_registered(
    cluster: Cluster, tmp_path: Path, policies: Path, name: str, *log: str
) -> tuple[subprocess.Popen[str], Path, str]:
    """`gpu-webhook serve --self-signed --register-url` on a free loopback port, as the README's
    try-it path runs it: (the process, its log file, its URL). `log`: --log-format and
    --log-level with their values."""
    port = _free_port()
    url = f"https://127.0.0.1:{port}"
    config = tmp_path / "config.yaml"
    # Nothing leaves loopback: no public registry is asked about an image.
    config.write_text("registryLookups:\n  publicRegistries: false\n", encoding="utf-8")
    path = tmp_path / "serve.log"
    gpu_webhook = Path(sys.executable).parent / "gpu-webhook"
    with path.open("w") as out:
        server = subprocess.Popen(
            [str(gpu_webhook), "serve", "--self-signed", "--host", "127.0.0.1", "--port",
             str(port), "--kubeconfig", str(cluster.kubeconfig), "--policies", str(policies),
             "--config", str(config), "--register-url", url, "--register-name", name, *log],
            stdout=out, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    return server, path, url


def test_serve_registers_itself_and_removes_the_registration_on_ctrl_c(
    cluster: Cluster, core: Any, namespace: str, registration: Any, tmp_path: Path
) -> None:
    _stale_registration(registration)
    server, log, url = serve_registered(
        cluster, tmp_path, _policy_dir(tmp_path), NAME, "--log-format", "text", "--log-level",
        "warning",
    )  # fmt: skip
    try:
        _wait("the registration", lambda: "Ctrl-C stops" in log.read_text(), server, log)
        printed = log.read_text()
        assert (
            "replaced MutatingWebhookConfiguration gpu-webhook-try-e2e (left by an earlier run); "
            "created ValidatingWebhookConfiguration gpu-webhook-try-e2e"
        ) in printed
        assert f"call {url}/mutate and {url}/validate" in printed
        assert "kubectl apply --dry-run=server -f examples/pods.yaml" in printed
        for kind in KINDS:
            hooks = _configuration(registration, kind).webhooks
            # The chart's entries (pods, workloads, operators, GPU access; CRL ConfigMaps too on
            # the validating side), each calling this run with its CA.
            assert [h.name.split(".")[0] for h in hooks] == (
                ["pods", "workloads", "operators", "gpu-access"]
                + (["crl-configmaps"] if kind == "validating" else [])
            )
            path = "/mutate" if kind == "mutating" else "/validate"
            assert {h.client_config.url for h in hooks} == {url + path}
            assert all(h.client_config.ca_bundle for h in hooks)
        # The API server picks the registration up through its own watch.
        denial = _wait("the denial", lambda: _denial(core, namespace), server, log)
        assert f"ConfigMap kube-public/{POLICY}" in denial
        assert f"limits.{RESOURCE}='150' is above 100 but not a multiple of 100" in denial
    finally:
        server.send_signal(signal.SIGINT)
        code = server.wait(timeout=60)
    assert code == 0, log.read_text()
    assert (
        "deleted MutatingWebhookConfiguration gpu-webhook-try-e2e; "
        "deleted ValidatingWebhookConfiguration gpu-webhook-try-e2e"
    ) in log.read_text()
    assert [_configuration(registration, kind) for kind in KINDS] == [None, None]
    # And the API server stops calling it (the session's webhook does not know the resource).
    _wait("after Ctrl-C, the pod admitted", lambda: _denial(core, namespace) is None, server, log)


def _unprivileged_kubeconfig(cluster: Cluster, tmp_path: Path) -> Path:
    """The cluster's kubeconfig with a client certificate for a user no RBAC rule names (signed
    by the kapi CA of scripts/e2e-kapi.sh): it may read /version, nothing else."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    pki = Path(os.environ.get("KAPI_DIR", "/nonexistent")) / "pki"
    if not (pki / "ca.key").is_file():
        pytest.skip("needs the CA key of scripts/e2e-kapi.sh's API server ($KAPI_DIR/pki)")
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), None)
    ca = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tryit-nobody")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    config = yaml.safe_load(cluster.kubeconfig.read_text(encoding="utf-8"))
    pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    config["users"] = [
        {
            "name": "tryit-nobody",
            "user": {
                "client-certificate-data": base64.b64encode(pem).decode(),
                "client-key-data": base64.b64encode(key_pem).decode(),
            },
        }
    ]
    for context in config["contexts"]:
        context["context"]["user"] = "tryit-nobody"
    path = tmp_path / "nobody.kubeconfig"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def test_a_refused_registration_stops_the_server_saying_what_is_missing(
    cluster: Cluster, registration: Any, tmp_path: Path
) -> None:
    kubeconfig = _unprivileged_kubeconfig(cluster, tmp_path)
    port = _free_port()
    result = subprocess.run(
        [str(Path(sys.executable).parent / "gpu-webhook"), "serve", "--self-signed", "--host",
         "127.0.0.1", "--port", str(port), "--kubeconfig", str(kubeconfig), "--policies",
         str(_policy_dir(tmp_path)), "--register-url", f"https://127.0.0.1:{port}",
         "--register-name", NAME, "--drain-seconds", "0", "--log-format", "text",
         "--log-level", "warning"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    # The user may read /version (the check before serving), not create configurations: the
    # server listened, the registration was refused, and the server stopped.
    assert result.returncode == 2, result.stdout + result.stderr
    # Nothing was made, so nothing is deleted (the user may not delete either).
    [error] = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert error.startswith(
        f"error: cannot register MutatingWebhookConfiguration {NAME} at {_server(cluster)}: 403 "
    )
    assert error.endswith(
        "the kubeconfig's user may not manage admission webhooks: it needs create, get, update "
        "and delete on mutatingwebhookconfigurations and validatingwebhookconfigurations "
        "(cluster-admin has them)"
    )
    assert "registered with the API server" not in result.stdout
    assert [_configuration(registration, kind) for kind in KINDS] == [None, None]


def _server(cluster: Cluster) -> str:
    config = yaml.safe_load(cluster.kubeconfig.read_text(encoding="utf-8"))
    server: str = config["clusters"][0]["cluster"]["server"]
    return server
