#!/usr/bin/env python3
"""Register a gpu-webhook running outside the cluster with the API server, by URL.

For development and end-to-end tests on a bare API server (no nodes needed: pods stay
Pending, but admission runs). The webhook configurations are the Helm chart's own (same
rules, namespace selectors, failure policies and matchConditions), rendered for the
cluster's version, with each clientConfig replaced by `url: URL/mutate|validate` and the
caBundle read from --ca-file.

    gpu-webhook serve --self-signed --host HOST_IP --kubeconfig KCFG   # prints the CA path
    scripts/register-webhook-url.py --url https://HOST_IP:8443 --ca-file CA --kubeconfig KCFG
    scripts/register-webhook-url.py --delete --kubeconfig KCFG
    scripts/register-webhook-url.py --write-data webhook/data/webhook-configurations.yaml

`gpu-webhook serve --register-url` (the try-it path, docs/operations/deploy.md) registers itself
without helm: it reads the chart's configurations rendered once into
webhook/data/webhook-configurations.yaml by `--write-data` (tests/chart/test_webhook_data.py
fails when that file and the chart differ).

`--config FILE` renders the chart with that webhook config as its `config` values (the file
`gpu-webhook serve --config` reads): the GPU access entry, for one, depends on `gpuAccess`.

The serving certificate must be valid for HOST_IP (the API server verifies it against the CA).
Needs the dev install (`make install`: helm-python-sdk, kubernetes).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import helm_python
import yaml
from helm_python import _native
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

ROOT = Path(__file__).resolve().parent.parent
CHART_DIR = ROOT / "charts" / "gpu-admission-webhook"
WEBHOOKS_TEMPLATE = "gpu-admission-webhook/templates/webhooks.yaml"
# Rendered as if released here; only used in the namespace selector's exclusion list.
PLACEHOLDER_NAMESPACE = "gpu-admission-webhook"
DEFAULT_NAME = "gpu-admission-webhook-url"
KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
# --write-data: the release name the shipped configurations are rendered with (their webhooks'
# names), and the kube versions of the two variants (matchConditions from 1.28 on).
DATA_RELEASE = "gpu-webhook-try"
DATA_VARIANTS = {"matchConditions": "v1.28.0", "noMatchConditions": "v1.27.0"}
DATA_HEADER = """\
# The Helm chart's Mutating/ValidatingWebhookConfiguration (charts/gpu-admission-webhook,
# templates/webhooks.yaml) rendered with the default values, for `gpu-webhook serve
# --register-url` (no helm at run time): `matchConditions` for Kubernetes >= 1.28,
# `noMatchConditions` before. Generated: scripts/register-webhook-url.py --write-data FILE;
# do not edit (tests/chart/test_webhook_data.py fails when it differs from the chart).
"""


def check_url(url: str) -> str:
    """The base URL without a trailing slash; raises ValueError with what is wrong."""
    parts = urlsplit(url)
    if parts.scheme != "https":
        raise ValueError(
            f"--url must be an https:// URL (the API server only calls HTTPS), got {url!r}"
        )
    if not parts.hostname:
        raise ValueError(f"--url has no host: {url!r}")
    if parts.query or parts.fragment or parts.username:
        raise ValueError(f"--url must not carry a query, fragment or user info: {url!r}")
    return url.rstrip("/")


def render_chart_configurations(
    name: str, kube_version: str, webhook_config: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The chart's webhook configurations as `helm template` renders them for `kube_version`."""
    values = None if webhook_config is None else json.dumps({"config": webhook_config})
    with helm_python.Chart.load(CHART_DIR) as chart:
        # Chart.render() of helm-python-sdk 0.2.2 does not expose kube_version; the C ABI's
        # render options do (like `helm template --kube-version`).
        options = {"name": name, "namespace": PLACEHOLDER_NAMESPACE, "kube_version": kube_version}
        rendered: dict[str, str] = json.loads(
            _native.call_string("helm_render", chart._raw(), values, json.dumps(options))
        )
    return [doc for doc in yaml.safe_load_all(rendered[WEBHOOKS_TEMPLATE]) if doc]


def data_text() -> str:
    """The text of webhook/data/webhook-configurations.yaml: both variants, default values."""
    variants = {
        key: [_data_configuration(c) for c in render_chart_configurations(DATA_RELEASE, version)]
        for key, version in DATA_VARIANTS.items()
    }
    return DATA_HEADER + yaml.safe_dump(variants, sort_keys=False, width=100)


def _data_configuration(configuration: dict[str, Any]) -> dict[str, Any]:
    """A rendered configuration without what a registration sets: metadata (name, labels) and
    each clientConfig but its path (the chart's generated caBundle differs on every render)."""
    hooks = []
    for hook in configuration["webhooks"]:
        path = hook["clientConfig"]["service"]["path"]
        hooks.append({**hook, "clientConfig": {"path": path}})
    return {
        "apiVersion": configuration["apiVersion"],
        "kind": configuration["kind"],
        "webhooks": hooks,
    }


def render_configurations(
    name: str,
    base_url: str,
    ca_pem: bytes,
    kube_version: str,
    webhook_config: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The chart's Mutating/ValidatingWebhookConfiguration, pointed at `base_url`, rendered
    with `webhook_config` as the chart's `config` values when given."""
    values = None if webhook_config is None else json.dumps({"config": webhook_config})
    with helm_python.Chart.load(CHART_DIR) as chart:
        # Chart.render() of helm-python-sdk 0.2.2 does not expose kube_version; the C ABI's
        # render options do (like `helm template --kube-version`).
        options = {"name": name, "namespace": PLACEHOLDER_NAMESPACE, "kube_version": kube_version}
        rendered: dict[str, str] = json.loads(
            _native.call_string("helm_render", chart._raw(), values, json.dumps(options))
        )
    configurations = [doc for doc in yaml.safe_load_all(rendered[WEBHOOKS_TEMPLATE]) if doc]
    ca_bundle = base64.b64encode(ca_pem).decode()
    for configuration in configurations:
        configuration["metadata"]["name"] = name
        configuration["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "register-webhook-url"
        for hook in configuration["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": base_url + path, "caBundle": ca_bundle}
    assert [c["kind"] for c in configurations] == list(KINDS)
    return configurations


def server_version(api: Any) -> str:
    version: str = client.VersionApi(api).get_code().git_version
    return version


def apply(api: Any, configuration: dict[str, Any]) -> str:
    """Create or replace one configuration; returns what was done."""
    registration = client.AdmissionregistrationV1Api(api)
    kind = configuration["kind"]
    suffix = "mutating" if kind.startswith("Mutating") else "validating"
    create = getattr(registration, f"create_{suffix}_webhook_configuration")
    read = getattr(registration, f"read_{suffix}_webhook_configuration")
    replace = getattr(registration, f"replace_{suffix}_webhook_configuration")
    name = configuration["metadata"]["name"]
    try:
        create(configuration)
        return f"created {kind} {name}"
    except ApiException as exc:
        if exc.status != 409:
            raise
    current = read(name)
    configuration["metadata"]["resourceVersion"] = current.metadata.resource_version
    replace(name, configuration)
    return f"replaced {kind} {name}"


def delete(api: Any, name: str) -> list[str]:
    registration = client.AdmissionregistrationV1Api(api)
    done = []
    for suffix, kind in (("mutating", KINDS[0]), ("validating", KINDS[1])):
        try:
            getattr(registration, f"delete_{suffix}_webhook_configuration")(name)
            done.append(f"deleted {kind} {name}")
        except ApiException as exc:
            if exc.status != 404:
                raise
            done.append(f"{kind} {name} did not exist")
    return done


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Register an out-of-cluster gpu-webhook with the API server by URL."
    )
    parser.add_argument("--url", help="the webhook's base URL, e.g. https://10.0.0.5:8443")
    parser.add_argument("--ca-file", type=Path, help="PEM CA that signed the serving cert")
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG or ~/.kube/config")
    parser.add_argument("--name", default=DEFAULT_NAME, help="configuration name (%(default)s)")
    parser.add_argument(
        "--kube-version", help="render for this version (default: ask the API server)"
    )
    parser.add_argument(
        "--print", action="store_true", help="print the YAML instead of applying it"
    )
    parser.add_argument("--delete", action="store_true", help="remove the configurations")
    parser.add_argument(
        "--write-data",
        type=Path,
        metavar="FILE",
        help="write the configurations `gpu-webhook serve --register-url` registers "
        "(webhook/data/webhook-configurations.yaml) and exit",
    )
    parser.add_argument(
        "--config",
        type=Path,
        help="the webhook's config file, rendered as the chart's `config` values",
    )
    args = parser.parse_args(argv)
    if args.config is not None and not args.config.is_file():
        parser.error(f"--config {args.config} does not exist")
    if not args.delete and args.write_data is None:
        if not args.url or not args.ca_file:
            parser.error("--url and --ca-file are required (unless --delete)")
        try:
            args.url = check_url(args.url)
        except ValueError as exc:
            parser.error(str(exc))
        if not args.ca_file.is_file():
            parser.error(f"--ca-file {args.ca_file} does not exist")
    if args.print and not args.kube_version:
        parser.error("--print needs --kube-version (it does not contact the cluster)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.write_data is not None:
        args.write_data.write_text(data_text(), encoding="utf-8")
        print(f"wrote {args.write_data}")
        return 0
    webhook_config = None
    if args.config is not None:
        loaded = yaml.safe_load(args.config.read_text(encoding="utf-8"))
        webhook_config = loaded if isinstance(loaded, dict) else {}
    if args.print:
        configurations = render_configurations(
            args.name, args.url, args.ca_file.read_bytes(), args.kube_version, webhook_config
        )
        print(yaml.safe_dump_all(configurations, sort_keys=False), end="")
        return 0
    # new_client_from_config is unannotated in the kubernetes client.
    api = config.new_client_from_config(config_file=args.kubeconfig)  # type: ignore[no-untyped-call]
    try:
        if args.delete:
            lines = delete(api, args.name)
        else:
            version = args.kube_version or server_version(api)
            configurations = render_configurations(
                args.name, args.url, args.ca_file.read_bytes(), version, webhook_config
            )
            lines = [apply(api, c) for c in configurations]
    finally:
        api.close()
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
