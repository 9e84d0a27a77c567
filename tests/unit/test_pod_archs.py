"""Which architectures a pod may run on, for its registry lookups: nodeSelector, else the
required node affinity's terms (ORed; expressions ANDed; empty terms match nothing), else
amd64 (k8s.io/component-helpers scheduling/corev1/nodeaffinity)."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.core.images.facts import MAX_ARCHS, pod_archs

ARCH = "kubernetes.io/arch"
BETA = "beta.kubernetes.io/arch"


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


def spec(*terms: Any, **extra: Any) -> dict[str, Any]:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }
    return {"affinity": affinity, **extra}


def term(*exprs: dict[str, Any]) -> dict[str, Any]:
    return {"matchExpressions": list(exprs)}


@pytest.mark.parametrize(
    ("pod_spec", "archs"),
    [
        ({}, ("amd64",)),
        ({"nodeSelector": {ARCH: "arm64"}}, ("arm64",)),
        ({"nodeSelector": {BETA: "arm64"}}, ("arm64",)),
        # nodeSelector must hold too: it decides even when the affinity allows more.
        (spec(term(expr(ARCH, "In", "amd64", "arm64")), nodeSelector={ARCH: "arm64"}), ("arm64",)),
        (spec(term(expr(ARCH, "In", "arm64"))), ("arm64",)),
        (spec(term(expr(BETA, "In", "arm64"))), ("arm64",)),
        (spec(term(expr(ARCH, "In", "arm64")), term(expr(ARCH, "In", "arm64"))), ("arm64",)),
        # Terms are ORed: the union.
        (
            spec(term(expr(ARCH, "In", "arm64")), term(expr(ARCH, "In", "amd64"))),
            ("amd64", "arm64"),
        ),
        (spec(term(expr(ARCH, "In", "arm64", "amd64"))), ("amd64", "arm64")),
        # Expressions of a term are ANDed: In ∩ In, minus NotIn.
        (
            spec(term(expr(ARCH, "In", "amd64", "arm64"), expr(ARCH, "In", "arm64", "ppc64le"))),
            ("arm64",),
        ),
        (spec(term(expr(ARCH, "In", "amd64", "arm64"), expr(ARCH, "NotIn", "amd64"))), ("arm64",)),
        # An empty term matches no node: skipped.
        (spec({}, term(expr(ARCH, "In", "arm64"))), ("arm64",)),
        # A term that does not pin the arch with In lets any architecture in: amd64.
        (spec(term(expr(ARCH, "In", "arm64")), term(expr("zone", "In", "a"))), ("amd64",)),
        (spec(term(expr(ARCH, "NotIn", "amd64"))), ("amd64",)),
        (spec(term(expr(ARCH, "Exists"))), ("amd64",)),
        (spec({"matchFields": [expr("metadata.name", "In", "node-1")]}), ("amd64",)),
        # A term no node can match (In ∩ In empty) adds nothing; none left: amd64.
        (spec(term(expr(ARCH, "In", "amd64"), expr(ARCH, "In", "arm64"))), ("amd64",)),
        # Malformed shapes are not read as an architecture.
        (
            spec(term(expr(ARCH, "In")), term({"key": ARCH, "operator": "In", "values": "arm64"})),
            ("amd64",),
        ),
        ({"affinity": {"nodeAffinity": "x"}}, ("amd64",)),
    ],
)
def test_the_architectures_a_pod_may_run_on(
    pod_spec: dict[str, Any], archs: tuple[str, ...]
) -> None:
    assert pod_archs(pod_spec) == archs


# Values from the pod are user input (issue 29): only architecture names cause lookups, each
# once, at most MAX_ARCHS of them, the GPU architectures first.


def test_sixty_four_architectures_make_at_most_max_archs_lookups() -> None:
    known = ["386", "amd64", "arm", "arm64", "loong64", "mips64le", "ppc64le", "riscv64", "s390x"]
    values = [*known, *(f"arch{i}" for i in range(55))]
    archs = pod_archs(spec(term(expr(ARCH, "In", *values))))
    assert MAX_ARCHS == 4
    assert archs == ("386", "amd64", "arm64", "ppc64le")  # the GPU ones, then by name


def test_values_that_are_no_architecture_name_cause_no_lookup() -> None:
    huge = "a" * 65536
    assert pod_archs(spec(term(expr(ARCH, "In", huge, "arm64", "Arm64", "arm64 ", "")))) == (
        "arm64",
    )
    assert pod_archs(spec(term(expr(ARCH, "In", huge)))) == ("amd64",)
    assert pod_archs({"nodeSelector": {ARCH: huge}}) == ("amd64",)
    assert pod_archs(spec(term(expr(ARCH, "In", *["arm64"] * 1000)))) == ("arm64",)
