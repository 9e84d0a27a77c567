"""The webhook's own /dev/shm on a reinvocation, on the real API server (issue 45 item 3): another
mutating admission step raises a plain pod's memory limit after the webhook's first pass, the
API server calls the webhook again (its entries have `reinvocationPolicy: IfNeeded`), and the
stored pod's `dshm` is sized from the new limit; a `dshm` the user wrote stays as written.

The other step is a MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in 1.36) that
raises the limit only once a `dshm` volume is in the pod, so in the first round (policies run
before webhooks) it changes nothing and only its reinvocation, after the webhook added the
volume, changes the limit: the webhook sees the new limit only if the API server calls it again.
Needs scripts/e2e-kapi.sh (a webhook registered by URL); no scheduler.
"""

from __future__ import annotations

import contextlib
import copy
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from .test_e2e_admission import call

pytestmark = pytest.mark.e2e

RUN = uuid.uuid4().hex[:6]
LABEL = "gaw-raise-memory"
GROUP, VERSION = "admissionregistration.k8s.io", "v1"
MARK = "features.alauda.io/injected-shm"
# Bounded wait for a new policy to reach the API server's admission (its informer).
POLICY_PROPAGATION_SECONDS = 30.0


def _policy(namespace: str) -> list[dict[str, Any]]:
    """The policy and its binding: pods of this test (labelled) in `namespace` that carry a
    `dshm` volume get their first container's memory limit set to 24Gi."""
    name = f"gaw-e2e-raise-memory-{RUN}"
    labelled = (
        f"has(object.metadata.labels) && '{LABEL}' in object.metadata.labels && "
        f"object.metadata.labels['{LABEL}'] == '{RUN}'"
    )
    # No patch while there is no `dshm` (a match condition would not do: a policy whose
    # conditions did not match is not reinvoked).
    patch = (
        "has(object.spec.volumes) && object.spec.volumes.exists(v, v.name == 'dshm') ? "
        '[JSONPatch{op: "replace", path: "/spec/containers/0/resources/limits/memory", '
        'value: "24Gi"}] : []'
    )
    policy = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "matchConditions": [{"name": "this-test", "expression": labelled}],
            "failurePolicy": "Fail",
            "reinvocationPolicy": "IfNeeded",
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": patch}}],
        },
    }
    binding = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            },
        },
    }
    return [policy, binding]


@pytest.fixture(scope="module")
def raising_policy(cluster: Any, namespace: str) -> Iterator[None]:
    from kubernetes import client

    custom = client.CustomObjectsApi(cluster.api)
    plural = {
        "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
        "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
    }
    objects = _policy(namespace)
    for obj in objects:
        custom.create_cluster_custom_object(GROUP, VERSION, plural[obj["kind"]], obj)
    try:
        yield
    finally:
        for obj in reversed(objects):
            with contextlib.suppress(client.ApiException):
                custom.delete_cluster_custom_object(
                    GROUP, VERSION, plural[obj["kind"]], obj["metadata"]["name"]
                )


def _pod(name: str, memory: str, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "train",
        "image": "registry.local/ml/rocm-trainer:1",
        "resources": {"limits": {"amd.com/gpu": "1", "memory": memory}},
    }
    if "mounts" in spec:
        container["volumeMounts"] = spec.pop("mounts")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {LABEL: RUN}},
        "spec": {"containers": [container], **spec},
    }


def _limit(obj: dict[str, Any]) -> str:
    return str(obj["spec"]["containers"][0]["resources"]["limits"]["memory"])


def _created(core: Any, namespace: str, pod: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A server-side dry-run create, repeated until the policy is in force (the limit raised),
    then a real create: the stored pod and the warnings shown."""
    deadline = time.monotonic() + POLICY_PROPAGATION_SECONDS
    while True:
        dry, _ = call(core.create_namespaced_pod, namespace, copy.deepcopy(pod), dry_run="All")
        if _limit(dry) == "24Gi":
            break
        assert time.monotonic() < deadline, "the MutatingAdmissionPolicy never took effect"
        time.sleep(0.5)
    return call(core.create_namespaced_pod, namespace, copy.deepcopy(pod))


def test_a_reinvocation_resizes_the_webhooks_own_dshm(
    core: Any, namespace: str, raising_policy: None
) -> None:
    stored, warnings = _created(core, namespace, _pod(f"shm-own-{RUN}", "4Gi"))
    try:
        # The first pass sized it for 4Gi (2Gi); the policy's reinvocation set 24Gi; the
        # webhook's own reinvocation resized its volume: half of the new limit.
        assert _limit(stored) == "24Gi"
        assert stored["spec"]["volumes"][-1] == {
            "name": "dshm",
            "emptyDir": {"medium": "Memory", "sizeLimit": "12Gi"},
        }
        assert stored["metadata"]["annotations"][MARK] == "dshm"
        assert {"name": "dshm", "mountPath": "/dev/shm"} in stored["spec"]["containers"][0][
            "volumeMounts"
        ]
        assert 'mounted a 2Gi memory-backed /dev/shm in container "train" (shm fix)' in warnings
        assert "resized the webhook's /dev/shm (dshm) to 12Gi (shm fix)" in warnings
    finally:
        core.delete_namespaced_pod(stored["metadata"]["name"], namespace, grace_period_seconds=0)


def test_a_users_own_dshm_is_left_as_written(
    core: Any, namespace: str, raising_policy: None
) -> None:
    # The user's dshm at /dev/shm, no mark: the policy raises the limit in the first round (the
    # volume is there from the start), and the webhook never changes the user's volume.
    users = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}
    pod = _pod(
        f"shm-user-{RUN}",
        "4Gi",
        volumes=[users],
        mounts=[{"name": "dshm", "mountPath": "/dev/shm"}],
    )
    stored, warnings = _created(core, namespace, pod)
    try:
        assert _limit(stored) == "24Gi"
        assert [v for v in stored["spec"]["volumes"] if v["name"].startswith("dshm")] == [users]
        assert MARK not in (stored["metadata"].get("annotations") or {})
        assert not [w for w in warnings if "(shm fix)" in w]
    finally:
        core.delete_namespaced_pod(stored["metadata"]["name"], namespace, grace_period_seconds=0)
