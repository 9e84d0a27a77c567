"""GPU access control's exported native policies against the webhook core, on a real API server
(SPEC §12 "Enforcement that survives the webhook"; issue 46 items 5 and 7).

With NATIVE_KUBECONFIG set (the kapi API server of shared/tools, no controllers needed), the
policies of `gpu-webhook export-policies --access` (a ValidatingAdmissionPolicy and a
MutatingAdmissionPolicy, with bindings narrowed to the test's namespace) are installed, NO
webhook is registered, and for every route pod of the access tests (tests/unit/
test_gpu_access*.py, the vendors' own examples of tests/vendor_examples.py, and the parsing and
route cases below) the API server's answer to a server-side dry-run create is compared with the
webhook core's Decision under `enforce`: denied exactly when the core denies for GPU access, and
when allowed, the same void and pin variables written in each container.

Run: NATIVE_KUBECONFIG=/tmp/kapi/kubeconfig .venv/bin/pytest -q tests/native/test_native_access.py
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from tests.helpers import container, pod
from tests.impersonation import as_user
from tests.unit.test_gpu_access import FINDINGS
from tests.unit.test_gpu_access_env_from import ALLOWED as ENV_FROM_ALLOWED
from tests.unit.test_gpu_access_env_from import FINDINGS as ENV_FROM_FINDINGS
from tests.unit.test_gpu_access_routes import VENDOR_ENV
from tests.vendor_examples import kai_pod, mindcluster_pod
from webhook.core.access.control import POLICY
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.evaluation.native_access import export_access, voids
from webhook.core.outcome.decision import Decision
from webhook.core.policies.policyset import PolicySet

KUBECONFIG = os.environ.get("NATIVE_KUBECONFIG", "")
pytestmark = pytest.mark.skipif(
    not KUBECONFIG,
    reason="no API server: set NATIVE_KUBECONFIG to a kubeconfig (e.g. shared/tools/kapi's) "
    "to compare the exported access policies with the webhook core",
)
NAMESPACE = "native-access"
NAME = "native-diff-access"
CONFIG = {
    "gpuAccess": {
        "mode": "enforce",
        "vendorRuntimeClasses": {"ascend": ["ascend"], "amd": ["amd-runtime"]},
    }
}
# A pod with this label is skipped by the test's bindings: how the UPDATE test stores a pod made
# before the policies were installed (no voids). The UPDATE drops it.
UNCHECKED = "native-access/unchecked"
VOID_NAMES = frozenset(v for v, _, _, _ in voids())
GPU = "nvidia.com/gpu"


def _env(name: str, value: str) -> list[dict[str, Any]]:
    return [{"name": name, "value": value}]


def _mount(path: str, at: str = "/host") -> dict[str, Any]:
    return pod(
        container("app", volumeMounts=[{"name": "d", "mountPath": at}]),
        volumes=[{"name": "d", "hostPath": {"path": path}}],
    )


def _caps(*names: str, limits: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return pod(
        container("app", limits=limits, securityContext={"capabilities": {"add": list(names)}})
    )


def route_cases() -> list[tuple[str, dict[str, Any]]]:
    """(case, pod): every route pod of the access tests, and what the runtimes' parsers and the
    vendors' patterns turn on."""
    cases: list[tuple[str, dict[str, Any]]] = [(case, obj) for case, obj, _ in FINDINGS]
    # envFrom where no void closes it (issue 46 leftovers): denied and allowed alike.
    cases += [(f"envFrom: {case}", obj) for case, obj, _ in ENV_FROM_FINDINGS]
    cases += [(f"envFrom: {case}", obj) for case, obj in ENV_FROM_ALLOWED]
    for name, value, _ in VENDOR_ENV:
        c = container("x", env=_env(name, value))
        cases += [
            (f"{name} in a container", pod(c)),
            (f"{name} in an init container", pod(container("main"), init=[c])),
            (
                f"{name} in a sidecar",
                pod(container("main"), init=[{**c, "restartPolicy": "Always"}]),
            ),
        ]
    # Each runtime's parser (core/families/visible.py), in a container without a device.
    values = {
        "NVIDIA_VISIBLE_DEVICES": [
            "all,VOID",
            "all,Void",
            "all,void\x1f",
            "void",
            " void ",
            "0,void",
            "all,none",
            "",
            " , ",
            "none",
            "GPU-0b5a",
        ],
        "NVIDIA_IMEX_CHANNELS": ["all", "void"],
        "AMD_VISIBLE_DEVICES": [
            "0-7,void",
            "void",
            "all",
            "All",
            "aLL",
            "0x1f",
            "abcdef012",
            "abc",
            "3-1",
            "-1",
            "+2",
            "1-+3",
            "",
        ],
        "DOCKER_RESOURCE_GPU": ["0", "void"],
        "ASCEND_VISIBLE_DEVICES": ["void", "", "0", "Ascend910-0"],
        "AWS_NEURON_VISIBLE_DEVICES": ["ALL", ""],
        "MTHREADS_VISIBLE_DEVICES": ["all"],
        "ENFLAME_VISIBLE_DEVICES": ["2"],
    }
    for name, listed in values.items():
        for value in listed:
            cases.append((f"{name}={value!r}", pod(container("app", env=_env(name, value)))))
    # Device containers: their own variable, the other vendors' voids, the pins.
    for resource, name, value in [
        (GPU, "NVIDIA_VISIBLE_DEVICES", "0,1"),
        ("amd.com/gpu", "AMD_VISIBLE_DEVICES", "all"),
        ("amd.com/cpx_nps4", "AMD_VISIBLE_DEVICES", "0-7"),
        ("huawei.com/Ascend910", "ASCEND_VISIBLE_DEVICES", "0-7"),
        ("huawei.com/Ascend910-2c.8g", "ASCEND_VISIBLE_DEVICES", "0"),
    ]:
        cases += [
            (
                f"{resource} sets {name}",
                pod(container("t", limits={resource: 1}, env=_env(name, value))),
            ),
            (f"{resource} alone", pod(container("t", limits={resource: 1}))),
        ]
    cases += [
        (
            "zero GPU request",
            pod(container("t", limits={GPU: 0}, env=_env("NVIDIA_VISIBLE_DEVICES", "all"))),
        ),
        ("plain pod", pod(container("app"), init=[container("setup")])),
        ("gpu container", pod(container("g", limits={GPU: 1}), container("side"))),
        ("intel gpu", pod(container("g", limits={"gpu.intel.com/i915": 1}))),
        ("neuron device", pod(container("g", limits={"aws.amazon.com/neuron": 1}))),
        # Privileged, and the capabilities NVIDIA's toolkit counts as privileged.
        (
            "privileged gpu container",
            pod(container("g", limits={GPU: 1}, securityContext={"privileged": True})),
        ),
        ("SYS_ADMIN", _caps("SYS_ADMIN")),
        ("ALL", _caps("ALL")),
        ("cap_sys_admin", _caps("cap_sys_admin")),
        ("SYS_ADMIN in a gpu container", _caps("SYS_ADMIN", limits={GPU: 1})),
        ("NET_ADMIN", _caps("NET_ADMIN", "SYS_PTRACE")),
        # hostPath volumes of device nodes, as the kubelet normalises them.
        *[
            (f"hostPath {path}", _mount(path))
            for path in [
                "/dev/kfd",
                "/dev/davinci0",
                "/dev/davinci_manager",
                "/dev/devmm_svm",
                "/dev/hisi_hdc",
                "/dev/nvidia0",
                "/dev/neuron0",
                "/dev/accel/accel0",
                "//dev",
                "/dev/../dev/davinci1/",
                "/dev/vdavinci3",
                "/dev/dvpp_cmdlist",
                "/dev/uburma/x",
                "/dev/ummu/y",
                "/",
                "/dev/",
                "/dev/shm",
                "/var/log",
                "dev/nvidia0",
                "/dev/./dri",
            ]
        ],
        ("device-list mount, no slash", _mount("/tmp", "/var/run/nvidia-container-devicesX")),
        (
            "device-list mount, doubled slash",
            _mount("/tmp", "//var/run//nvidia-container-devices/0"),
        ),
        (
            "a device hostPath not mounted",
            pod(container("app"), volumes=[{"name": "d", "hostPath": {"path": "/dev"}}]),
        ),
        # Device annotations.
        *[
            (f"annotation {key}", pod(container("app"), annotations={key: "nvidia.com/gpu=all"}))
            for key in [
                "cdi.k8s.io/gpu",
                "nvidia.cdi.k8s.io/x",
                "devices.noderesource.dev/container.app",
                "mounts.noderesource.dev/pod",
                "cdi-devices.noderesource.dev/c",
                "devices.nri.io/c",
                "io.kubernetes.cri-o.Devices",
                "devices.crio.io/app",
                "example.com/other",
            ]
        ],
        # Vendor runtime classes.
        ("runtime class nvidia, no GPU", pod(container("app"), runtimeClassName="nvidia")),
        (
            "runtime class nvidia, a GPU",
            pod(container("g", limits={GPU: 1}), runtimeClassName="nvidia"),
        ),
        (
            "runtime class ascend, a GPU",
            pod(container("g", limits={GPU: 1}), runtimeClassName="ascend"),
        ),
        (
            "runtime class amd, an AMD GPU",
            pod(container("g", limits={"amd.com/gpu": 1}), runtimeClassName="amd-runtime"),
        ),
        ("runtime class other", pod(container("app"), runtimeClassName="runc")),
        # HAMi-core's limiter controls in a share, and the same names without a device.
        *[
            (
                f"hami share {name}={value}",
                pod(
                    container(
                        "s", limits={GPU: 1, "nvidia.com/gpumem": 1000}, env=_env(name, value)
                    )
                ),
            )
            for name, value in [
                ("CUDA_DISABLE_CONTROL", "true"),
                ("CUDA_DEVICE_MEMORY_LIMIT_0", "80g"),
                ("CUDA_DEVICE_SM_LIMIT", "100"),
                ("GPU_CORE_UTILIZATION_POLICY", "disable"),
                ("GPU_CORE_UTILIZATION_POLICY", "force"),
                ("CUDA_VERSION", "12.4"),
            ]
        ],
        ("limiter without a device", pod(container("s", env=_env("CUDA_DISABLE_CONTROL", "true")))),
        ("hami cores share", pod(container("s", limits={GPU: 1, "nvidia.com/gpucores": 30}))),
        # envFrom.
        (
            "envFrom in a gpu container",
            pod(container("g", limits={GPU: 1}, envFrom=[{"configMapRef": {"name": "x"}}])),
        ),
        (
            "envFrom in a plain container",
            pod(container("app", envFrom=[{"configMapRef": {"name": "x"}}])),
        ),
        *[
            (
                f"envFrom prefix {prefix}",
                pod(container("app", envFrom=[{"prefix": prefix, "configMapRef": {"name": "x"}}])),
            )
            for prefix in ["DOCKER_", "DOCKER_RESOURCE_GPU", "AWS_NEURON_", "NVIDIA_", "APP_"]
        ],
        # Every entry of a name counts, not only the last.
        (
            "an earlier entry names devices",
            pod(
                container(
                    "app",
                    env=[
                        *_env("NVIDIA_VISIBLE_DEVICES", "all"),
                        *_env("NVIDIA_VISIBLE_DEVICES", "void"),
                    ],
                )
            ),
        ),
        (
            "duplicate names elsewhere",
            pod(container("app", env=[*_env("X", "1"), *_env("X", "2")])),
        ),
        # The vendors' own examples, and the same variables where their schedulers count none.
        ("MindCluster", mindcluster_pod()),
        ("MindCluster, default scheduler", mindcluster_pod(schedulerName="default-scheduler")),
        (
            "MindCluster, another annotation",
            mindcluster_pod(
                container={
                    "env": [
                        {
                            "name": "ASCEND_VISIBLE_DEVICES",
                            "valueFrom": {
                                "fieldRef": {
                                    "fieldPath": "metadata.annotations['huawei.com/Ascend310P']"
                                }
                            },
                        }
                    ]
                }
            ),
        ),
        ("KAI fraction", kai_pod()),
        (
            "KAI fraction, first container",
            kai_pod(fraction_container=0, annotations={"gpu-fraction-container-name": ""}),
        ),
        ("KAI, wrong container", kai_pod(fraction_container=2)),
        ("KAI, default scheduler", kai_pod(schedulerName="default-scheduler")),
        ("KAI, no fraction", kai_pod(annotations={"gpu-fraction": ""})),
    ]
    return cases


def _named(obj: dict[str, Any], case: str, i: int) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["name"] = f"r{i}"
    out["metadata"]["namespace"] = NAMESPACE
    for lst in ("containers", "initContainers"):
        for c in out["spec"].get(lst) or []:
            c.setdefault("image", "busybox")
            for key in ("limits", "requests"):
                values = (c.get("resources") or {}).get(key) or {}
                for resource, value in values.items():
                    values[resource] = str(value)
    out["metadata"].setdefault("labels", {})["case"] = str(i)
    return out


def _written(original: Mapping[str, Any], result: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """container -> the void and pin variables `result` has that `original` had not."""
    found: dict[str, dict[str, str]] = {}
    for lst in ("containers", "initContainers"):
        before = {c["name"]: c for c in original["spec"].get(lst) or []}
        for c in result["spec"].get(lst) or []:
            had = {e["name"] for e in before.get(c["name"], {}).get("env") or []}
            new = {
                e["name"]: e.get("value", "")
                for e in c.get("env") or []
                if e["name"] in VOID_NAMES and e["name"] not in had
            }
            if new:
                found[f"{lst}/{c['name']}"] = new
    return found


def _core(obj: Mapping[str, Any], config: WebhookConfig, **update: Any) -> Decision:
    """The webhook core's Decision under `config`, with no CRL (an UPDATE: `old_object=`)."""
    operation = "UPDATE" if update else "CREATE"
    return evaluate(
        obj,
        PolicySet.from_configmaps([]),
        config,
        namespace=NAMESPACE,
        operation=operation,
        **update,
    )


def core_answer(
    obj: dict[str, Any], config: WebhookConfig
) -> tuple[bool, dict[str, dict[str, str]]]:
    """(denied for GPU access, the voids written) by the webhook core under `enforce`."""
    decision = _core(obj, config)
    denied = any(v.configmap == POLICY for v in decision.violations)
    mutated = decision.mutated if decision.mutated is not None else obj
    return denied, {} if denied else _written(obj, mutated)


def server_answer(core: Any, obj: dict[str, Any]) -> tuple[bool, dict[str, dict[str, str]], str]:
    from kubernetes import client as _client

    client: Any = _client
    try:
        result = core.create_namespaced_pod(NAMESPACE, obj, dry_run="All", _preload_content=False)
    except client.ApiException as exc:
        message = json.loads(exc.body or "{}").get("message", "")
        if "ValidatingAdmissionPolicy" in message and NAME in message:
            return True, {}, message
        if exc.status == 422:
            return False, {}, f"invalid: {message}"
        raise AssertionError(f"unexpected API error {exc.status}: {message}") from exc
    return False, _written(obj, json.loads(result.data)), ""


def apply_object(api: Any, obj: dict[str, Any]) -> None:
    """Create, or replace in place."""
    from kubernetes import client as _client

    client: Any = _client
    plural = {
        "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
        "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
        "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
        "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
    }[obj["kind"]]
    custom = client.CustomObjectsApi(api)
    group, version = obj["apiVersion"].split("/")
    name = obj["metadata"]["name"]
    try:
        current = custom.get_cluster_custom_object(group, version, plural, name)
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        custom.create_cluster_custom_object(group, version, plural, obj)
        return
    body = copy.deepcopy(obj)
    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    custom.replace_cluster_custom_object(group, version, plural, name, body)


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Any, WebhookConfig]]:
    from kubernetes import client as _client
    from kubernetes import config as _config

    client: Any = _client
    config: Any = _config
    api = config.new_client_from_config(config_file=KUBECONFIG)
    core = client.CoreV1Api(api)
    with contextlib.suppress(client.ApiException):
        core.create_namespace({"metadata": {"name": NAMESPACE}})
    # The RuntimeClass admission plugin wants the classes the pods name to exist.
    node = client.NodeV1Api(api)
    for runtime in ("nvidia", "ascend", "amd-runtime", "runc"):
        with contextlib.suppress(client.ApiException):
            node.create_runtime_class({"metadata": {"name": runtime}, "handler": runtime})
    webhook_config = load_config(CONFIG)
    objects = export_access(webhook_config, name=NAME).objects
    assert [o["kind"] for o in objects] == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    ]
    for obj in objects:
        if obj["kind"].endswith("Binding"):
            obj["spec"]["matchResources"] = {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
                "objectSelector": {
                    "matchExpressions": [{"key": UNCHECKED, "operator": "DoesNotExist"}]
                },
            }
        apply_object(api, obj)
    # The policies' informers sync (each policy on its own): wait until a route pod is denied
    # and a plain pod gets its voids.
    route = _named(pod(container("app", env=_env("NVIDIA_VISIBLE_DEVICES", "all"))), "probe", 0)
    plain = _named(pod(container("app")), "probe", 0)
    for _ in range(120):
        with contextlib.suppress(AssertionError):
            if server_answer(core, route)[0] and server_answer(core, plain)[1]:
                break
        time.sleep(0.5)
    else:
        raise AssertionError("the access policies did not take effect within a minute")
    yield core, webhook_config
    custom = client.CustomObjectsApi(api)
    for obj in reversed(objects):
        group, version = obj["apiVersion"].split("/")
        plural = obj["kind"].lower().replace("policy", "policies").replace("binding", "bindings")
        plural = plural.replace("policiesbindings", "policybindings")
        custom.delete_cluster_custom_object(group, version, plural, NAME)


def test_no_webhook_is_registered(cluster: Any) -> None:
    from kubernetes import client as _client

    client: Any = _client
    core, _ = cluster
    adm = client.AdmissionregistrationV1Api(core.api_client)
    assert adm.list_validating_webhook_configuration().items == []
    assert adm.list_mutating_webhook_configuration().items == []


def test_policies_and_webhook_agree_on_every_route(cluster: Any) -> None:
    core, config = cluster
    disagree: list[str] = []
    invalid: list[str] = []
    denied = allowed = 0
    for i, (case, obj) in enumerate(route_cases(), start=1):
        body = _named(obj, case, i)
        want = core_answer(body, config)
        got = server_answer(core, body)
        if got[2].startswith("invalid: "):
            invalid.append(f"{case}: {got[2]}")
            continue
        if (got[0], got[1]) != want:
            disagree.append(f"{case}: webhook {want}, policies {got[:2]} {got[2][:160]}")
        denied += want[0]
        allowed += not want[0]
    print(f"{denied + allowed} compared: {denied} denied and {allowed} allowed by both")
    assert not disagree, "\n".join(disagree)
    # Rejected by the API server's validation before any policy: a `..` in a hostPath.
    assert len(invalid) == 1 and "must not contain '..'" in invalid[0], invalid
    # Both answers occur, and the routes are the majority.
    assert denied > 80 and allowed > 30, (denied, allowed)


def test_without_the_webhook_a_plain_pod_is_created_and_a_route_still_denied(cluster: Any) -> None:
    """Issue 46 item 7: the webhook stopped (here: never registered), the native policies
    installed: a plain pod is created, with its voids; a route pod is denied."""
    from kubernetes import client as _client

    client: Any = _client
    core, _ = cluster
    plain = _named(pod(container("app")), "plain", 9000)
    with contextlib.suppress(client.ApiException):
        core.delete_namespaced_pod("r9000", NAMESPACE, grace_period_seconds=0)
    created = core.create_namespaced_pod(NAMESPACE, plain)
    env = {e.name: e.value or "" for e in created.spec.containers[0].env}
    assert env == {
        "NVIDIA_VISIBLE_DEVICES": "void",
        "AMD_VISIBLE_DEVICES": "void",
        "ASCEND_VISIBLE_DEVICES": "",
    }
    route = _named(pod(container("app", env=_env("NVIDIA_VISIBLE_DEVICES", "all,VOID"))), "r", 9001)
    with pytest.raises(client.ApiException) as denied:
        core.create_namespaced_pod(NAMESPACE, route)
    assert denied.value.status == 403
    message = json.loads(denied.value.body)["message"]
    assert message == (
        f"pods \"r9001\" is forbidden: ValidatingAdmissionPolicy '{NAME}' with binding '{NAME}' "
        "denied request: gpuAccess: a container sets a device-selection variable that names "
        "devices it does not request: request the device's resource, or set the variable to its "
        'void (container "app").'
    )
    core.delete_namespaced_pod("r9000", NAMESPACE, grace_period_seconds=0)


def _debug_denied(core: Any, name: str, debug: dict[str, Any]) -> str:
    """The API server's message refusing `debug` added to pod `name` by kubectl debug."""
    from kubernetes import client as _client

    client: Any = _client
    with pytest.raises(client.ApiException) as denied:
        core.patch_namespaced_pod_ephemeralcontainers(
            name, NAMESPACE, {"spec": {"ephemeralContainers": [debug]}}
        )
    message: str = json.loads(denied.value.body)["message"]
    return message


def test_a_new_ephemeral_container_is_judged_and_voided(cluster: Any) -> None:
    """The pods/ephemeralcontainers subresource: a privileged debug container is denied, a plain
    one added with the voids the webhook core writes into it (and nothing written elsewhere)."""
    from kubernetes import client as _client

    client: Any = _client
    core, config = cluster
    name = "r9002"
    with contextlib.suppress(client.ApiException):
        core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
    stored = core.create_namespaced_pod(NAMESPACE, _named(pod(container("app")), "eph", 9002))
    old = core.api_client.sanitize_for_serialization(stored)
    debug = {"name": "debug", "image": "busybox", "securityContext": {"privileged": True}}
    assert _debug_denied(core, name, debug).endswith(
        "gpuAccess: a container is privileged or adds SYS_ADMIN or ALL, which gives it every "
        "device of its node: drop it or exempt its namespace in gpuAccess "
        '(ephemeral container "debug").'
    )
    plain = {"name": "shell", "image": "busybox", "env": [{"name": "TERM", "value": "xterm"}]}
    done = core.patch_namespaced_pod_ephemeralcontainers(
        name, NAMESPACE, {"spec": {"ephemeralContainers": [plain]}}
    )
    (shell,) = done.spec.ephemeral_containers
    got = [(e.name, e.value or "") for e in shell.env]
    new = copy.deepcopy(old)
    new["spec"]["ephemeralContainers"] = [plain]
    decision = _core(new, config, sub_resource="ephemeralcontainers", old_object=old)
    assert decision.mutated is not None
    (want,) = decision.mutated["spec"]["ephemeralContainers"]
    assert got == [(e["name"], e.get("value", "")) for e in want["env"]]
    assert got == [
        ("TERM", "xterm"),
        ("NVIDIA_VISIBLE_DEVICES", "void"),
        ("AMD_VISIBLE_DEVICES", "void"),
        ("ASCEND_VISIBLE_DEVICES", ""),
    ]
    # The pod's own containers are untouched on the subresource.
    assert done.spec.containers[0].env == stored.spec.containers[0].env
    core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)


def test_an_ephemeral_container_with_unprefixed_env_from_in_an_amd_pod(cluster: Any) -> None:
    """kubectl debug into an AMD pod with an unprefixed envFrom: its DOCKER_RESOURCE_* keys
    would reach AMD's runtime unseen; the policy denies as the core does, and a prefix passes."""
    from kubernetes import client as _client

    client: Any = _client
    core, config = cluster
    name = "r9003"
    with contextlib.suppress(client.ApiException):
        core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
    amd = pod(container("gpu", limits={"amd.com/gpu": 1}))
    stored = core.create_namespaced_pod(NAMESPACE, _named(amd, "eph-amd", 9003))
    old = core.api_client.sanitize_for_serialization(stored)
    debug = {"name": "dbg", "image": "busybox", "envFrom": [{"configMapRef": {"name": "cm"}}]}
    new = copy.deepcopy(old)
    new["spec"]["ephemeralContainers"] = [debug]
    assert not _core(new, config, sub_resource="ephemeralcontainers", old_object=old).allowed
    assert _debug_denied(core, name, debug).endswith(
        "gpuAccess: a container's envFrom can choose devices no void closes: set an envFrom "
        'prefix or list its variables in env (ephemeral container "dbg").'
    )
    prefixed = {**debug, "envFrom": [{"prefix": "CFG_", "configMapRef": {"name": "cm"}}]}
    done = core.patch_namespaced_pod_ephemeralcontainers(
        name, NAMESPACE, {"spec": {"ephemeralContainers": [prefixed]}}
    )
    assert [e.name for e in done.spec.ephemeral_containers[0].env] == [
        "NVIDIA_VISIBLE_DEVICES",
        "AMD_VISIBLE_DEVICES",
        "ASCEND_VISIBLE_DEVICES",
    ]
    core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)


def _both_answer(
    api: Any, name: str, new: dict[str, Any], decision: Decision, denied: bool, rule: str
) -> None:
    """The webhook core's `decision` and the API server's answer to a dry-run replace of pod
    `name` with `new` both deny (the policy with `rule`) when `denied`, else both allow."""
    from kubernetes import client as _client

    client: Any = _client
    assert any(v.configmap == POLICY for v in decision.violations) is denied
    try:
        api.replace_namespaced_pod(name, NAMESPACE, new, dry_run="All")
        answer = "allowed"
    except client.ApiException as exc:
        answer = json.loads(exc.body or "{}").get("message", "")
    if denied:
        assert answer.endswith(f"denied request: gpuAccess: {rule}."), answer
    else:
        assert answer == "allowed"


@pytest.mark.parametrize(
    ("stored_without_voids", "image", "denied"),
    [
        (True, "nvidia/cuda:12.4.1-base-ubuntu22.04", True),
        (True, "busybox", False),
        (False, "nvidia/cuda:12.4.1-base-ubuntu22.04", False),
    ],
    ids=["image swapped, no voids", "label only, no voids", "image swapped, voided"],
)
def test_a_pod_update_that_swaps_an_image(
    cluster: Any, stored_without_voids: bool, image: str, denied: bool
) -> None:
    """A Pod UPDATE that gives a container without its voids a new image (its image config
    could name devices): denied by both; a label change, or a pod the mutating policy voided,
    passes both."""
    from kubernetes import client as _client

    client: Any = _client
    core, config = cluster
    name = "r9004"
    with contextlib.suppress(client.ApiException):
        core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
    body = _named(pod(container("app", image="busybox")), "update", 9004)
    if stored_without_voids:
        body["metadata"]["labels"][UNCHECKED] = "true"
    stored = core.create_namespaced_pod(NAMESPACE, body)
    old = core.api_client.sanitize_for_serialization(stored)
    assert bool(stored.spec.containers[0].env) is not stored_without_voids
    new = copy.deepcopy(old)
    new["metadata"]["labels"].pop(UNCHECKED, None)
    new["spec"]["containers"][0]["image"] = image
    _both_answer(
        core, name, new, _core(new, config, old_object=old), denied,
        "a container changes its image while its device variables are not void: recreate the "
        "pod, env cannot change on update",
    )  # fmt: skip
    core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)


NPU_ANNOTATION = "huawei.com/Ascend910"
VOLCANO_SCHEDULER = "system:serviceaccount:volcano-system:volcano-scheduler"


@pytest.mark.parametrize(
    ("writer", "change", "denied"),
    [
        (None, "Ascend910-0,Ascend910-1,Ascend910-2,Ascend910-3", True),
        (None, None, True),
        (VOLCANO_SCHEDULER, "Ascend910-0,Ascend910-1,Ascend910-2,Ascend910-3", False),
        (None, "team", False),
    ],
    ids=["admin rewrites it", "admin removes it", "Volcano's scheduler rewrites it", "other key"],
)
def test_a_pod_update_of_the_annotation_a_device_variable_reads(
    cluster: Any, writer: str | None, change: str | None, denied: bool
) -> None:
    """MindCluster's pod reads ASCEND_VISIBLE_DEVICES from its huawei.com/Ascend910 annotation:
    changing it is denied by both unless the user is a declared writer (request.userInfo)."""
    from kubernetes import client as _client

    client: Any = _client
    core, config = cluster
    name = "r9046"
    with contextlib.suppress(client.ApiException):
        core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
    body = _named(mindcluster_pod(), "annotation", 9046)
    body["metadata"]["annotations"] = {NPU_ANNOTATION: "Ascend910-0,Ascend910-1"}
    stored = core.create_namespaced_pod(NAMESPACE, body)
    old = core.api_client.sanitize_for_serialization(stored)
    new = copy.deepcopy(old)
    annotations = new["metadata"]["annotations"]
    if change == "team":
        annotations["team"] = "vision"
    elif change is None:
        del annotations[NPU_ANNOTATION]
    else:
        annotations[NPU_ANNOTATION] = change
    api, username, groups = as_user(core, writer)
    decision = _core(new, config, old_object=old, username=username, groups=groups)
    _both_answer(
        api, name, new, decision, denied,
        "an update changes an annotation a container reads a device variable from: only "
        "gpuAccess.annotationWriters (its scheduler) may change it",
    )  # fmt: skip
    core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)


# --- an outage, through the chart's own webhook configurations ---------------------------------

OUTAGE_PODS: list[tuple[str, dict[str, Any]]] = [
    ("plain", pod(container("app"))),
    ("plain with an init container", pod(container("app"), init=[container("setup")])),
    ("GPU", pod(container("g", limits={GPU: "1"}))),
    (
        "route: NVIDIA_VISIBLE_DEVICES=all",
        pod(container("app", env=_env("NVIDIA_VISIBLE_DEVICES", "all"))),
    ),
    ("route: privileged", pod(container("app", securityContext={"privileged": True}))),
    (
        "route: CDI annotation",
        pod(container("app"), annotations={"cdi.k8s.io/gpu": "nvidia.com/gpu=all"}),
    ),
]


def _chart_webhooks(native: bool) -> list[dict[str, Any]]:
    """The chart's two webhook configurations under `enforce` (with or without the native access
    policies), with the Service the chart names absent: every call fails, as in an outage."""
    import helm_python

    from tests.chart.conftest import CHART_DIR, manifests_of, render_chart

    values: dict[str, Any] = {"config": {"gpuAccess": {"mode": "enforce"}}}
    if native:
        values["nativePolicies"] = {"access": {"enabled": True}}
    with helm_python.Chart.load(CHART_DIR) as chart:
        objs = manifests_of(render_chart(chart, values, kube_version="v1.36.2"))
    return [o for o in objs if o["kind"].endswith("WebhookConfiguration")]


def _outcome(core: Any, i: int, obj: dict[str, Any]) -> str:
    from kubernetes import client as _client

    client: Any = _client
    try:
        core.create_namespaced_pod(NAMESPACE, _named(obj, "outage", i), dry_run="All")
    except client.ApiException as exc:
        message = json.loads(exc.body or "{}").get("message", "")
        if "failed calling webhook" in message:
            return "blocked by the outage"
        if "ValidatingAdmissionPolicy" in message:
            return "denied by the policy"
        raise AssertionError(f"unexpected API error {exc.status}: {message}") from exc
    return "created"


@pytest.mark.parametrize("native", [False, True], ids=["webhook only", "native policies"])
def test_an_outage_under_enforce(cluster: Any, native: bool) -> None:
    """Issue 46 items 5 and 7, with numbers: the webhook unreachable (its Service absent), the
    chart's entries under `enforce`. Without the native policies the access entry (Fail) blocks
    every pod CREATE in the namespace; with them (access entry Ignore) plain pods are created,
    the routes are still denied by the API server, and only pods with extended resources wait
    for the pods entries (failurePolicy Fail: the CRL quotas)."""
    from kubernetes import client as _client

    client: Any = _client
    core, _ = cluster
    adm = client.AdmissionregistrationV1Api(core.api_client)
    configs = _chart_webhooks(native)
    assert {
        h["failurePolicy"]
        for c in configs
        for h in c["webhooks"]
        if h["name"].startswith("gpu-access.")
    } == {"Ignore" if native else "Fail"}
    try:
        for config in configs:
            if config["kind"] == "MutatingWebhookConfiguration":
                adm.create_mutating_webhook_configuration(config)
            else:
                adm.create_validating_webhook_configuration(config)
        time.sleep(2)  # the webhook configuration informer
        outcomes = {case: _outcome(core, i, obj) for i, (case, obj) in enumerate(OUTAGE_PODS, 9100)}
    finally:
        for config in configs:
            name = config["metadata"]["name"]
            with contextlib.suppress(client.ApiException):
                if config["kind"] == "MutatingWebhookConfiguration":
                    adm.delete_mutating_webhook_configuration(name)
                else:
                    adm.delete_validating_webhook_configuration(name)
    if not native:
        assert outcomes == dict.fromkeys(outcomes, "blocked by the outage")
        return
    assert outcomes == {
        "plain": "created",
        "plain with an init container": "created",
        "GPU": "blocked by the outage",
        "route: NVIDIA_VISIBLE_DEVICES=all": "denied by the policy",
        "route: privileged": "denied by the policy",
        "route: CDI annotation": "denied by the policy",
    }
