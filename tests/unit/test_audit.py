"""The audit's grouping (core/audit/audit.py): evaluations of what runs, merged by top owner."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.helpers import GPU, container, crl, pod, policies, standard_policies, workload
from webhook.core.audit.audit import Audit, evaluate_object, pod_finished
from webhook.core.audit.findings import MAX_PROBLEMS, Finding
from webhook.core.audit.owners import Ref
from webhook.core.config.model import WebhookConfig
from webhook.core.policies.policyset import PolicySet

IMAGE = "nvidia/cuda:12.4.1-runtime-ubuntu22.04"
CONFIG = WebhookConfig()
MAX_GPU_MESSAGE = (
    "container \"train\": limits.nvidia.com/gpu='8' is above the maximum 4 "
    "(max: 4 in ConfigMap kube-public/cf-crl-nvidia-gpu)."
)


def gpu_policies(max_gpus: str | None = None) -> PolicySet:
    extra = {"max": max_gpus} if max_gpus else {}
    return policies(crl(GPU, "nvidia", name="cf-crl-nvidia-gpu", requests="fromLimits", **extra))


def owned(obj: dict[str, Any], kind: str, name: str, uid: str, api: str = "apps/v1") -> None:
    obj["metadata"]["ownerReferences"] = [
        # A non-controller reference first: only `controller: true` makes the owner.
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "cm-1"},
        {"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": True},
    ]


def gpu_pod(name: str, gpus: str, namespace: str = "ml", c: str = "train") -> dict[str, Any]:
    """A pod as it runs: requests defaulted from limits by the API server, then mutated by the
    webhook when it was created (CUDA affinity), under the policies of that time."""
    spec = container(c, image=IMAGE, limits={GPU: gpus}, requests={GPU: gpus})
    created = pod(spec, name=name, namespace=namespace)
    admitted = evaluate_object(created, "v1", "Pod", gpu_policies(), CONFIG).mutated
    return copy.deepcopy(dict(admitted)) if admitted is not None else created


def add(
    audit: Audit, obj: dict[str, Any], kind: str, api: str, policy_set: PolicySet, *, owner: bool
) -> None:
    if owner:
        audit.owner(obj, api, kind)
    audit.add(obj, api, kind, evaluate_object(obj, api, kind, policy_set, CONFIG))


def deployment_with_pods(
    audit: Audit,
    *,
    namespace: str = "ml",
    gpus: str = "8",
    max_gpus: str = "4",
    pods: int = 3,
    name: str = "train",
    pods_first: bool = False,
) -> None:
    """A Deployment, its ReplicaSet (as the Deployment controller makes it) and its pods."""
    policy_set = gpu_policies(max_gpus)
    template = gpu_pod("x", gpus, namespace)
    del template["spec"]["containers"][0]["resources"]["requests"]  # templates are not defaulted
    deployment = workload("Deployment", template, name=name)
    deployment["metadata"]["uid"] = f"{namespace}-{name}-dep"
    replicaset = workload("ReplicaSet", template, name=f"{name}-5d8f")
    replicaset["metadata"]["uid"] = f"{namespace}-{name}-rs"
    owned(replicaset, "Deployment", name, deployment["metadata"]["uid"])
    members = []
    for index in range(pods):
        member = gpu_pod(f"{name}-5d8f-{index}", gpus, namespace)
        owned(member, "ReplicaSet", f"{name}-5d8f", replicaset["metadata"]["uid"])
        members.append(member)
    owners = [("Deployment", deployment), ("ReplicaSet", replicaset)]
    if not pods_first:
        for kind, obj in owners:
            add(audit, obj, kind, "apps/v1", policy_set, owner=True)
    for member in members:
        add(audit, member, "Pod", "v1", policy_set, owner=False)
    if pods_first:
        for kind, obj in owners:
            add(audit, obj, kind, "apps/v1", policy_set, owner=True)


@pytest.mark.parametrize("pods_first", [False, True], ids=["owners-first", "pods-first"])
def test_a_deployment_its_replicaset_and_pods_are_one_finding_on_the_deployment(
    pods_first: bool,
) -> None:
    audit = Audit()
    deployment_with_pods(audit, pods_first=pods_first)
    result = audit.result()
    (finding,) = result.findings
    assert finding.owner == Ref("apps/v1", "Deployment", "ml", "train", "ml-train-dep")
    assert (finding.pods, finding.pods_denied, finding.owner_denied) == (3, 3, True)
    # The template's violation and the pods' are the same sentence: one problem, counted.
    (problem,) = finding.denied.values()
    assert (problem.policy, problem.rule) == ("cf-crl-nvidia-gpu", "max: 4")
    assert problem.message.startswith(MAX_GPU_MESSAGE)
    assert (problem.in_owner, problem.pods, problem.example) == (True, 3, "train-5d8f-0")
    assert finding.scope() == "template denied, 3 of 3 pod(s) denied"
    assert not finding.changes
    # The ReplicaSet is allowed untouched (its Deployment's template is checked), as in
    # admission; the Deployment is the one workload evaluated.
    assert (result.workloads, result.pods, result.skipped) == (1, 3, 1)


def test_pods_within_the_policy_count_toward_their_owner_but_make_no_finding() -> None:
    audit = Audit()
    deployment_with_pods(audit, gpus="2")
    assert audit.result().findings == ()
    audit = Audit()
    policy_set = gpu_policies("4")
    deployment_with_pods(audit, gpus="2", max_gpus="4")
    # A pod created by hand later with more GPUs, under the same ReplicaSet.
    rogue = gpu_pod("train-5d8f-rogue", "8")
    owned(rogue, "ReplicaSet", "train-5d8f", "ml-train-rs")
    add(audit, rogue, "Pod", "v1", policy_set, owner=False)
    (finding,) = audit.result().findings
    assert finding.owner.kind == "Deployment"
    assert finding.scope() == "template allowed, 1 of 4 pod(s) denied"
    (problem,) = finding.denied.values()
    assert (problem.in_owner, problem.pods, problem.example) == (False, 1, "train-5d8f-rogue")


def test_an_operators_pods_are_one_finding_on_its_pytorchjob() -> None:
    policy_set = gpu_policies("4")
    template = {"metadata": {}, "spec": {"containers": [container("pytorch", image=IMAGE)]}}
    template["spec"]["containers"][0]["resources"] = {"limits": {GPU: "8"}}
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "bert", "namespace": "ml", "uid": "job-1"},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": template}}},
    }
    audit = Audit()
    add(audit, job, "PyTorchJob", "kubeflow.org/v1", policy_set, owner=True)
    for index in range(2):
        member = gpu_pod(f"bert-worker-{index}", "8", c="pytorch")
        owned(member, "PyTorchJob", "bert", "job-1", api="kubeflow.org/v1")
        add(audit, member, "Pod", "v1", policy_set, owner=False)
    (finding,) = audit.result().findings
    assert finding.owner == Ref("kubeflow.org/v1", "PyTorchJob", "ml", "bert", "job-1")
    assert finding.scope() == "template denied, 2 of 2 pod(s) denied"
    # The template's message names the replica; the pods' do not: two problems.
    messages = sorted((p.message, p.in_owner, p.pods) for p in finding.denied.values())
    assert [m[0].split(":")[0] for m in messages] == [
        'container "pytorch"',
        'replica Worker, container "pytorch"',
    ]
    assert [(m[1], m[2]) for m in messages] == [(False, 2), (True, 0)]


def test_a_cronjobs_jobs_and_pods_are_one_finding_on_the_cronjob() -> None:
    policy_set = gpu_policies("4")
    template = gpu_pod("x", "8")
    del template["spec"]["containers"][0]["resources"]["requests"]
    cron = workload("CronJob", template, name="nightly")
    cron["metadata"]["uid"] = "cron-1"
    job = workload("Job", template, name="nightly-2900")
    job["metadata"]["uid"] = "job-1"
    owned(job, "CronJob", "nightly", "cron-1", api="batch/v1")
    member = gpu_pod("nightly-2900-abc", "8")
    owned(member, "Job", "nightly-2900", "job-1", api="batch/v1")
    audit = Audit()
    add(audit, member, "Pod", "v1", policy_set, owner=False)
    add(audit, job, "Job", "batch/v1", policy_set, owner=True)
    add(audit, cron, "CronJob", "batch/v1", policy_set, owner=True)
    (finding,) = audit.result().findings
    assert finding.owner.label() == "CronJob ml/nightly"
    assert finding.scope() == "template denied, 1 of 1 pod(s) denied"


def test_an_owner_that_was_not_listed_is_the_finding_as_its_reference_names_it() -> None:
    """A kind the audit does not list (forbidden, or not a kind the webhook checks, e.g. a
    Knative Revision) ends the chain: the pods group under it as the reference says."""
    member = gpu_pod("web-1", "8")
    owned(member, "Revision", "web-00001", "rev-1", api="serving.knative.dev/v1")
    audit = Audit()
    add(audit, member, "Pod", "v1", gpu_policies("4"), owner=False)
    (finding,) = audit.result().findings
    assert finding.owner == Ref("serving.knative.dev/v1", "Revision", "ml", "web-00001", "rev-1")
    assert finding.scope() == "1 of 1 pod(s) denied"


def test_a_standalone_pod_is_its_own_finding_and_clean_ones_cost_nothing() -> None:
    audit = Audit()
    policy_set = gpu_policies("4")
    for index in range(5):
        add(audit, gpu_pod(f"ok-{index}", "1"), "Pod", "v1", policy_set, owner=False)
    add(audit, gpu_pod("big", "8"), "Pod", "v1", policy_set, owner=False)
    result = audit.result()
    (finding,) = result.findings
    assert finding.owner.label() == "Pod ml/big"
    assert finding.is_pod and finding.scope() == "the pod"
    (problem,) = finding.denied.values()
    assert problem.message.startswith('container "train": ')
    assert result.pods == 6
    assert len(audit._buckets) == 1  # only the pod with a problem was kept


def test_owner_reference_cycles_end() -> None:
    a = workload("ReplicaSet", gpu_pod("x", "1"), name="a")
    a["metadata"]["uid"] = "a"
    b = workload("ReplicaSet", gpu_pod("x", "1"), name="b")
    b["metadata"]["uid"] = "b"
    owned(a, "ReplicaSet", "b", "b")
    owned(b, "ReplicaSet", "a", "a")
    audit = Audit()
    audit.owner(a, "apps/v1", "ReplicaSet")
    audit.owner(b, "apps/v1", "ReplicaSet")
    assert audit.top(Ref("apps/v1", "ReplicaSet", "ml", "a", "a")).name in ("a", "b")


def test_pods_that_would_get_something_new_are_reported_as_changes_not_denials() -> None:
    """A pod created before the webhook (no requests copied from limits, no CUDA affinity, no
    /dev/shm) would get them if created again: a change, and the pod is not denied."""
    bare = pod(container("train", image=IMAGE, limits={GPU: "2"}), name="old")
    audit = Audit()
    add(audit, bare, "Pod", "v1", standard_policies(), owner=False)
    (finding,) = audit.result().findings
    assert not finding.denied
    rules = sorted(p.rule for p in finding.changes.values())
    assert rules == ["cuda-affinity", "requests-from-limits", "shm"]
    assert all(p.pods == 1 and p.example == "old" for p in finding.changes.values())


def test_a_pod_the_webhook_already_mutated_is_no_change() -> None:
    bare = pod(container("train", image=IMAGE, limits={GPU: "2"}), name="old")
    first = evaluate_object(bare, "v1", "Pod", standard_policies(), CONFIG)
    assert first.mutated is not None
    audit = Audit()
    add(audit, dict(first.mutated), "Pod", "v1", standard_policies(), owner=False)
    assert audit.result().findings == ()


def test_exempt_namespaces_and_objects_being_deleted_are_skipped_as_in_admission() -> None:
    audit = Audit()
    policy_set = gpu_policies("4")
    add(audit, gpu_pod("sys", "8", namespace="kube-system"), "Pod", "v1", policy_set, owner=False)
    leaving = gpu_pod("leaving", "8")
    leaving["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    add(audit, leaving, "Pod", "v1", policy_set, owner=False)
    result = audit.result()
    assert (result.findings, result.pods, result.skipped) == ((), 0, 2)


def test_finished_pods_are_recognised() -> None:
    done = gpu_pod("done", "8")
    assert not pod_finished(done)
    for phase in ("Succeeded", "Failed"):
        done["status"] = {"phase": phase}
        assert pod_finished(done)
    done["status"] = {"phase": "Running"}
    assert not pod_finished(done)


def test_an_object_the_core_cannot_evaluate_is_a_denial_as_in_admission() -> None:
    broken = {"metadata": {"name": "odd", "namespace": "ml"}, "spec": {"containers": "nope"}}
    decision = evaluate_object(broken, "v1", "Pod", gpu_policies("4"), CONFIG)
    (violation,) = decision.violations
    assert violation.rule == "object shape"
    assert violation.message.startswith("Pod ml/odd: cannot evaluate: ")
    audit = Audit()
    audit.add(broken, "v1", "Pod", decision)
    (finding,) = audit.result().findings
    (problem,) = finding.denied.values()
    assert (problem.policy, problem.rule) == ("gpu-admission-webhook", "object shape")


def test_distinct_problems_per_finding_are_capped_and_counted() -> None:
    finding = Finding(Ref("apps/v1", "Deployment", "ml", "x"))
    other = Finding(Ref("apps/v1", "Deployment", "ml", "x"))
    from webhook.core.audit.findings import Problem

    for index in range(MAX_PROBLEMS + 7):
        other.add_problem(other.denied, Problem("p", "r", f"message {index}", pods=1))
    finding.merge(other)
    assert len(finding.denied) == MAX_PROBLEMS
    assert finding.more == 7


def test_result_json_names_each_finding_and_its_counts() -> None:
    audit = Audit()
    deployment_with_pods(audit)
    document = audit.result().to_json()
    assert document["summary"] == {
        "denied": 1,
        "changed": 0,
        "gpuAccess": 0,
        "workloads": 1,
        "pods": 3,
        "finishedPods": 0,
        "skipped": 1,
        "unknownRuntimes": {},
    }
    (finding,) = document["findings"]
    assert {k: finding[k] for k in ("namespace", "kind", "name", "pods", "podsDenied")} == {
        "namespace": "ml",
        "kind": "Deployment",
        "name": "train",
        "pods": 3,
        "podsDenied": 3,
    }
    (violation,) = finding["violations"]
    assert violation["policy"] == "cf-crl-nvidia-gpu"
    assert violation["template"] is True
    assert violation["pods"] == 3


# --- owners past a Pod, and past kinds the audit does not list (issue 30, item 3) ---------------


def _lws_template() -> dict[str, Any]:
    spec = container("worker", image=IMAGE, limits={GPU: "8"})
    return {"metadata": {}, "spec": {"containers": [spec]}}


def test_leaderworkerset_worker_groups_are_one_finding_on_the_leaderworkerset() -> None:
    """kubernetes-sigs/lws pkg/controllers/pod_controller.go: the leader Pod of each group is
    the controller of the group's worker StatefulSet (setControllerReferenceWithStatefulSet,
    the StatefulSet named after the leader Pod); the leader Pod's controller is the leader
    StatefulSet, whose controller is the LeaderWorkerSet. Before the fix the workers were
    reported as "Pod ml/vllm-0: the pod"."""
    policy_set = gpu_policies("4")
    api = "leaderworkerset.x-k8s.io/v1"
    lws = {
        "apiVersion": api,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "vllm", "namespace": "ml", "uid": "lws-1"},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {"size": 3, "workerTemplate": _lws_template()},
        },
    }
    leader_sts = workload("StatefulSet", gpu_pod("x", "8", c="worker"), name="vllm")
    leader_sts["metadata"]["uid"] = "sts-leader"
    owned(leader_sts, "LeaderWorkerSet", "vllm", "lws-1", api=api)
    worker_sts = workload("StatefulSet", gpu_pod("x", "8", c="worker"), name="vllm-0")
    worker_sts["metadata"]["uid"] = "sts-workers-0"
    leader = gpu_pod("vllm-0", "8", c="worker")
    leader["metadata"]["uid"] = "pod-leader-0"
    owned(leader, "StatefulSet", "vllm", "sts-leader")
    owned(worker_sts, "Pod", "vllm-0", "pod-leader-0", api="v1")
    workers = []
    for index in (1, 2):
        member = gpu_pod(f"vllm-0-{index}", "8", c="worker")
        owned(member, "StatefulSet", "vllm-0", "sts-workers-0")
        workers.append(member)
    audit = Audit()
    # As the cluster is listed: workloads first, then pods (webhook/sources/audit.py).
    add(audit, lws, "LeaderWorkerSet", api, policy_set, owner=True)
    add(audit, leader_sts, "StatefulSet", "apps/v1", policy_set, owner=True)
    add(audit, worker_sts, "StatefulSet", "apps/v1", policy_set, owner=True)
    for member in [leader, *workers]:
        add(audit, member, "Pod", "v1", policy_set, owner=False)
    (finding,) = audit.result().findings
    assert finding.owner == Ref(api, "LeaderWorkerSet", "ml", "vllm", "lws-1")
    assert finding.scope() == "template denied, 3 of 3 pod(s) denied"


def _knative_labels(service: str) -> dict[str, str]:
    """What knative/serving puts on a Revision's Deployment and pods: the Revision's labels
    (pkg/reconciler/revision/resources/meta.go makeLabels), which carry the Configuration's
    and, when a Service made it, the Service's name and uid
    (pkg/reconciler/configuration/resources/revision.go; the Configuration's come from
    pkg/reconciler/service/resources/configuration.go MakeConfiguration)."""
    return {
        "serving.knative.dev/service": service,
        "serving.knative.dev/serviceUID": f"ksvc-{service}",
        "serving.knative.dev/configuration": service,
        "serving.knative.dev/configurationUID": f"cfg-{service}",
        "serving.knative.dev/revision": f"{service}-00001",
        "serving.knative.dev/revisionUID": f"rev-{service}",
    }


def _knative_family(
    audit: Audit, policy_set: PolicySet, name: str, *, service_owner: dict[str, Any] | None
) -> None:
    """A Knative Service and what Knative makes of it: Configuration → Revision (not listed by
    the audit) → Deployment (controller: the Revision, pkg/reconciler/revision/resources/
    deploy.go MakeDeployment) → ReplicaSet → Pods."""
    labels = _knative_labels(name)
    template = gpu_pod("x", "8")
    del template["spec"]["containers"][0]["resources"]["requests"]
    ksvc = {
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "ml", "uid": f"ksvc-{name}"},
        "spec": {"template": {"metadata": {}, "spec": template["spec"]}},
    }
    if service_owner is not None:
        meta = service_owner["metadata"]
        owned(
            ksvc, service_owner["kind"], meta["name"], meta["uid"], api=service_owner["apiVersion"]
        )
    deployment = workload("Deployment", template, name=f"{name}-00001-deployment")
    deployment["metadata"].update(uid=f"dep-{name}", labels=dict(labels))
    owned(deployment, "Revision", f"{name}-00001", f"rev-{name}", api="serving.knative.dev/v1")
    replicaset = workload("ReplicaSet", template, name=f"{name}-00001-deployment-7c9")
    replicaset["metadata"].update(uid=f"rs-{name}", labels=dict(labels))
    owned(replicaset, "Deployment", f"{name}-00001-deployment", f"dep-{name}")
    add(audit, ksvc, "Service", "serving.knative.dev/v1", policy_set, owner=True)
    add(audit, deployment, "Deployment", "apps/v1", policy_set, owner=True)
    add(audit, replicaset, "ReplicaSet", "apps/v1", policy_set, owner=True)
    for index in range(2):
        member = gpu_pod(f"{name}-00001-deployment-7c9-{index}", "8")
        member["metadata"]["labels"] = dict(labels)
        owned(member, "ReplicaSet", replicaset["metadata"]["name"], f"rs-{name}")
        add(audit, member, "Pod", "v1", policy_set, owner=False)


def test_knative_pods_are_one_finding_on_their_service_not_the_revision() -> None:
    audit = Audit()
    _knative_family(audit, gpu_policies("4"), "web", service_owner=None)
    (finding,) = audit.result().findings
    assert finding.owner == Ref("serving.knative.dev/v1", "Service", "ml", "web", "ksvc-web")
    # The Service's template, the Revision's Deployment and its 2 pods.
    assert finding.scope() == "template denied, 2 of 2 pod(s) denied"


def test_kserve_serverless_pods_are_one_finding_on_the_inferenceservice() -> None:
    """KServe's serverless mode makes a Knative Service controlled by the InferenceService."""
    api = "serving.kserve.io/v1beta1"
    isvc: dict[str, Any] = {
        "apiVersion": api,
        "kind": "InferenceService",
        "metadata": {"name": "llm", "namespace": "ml", "uid": "isvc-1"},
        "spec": {"predictor": {"containers": [container("kserve-container", image=IMAGE)]}},
    }
    isvc["spec"]["predictor"]["containers"][0]["resources"] = {"limits": {GPU: "8"}}
    policy_set = gpu_policies("4")
    audit = Audit()
    add(audit, isvc, "InferenceService", api, policy_set, owner=True)
    _knative_family(audit, policy_set, "llm-predictor", service_owner=isvc)
    (finding,) = audit.result().findings
    assert finding.owner == Ref(api, "InferenceService", "ml", "llm", "isvc-1")
    assert finding.scope() == "template denied, 2 of 2 pod(s) denied"


def test_unknown_runtimes_are_counted_per_runtime_for_every_vendor() -> None:
    """One pod of each family whose runtime version nothing tells, one whose image names it:
    the audit counts the unknown ones by runtime, the same way for CUDA, ROCm and CANN."""
    audit = Audit()
    for name, image, resource in (
        ("cuda", "registry.example/team/cuda-app:1", GPU),
        ("cuda-2", "registry.example/team/cuda-app:2", GPU),
        ("rocm", "registry.example/team/rocm-app:1", "amd.com/gpu"),
        ("cann", "registry.example/team/npu-app:1", "huawei.com/npu"),
        ("known", "rocm/vllm:rocm7.0.0_vllm_0.10.2_20251006", "amd.com/gpu"),
    ):
        obj = pod(container("c", image=image, limits={resource: "1"}), name=name)
        add(audit, obj, "Pod", "v1", standard_policies(), owner=False)
    result = audit.result()
    assert result.to_json()["summary"]["unknownRuntimes"] == {"CUDA": 2, "CANN": 1, "ROCm": 1}
    assert result.unknown_text() == "CUDA 2, CANN 1, ROCm 1"
