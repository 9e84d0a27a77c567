"""GPU access control (SPEC §12) through a real API server: what a tenant sees when a pod reaches
GPUs without requesting them, in the mode the webhook runs with (E2E_WEBHOOK_CONFIG's
`gpuAccess.mode`; the default is `warn`), and what the audit lists.

The pods reach the webhook through the chart's own `gpu-access` entry (its matchConditions),
as registered for the run: a pod that requests no extended resource is never sent to the pods
entry, so these tests fail if that entry is missing or its conditions are wrong.
"""

from __future__ import annotations

import itertools
import json
import os
import string
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.impersonation import as_user
from tests.vendor_examples import kai_pod, mindcluster_pod
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.policies.policyset import PolicySet

from .conftest import ROOT
from .test_e2e_admission import call, denial, expected_for, unique

pytestmark = pytest.mark.e2e

CUDA_IMAGE = "nvidia/cuda:12.4.1-runtime-ubuntu22.04"


def plain_pod(name: str, image: str = "busybox:1.36", **container: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": image, **container}]},
    }


@pytest.fixture(scope="module")
def exempt_namespace(core: Any, webhook_config: WebhookConfig) -> Iterator[str]:
    """The first of gpuAccess.exemptNamespaces, created for the test if it does not exist."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    if not webhook_config.gpu_access.exempt_namespaces:
        pytest.skip("the webhook's config exempts no namespace from gpuAccess")
    name = webhook_config.gpu_access.exempt_namespaces[0]
    created = False
    try:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        created = True
    except ApiException as exc:
        if exc.status != 409:
            raise
    try:
        yield name
    finally:
        if created:
            core.delete_namespace(name)


def _mode(config: WebhookConfig) -> str:
    return config.gpu_access.mode


def _judged(
    mode: str, expected: Any, starts: str, method: Any, *args: Any, **kw: Any
) -> tuple[dict[str, Any], list[str]] | None:
    """A request through the access entry, as the webhook's mode says (every test below): under
    `enforce` it is denied with the core's exact message, which starts with `starts` (None is
    returned); under `warn` it is admitted: the object and the warnings shown are returned."""
    if mode == "enforce":
        message = denial(method, *args, **kw)
        assert message == expected.denial_message()
        assert message.startswith(starts)
        return None
    return call(method, *args, **kw)


def test_a_pod_setting_nvidia_visible_devices_without_a_gpu_request(
    core: Any, namespace: str, policies: PolicySet, webhook_config: WebhookConfig
) -> None:
    pod = plain_pod(unique("sneaky"), env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])
    expected = expected_for(pod, namespace, policies, webhook_config, None)
    mode = _mode(webhook_config)
    if mode == "off":
        pytest.skip("the webhook runs with gpuAccess.mode: off")
    text = (
        'container "app" sets NVIDIA_VISIBLE_DEVICES=all but requests no GPU: '
        "request nvidia.com/gpu or set it to void"
    )
    assert expected.allowed == (mode != "enforce")
    starts = f"Pod {namespace}/{pod['metadata']['name']}, {text}."
    admitted = _judged(mode, expected, starts, core.create_namespaced_pod, namespace, pod)
    if admitted is None:
        return
    created, shown = admitted
    assert text in shown
    assert created["spec"]["containers"][0]["env"] == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}
    ]


def test_a_privileged_pod_and_a_cdi_annotation(
    core: Any, namespace: str, policies: PolicySet, webhook_config: WebhookConfig
) -> None:
    pod = plain_pod(unique("priv"), securityContext={"privileged": True})
    pod["metadata"]["annotations"] = {"cdi.k8s.io/gpu": "nvidia.com/gpu=all"}
    mode = _mode(webhook_config)
    if mode == "off":
        pytest.skip("the webhook runs with gpuAccess.mode: off")
    expected = expected_for(pod, namespace, policies, webhook_config, None)
    # Two findings (the privileged container, the CDI annotation): the message lists them.
    starts = f"Pod {namespace}/{pod['metadata']['name']}: 2 GPU policy violations:"
    admitted = _judged(
        mode, expected, starts, core.create_namespaced_pod, namespace, pod, dry_run="All"
    )
    if admitted is None:
        return
    _, shown = admitted
    assert list(expected.warnings) == [w for w in shown if w in expected.warnings]
    assert len(expected.warnings) == 2


def _pairs(env: list[dict[str, Any]] | None) -> list[tuple[str, str]] | None:
    return None if env is None else [(e["name"], e.get("value", "")) for e in env]


def test_a_cuda_image_without_a_gpu_request(
    core: Any, namespace: str, policies: PolicySet, webhook_config: WebhookConfig
) -> None:
    pod = plain_pod(unique("cpu-on-cuda"), CUDA_IMAGE, command=["sleep", "1"])
    expected = expected_for(pod, namespace, policies, webhook_config, None)
    created, shown = call(core.create_namespaced_pod, namespace, pod)
    env = created["spec"]["containers"][0].get("env")
    after = jsonpatch.apply_patch(expected.original, expected.patch)
    # The API server stores `value: ""` as no value (omitempty): the same empty variable.
    assert _pairs(env) == _pairs(after["spec"]["containers"][0].get("env"))
    voids = (
        _mode(webhook_config) == "enforce" and webhook_config.gpu_access.void_image_devices != "off"
    )
    if voids:
        # Every vendor's device variables the core voids, NVIDIA's among them.
        assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in env
        assert expected.notes and set(expected.notes) <= set(shown)
    else:
        assert env is None
        assert shown == []


def test_an_exempt_namespace_is_unaffected(
    core: Any, exempt_namespace: str, webhook_config: WebhookConfig
) -> None:
    pod = plain_pod(
        unique("dcgm"),
        CUDA_IMAGE,
        env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
        securityContext={"privileged": True},
    )
    created, shown = call(core.create_namespaced_pod, exempt_namespace, pod)
    try:
        assert created["spec"]["containers"][0]["env"] == [
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}
        ]
        assert shown == []
    finally:
        core.delete_namespaced_pod(pod["metadata"]["name"], exempt_namespace)


def test_the_audit_lists_what_reaches_gpus_without_a_request(
    core: Any, cluster: Any, namespace: str, webhook_config: WebhookConfig, tmp_path: Path
) -> None:
    """Pods the webhook let in (warn mode, or created before enforce) are listed by the
    audit; with `enforce` in the audit's config they are what the next change would deny."""
    kubeconfig = os.environ.get("E2E_KUBECONFIG")
    if not kubeconfig:
        pytest.skip("the audit CLI needs the cluster's kubeconfig file (E2E_KUBECONFIG)")
    name = unique("listed")
    # Created where the webhook does not look, so it exists whatever mode the server runs.
    from kubernetes import client

    hidden = f"gaw-e2e-hidden-{name[-6:]}"
    core.create_namespace(
        client.V1Namespace(
            metadata=client.V1ObjectMeta(
                name=hidden, labels={"gpu-admission-webhook.io/ignore": "true"}
            )
        )
    )
    try:
        pod = plain_pod(name, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0"}])
        call(core.create_namespaced_pod, hidden, pod)
        config_file = tmp_path / "config.yaml"
        config_file.write_text(
            yaml.safe_dump({"registryLookups": {"publicRegistries": False}}), encoding="utf-8"
        )
        result = subprocess.run(
            [
                str(Path(sys.executable).parent / "gpu-webhook"),
                "audit",
                "--kubeconfig",
                kubeconfig,
                "--namespace",
                hidden,
                "--config",
                str(config_file),
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        document = json.loads(result.stdout)
        assert document["summary"]["gpuAccess"] == 1
        (finding,) = document["findings"]
        assert (finding["kind"], finding["name"]) == ("Pod", name)
        assert [p["message"] for p in finding["gpuAccess"]] == [
            'container "app" sets NVIDIA_VISIBLE_DEVICES=0 but requests no GPU: '
            "request nvidia.com/gpu or set it to void"
        ]
    finally:
        core.delete_namespace(hidden)


# --- What reaches the webhook (SPEC §12): pod UPDATE, ephemeral containers, a padded pod -------


JSON_PATCH = "application/json-patch+json"


def _created_busybox(core: Any, namespace: str, prefix: str) -> dict[str, Any]:
    """A plain busybox pod as stored (created through the webhook in the run's mode)."""
    pod = plain_pod(unique(prefix), command=["sleep", "3600"])
    created, _ = call(core.create_namespaced_pod, namespace, pod)
    return created


def _expected_update(
    new: dict[str, Any],
    old: dict[str, Any],
    namespace: str,
    policies: PolicySet,
    config: WebhookConfig,
    sub_resource: str = "",
    **user: Any,
) -> Any:
    """What the webhook answers for this UPDATE: the same core, on the objects the API server
    sends (the stored pod as oldObject; `username=` and `groups=` its userInfo)."""
    return evaluate(
        new,
        policies,
        config,
        kind="Pod",
        namespace=namespace,
        operation="UPDATE",
        sub_resource=sub_resource,
        old_object=old,
        **user,
    )


def _void_or_denied(container: dict[str, Any]) -> bool:
    env = {e["name"]: e.get("value") for e in container.get("env") or []}
    return env.get("NVIDIA_VISIBLE_DEVICES") == "void"


def test_a_pod_update_swapping_busybox_for_a_cuda_image(
    core: Any, namespace: str, policies: PolicySet, webhook_config: WebhookConfig
) -> None:
    """ValidatePodUpdate lets an image change: the swap reaches the access entry. Under enforce
    the stored pod has void in that container or the update is denied; never neither."""
    mode = _mode(webhook_config)
    if mode == "off":
        pytest.skip("the webhook runs with gpuAccess.mode: off")
    old = _created_busybox(core, namespace, "swap")
    name = old["metadata"]["name"]
    patch = [{"op": "replace", "path": "/spec/containers/0/image", "value": CUDA_IMAGE}]
    new = json.loads(json.dumps(old))
    new["spec"]["containers"][0]["image"] = CUDA_IMAGE
    expected = _expected_update(new, old, namespace, policies, webhook_config)
    # Under enforce the swap is denied unless the container's device variables are void already.
    denied = mode == "enforce" and not _void_or_denied(old["spec"]["containers"][0])
    assert expected.allowed != denied
    starts = (
        f'Pod {namespace}/{name}, container "app" changes its image while its device '
        "variables are not void: recreate the pod"
    )
    admitted = _judged(
        "enforce" if denied else "warn", expected, starts,
        core.patch_namespaced_pod, name, namespace, patch, _content_type=JSON_PATCH,
    )  # fmt: skip
    if admitted is None:
        stored = core.read_namespaced_pod(name, namespace)
        assert stored.spec.containers[0].image == "busybox:1.36"
        return
    updated, shown = admitted
    assert updated["spec"]["containers"][0]["image"] == CUDA_IMAGE
    assert [w for w in shown if w in expected.warnings] == list(expected.warnings)
    if mode == "enforce":
        assert _void_or_denied(updated["spec"]["containers"][0])


def _debug_patch(**ephemeral: Any) -> list[dict[str, Any]]:
    """What `kubectl debug -it POD --image=IMAGE --target=app [--profile=sysadmin]` sends to the
    pods/ephemeralcontainers subresource, as a JSON patch."""
    container = {
        "name": "debugger",
        "image": "busybox:1.36",
        "targetContainerName": "app",
        "stdin": True,
        "tty": True,
        **ephemeral,
    }
    return [{"op": "add", "path": "/spec/ephemeralContainers", "value": [container]}]


def test_a_debug_container_on_a_cuda_image_gets_void_under_enforce(
    core: Any, namespace: str, policies: PolicySet, webhook_config: WebhookConfig
) -> None:
    mode = _mode(webhook_config)
    if mode == "off":
        pytest.skip("the webhook runs with gpuAccess.mode: off")
    old = _created_busybox(core, namespace, "debug-cuda")
    name = old["metadata"]["name"]
    patch = _debug_patch(image=CUDA_IMAGE)
    updated, shown = call(
        core.patch_namespaced_pod_ephemeralcontainers,
        name,
        namespace,
        patch,
        _content_type=JSON_PATCH,
    )
    (debugger,) = updated["spec"]["ephemeralContainers"]
    voids = mode == "enforce" and webhook_config.gpu_access.void_image_devices != "off"
    new = json.loads(json.dumps(old))
    new["spec"]["ephemeralContainers"] = patch[0]["value"]
    expected = _expected_update(
        new, old, namespace, policies, webhook_config, "ephemeralcontainers"
    )
    if voids:
        assert _void_or_denied(debugger)
        assert expected.notes and set(expected.notes) <= set(shown)
        assert any('ephemeral container "debugger"' in note for note in expected.notes)
    # Nothing but the new ephemeral container changed.
    assert updated["spec"]["containers"] == old["spec"]["containers"]


def test_a_sysadmin_debug_container_is_denied_under_enforce(
    core: Any, namespace: str, policies: PolicySet, webhook_config: WebhookConfig
) -> None:
    """`kubectl debug --profile=sysadmin` makes the debug container privileged: every device."""
    mode = _mode(webhook_config)
    if mode == "off":
        pytest.skip("the webhook runs with gpuAccess.mode: off")
    old = _created_busybox(core, namespace, "debug-sysadmin")
    name = old["metadata"]["name"]
    patch = _debug_patch(securityContext={"privileged": True})
    new = json.loads(json.dumps(old))
    new["spec"]["ephemeralContainers"] = patch[0]["value"]
    expected = _expected_update(
        new, old, namespace, policies, webhook_config, "ephemeralcontainers"
    )
    text = 'ephemeral container "debugger" is privileged but requests no GPU'
    admitted = _judged(
        mode, expected, f"Pod {namespace}/{name}, {text}",
        core.patch_namespaced_pod_ephemeralcontainers, name, namespace, patch,
        _content_type=JSON_PATCH,
    )  # fmt: skip
    if admitted is None:
        stored = core.read_namespaced_pod(name, namespace)
        assert not stored.spec.ephemeral_containers
        return
    updated, shown = admitted
    assert updated["spec"]["ephemeralContainers"][0]["securityContext"] == {"privileged": True}
    assert any(w.startswith(text) for w in shown), shown


# Unique env names (E + 3 of 62 characters): 100,000 entries make a 1.6 MB request, within the
# API server's 3 MiB. Measured on kube-apiserver 1.36.2 (docs/operations/deploy.md): the access
# entry's former matchCondition went past RuntimeCELCostBudgetMatchConditions (2,500,000) on
# this pod and, under failurePolicy Ignore, the entry was skipped.
PADDING = 100_000


def _padded_env(count: int) -> list[dict[str, str]]:
    alphabet = string.ascii_letters + string.digits
    names = itertools.islice(itertools.product(alphabet, repeat=3), count)
    return [{"name": "E" + "".join(n)} for n in names]


def test_a_pod_padded_with_100000_env_entries_still_reaches_the_webhook(
    core: Any, namespace: str, policies: PolicySet, webhook_config: WebhookConfig
) -> None:
    mode = _mode(webhook_config)
    if mode == "off":
        pytest.skip("the webhook runs with gpuAccess.mode: off")
    env = [*_padded_env(PADDING), {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    pod = plain_pod(unique("padded"), env=env)
    text = (
        'container "app" sets NVIDIA_VISIBLE_DEVICES=all but requests no GPU: '
        "request nvidia.com/gpu or set it to void"
    )
    expected = expected_for(pod, namespace, policies, webhook_config, None)
    # A dry run: the point is admission, and etcd need not store a 1.6 MB pod.
    starts = f"Pod {namespace}/{pod['metadata']['name']}, {text}."
    admitted = _judged(
        mode, expected, starts, core.create_namespaced_pod, namespace, pod, dry_run="All"
    )
    if admitted is not None:
        assert text in admitted[1]


# Other vendors' routes (SPEC §12, §13), each through the chart's access entry: the exact denial
# under enforce, the warning under warn (the core's messages, computed the same way).
VENDOR_ROUTES = [
    ("ascend-env", {"env": [{"name": "ASCEND_VISIBLE_DEVICES", "value": "0-7"}]}, None),
    ("amd-env", {"env": [{"name": "AMD_VISIBLE_DEVICES", "value": "all"}]}, None),
    ("kfd", {"volumeMounts": [{"name": "dev", "mountPath": "/dev/kfd"}]}, "/dev/kfd"),
    (
        "davinci",
        {"volumeMounts": [{"name": "dev", "mountPath": "/dev/davinci0"}]},
        "/dev/davinci0",
    ),
    # Issue 46: each value as its runtime reads it, and the routes added as data.
    ("cri-o-devices", {}, None),
    (
        "nvidia-all-upper-void",
        {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all,VOID"}]},
        None,
    ),
    (
        "nvidia-all-void-us",
        {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all,void\x1f"}]},
        None,
    ),
    ("amd-range-void", {"env": [{"name": "AMD_VISIBLE_DEVICES", "value": "0-7,void"}]}, None),
    ("neuron-env", {"env": [{"name": "AWS_NEURON_VISIBLE_DEVICES", "value": "ALL"}]}, None),
    ("mthreads-env", {"env": [{"name": "MTHREADS_VISIBLE_DEVICES", "value": "all"}]}, None),
    ("enflame-env", {"env": [{"name": "ENFLAME_VISIBLE_DEVICES", "value": "0,1"}]}, None),
    ("sys-admin", {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}, None),
    ("cap-all", {"securityContext": {"capabilities": {"add": ["ALL"]}}}, None),
    (
        "vdavinci",
        {"volumeMounts": [{"name": "dev", "mountPath": "/dev/vdavinci0"}]},
        "/dev/vdavinci0",
    ),
    (
        "uburma",
        {"volumeMounts": [{"name": "dev", "mountPath": "/dev/uburma"}]},
        "/dev/uburma",
    ),
]


@pytest.mark.parametrize(
    ("case", "container", "host_path"), VENDOR_ROUTES, ids=[r[0] for r in VENDOR_ROUTES]
)
def test_another_vendors_route_without_a_request(
    core: Any,
    namespace: str,
    policies: PolicySet,
    webhook_config: WebhookConfig,
    case: str,
    container: dict[str, Any],
    host_path: str | None,
) -> None:
    mode = _mode(webhook_config)
    if mode == "off":
        pytest.skip("the webhook runs with gpuAccess.mode: off")
    pod = plain_pod(unique(case), **container)
    if host_path is not None:
        pod["spec"]["volumes"] = [{"name": "dev", "hostPath": {"path": host_path}}]
    if case == "cri-o-devices":
        pod["metadata"]["annotations"] = {"devices.crio.io": "/dev/nvidia0:/dev/nvidia0:rwm"}
    expected = expected_for(pod, namespace, policies, webhook_config, None)
    assert expected.access, "the core finds no route: the case is wrong"
    starts = f"Pod {namespace}/{pod['metadata']['name']}, "
    admitted = _judged(
        mode, expected, starts, core.create_namespaced_pod, namespace, pod, dry_run="All"
    )
    if admitted is not None:
        assert expected.warnings and set(expected.warnings) <= set(admitted[1])


# --- Issue 46: the voids a device container needs, and the vendors' own patterns ---------------


def test_an_amd_device_container_gets_amds_void(
    core: Any, namespace: str, policies: PolicySet, webhook_config: WebhookConfig
) -> None:
    """No AMD plugin or DRA driver sets AMD_VISIBLE_DEVICES: under enforce the AMD device
    container gets AMD's void after the other vendors' (ROCm images carry `all`)."""
    if _mode(webhook_config) == "off":
        pytest.skip("the webhook runs with gpuAccess.mode: off")
    pod = plain_pod(
        unique("amd-dev"), "rocm/pytorch:latest", resources={"limits": {"amd.com/gpu": "1"}}
    )
    expected = expected_for(pod, namespace, policies, webhook_config, None)
    created, shown = call(core.create_namespaced_pod, namespace, pod, dry_run="All")
    env = created["spec"]["containers"][0].get("env")
    after = jsonpatch.apply_patch(expected.original, expected.patch)
    assert _pairs(env) == _pairs(after["spec"]["containers"][0].get("env"))
    if _mode(webhook_config) == "enforce" and webhook_config.gpu_access.void_image_devices == "all":
        assert env[-1] == {"name": "AMD_VISIBLE_DEVICES", "value": "void"}
        note = (
            'set AMD_VISIBLE_DEVICES=void in container "app": its AMD GPUs come as device nodes, '
            "not from its image"
        )
        assert note in expected.notes and note in shown


def test_the_vendors_documented_patterns_pass(
    core: Any, namespace: str, policies: PolicySet, webhook_config: WebhookConfig
) -> None:
    """MindCluster's and KAI's published pods are admitted with no access finding, under the
    run's mode (enforce in CI's access run)."""
    if _mode(webhook_config) == "off":
        pytest.skip("the webhook runs with gpuAccess.mode: off")
    for pod in (
        mindcluster_pod(unique("acjob"), None),
        kai_pod(unique("kai-frac"), None),
    ):
        expected = expected_for(pod, namespace, policies, webhook_config, None)
        assert expected.allowed and not expected.access, expected.access
        created, shown = call(core.create_namespaced_pod, namespace, pod, dry_run="All")
        after = jsonpatch.apply_patch(expected.original, expected.patch)
        assert _pairs(created["spec"]["containers"][0].get("env")) == _pairs(
            after["spec"]["containers"][0].get("env")
        )
        # Shown: the core's notes and warnings (CANN/CUDA unknown, the other vendors' voids),
        # none of them about the pattern's own variable; and under enforce the lookup of the NPU
        # pod's images for ASCEND_VISIBLE_DEVICES (first-entry Ascend builds), which cannot
        # answer for an image of a registry lookups may not ask.
        looked = {w for w in shown if w.startswith("Image config lookup of ")}
        assert set(shown) - looked == set(expected.warnings) | set(expected.notes), shown
        assert not [w for w in shown if "_VISIBLE_DEVICES from valueFrom" in w], shown


@pytest.mark.parametrize("case", ["mindcluster-no-npu", "kai-other-scheduler"])
def test_the_same_variables_without_the_counted_device_are_findings(
    core: Any, namespace: str, policies: PolicySet, webhook_config: WebhookConfig, case: str
) -> None:
    mode = _mode(webhook_config)
    if mode == "off":
        pytest.skip("the webhook runs with gpuAccess.mode: off")
    if case == "mindcluster-no-npu":
        pod = mindcluster_pod(unique("acjob-side"), None, container={"resources": {}})
        text = (
            'container "ascend" sets ASCEND_VISIBLE_DEVICES from valueFrom but requests no NPU: '
            "request huawei.com/Ascend910 instead"
        )
    else:
        pod = kai_pod(unique("kai-other"), None, schedulerName="default-scheduler")
        text = (
            'container "gpu-workload" sets NVIDIA_VISIBLE_DEVICES from valueFrom but requests no '
            "GPU: request nvidia.com/gpu instead"
        )
    expected = expected_for(pod, namespace, policies, webhook_config, None)
    assert any(v.message.startswith(f"Pod {namespace}/") for v in expected.access)
    starts = f"Pod {namespace}/{pod['metadata']['name']}, {text}"
    admitted = _judged(
        mode, expected, starts, core.create_namespaced_pod, namespace, pod, dry_run="All"
    )
    if admitted is not None:
        assert set(expected.warnings) <= set(admitted[1])


# --- Issue 46 leftovers: envFrom where no void closes it ---------------------------------------


@pytest.mark.parametrize(
    ("case", "prefix", "sidecar"),
    [
        ("amd-envfrom", "", False),
        ("amd-envfrom-prefixed", "CFG_", False),
        ("amd-sidecar-envfrom", "", True),
        ("amd-sidecar-envfrom-prefixed", "CFG_", True),
    ],
)
def test_unprefixed_env_from_in_an_amd_pod(
    core: Any,
    namespace: str,
    policies: PolicySet,
    webhook_config: WebhookConfig,
    case: str,
    prefix: str,
    sidecar: bool,
) -> None:
    """AMD's runtime reads every DOCKER_RESOURCE_* variable (ROCm/container-toolkit
    internal/oci/oci.go getAMDEnv) and no written name overrides a ConfigMap key of another
    name: an unprefixed envFrom in an amd.com/gpu container, or in a sidecar beside one, is
    denied under enforce; with a prefix that makes no such name it is admitted."""
    mode = _mode(webhook_config)
    if mode == "off":
        pytest.skip("the webhook runs with gpuAccess.mode: off")
    env_from = [{"prefix": prefix, "configMapRef": {"name": "settings"}}]
    gpu = {"limits": {"amd.com/gpu": "1"}}
    if sidecar:
        pod = plain_pod(unique(case), resources=gpu)
        pod["spec"]["initContainers"] = [
            {
                "name": "side",
                "image": "busybox:1.36",
                "restartPolicy": "Always",
                "envFrom": env_from,
            }
        ]
        text = (
            'init container "side" uses envFrom configMap "settings" but requests no AMD GPU: '
            "set an envFrom prefix: DOCKER_RESOURCE_* keys pick AMD GPUs"
        )
    else:
        pod = plain_pod(unique(case), envFrom=env_from, resources=gpu)
        text = (
            'container "app" uses envFrom: list its variables in env: envFrom can choose its '
            "AMD GPUs or raise its limits"
        )
    expected = expected_for(pod, namespace, policies, webhook_config, None)
    if prefix:
        # (Under warn the audit still lists the pod's Service links, a route of its own.)
        assert expected.allowed and not [v for v in expected.access if "envFrom" in v.message]
        created, _ = call(core.create_namespaced_pod, namespace, pod, dry_run="All")
        after = jsonpatch.apply_patch(expected.original, expected.patch)
        assert _pairs(created["spec"]["containers"][0].get("env")) == _pairs(
            after["spec"]["containers"][0].get("env")
        )
        return
    assert [v for v in expected.access if text in v.message], expected.access
    starts = f"Pod {namespace}/{pod['metadata']['name']}, {text}"
    admitted = _judged(
        mode, expected, starts, core.create_namespaced_pod, namespace, pod, dry_run="All"
    )
    if admitted is not None:
        assert set(expected.warnings) <= set(admitted[1])


NPU_ANNOTATION = "huawei.com/Ascend910"
VOLCANO_SCHEDULER = "system:serviceaccount:volcano-system:volcano-scheduler"


def test_rewriting_mindclusters_npu_annotation_is_left_to_its_writers(
    core: Any, namespace: str, policies: PolicySet, webhook_config: WebhookConfig
) -> None:
    """MindCluster's container reads ASCEND_VISIBLE_DEVICES from the pod's huawei.com/Ascend910
    annotation, which the kubelet reads again at each restart: the test's admin (no writer in
    the run's config) rewriting it to every NPU is denied under enforce (warned under warn);
    the same patch as Volcano's scheduler (impersonated: the default writer) is admitted."""
    mode = _mode(webhook_config)
    if mode == "off":
        pytest.skip("the webhook runs with gpuAccess.mode: off")
    _, username, groups = as_user(core, None)
    writers = webhook_config.gpu_access
    assert username not in writers.annotation_writers
    assert not set(groups) & set(writers.annotation_writer_groups)
    assert VOLCANO_SCHEDULER in writers.annotation_writers
    pod = mindcluster_pod(unique("acjob"), None)
    pod["metadata"]["annotations"] = {NPU_ANNOTATION: "Ascend910-0,Ascend910-1"}
    old, _ = call(core.create_namespaced_pod, namespace, pod)
    name = old["metadata"]["name"]
    every = ",".join(f"Ascend910-{i}" for i in range(8))
    path = "/metadata/annotations/" + NPU_ANNOTATION.replace("/", "~1")
    patch = [{"op": "replace", "path": path, "value": every}]
    new = json.loads(json.dumps(old))
    new["metadata"]["annotations"][NPU_ANNOTATION] = every
    expected = _expected_update(
        new, old, namespace, policies, webhook_config, username=username, groups=groups
    )
    text = (
        'container "ascend" reads huawei.com/Ascend910 as ASCEND_VISIBLE_DEVICES: '
        "only gpuAccess.annotationWriters may change it"
    )
    assert expected.allowed == (mode != "enforce")
    starts = f"Pod {namespace}/{name}, {text}."
    admitted = _judged(
        mode, expected, starts,
        core.patch_namespaced_pod, name, namespace, patch, _content_type=JSON_PATCH,
    )  # fmt: skip
    stored = core.read_namespaced_pod(name, namespace)
    if admitted is None:
        assert stored.metadata.annotations[NPU_ANNOTATION] == "Ascend910-0,Ascend910-1"
    else:
        assert text in admitted[1]
        assert stored.metadata.annotations[NPU_ANNOTATION] == every
    # Volcano's scheduler writes the NPUs it allocated: admitted, nothing shown.
    volcano, as_volcano, _ = as_user(core, VOLCANO_SCHEDULER)
    assert as_volcano == VOLCANO_SCHEDULER
    patch = [{"op": "replace", "path": path, "value": "Ascend910-2,Ascend910-3"}]
    updated, shown = call(
        volcano.patch_namespaced_pod, name, namespace, patch, _content_type=JSON_PATCH
    )
    assert updated["metadata"]["annotations"][NPU_ANNOTATION] == "Ascend910-2,Ascend910-3"
    assert shown == []
    core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
