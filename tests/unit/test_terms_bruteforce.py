"""Brute force: the injected node terms select exactly the compatible drivers (SPEC §4).

`selects` is a small node-affinity matcher following Kubernetes: terms ORed, expressions in a
term ANDed, an empty term matches nothing; In/NotIn compare strings; Gt/Lt need exactly one
value and compare integers parsed from the label value (apimachinery pkg/labels selector.go,
Requirement.Matches: a missing label or an unparsable value does not match).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest

from tests.helpers import GPU, VCORE, apply, container, node_terms, pod, preferred_terms, run
from webhook.core.base.versions import CudaVersion
from webhook.core.config.model import load_config

MAJOR, MINOR = "cuda-major-version", "cuda-minor-version"
_GO_INT = re.compile(r"[+-]?[0-9]+")


def _matches(e: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = e["key"], e["operator"], e.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    assert op in ("Gt", "Lt") and len(values) == 1, e  # the API server rejects anything else
    if key not in labels or not _GO_INT.fullmatch(labels[key]):
        return False
    left, right = int(labels[key]), int(values[0])
    return left > right if op == "Gt" else left < right


def selects(terms: list[Mapping[str, Any]], labels: Mapping[str, str]) -> bool:
    for term in terms:
        exprs = term.get("matchExpressions") or []
        if term.get("matchFields"):
            continue  # no node name in this test: a term with fields never matches here
        if exprs and all(_matches(e, labels) for e in exprs):
            return True
    return False


def score(preferred: list[Mapping[str, Any]] | None, labels: Mapping[str, str]) -> int:
    """The NodeAffinity score before normalisation: the summed weights of the preferred terms
    the node matches (component-helpers nodeaffinity PreferredSchedulingTerms.Score)."""
    total = 0
    for term in preferred or ():
        assert 1 <= term["weight"] <= 100  # the API server's range
        exprs = term["preference"].get("matchExpressions") or []
        if exprs and all(_matches(e, labels) for e in exprs):
            total += term["weight"]
    return total


def required_ok(
    driver: CudaVersion, needs: list[tuple[CudaVersion, bool]], skew: int | None
) -> bool:
    """The model of the required rule: D ≥ R for every container; vGPU: the same major; with
    majorSkew: require (`skew` set), a physical GPU's driver at most `skew` majors newer."""
    for runtime, vgpu in needs:
        if driver < runtime:
            return False
        if vgpu and driver.major != runtime.major:
            return False
        if not vgpu and skew is not None and driver.major > runtime.major + skew:
            return False
    return True


def recommended(driver: CudaVersion, needs: list[tuple[CudaVersion, bool]], skew: int) -> bool:
    """The reference's Recommended rule for every container, D.major − R.major ≤ skew (vGPU:
    its required rule)."""
    return required_ok(driver, needs, skew) and all(
        driver.major <= runtime.major + skew for runtime, _ in needs
    )


def check(
    decision_obj: Mapping[str, Any], needs: list[tuple[CudaVersion, bool]], skew: int, require: bool
) -> None:
    """Every label value pair (also zero-padded): the required terms select exactly the model's
    required set; the preferred terms score exactly its recommended part (or nothing, when no
    node or every node is recommended)."""
    terms = node_terms(decision_obj)
    prefs = preferred_terms(decision_obj)
    assert isinstance(terms, list)
    grid = [CudaVersion(a, b) for a in LABEL_VALUES for b in LABEL_VALUES]
    fits = [v for v in grid if required_ok(v, needs, skew if require else None)]
    best = {v for v in fits if recommended(v, needs, skew)}
    if prefs is None:
        # nothing to prefer: every fitting driver is recommended, or none is
        assert not best or len(best) == len(fits), (needs, skew)
    for version in grid:
        for labels in (
            {MAJOR: str(version.major), MINOR: str(version.minor)},
            {MAJOR: f"{version.major:03d}", MINOR: f"{version.minor:02d}"},  # padded: Gt/Lt
        ):
            assert selects(terms, labels) is (version in fits), (needs, labels, terms)
            if prefs is not None and version in fits:
                assert (score(prefs, labels) > 0) is (version in best), (needs, labels, prefs)


def evaluated(obj: dict[str, Any], skew: int, require: bool) -> Any:
    config = load_config({"maxMajorSkew": skew, "majorSkew": "require" if require else "prefer"})
    return run(obj, config=config)


LABEL_VALUES = range(21)
RUNTIMES = [CudaVersion(a, b) for a in (1, 2, 9, 10, 11, 12, 19, 20) for b in (0, 1, 4, 9, 20)]


@pytest.mark.parametrize("require", [False, True])
@pytest.mark.parametrize("skew", [0, 1, 2, 3])
@pytest.mark.parametrize("vgpu", [False, True])
def test_terms_select_exactly_the_compatible_drivers(vgpu: bool, skew: int, require: bool) -> None:
    for runtime in RUNTIMES:
        gpu = container(image="busybox", limits={GPU: "1"}, requests={GPU: "1"})
        share = container(image="busybox", limits={VCORE: "50"})
        annotations = {"features.alauda.io/cuda-version": str(runtime)}
        decision = evaluated(pod(share if vgpu else gpu, annotations=annotations), skew, require)
        check(apply(decision), [(runtime, vgpu)], skew, require)


def test_nodes_without_labels_or_with_words_are_never_selected() -> None:
    obj = pod(
        container(image="busybox", limits={GPU: "1"}, requests={GPU: "1"}),
        annotations={"features.alauda.io/cuda-version": "12.4"},
    )
    mutated = apply(run(obj))
    terms, prefs = node_terms(mutated), preferred_terms(mutated)
    for labels in ({}, {MAJOR: "12"}, {MAJOR: "twelve", MINOR: "4"}, {MINOR: "9"}):
        assert not selects(terms, labels)
    for labels in ({}, {MAJOR: "twelve", MINOR: "4"}, {MINOR: "9"}):
        assert score(prefs, labels) == 0


@pytest.mark.parametrize("require", [False, True])
@pytest.mark.parametrize("skew", [0, 1, 2])
def test_two_containers_select_the_intersection(skew: int, require: bool) -> None:
    """A physical GPU container and a vGPU one, or two physical GPU containers."""
    for first in (CudaVersion(11, 8), CudaVersion(12, 0), CudaVersion(12, 4)):
        for second in (CudaVersion(11, 2), CudaVersion(12, 4), CudaVersion(13, 1)):
            for second_vgpu in (False, True):
                obj = pod(
                    container("a", "busybox", limits={GPU: "1"}, requests={GPU: "1"}),
                    container(
                        "b",
                        "busybox",
                        limits={VCORE: "50"} if second_vgpu else {GPU: "1"},
                        requests=None if second_vgpu else {GPU: "1"},
                    ),
                )
                for c, version in zip(obj["spec"]["containers"], (first, second), strict=True):
                    c["env"] = [{"name": "CUDA_VERSION", "value": str(version)}]
                decision = evaluated(obj, skew, require)
                needs = [(first, False), (second, second_vgpu)]
                grid = [CudaVersion(a, b) for a in LABEL_VALUES for b in LABEL_VALUES]
                if not any(required_ok(v, needs, skew if require else None) for v in grid):
                    assert not decision.allowed
                    assert node_terms(apply(decision)) is None
                    continue
                assert decision.allowed
                check(apply(decision), needs, skew, require)
