"""Admission through a real API server: what `kubectl apply` users and cluster admins see.

Expected objects, warnings and messages are computed with the webhook's own evaluation core
from the shipped configmaps/, the webhook's config and the node inventory built from the
cluster's Nodes (as the webhook builds it), after simulating what the API server does before it
calls a webhook, so a change of wording needs no edit here.
"""

from __future__ import annotations

import copy
import json
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import Decision, evaluate, evaluate_configmap
from webhook.core.images.facts import ImageQuery, Requirement
from webhook.core.placement.inventory import NodeInventory
from webhook.core.policies.crl import crl_configmap as build_crl_configmap
from webhook.core.policies.policyset import PolicySet

from .conftest import INVENTORY_PROPAGATION_SECONDS, api_error

pytestmark = pytest.mark.e2e

PADDLE_IMAGE = "paddlepaddle/paddle:2.6.1-gpu-cuda12.0-cudnn8.9-trt8.6"
DENIED = re.compile(r'^admission webhook "[^"]+" denied the request: (?P<message>.*)$', re.S)
WARNING_VALUE = re.compile(r'\d{3} \S+ "((?:[^"\\]|\\.)*)"')
# Bounded wait for a new CRL to reach the webhook through its watch (no restart).
POLICY_PROPAGATION_SECONDS = 20.0


def warnings_of(response: Any) -> list[str]:
    """The API server's Warning headers (`299 - "text"`), in order."""
    values = response.headers.getlist("Warning") if response.headers else []
    found: list[str] = []
    for raw in values:
        # http.client decodes header bytes as latin-1; the API server sends UTF-8 ("≥").
        try:
            value = raw.encode("latin-1").decode("utf-8")
        except UnicodeError:
            value = raw
        for text in WARNING_VALUE.findall(value):
            found.append(re.sub(r"\\(.)", r"\1", text))
    return found


def call(method: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[dict[str, Any], list[str]]:
    """Call a typed client method; return the object as JSON plus the warnings shown."""
    response = method(*args, _preload_content=False, **kwargs)
    obj: dict[str, Any] = json.loads(response.data)
    return obj, warnings_of(response)


def denial(method: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """Call a method that must be denied by a webhook; return the webhook's message."""
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException) as excinfo:
        method(*args, **kwargs)
    message = str(api_error(excinfo.value).get("message", ""))
    match = DENIED.match(message)
    assert match, f"not a webhook denial: {message!r}"
    return match.group("message")


def admitted_pod(pod: dict[str, Any], namespace: str) -> dict[str, Any]:
    """A Pod as a webhook receives it (and as stored): the API server has already defaulted each
    container's missing requests from its limits (pkg/apis/core/v1/defaults.go, SetDefaults_Pod),
    and it re-applies defaulting after every mutating webhook's patch."""
    admitted = copy.deepcopy(pod)
    admitted["metadata"]["namespace"] = namespace
    for group in ("containers", "initContainers"):
        for container in admitted["spec"].get(group, []):
            # An empty value is stored as none (EnvVar.Value is `omitempty`): the core writes
            # ASCEND_VISIBLE_DEVICES="" as Ascend's void under gpuAccess enforce.
            for entry in container.get("env") or []:
                if entry.get("value") == "":
                    del entry["value"]
            resources = container.setdefault("resources", {})
            limits = resources.get("limits") or {}
            requests = resources.setdefault("requests", {})
            for key, value in limits.items():
                requests.setdefault(key, value)
    return admitted


def gpu_pod(name: str, limits: dict[str, str], image: str = PADDLE_IMAGE) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "train",
                    "image": image,
                    "command": ["sleep", "3600"],
                    "resources": {"limits": limits},
                }
            ],
        },
    }


def gpu_deployment(name: str, limits: dict[str, str]) -> dict[str, Any]:
    labels = {"app": name}
    pod = gpu_pod(name, limits)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod["spec"]},
        },
    }


def expected_for(
    pod: dict[str, Any],
    namespace: str,
    policies: PolicySet,
    config: WebhookConfig,
    inventory: NodeInventory | None,
    facts: Mapping[ImageQuery, Requirement] | None = None,
    **lookups: Any,
) -> Decision:
    """What the webhook answers for `pod`: the evaluation core on the pod as admitted, with the
    node inventory the webhook places against (and what registry lookups found, `facts`, and
    `lookups`: image_platforms, image_env)."""
    return evaluate(
        admitted_pod(pod, namespace),
        policies,
        config,
        kind="Pod",
        namespace=namespace,
        inventory=inventory,
        images=facts,
        **lookups,
    )


def denied_as_decided(
    core: Any,
    namespace: str,
    pod: dict[str, Any],
    want: Decision,
    config: WebhookConfig,
    **create: Any,
) -> bool:
    """Under `noCompatibleNode: deny`, a pod whose CUDA no node runs is denied with the message
    the core gives: True when it was (and checked), False when `want` allows the pod."""
    if want.allowed:
        return False
    assert config.no_compatible_node == "deny", want.violations
    assert denial(core.create_namespaced_pod, namespace, pod, **create) == want.denial_message()
    return True


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def dry_run_until(
    core: Any,
    namespace: str,
    pod: dict[str, Any],
    done: Callable[[dict[str, Any], list[str]], bool],
) -> tuple[dict[str, Any], list[str]]:
    """Dry-run create `pod` until `done(returned pod, warnings)` holds (bounded): the webhook
    learns of Node changes through its watch. Returns the last answer, done or not."""
    deadline = time.monotonic() + INVENTORY_PROPAGATION_SECONDS
    while True:
        returned, shown = call(core.create_namespaced_pod, namespace, pod, dry_run="All")
        if done(returned, shown) or time.monotonic() > deadline:
            return returned, shown
        time.sleep(0.5)


def test_pod_gets_resource_defaults_cuda_affinity_and_env_fixes(
    core: Any,
    namespace: str,
    policies: PolicySet,
    webhook_config: WebhookConfig,
    placement_inventory: NodeInventory | None,
) -> None:
    pod = gpu_pod(unique("paddle"), {"tencent.com/vcuda-core": "50"})
    # The webhook places pods against its node inventory: evaluate with the same one.
    expected = expected_for(pod, namespace, policies, webhook_config, placement_inventory)
    assert expected.allowed
    assert expected.mutated is not None
    # The scenario really exercises all three mutations (the fixture added a CUDA 12.4 node;
    # without an inventory the first label scheme is used).
    assert {"resource-default", "cuda-affinity", "env-fix"} <= set(expected.mutation_kinds)
    want_affinity = admitted_pod(dict(expected.mutated), namespace)["spec"]["affinity"]
    # When /inventory cannot be read, wait (bounded) by dry runs for the webhook to see the node.
    dry_run_until(core, namespace, pod, lambda p, _: p["spec"].get("affinity") == want_affinity)

    created, shown = call(core.create_namespaced_pod, namespace, pod)

    want = admitted_pod(dict(expected.mutated), namespace)["spec"]
    got = created["spec"]
    assert got["containers"][0]["resources"] == want["containers"][0]["resources"]
    assert {"name": "FLAGS_allocator_strategy", "value": "naive_best_fit"} in got["containers"][0][
        "env"
    ]
    assert got["containers"][0]["env"] == want["containers"][0]["env"]
    assert got["affinity"] == want["affinity"] == want_affinity
    # Every mutation is reported to the user as a warning line.
    for line in (*expected.notes, *expected.warnings):
        assert line in shown


def test_pod_breaking_a_policy_is_denied_with_the_exact_message(
    core: Any,
    namespace: str,
    policies: PolicySet,
    webhook_config: WebhookConfig,
    placement_inventory: NodeInventory | None,
) -> None:
    # 150 vcuda-core: above one card (100) only whole cards are allowed (wholeUnit).
    pod = gpu_pod(unique("too-much"), {"tencent.com/vcuda-core": "150"})
    mutated = evaluate(
        admitted_pod(pod, namespace),
        policies,
        webhook_config,
        kind="Pod",
        namespace=namespace,
        inventory=placement_inventory,
    ).mutated
    assert mutated is not None
    # The validating webhook sees the mutated (and re-defaulted) pod.
    expected = evaluate(
        admitted_pod(dict(mutated), namespace),
        policies,
        webhook_config,
        kind="Pod",
        namespace=namespace,
        inventory=placement_inventory,
    )
    assert not expected.allowed

    message = denial(core.create_namespaced_pod, namespace, pod)

    assert message == expected.denial_message()
    assert "wholeUnit" in message or "100" in message


def test_dry_run_of_a_deployment_breaking_a_policy_is_denied(
    apps: Any,
    namespace: str,
    policies: PolicySet,
    webhook_config: WebhookConfig,
    placement_inventory: NodeInventory | None,
) -> None:
    deployment = gpu_deployment(unique("bad-deploy"), {"tencent.com/vcuda-core": "150"})
    expected = evaluate(
        {**deployment, "metadata": {**deployment["metadata"], "namespace": namespace}},
        policies,
        webhook_config,
        kind="Deployment",
        namespace=namespace,
        inventory=placement_inventory,
    )
    assert not expected.allowed

    message = denial(apps.create_namespaced_deployment, namespace, deployment, dry_run="All")

    assert message == expected.denial_message()


def test_dry_run_of_a_good_deployment_is_allowed_and_shows_what_pods_will_get(
    apps: Any,
    namespace: str,
    policies: PolicySet,
    webhook_config: WebhookConfig,
    placement_inventory: NodeInventory | None,
) -> None:
    from kubernetes.client.exceptions import ApiException

    deployment = gpu_deployment(unique("good-deploy"), {"tencent.com/vcuda-core": "50"})
    expected = evaluate(
        {**deployment, "metadata": {**deployment["metadata"], "namespace": namespace}},
        policies,
        webhook_config,
        kind="Deployment",
        namespace=namespace,
        inventory=placement_inventory,
    )
    assert expected.allowed
    expected_lines = [*expected.notes, *expected.warnings]
    assert expected_lines, "the scenario must produce warnings to check"

    returned, shown = call(apps.create_namespaced_deployment, namespace, deployment, dry_run="All")

    for line in expected_lines:
        assert line in shown
    sent = deployment["spec"]["template"]["spec"]["containers"][0]
    got = returned["spec"]["template"]["spec"]["containers"][0]
    if webhook_config.mutate_templates:
        # Template mutation on (E2E_CONFIG): the template comes back as the core mutates it.
        assert expected.mutated is not None
        want = expected.mutated["spec"]["template"]["spec"]["containers"][0]
        assert want["resources"] != sent["resources"], "the scenario must default a resource"
        assert got["resources"] == want["resources"]
        assert got.get("env") == want.get("env")
    else:
        # Template mutation is off by default: the template comes back as sent.
        assert got["resources"] == sent["resources"]
        assert "env" not in got
    # A dry run creates nothing.
    with pytest.raises(ApiException) as excinfo:
        apps.read_namespaced_deployment(deployment["metadata"]["name"], namespace)
    assert excinfo.value.status == 404


def crl_configmap(name: str, key: str, **data: str) -> dict[str, Any]:
    fields = {
        "key": key,
        "dataType": "integer",
        "group": "e2e",
        "limits": "optional",
        "requests": "fromLimits",
        "descriptionEn": "end-to-end test widget",
        **data,
    }
    return build_crl_configmap(name, fields, group="e2e")


def cluster_policies(core: Any) -> PolicySet:
    """The CRLs in force in the cluster, read the way the webhook reads them."""
    items = core.api_client.sanitize_for_serialization(
        core.list_namespaced_config_map("kube-public").items
    )
    return PolicySet.from_configmaps(items)


@pytest.fixture
def widget_key(core: Any) -> Iterator[str]:
    """A resource key no shipped policy uses; its CRL ConfigMap is removed afterwards."""
    from kubernetes.client.exceptions import ApiException

    suffix = uuid.uuid4().hex[:6]
    key = f"example.com/widget{suffix}"
    yield key
    for cm in core.list_namespaced_config_map(
        "kube-public", label_selector="features.alauda.io/group=e2e"
    ).items:
        try:
            core.delete_namespaced_config_map(cm.metadata.name, "kube-public")
        except ApiException as exc:
            if exc.status != 404:
                raise


def test_crl_configmap_with_a_bad_field_is_rejected(core: Any, widget_key: str) -> None:
    name = f"cf-crl-e2e-{widget_key.split('/')[1]}"
    bad = crl_configmap(name, widget_key, limits="sometimes")
    expected = evaluate_configmap(bad, cluster_policies(core), operation="CREATE")
    assert not expected.allowed

    message = denial(core.create_namespaced_config_map, "kube-public", bad)

    assert message == expected.denial_message()
    assert "sometimes" in message


def test_new_crl_configmap_is_accepted_and_enforced_without_restarting_the_webhook(
    core: Any, namespace: str, widget_key: str, webhook_config: WebhookConfig
) -> None:
    pod = gpu_pod(unique("widget"), {widget_key: "3"}, image="busybox:1.36")
    # Before the policy exists nothing limits this resource.
    call(core.create_namespaced_pod, namespace, pod, dry_run="All")

    name = f"cf-crl-e2e-{widget_key.split('/')[1]}"
    good = crl_configmap(name, widget_key, max="2")
    expected_cm = evaluate_configmap(good, cluster_policies(core), operation="CREATE")
    assert expected_cm.allowed
    _, shown = call(core.create_namespaced_config_map, "kube-public", good)
    for line in expected_cm.warnings:
        assert line in shown

    in_force = PolicySet.from_configmaps([good])
    admitted = admitted_pod(pod, namespace)
    mutated = evaluate(admitted, in_force, webhook_config, kind="Pod", namespace=namespace).mutated
    expected = evaluate(
        admitted_pod(dict(mutated or admitted), namespace),
        in_force,
        webhook_config,
        kind="Pod",
        namespace=namespace,
    )
    assert not expected.allowed

    # The webhook learns about the new ConfigMap through its watch: poll with dry runs, for a
    # bounded time, until it is in force.
    from kubernetes.client.exceptions import ApiException

    deadline = time.monotonic() + POLICY_PROPAGATION_SECONDS
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            core.create_namespaced_pod(namespace, pod, dry_run="All")
        except ApiException as exc:
            status = api_error(exc)
            break
        time.sleep(0.5)
    assert status, f"the new policy was not enforced within {POLICY_PROPAGATION_SECONDS:.0f}s"
    match = DENIED.match(str(status.get("message", "")))
    assert match, status
    assert match.group("message") == expected.denial_message()


@pytest.mark.parametrize(
    ("image", "node_selector"),
    [
        ("vllm/vllm-openai:v0.11.0", {"kubernetes.io/arch": "arm64"}),
        # the single-architecture tag is arm64's image, whatever the pod pins
        ("vllm/vllm-openai:v0.11.0-aarch64", None),
    ],
)
def test_an_arm64_pod_gets_the_cuda_its_architectures_image_was_built_with(
    core: Any,
    namespace: str,
    policies: PolicySet,
    webhook_config: WebhookConfig,
    placement_inventory: NodeInventory | None,
    image: str,
    node_selector: dict[str, str] | None,
) -> None:
    """vllm/vllm-openai:v0.11.0 is one tag over two images (amd64 CUDA 12.8, arm64 12.9): a
    pod pinned to arm64, or naming arm64's own tag, gets arm64's requirement."""
    pod = gpu_pod(unique("vllm"), {"nvidia.com/gpu": "1"}, image=image)
    if node_selector is not None:
        pod["spec"]["nodeSelector"] = node_selector
    expected = expected_for(pod, namespace, policies, webhook_config, placement_inventory)
    if denied_as_decided(core, namespace, pod, expected, webhook_config, dry_run="All"):
        assert "CUDA 12.9" in expected.denial_message()
        return
    lines = (*expected.notes, *expected.warnings)
    assert any("12.9" in line and "vLLM 0.11.0 for linux/arm64" in line for line in lines), lines
    want = admitted_pod(dict(expected.mutated or pod), namespace)["spec"].get("affinity")
    returned, shown = dry_run_until(
        core, namespace, pod, lambda p, _: p["spec"].get("affinity") == want
    )
    assert returned["spec"].get("affinity") == want, shown
    for line in lines:
        assert line in shown
