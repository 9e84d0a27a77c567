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

from tests.helpers import GPU, VCORE, apply, container, node_terms, pod, run
from webhook.core.config import load_config
from webhook.core.rules.cuda import compatible
from webhook.core.rules.versions import CudaVersion

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


def injected(runtime: CudaVersion, vgpu: bool, skew: int) -> list[Mapping[str, Any]]:
    gpu = container(image="busybox", limits={GPU: "1"}, requests={GPU: "1"})
    share = container(image="busybox", limits={VCORE: "50"})
    obj = pod(share if vgpu else gpu, annotations={"features.alauda.io/cuda-version": str(runtime)})
    decision = run(obj, config=load_config({"maxMajorSkew": skew}))
    terms = node_terms(apply(decision))
    assert isinstance(terms, list)
    return terms


LABEL_VALUES = range(21)
RUNTIMES = [CudaVersion(a, b) for a in (1, 2, 9, 10, 11, 12, 19, 20) for b in (0, 1, 4, 9, 20)]


@pytest.mark.parametrize("skew", [0, 1, 2, 3])
@pytest.mark.parametrize("vgpu", [False, True])
def test_terms_select_exactly_the_compatible_drivers(vgpu: bool, skew: int) -> None:
    for runtime in RUNTIMES:
        terms = injected(runtime, vgpu, skew)
        for major in LABEL_VALUES:
            for minor in LABEL_VALUES:
                want = compatible(CudaVersion(major, minor), runtime, vgpu=vgpu, skew=skew)
                for labels in (
                    {MAJOR: str(major), MINOR: str(minor)},
                    {MAJOR: f"{major:02d}", MINOR: f"{minor:02d}"},
                    {MAJOR: f"{major:03d}", MINOR: str(minor)},
                ):
                    assert selects(terms, labels) is want, (runtime, labels, terms)


def test_nodes_without_labels_or_with_words_are_never_selected() -> None:
    terms = injected(CudaVersion(12, 4), vgpu=False, skew=1)
    for labels in ({}, {MAJOR: "12"}, {MAJOR: "twelve", MINOR: "4"}, {MINOR: "9"}):
        assert not selects(terms, labels)


@pytest.mark.parametrize("skew", [0, 1, 2])
def test_two_containers_select_the_intersection(skew: int) -> None:
    for first in (CudaVersion(11, 8), CudaVersion(12, 0), CudaVersion(12, 4)):
        for second in (CudaVersion(11, 2), CudaVersion(12, 4), CudaVersion(13, 1)):
            obj = pod(
                container("a", "busybox", limits={GPU: "1"}, requests={GPU: "1"}),
                container("b", "busybox", limits={VCORE: "50"}),
            )
            obj["spec"]["containers"][0]["env"] = [{"name": "CUDA_VERSION", "value": str(first)}]
            obj["spec"]["containers"][1]["env"] = [{"name": "CUDA_VERSION", "value": str(second)}]
            decision = run(obj, config=load_config({"maxMajorSkew": skew}))
            both = [
                CudaVersion(a, b)
                for a in LABEL_VALUES
                for b in LABEL_VALUES
                if compatible(CudaVersion(a, b), first, vgpu=False, skew=skew)
                and compatible(CudaVersion(a, b), second, vgpu=True, skew=skew)
            ]
            if not both:
                assert not decision.allowed
                assert node_terms(apply(decision)) is None
                continue
            terms = node_terms(apply(decision))
            for a in LABEL_VALUES:
                for b in LABEL_VALUES:
                    labels = {MAJOR: f"{a:02d}", MINOR: str(b)}
                    assert selects(terms, labels) is (CudaVersion(a, b) in both)
