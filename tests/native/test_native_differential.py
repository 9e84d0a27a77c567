"""The exported native policy against the webhook core, on a real API server (SPEC §9).

With NATIVE_KUBECONFIG set (e.g. the kapi API server of shared/tools, no controllers needed),
the shipped and the test CRLs are installed in kube-public, the exported policy and binding
too, NO webhook is registered, and for a few hundred seeded Pods and workload templates the
webhook core's verdict on the CRL rules (core/evaluation/evaluate.py, only violations that name a
CRL ConfigMap) is compared with the API server's, through a server-side dry-run create; then for
seeded UPDATEs of stored workloads (dry-run replace), and after CRL edits.

Run: NATIVE_KUBECONFIG=~/.cache/kapi/kubeconfig .venv/bin/pytest -q tests/native -s
(a fresh API server is best: `KAPI_DIR=... shared/tools/kapi/start.sh --clean`; ~1 minute.)

The policy and its binding are updated in place and never deleted: while no binding names a
built-in paramKind, the API server stops that kind's param informer for good, and every policy
then reads the params it held at that moment until the API server restarts (kubernetes issue
130887, fix pending in PR 141015). The binding only matches the test's namespace.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import random
import re
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from webhook.core.config.model import load_config
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.evaluation.updates import update_reads
from webhook.core.policies.crl import crl_configmap
from webhook.core.policies.native import export
from webhook.core.policies.policyset import PolicySet
from webhook.sources.files import policy_files, read_documents

ROOT = Path(__file__).resolve().parents[2]
KUBECONFIG = os.environ.get("NATIVE_KUBECONFIG", "")
pytestmark = pytest.mark.skipif(
    not KUBECONFIG,
    reason="no API server: set NATIVE_KUBECONFIG to a kubeconfig (e.g. shared/tools/kapi's) "
    "to compare the exported policy with the webhook core",
)
NAMESPACE = "native-diff"
POLICY = "native-diff-crl"
SEED = 20260530
CASES = 500
UPDATES = 200
# A stored object with this label is not checked by the test's binding (objectSelector): how
# the UPDATE cases store "old" objects that the current CRLs would deny (made before a CRL
# edit). The UPDATE drops the label, a metadata change the webhook does not read.
UNCHECKED = "native-diff/unchecked"

# CRLs that exercise every rule the shipped ones do not: required/disabled limits and
# requests, min/max, wholeUnit, a default, a two-key group, and one invalid CRL that both
# the webhook and the policy must ignore.
TEST_CRLS = [
    crl_configmap(
        "cf-crl-test-need",
        {
            "key": "test.example.com/need",
            "dataType": "integer",
            "group": "test",
            "limits": "required",
            "requests": "fromLimits",
            "min": "1",
            "max": "8",
            "descriptionEn": "Test key that must be set",
        },
    ),
    crl_configmap(
        "cf-crl-test-share",
        {
            "key": "test.example.com/share",
            "dataType": "integer",
            "group": "test",
            "limits": "optional",
            "requests": "required",
            "wholeUnit": "10",
            "defaultValue": "5",
        },
    ),
    crl_configmap(
        "cf-crl-test2-banned",
        {
            "key": "test.example.com/banned",
            "dataType": "integer",
            "group": "test2",
            "limits": "disabled",
            "requests": "disabled",
        },
    ),
    crl_configmap(
        "cf-crl-test2-solo",
        {
            "key": "test.example.com/solo",
            "dataType": "integer",
            "group": "test2",
            "limits": "optional",
            "requests": "disabled",
            "max": "4",
        },
    ),
    crl_configmap(
        "cf-crl-test3-broken",
        {
            "key": "test.example.com/broken",
            "dataType": "integer",
            "group": "test3",
            "limits": "required",
            "requests": "disabled",
            "min": "one",
        },
    ),
]
VALUES = ["0", "1", "2", "4", "5", "8", "9", "10", "15", "20", "50", "100", "150", "200", "1k"]
WORKLOADS = ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"]


def shipped_crls() -> list[dict[str, Any]]:
    return [
        doc
        for file in policy_files(ROOT / "configmaps")
        for doc in read_documents(file)
        if isinstance(doc, dict)
    ]


def all_keys(crls: list[dict[str, Any]]) -> list[str]:
    return [*sorted({cm["data"]["key"] for cm in crls}), "example.com/other"]


def container(rng: random.Random, name: str, keys: list[str]) -> dict[str, Any]:
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    for key in rng.sample(keys, rng.randint(0, 3)):
        # Mostly what the API server's validation accepts (a request needs an equal limit):
        # the rest is rejected before any policy runs and compares nothing.
        shape = rng.choices(["limits", "both", "requests", "differ"], [8, 6, 1, 1])[0]
        value = rng.choice(VALUES)
        if shape in ("limits", "both", "differ"):
            limits[key] = value
        if shape == "both":
            requests[key] = value
        if shape == "requests":
            requests[key] = value
        if shape == "differ":
            requests[key] = rng.choice(VALUES)
    resources: dict[str, Any] = {}
    if limits:
        resources["limits"] = limits
    if requests:
        resources["requests"] = requests
    return {"name": name, "image": "busybox", "resources": resources}


def pod_spec(rng: random.Random, keys: list[str]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [container(rng, f"c{i}", keys) for i in range(rng.randint(1, 3))]
    }
    if rng.random() < 0.3:
        spec["initContainers"] = [container(rng, "init", keys)]
    if rng.random() < 0.3:
        spec["restartPolicy"] = "Never"
    return spec


def make_object(rng: random.Random, i: int, keys: list[str]) -> dict[str, Any]:
    kind = "Pod" if rng.random() < 0.5 else rng.choice(WORKLOADS)
    name = f"o{i}"
    spec = pod_spec(rng, keys)
    meta = {"name": name, "namespace": NAMESPACE}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    labels = {"app": name}
    template = {"metadata": {"labels": labels}, "spec": spec}
    if kind in ("Job", "CronJob"):
        spec["restartPolicy"] = "Never"
        job = {"template": template}
        if kind == "Job":
            return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": job}
        return {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": meta,
            "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": job}},
        }
    spec["restartPolicy"] = "Always"
    body: dict[str, Any] = {"selector": {"matchLabels": labels}, "template": template}
    if kind == "StatefulSet":
        body["serviceName"] = name
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": body}


def as_admitted(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object as admission sees it: on a Pod the API server has copied each limit into a
    missing request (kubernetes pkg/apis/core/v1/defaults.go SetDefaults_Pod)."""
    out = copy.deepcopy(dict(obj))
    if out["kind"] == "Pod":
        for lst in ("containers", "initContainers"):
            for c in out["spec"].get(lst) or []:
                res = c.get("resources") or {}
                limits = res.get("limits") or {}
                if limits:
                    requests = res.setdefault("requests", {})
                    for key, value in limits.items():
                        requests.setdefault(key, value)
    return out


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    # The client's generated signatures want its model classes; the test sends plain dicts.
    from kubernetes import client as _client
    from kubernetes import config as _config

    client: Any = _client
    config: Any = _config
    api = config.new_client_from_config(config_file=KUBECONFIG)
    core = client.CoreV1Api(api)
    crls = shipped_crls() + TEST_CRLS
    for source in crls:
        cm = copy.deepcopy(source)
        cm["metadata"]["namespace"] = "kube-public"
        with contextlib.suppress(client.ApiException):
            core.delete_namespaced_config_map(cm["metadata"]["name"], "kube-public")
        core.create_namespaced_config_map("kube-public", cm)
    try:
        core.create_namespace({"metadata": {"name": NAMESPACE}})
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    policies = PolicySet.from_configmaps(crls)
    adm = client.AdmissionregistrationV1Api(api)
    policy, binding = export(
        policies.by_key.values(), reads=update_reads(load_config(None)), name=POLICY
    ).objects
    binding["spec"]["matchResources"] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
        "objectSelector": {"matchExpressions": [{"key": UNCHECKED, "operator": "DoesNotExist"}]},
    }
    apply_admission_object(adm, policy)
    apply_admission_object(adm, binding)
    time.sleep(3)  # the policy and param informers sync
    yield api, policies, crls
    for cm in TEST_CRLS:
        core.delete_namespaced_config_map(cm["metadata"]["name"], "kube-public")


def apply_admission_object(adm: Any, obj: dict[str, Any]) -> None:
    """Create, or replace in place (never delete: see the module's docstring)."""
    from kubernetes import client as _client

    client: Any = _client
    name = obj["metadata"]["name"]
    if obj["kind"] == "ValidatingAdmissionPolicy":
        read, create, replace = (
            adm.read_validating_admission_policy,
            adm.create_validating_admission_policy,
            adm.replace_validating_admission_policy,
        )
    else:
        read, create, replace = (
            adm.read_validating_admission_policy_binding,
            adm.create_validating_admission_policy_binding,
            adm.replace_validating_admission_policy_binding,
        )
    try:
        current = read(name)
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        create(obj)
        return
    body = copy.deepcopy(obj)
    body["metadata"]["resourceVersion"] = current.metadata.resource_version
    replace(name, body)


def server_verdict(api: Any, obj: Mapping[str, Any]) -> tuple[str, str]:
    """("allowed" | "policy" | "invalid", message) from a server-side dry-run create."""
    from kubernetes import client as _client

    client: Any = _client
    kind = obj["kind"]
    create: dict[str, Any] = {
        "Pod": lambda b: client.CoreV1Api(api).create_namespaced_pod(NAMESPACE, b, dry_run="All"),
        "Deployment": lambda b: client.AppsV1Api(api).create_namespaced_deployment(
            NAMESPACE, b, dry_run="All"
        ),
        "StatefulSet": lambda b: client.AppsV1Api(api).create_namespaced_stateful_set(
            NAMESPACE, b, dry_run="All"
        ),
        "DaemonSet": lambda b: client.AppsV1Api(api).create_namespaced_daemon_set(
            NAMESPACE, b, dry_run="All"
        ),
        "ReplicaSet": lambda b: client.AppsV1Api(api).create_namespaced_replica_set(
            NAMESPACE, b, dry_run="All"
        ),
        "Job": lambda b: client.BatchV1Api(api).create_namespaced_job(NAMESPACE, b, dry_run="All"),
        "CronJob": lambda b: client.BatchV1Api(api).create_namespaced_cron_job(
            NAMESPACE, b, dry_run="All"
        ),
    }
    try:
        create[kind](obj)
    except client.ApiException as exc:
        message = json.loads(exc.body or "{}").get("message", "")
        if "ValidatingAdmissionPolicy" in message:
            return "policy", message
        if exc.status == 422:
            return "invalid", message
        raise
    return "allowed", ""


def core_verdict(obj: Mapping[str, Any], policies: PolicySet) -> list[str]:
    """The webhook core's CRL violations (placement, access, env: other rules, not compared)."""
    decision = evaluate(as_admitted(obj), policies, load_config(None), namespace=NAMESPACE)
    return [v.detail for v in decision.violations if v.configmap]


def test_policy_and_webhook_agree_on_crl_rules(cluster: Any) -> None:
    api, policies, crls = cluster
    rng = random.Random(SEED)
    keys = all_keys(crls)
    counts: Counter[str] = Counter()
    disagreements: list[str] = []
    unmatched_messages: list[str] = []
    for i in range(CASES):
        obj = make_object(rng, i, keys)
        expected = core_verdict(obj, policies)
        got, message = server_verdict(api, obj)
        counts[obj["kind"]] += 1
        if got == "invalid":
            # The API server's own validation rejected it before any policy ran (a request
            # without a limit, requests != limits on an extended resource): no policy verdict.
            counts["rejected by API validation"] += 1
            continue
        counts[f"{'denied' if expected else 'allowed'} by the webhook core"] += 1
        counts[f"{got} by the API server"] += 1
        if bool(expected) != (got == "policy"):
            disagreements.append(f"{obj} -> core {expected}, server {got}: {message}")
        elif expected:
            shown = message.split("denied request: ", 1)[1]
            # Every problem the policy shows is one the webhook reports, word for word.
            for part in re.split(f"; (?=(?:{'|'.join(['Pod', *WORKLOADS])}) {NAMESPACE}/)", shown):
                if not any(part.startswith(detail.rstrip(".")) for detail in expected):
                    unmatched_messages.append(f"{part!r} not in {expected}")
    print("\nnative policy differential:", dict(sorted(counts.items())))
    assert not disagreements, "\n".join(disagreements[:10])
    assert not unmatched_messages, "\n".join(unmatched_messages[:10])
    assert counts["policy by the API server"] >= 50 and counts["allowed by the API server"] >= 50


def test_violating_pod_denied_with_the_webhook_down(cluster: Any) -> None:
    """A webhook registered with failurePolicy: Ignore whose process is stopped (nothing
    listens on its port): the policy still denies a violating pod, and admits a good one."""
    from kubernetes import client as _client

    client: Any = _client
    api, _, _ = cluster
    adm = client.AdmissionregistrationV1Api(api)
    name = "gpu-webhook-stopped"
    hook = {
        "name": "pods.gpu-webhook.test",
        "clientConfig": {"url": "https://127.0.0.1:9/validate"},  # port 9: nothing listens
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
                "operations": ["CREATE"],
            }
        ],
        "failurePolicy": "Ignore",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 2,
    }
    adm.create_validating_webhook_configuration({"metadata": {"name": name}, "webhooks": [hook]})
    core = client.CoreV1Api(api)
    try:
        bad: dict[str, Any] = {
            "metadata": {"name": "too-many-cards"},
            "spec": {
                "containers": [
                    {
                        "name": "train",
                        "image": "busybox",
                        "resources": {"limits": {"tencent.com/vcuda-core": "150"}},
                    }
                ]
            },
        }
        with pytest.raises(client.ApiException) as denied:
            core.create_namespaced_pod(NAMESPACE, bad)
        assert denied.value.status == 403
        assert (
            'Pod native-diff/too-many-cards, container "train": '
            "limits.tencent.com/vcuda-core='150' is above 100 but not a multiple of 100"
        ) in json.loads(denied.value.body or "{}")["message"]
        good = copy.deepcopy(bad)
        good["metadata"]["name"] = "two-cards"
        good["spec"]["containers"][0]["resources"]["limits"]["tencent.com/vcuda-core"] = "200"
        core.create_namespaced_pod(NAMESPACE, good)
        core.delete_namespaced_pod("two-cards", NAMESPACE)
    finally:
        adm.delete_validating_webhook_configuration(name)


# --- UPDATEs of stored workloads ------------------------------------------------------------

UPDATE_KINDS = ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "CronJob"]


def _workload_api(api: Any, kind: str) -> tuple[Any, str]:
    from kubernetes import client as _client

    client: Any = _client
    snake = {
        "Deployment": "deployment",
        "StatefulSet": "stateful_set",
        "DaemonSet": "daemon_set",
        "ReplicaSet": "replica_set",
        "CronJob": "cron_job",
    }[kind]
    group = client.BatchV1Api(api) if kind == "CronJob" else client.AppsV1Api(api)
    return group, snake


def pod_template_spec(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "CronJob":
        spec: dict[str, Any] = obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        return spec
    template_spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return template_spec


def mutate(rng: random.Random, obj: dict[str, Any], keys: list[str]) -> str:
    """One change an UPDATE makes, as users and controllers make them; returns its name."""
    spec = pod_template_spec(obj)
    c = rng.choice(spec["containers"])
    change = rng.choice(
        [
            "nothing",
            "replicas",
            "image",
            "resource value",
            "resource added",
            "cpu",
            "reader env",
            "other env",
            "reorder",
            "read annotation",
            "other annotation",
        ]
    )
    resources = c.setdefault("resources", {})
    if change == "replicas" and obj["kind"] != "CronJob" and obj["kind"] != "DaemonSet":
        obj["spec"]["replicas"] = 3
    elif change == "image":
        c["image"] = "busybox:1.37"
    elif change == "resource value" and resources.get("limits"):
        key = rng.choice(sorted(resources["limits"]))
        value = rng.choice(VALUES)
        resources["limits"][key] = value
        if key in resources.get("requests", {}):
            resources["requests"][key] = value
    elif change == "resource added":
        resources.setdefault("limits", {})[rng.choice(keys)] = rng.choice(VALUES)
    elif change == "cpu":
        resources.setdefault("limits", {})["cpu"] = "2"
    elif change == "reader env":
        c.setdefault("env", []).append({"name": "NVIDIA_REQUIRE_CUDA", "value": "cuda>=12.0"})
    elif change == "other env":
        c.setdefault("env", []).append({"name": "RELOADER_BUMP", "value": str(rng.random())})
    elif change == "reorder" and len(spec["containers"]) > 1:
        spec["containers"].reverse()
    elif change in ("read annotation", "other annotation"):
        template = (
            obj["spec"]["jobTemplate"]["spec"]["template"]
            if obj["kind"] == "CronJob"
            else obj["spec"]["template"]
        )
        name = "features.alauda.io/cuda-version" if change == "read annotation" else "team"
        template.setdefault("metadata", {}).setdefault("annotations", {})[name] = "12.4"
    else:
        change = "nothing"
    return change


def test_policy_and_webhook_agree_on_updates(cluster: Any) -> None:
    """Stored workloads (some violating the CRLs, stored past the binding with UNCHECKED),
    each updated once by a seeded change: the webhook core's verdict on the UPDATE (with the
    old object) is the API server's, through a dry-run replace."""
    from kubernetes import client as _client

    client: Any = _client
    api, policies, crls = cluster
    rng = random.Random(SEED + 1)
    keys = all_keys(crls)
    counts: Counter[str] = Counter()
    disagreements: list[str] = []
    made = 0
    for i in range(UPDATES * 10):
        if made == UPDATES:
            break
        obj = make_object(rng, 1000 + i, keys)
        if obj["kind"] not in UPDATE_KINDS:
            continue
        obj["metadata"]["labels"] = {UNCHECKED: "true"}
        group, snake = _workload_api(api, obj["kind"])
        try:
            stored = json.loads(
                getattr(group, f"create_namespaced_{snake}")(
                    NAMESPACE, obj, _preload_content=False
                ).data
            )
        except client.ApiException as exc:
            if exc.status == 422:
                continue  # invalid for the API server itself: nothing to update
            raise
        made += 1
        try:
            new = copy.deepcopy(stored)
            new["metadata"]["labels"].pop(UNCHECKED)
            change = mutate(rng, new, keys)
            decision = evaluate(
                new,
                policies,
                load_config(None),
                namespace=NAMESPACE,
                operation="UPDATE",
                old_object=stored,
            )
            expected = [v.detail for v in decision.violations if v.configmap]
            try:
                getattr(group, f"replace_namespaced_{snake}")(
                    obj["metadata"]["name"], NAMESPACE, new, dry_run="All"
                )
                got, message = "allowed", ""
            except client.ApiException as exc:
                message = json.loads(exc.body or "{}").get("message", "")
                if exc.status == 422:
                    counts["rejected by API validation"] += 1
                    continue
                if "ValidatingAdmissionPolicy" not in message:
                    raise
                got = "policy"
            counts[f"{change}: {'denied' if expected else 'allowed'}"] += 1
            if bool(expected) != (got == "policy"):
                disagreements.append(f"{change}: {new} -> core {expected}, server {got}: {message}")
        finally:
            getattr(group, f"delete_namespaced_{snake}")(obj["metadata"]["name"], NAMESPACE)
    print("\nnative policy differential, updates:", dict(sorted(counts.items())))
    assert not disagreements, "\n".join(disagreements[:10])
    assert made == UPDATES
    denied = sum(n for k, n in counts.items() if k.endswith("denied"))
    assert denied >= 20 and counts["nothing: allowed"] >= 5


# --- CRL edits take effect without a re-export ----------------------------------------------


def test_crl_edits_take_effect_without_reexport(cluster: Any) -> None:
    """Editing a CRL's bound, adding a CRL and disabling it change the policy's verdict with
    no new export, as they change the webhook's (the policy reads the CRLs as params)."""
    from kubernetes import client as _client

    client: Any = _client
    api, _, crls = cluster
    core_api = client.CoreV1Api(api)
    late = crl_configmap(
        "cf-crl-test4-late",
        {
            "key": "test.example.com/late",
            "dataType": "integer",
            "group": "test4",
            "limits": "optional",
            "requests": "fromLimits",
            "max": "1",
        },
    )
    late["metadata"]["namespace"] = "kube-public"

    def pod(key: str, value: str) -> dict[str, Any]:
        c = {"name": "c", "image": "busybox", "resources": {"limits": {key: value}}}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "edited", "namespace": NAMESPACE},
            "spec": {"containers": [c]},
        }

    def agree(obj: dict[str, Any], current: list[dict[str, Any]], denied: bool) -> None:
        expected = core_verdict(obj, PolicySet.from_configmaps(current))
        assert bool(expected) == denied, expected
        deadline = time.monotonic() + 15  # the param informer's watch
        while True:
            got, message = server_verdict(api, obj)
            if (got == "policy") == denied or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert (got == "policy") == denied, message
        if denied:
            assert expected[0].rstrip(".") in message

    solo = next(cm for cm in crls if cm["metadata"]["name"] == "cf-crl-test2-solo")
    edited = copy.deepcopy(solo)
    edited["data"]["max"] = "2"
    others = [cm for cm in crls if cm is not solo]
    agree(pod("test.example.com/solo", "3"), crls, denied=False)
    core_api.patch_namespaced_config_map("cf-crl-test2-solo", "kube-public", {"data": {"max": "2"}})
    try:
        agree(pod("test.example.com/solo", "3"), [*others, edited], denied=True)
        agree(pod("test.example.com/late", "2"), [*others, edited], denied=False)
        core_api.create_namespaced_config_map("kube-public", late)
        agree(pod("test.example.com/late", "2"), [*others, edited, late], denied=True)
        disabled = copy.deepcopy(late)
        disabled["metadata"]["labels"]["features.alauda.io/enabled"] = "false"
        core_api.patch_namespaced_config_map(
            "cf-crl-test4-late",
            "kube-public",
            {"metadata": {"labels": {"features.alauda.io/enabled": "false"}}},
        )
        agree(pod("test.example.com/late", "2"), [*others, edited, disabled], denied=False)
    finally:
        core_api.patch_namespaced_config_map(
            "cf-crl-test2-solo", "kube-public", {"data": {"max": "4"}}
        )
        with contextlib.suppress(client.ApiException):
            core_api.delete_namespaced_config_map("cf-crl-test4-late", "kube-public")


# --- Named cases ----------------------------------------------------------------------------


def test_a_deployment_written_the_usual_way_is_admitted(cluster: Any) -> None:
    """requests = limits on the shipped GPU-Manager keys (requests: disabled): its pods are
    admitted, so the template is too (SPEC §3). The policy denied it."""
    api, policies, _ = cluster
    values = {"tencent.com/vcuda-core": "50", "tencent.com/vcuda-memory": "8"}
    c = {"name": "train", "image": "busybox", "resources": {"limits": values, "requests": values}}
    obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "usual", "namespace": NAMESPACE},
        "spec": {
            "selector": {"matchLabels": {"app": "usual"}},
            "template": {"metadata": {"labels": {"app": "usual"}}, "spec": {"containers": [c]}},
        },
    }
    assert core_verdict(obj, policies) == []
    assert server_verdict(api, obj) == ("allowed", "")


def test_an_unchanged_update_of_a_big_deployment_is_admitted(cluster: Any) -> None:
    """An UPDATE that changes no template field of a Deployment of 1,000 containers × 10 keys:
    the update check is linear (it compared every container with every other and exceeded the
    CEL cost limit from ~800 containers, denying the update)."""
    from kubernetes import client as _client

    client: Any = _client
    api, _, crls = cluster
    keys = all_keys(crls)[:10]
    containers = [
        {"name": f"c{i}", "image": "busybox", "resources": {"limits": dict.fromkeys(keys, "0")}}
        for i in range(1000)
    ]
    obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "big", "namespace": NAMESPACE, "labels": {UNCHECKED: "true"}},
        "spec": {
            "selector": {"matchLabels": {"app": "big"}},
            "template": {
                "metadata": {"labels": {"app": "big"}},
                "spec": {"containers": containers},
            },
        },
    }
    apps = client.AppsV1Api(api)
    stored = json.loads(
        apps.create_namespaced_deployment(NAMESPACE, obj, _preload_content=False).data
    )
    try:
        new = copy.deepcopy(stored)
        new["metadata"]["labels"].pop(UNCHECKED)
        new["spec"]["replicas"] = 0
        assert (
            evaluate(
                new,
                PolicySet.from_configmaps(crls),
                load_config(None),
                operation="UPDATE",
                old_object=stored,
            ).reason
            == "the pod template is unchanged"
        )
        apps.replace_namespaced_deployment("big", NAMESPACE, new, dry_run="All")
    finally:
        apps.delete_namespaced_deployment("big", NAMESPACE)
