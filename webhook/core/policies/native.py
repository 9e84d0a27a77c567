"""CRL rules as native Kubernetes policies (SPEC §9 `export-policies`): pure generation.

One ValidatingAdmissionPolicy reads every enabled CRL ConfigMap of `kube-public` as a
**param** (`paramKind: v1 ConfigMap`, binding `paramRef.selector` on the CRL labels), so an
edit of a CRL changes enforcement at once, with no re-export. Kubernetes facts this relies on
(read in the 1.36.2 source):

- A `paramRef.selector` matching several params evaluates the policy once per param, each
  with its own runtime budget, and every denial counts (staging/src/k8s.io/apiserver/pkg/
  admission/plugin/policy/validating/dispatcher.go: `for _, param := range params {
  ... hook.Evaluator.Validate(..., p, ..., celconfig.RuntimeCELCostBudget, ...)}`). No
  params and `parameterNotFoundAction: Allow`: nothing is evaluated (generic/
  policy_dispatcher.go, CollectParams).
- Only the first denial is shown: "ValidatingAdmissionPolicy '<p>' with binding '<b>' denied
  request: <message>" (validating/dispatcher.go, `deniedDecisions[0]`). So one validation per
  param carries every problem of that CRL's key, joined, in its messageExpression.
- The ValidatingAdmissionPolicy admission plugin runs before ValidatingAdmissionWebhook
  (pkg/kubeapiserver/options/plugins.go order), and the validating chain stops at the first
  error (apiserver pkg/admission/chain.go): when both the policy and the webhook deny, users
  see the policy's denial only, never two.

- While no binding names a policy with a built-in paramKind for one policy refresh, the API
  server stops that kind's param informer for good and every such policy keeps the params it
  held (kubernetes issue 130887, 1.36.2 included; fix pending in PR 141015): the policy and
  binding must be updated in place, never deleted and re-created (docs/operations/
  native-policies.md says what that means for Helm).

What one policy evaluation cannot see is decided at export: which keys make up a group (a
group is "used" when any of its keys is above zero, SPEC §3), read from the CRLs given to the
export. Adding, removing or disabling a key of a multi-key group needs a re-export.

An UPDATE passes untouched when its pod template is unchanged in what the webhook reads
(native_cel.unchanged, the copy of webhook.core.evaluation.updates `templates_equal`); the names
are the caller's, so two Helm releases install two policies.

The policy's CEL expressions (and the CEL environment they rely on) are built in
webhook.core.policies.native_cel; the cost model, and the export's refusal past the API
server's per-expression limit, are webhook.core.policies.native_cost.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.core.policies.crl import (
    CRL_NAMESPACE,
    LABEL_ENABLED,
    LABEL_TYPE,
    TYPE_VALUE,
    ResourceLimitation,
)
from webhook.core.policies.native_cel import UpdateReads, policy_variables, template, unchanged

# The default name of the policy and of its binding; the chart uses its release's full name
# (`<fullname>-crl`), so two releases never overwrite each other's objects.
DEFAULT_NAME = "gpu-webhook-crl"
API_VERSION = "admissionregistration.k8s.io/v1"

# What CEL cannot express, printed by the command and listed in docs/operations/native-policies.md.
NOT_EXPRESSED: tuple[str, ...] = (
    "defaults (defaultValue, requests fromLimits) are not applied: a policy only validates; "
    "a missing key that has a default is accepted, as the webhook would default it",
    "CUDA node affinity and compute-capability placement (need image facts and node labels)",
    "node inventory checks (a policy cannot read Nodes)",
    "registry facts (image CUDA versions from registries)",
    "DRA resource claims (a policy cannot read ResourceClaimTemplates)",
    "environment fixes and GPU access control",
    "operator workloads (Kubeflow, Ray, LWS, JobSet, Volcano, KServe, Knative): only Pods "
    "and Deployment, StatefulSet, DaemonSet, ReplicaSet, Job and CronJob templates",
    "group membership is fixed at export: re-export after adding, removing or disabling a "
    "key of a group with several keys",
    "an UPDATE that changes only the arguments a compute-capability rule reads or the pod's "
    "architecture passes (the webhook judges it again)",
    "two enabled CRLs with the same key: the webhook uses one, the policy enforces both",
)


@dataclass(frozen=True)
class Export:
    """The generated objects and what the export could not express."""

    objects: list[dict[str, Any]]
    groups: dict[str, list[str]]
    not_expressed: tuple[str, ...] = NOT_EXPRESSED
    notes: list[str] = field(default_factory=list)


def group_keys(policies: Iterable[ResourceLimitation]) -> dict[str, list[str]]:
    """group -> its keys, for groups of two or more keys (a one-key group needs no table)."""
    groups: dict[str, set[str]] = {}
    for policy in policies:
        groups.setdefault(policy.group, set()).add(policy.key)
    return {g: sorted(keys) for g, keys in sorted(groups.items()) if len(keys) > 1}


def policy(
    groups: Mapping[str, Sequence[str]], reads: UpdateReads, name: str = DEFAULT_NAME
) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy (the rules), reading one CRL ConfigMap per evaluation."""
    variables = [
        ("template", template("object")),
        ("oldTemplate", template("oldObject")),
        ("unchanged", unchanged(reads)),
        *policy_variables(groups),
    ]
    joined = "(variables.containerProblems + variables.initContainerProblems).join('; ')"
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/name": "gpu-admission-webhook"},
            "annotations": {
                "gpu-webhook.dev/groups": json.dumps(dict(groups), sort_keys=True),
            },
        },
        "spec": {
            # A CEL error (the cost limit, on an absurd object) denies: the policy is the
            # backstop of quotas, and a pod must not pass because it was made too big to check.
            "failurePolicy": "Fail",
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "operations": ["CREATE"],
                    },
                    {
                        "apiGroups": ["apps"],
                        "apiVersions": ["v1"],
                        "resources": ["deployments", "statefulsets", "daemonsets", "replicasets"],
                        "operations": ["CREATE", "UPDATE"],
                    },
                    {
                        "apiGroups": ["batch"],
                        "apiVersions": ["v1"],
                        "resources": ["jobs", "cronjobs"],
                        "operations": ["CREATE", "UPDATE"],
                    },
                ]
            },
            # SPEC §6: requests that pass untouched, as webhook/core/evaluation/updates.py decides.
            "matchConditions": [
                {
                    "name": "not-being-deleted",
                    "expression": "!has(object.metadata.deletionTimestamp)",
                },
                {
                    "name": "not-made-by-a-checked-owner",
                    "expression": (
                        "!(request.kind.kind in ['ReplicaSet', 'Job'] && "
                        "object.metadata.?ownerReferences.orValue([]).filter(r, "
                        "r.?controller.orValue(false)).exists(r, "
                        "(request.kind.kind == 'ReplicaSet' && r.kind == 'Deployment' && "
                        "r.apiVersion.startsWith('apps/')) || "
                        "(request.kind.kind == 'Job' && r.kind == 'CronJob' && "
                        "r.apiVersion.startsWith('batch/'))))"
                    ),
                },
            ],
            "variables": [{"name": n, "expression": e} for n, e in variables],
            "validations": [
                {
                    # An UPDATE that leaves the template as the webhook reads it passes
                    # untouched, as by the webhook (SPEC §6, updates.py `templates_equal`).
                    "expression": (
                        "variables.unchanged || !variables.valid || "
                        "(size(variables.containerProblems) == 0 && "
                        "size(variables.initContainerProblems) == 0)"
                    ),
                    # Kept under the API server's 5 KiB cap on an evaluated message
                    # (apiserver pkg/apis/cel/config.go MaxEvaluatedMessageExpressionSizeBytes).
                    "messageExpression": (
                        f"size({joined}) > 4000 ? {joined}.substring(0, 4000) + ' …' : {joined}"
                    ),
                    "message": "a CRL resource rule is broken (see the webhook's review)",
                    "reason": "Forbidden",
                }
            ],
        },
    }


def binding(
    exempt_namespaces: Sequence[str] = ("kube-system",),
    validation_actions: Sequence[str] = ("Deny",),
    name: str = DEFAULT_NAME,
) -> dict[str, Any]:
    """The binding: every enabled CRL ConfigMap of kube-public is a param."""
    spec: dict[str, Any] = {
        "policyName": name,
        "validationActions": list(validation_actions),
        "paramRef": {
            "namespace": CRL_NAMESPACE,
            "selector": {"matchLabels": {LABEL_TYPE: TYPE_VALUE, LABEL_ENABLED: "true"}},
            # No CRL: nothing to enforce, as for the webhook.
            "parameterNotFoundAction": "Allow",
        },
    }
    if exempt_namespaces:
        spec["matchResources"] = {
            "namespaceSelector": {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "NotIn",
                        "values": sorted(set(exempt_namespaces)),
                    }
                ]
            }
        }
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/name": "gpu-admission-webhook"},
        },
        "spec": spec,
    }


def export(
    policies: Iterable[ResourceLimitation],
    *,
    reads: UpdateReads,
    exempt_namespaces: Sequence[str] = ("kube-system",),
    name: str = DEFAULT_NAME,
) -> Export:
    """The policy and its binding (both named `name`) for a set of CRL policies (their group
    table); `reads` is what an UPDATE compares (updates.py `update_reads` of the config)."""
    groups = group_keys(policies)
    return Export([policy(groups, reads, name), binding(exempt_namespaces, name=name)], groups)
