"""Audit findings (SPEC §6): what was found for one top owner, and an audit's whole result.

A finding keeps each distinct problem once, with the number of pods it was found in and
whether the owner's own template has it; the result is the findings sorted, with the counts of
what was evaluated, skipped and finished. Both give the JSON `audit -o json` prints, and
webhook.core.audit.reports turns them into policy reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from webhook.core.audit.owners import Ref

SOURCE = "gpu-admission-webhook"
# Distinct problems kept per finding (a template's pods share theirs; this only bounds a
# pathological owner whose pods all differ); the rest is counted.
MAX_PROBLEMS = 50


@dataclass
class Problem:
    """One distinct violation (or change) and where it was found among an owner's objects."""

    policy: str
    rule: str
    message: str  # without the object's own reference, which the finding names
    pods: int = 0  # pods it was found in
    in_owner: bool = False  # found in the owner's own template
    example: str = ""  # the first pod it was found in

    def merge(self, other: Problem) -> None:
        self.pods += other.pods
        self.in_owner = self.in_owner or other.in_owner
        self.example = self.example or other.example


@dataclass
class Finding:
    """Everything the audit found for one top owner (or a Pod without one)."""

    owner: Ref
    denied: dict[tuple[str, str, str], Problem] = field(default_factory=dict)
    changes: dict[tuple[str, str, str], Problem] = field(default_factory=dict)
    # GPU access findings admission only warns about (gpuAccess warn/off): denied ones are in
    # `denied` like every violation.
    access: dict[tuple[str, str, str], Problem] = field(default_factory=dict)
    pods: int = 0  # pods evaluated under this owner
    pods_denied: int = 0
    pods_changed: int = 0
    owner_evaluated: bool = False  # the owner's own object was listed and evaluated
    owner_denied: bool = False
    more: int = 0  # distinct problems past MAX_PROBLEMS

    @property
    def is_pod(self) -> bool:
        return self.owner.kind == "Pod" and self.owner.group == ""

    def add_problem(self, table: dict[tuple[str, str, str], Problem], problem: Problem) -> None:
        key = (problem.policy, problem.rule, problem.message)
        held = table.get(key)
        if held is not None:
            held.merge(problem)
        elif len(table) < MAX_PROBLEMS:
            table[key] = problem
        else:
            self.more += 1

    def merge(self, other: Finding) -> None:
        for problem in other.denied.values():
            self.add_problem(self.denied, problem)
        for problem in other.changes.values():
            self.add_problem(self.changes, problem)
        for problem in other.access.values():
            self.add_problem(self.access, problem)
        self.pods += other.pods
        self.pods_denied += other.pods_denied
        self.pods_changed += other.pods_changed
        self.owner_evaluated = self.owner_evaluated or other.owner_evaluated
        self.owner_denied = self.owner_denied or other.owner_denied
        self.more += other.more

    def scope(self) -> str:
        """What was evaluated: `template, 3 of 3 pods denied` style, for text and reports."""
        if self.is_pod:
            return "the pod"
        parts = []
        if self.owner_evaluated:
            parts.append("template denied" if self.owner_denied else "template allowed")
        if self.pods:
            parts.append(f"{self.pods_denied} of {self.pods} pod(s) denied")
            if self.pods_changed:
                parts.append(f"{self.pods_changed} of {self.pods} would change")
        return ", ".join(parts) or "no pods"

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.owner.namespace,
            "apiVersion": self.owner.api_version,
            "kind": self.owner.kind,
            "name": self.owner.name,
            "denied": bool(self.denied),
            "pods": self.pods,
            "podsDenied": self.pods_denied,
            "podsChanged": self.pods_changed,
            "templateEvaluated": self.owner_evaluated,
            "templateDenied": self.owner_denied,
            "violations": [_problem_json(p) for p in self.denied.values()],
            "changes": [_problem_json(p) for p in self.changes.values()],
            "gpuAccess": [_problem_json(p) for p in self.access.values()],
            "moreProblems": self.more,
        }


def _problem_json(problem: Problem) -> dict[str, Any]:
    return {
        "policy": problem.policy,
        "rule": problem.rule,
        "message": problem.message,
        "pods": problem.pods,
        "template": problem.in_owner,
        "examplePod": problem.example,
    }


def policy_name(configmap: str) -> str:
    """A violation's policy: its CRL ConfigMap's name (CRLs all live in kube-public), or the
    webhook itself for rules that are not a CRL's (CUDA placement, object shape)."""
    return configmap.rpartition("/")[2] if configmap else SOURCE


@dataclass(frozen=True)
class AuditResult:
    findings: tuple[Finding, ...]  # sorted by namespace, kind, name
    workloads: int  # workload objects evaluated (templates)
    pods: int  # pods evaluated
    finished_pods: int  # pods skipped because they will not run again
    skipped: int = 0  # objects admission lets pass unevaluated (exempt namespace, ...)
    notes: tuple[str, ...] = ()
    # (runtime, containers): the pods' containers whose runtime version (CUDA, ROCm, CANN)
    # nothing told, where placement would have used it; CUDA first, then by name.
    runtime_unknown: tuple[tuple[str, int], ...] = ()

    def unknown_text(self) -> str:
        """`CUDA 2, ROCm 1`: the containers whose runtime is unknown, per runtime."""
        return ", ".join(f"{runtime} {count}" for runtime, count in self.runtime_unknown)

    @property
    def denied(self) -> list[Finding]:
        return [f for f in self.findings if f.denied]

    @property
    def changed(self) -> list[Finding]:
        return [f for f in self.findings if f.changes]

    @property
    def access(self) -> list[Finding]:
        return [f for f in self.findings if f.access]

    def to_json(self) -> dict[str, Any]:
        return {
            "summary": {
                "denied": len(self.denied),
                "changed": len(self.changed),
                "gpuAccess": len(self.access),
                "workloads": self.workloads,
                "pods": self.pods,
                "finishedPods": self.finished_pods,
                "skipped": self.skipped,
                "unknownRuntimes": dict(self.runtime_unknown),
            },
            "findings": [f.to_json() for f in self.findings],
            "notes": list(self.notes),
        }
