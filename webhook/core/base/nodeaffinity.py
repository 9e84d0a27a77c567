"""A pod's required node affinity read as the scheduler reads it (k8s.io/component-helpers
scheduling/corev1/nodeaffinity): shared by placement and by the architecture a lookup is for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.base.shapes import is_mapping


def required_terms(spec: Mapping[str, Any]) -> list[Any] | None:
    affinity = spec.get("affinity")
    node = affinity.get("nodeAffinity") if is_mapping(affinity) else None
    required = (
        node.get("requiredDuringSchedulingIgnoredDuringExecution") if is_mapping(node) else None
    )
    terms = required.get("nodeSelectorTerms") if is_mapping(required) else None
    return terms if isinstance(terms, list) else None


def is_empty_term(term: Any) -> bool:
    """A null or empty node selector term matches no node (k8s.io/component-helpers
    scheduling/corev1/nodeaffinity isEmptyNodeSelectorTerm)."""
    if not is_mapping(term):
        return True
    return not term.get("matchExpressions") and not term.get("matchFields")
