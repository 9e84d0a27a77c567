"""The node labels and pod annotations the webhook config names: CUDA label schemes, node
selector terms (as the API server validates and matches them), and the pod annotations read."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import field_validator, model_validator

from webhook.core.config.fields import ConfigModel, label_key_problem

# Pod annotations the webhook reads (SPEC §4, §5), and the one it writes.
ANNOTATION_CUDA_VERSION = "features.alauda.io/cuda-version"
ANNOTATION_CUDA_AFFINITY = "features.alauda.io/cuda-affinity"
ANNOTATION_ENV_FIXES = "features.alauda.io/env-fixes"
ANNOTATION_MIN_COMPUTE = "features.alauda.io/min-compute-capability"
# A pod may ask for the stricter `backward` rule where the cluster says `minorVersion`.
ANNOTATION_CUDA_COMPATIBILITY = "features.alauda.io/cuda-compatibility"
# Written by the webhook, never read as a setting: the digest of the node affinity it injected
# into a pod template (SPEC §4 "The webhook's own terms are its own"; placement/injection.py).
ANNOTATION_INJECTED_AFFINITY = "features.alauda.io/injected-node-affinity"


# GFD's labels for the driver's own version, e.g. 450.80.02 -> "450", "80", "02" (NVIDIA
# k8s-device-plugin internal/lm/nvml.go newVersionLabeler: the "new labels"; the deprecated
# nvidia.com/cuda.driver.major/minor/rev carry the same values). The major is also the default
# driverBranchLabel. Read for minorVersion on CUDA 11.0 nodes (placement/cuda.py).
DRIVER_VERSION_LABELS = (
    "nvidia.com/cuda.driver-version.major",
    "nvidia.com/cuda.driver-version.minor",
    "nvidia.com/cuda.driver-version.revision",
)


class CudaLabels(ConfigModel):
    """A label scheme: node label keys carrying a version's major and minor number."""

    # How messages, `review --nodes` and /inventory name the scheme ("": by its major key).
    name: str = ""
    # The node label whose value is the major number (a label key, validated as the API does).
    major: str = "cuda-major-version"
    # The node label whose value is the minor number.
    minor: str = "cuda-minor-version"

    @field_validator("major", "minor")
    @classmethod
    def _key(cls, value: str) -> str:
        problem = label_key_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @property
    def label(self) -> str:
        """How messages and /inventory name the scheme."""
        return self.name or self.major


LabelScheme = CudaLabels

# Label values (apimachinery validation.go IsValidLabelValue): empty, or ≤ 63 characters that
# start and end with an alphanumeric and hold only alphanumerics, "-", "_" and ".".
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_INTEGER = re.compile(r"-?[0-9]{1,18}")


class NodeSelectorRequirement(ConfigModel):
    """One expression of a node selector term (k8s.io/api core/v1 NodeSelectorRequirement),
    validated as the API server validates it (pkg/apis/core/validation
    ValidateNodeSelectorRequirement): In/NotIn need values, Exists/DoesNotExist take none,
    Gt/Lt exactly one integer."""

    # The node label the expression reads.
    key: str
    # How the label's value is compared, with the API server's meaning of each operator.
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    # The values compared with: In/NotIn one or more, Exists/DoesNotExist none, Gt/Lt one integer.
    values: tuple[str, ...] = ()

    @field_validator("key")
    @classmethod
    def _key(cls, value: str) -> str:
        problem = label_key_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _values(self) -> NodeSelectorRequirement:
        op, values = self.operator, self.values
        if op in ("In", "NotIn") and not values:
            raise ValueError(f"{self.key}: operator {op} needs at least one value")
        if op in ("Exists", "DoesNotExist") and values:
            raise ValueError(f"{self.key}: operator {op} takes no values")
        if op in ("Gt", "Lt") and (len(values) != 1 or not _INTEGER.fullmatch(values[0])):
            raise ValueError(f"{self.key}: operator {op} takes exactly one integer value")
        for v in values:
            if len(v) > 63 or not _LABEL_VALUE.fullmatch(v):
                raise ValueError(f"{self.key}: {v!r} is not a valid label value")
        return self

    def as_expression(self) -> dict[str, Any]:
        """As written in a pod's node affinity (no `values` for Exists/DoesNotExist: the API
        server stores an empty list as absent)."""
        expr: dict[str, Any] = {"key": self.key, "operator": self.operator}
        if self.values:
            expr["values"] = list(self.values)
        return expr

    def matches(self, labels: Mapping[str, str]) -> bool:
        """apimachinery pkg/labels selector.go Requirement.Matches: NotIn and DoesNotExist
        match a node without the label; Gt/Lt compare integers (strconv.ParseInt)."""
        value = labels.get(self.key)
        op = self.operator
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        if op == "NotIn":
            return value is None or value not in self.values
        if value is None:
            return False
        if op == "In":
            return value in self.values
        if not _INTEGER.fullmatch(value):
            return False
        bound = int(self.values[0])
        return int(value) > bound if op == "Gt" else int(value) < bound


class NodeSelectorTerm(ConfigModel):
    """A node selector term (its expressions ANDed), as the config names a set of nodes."""

    # The expressions, all of which a node must satisfy (at least one).
    match_expressions: tuple[NodeSelectorRequirement, ...]

    @field_validator("match_expressions")
    @classmethod
    def _nonempty(
        cls, value: tuple[NodeSelectorRequirement, ...]
    ) -> tuple[NodeSelectorRequirement, ...]:
        if not value:
            raise ValueError("an empty node selector term matches no node")
        return value

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(e.matches(labels) for e in self.match_expressions)

    @property
    def keys(self) -> frozenset[str]:
        return frozenset(e.key for e in self.match_expressions)


# Nodes advertise the highest CUDA version their driver supports under one of these (SPEC §4):
# the reference's manual labels, NVIDIA GPU Feature Discovery's, and GFD's older ones.
DEFAULT_CUDA_SCHEMES: tuple[CudaLabels, ...] = (
    CudaLabels(name="manual", major="cuda-major-version", minor="cuda-minor-version"),
    CudaLabels(
        name="gfd",
        major="nvidia.com/cuda.runtime-version.major",
        minor="nvidia.com/cuda.runtime-version.minor",
    ),
    CudaLabels(
        name="gfd-legacy",
        major="nvidia.com/cuda.runtime.major",
        minor="nvidia.com/cuda.runtime.minor",
    ),
)
# GPU Feature Discovery's compute capability labels (e.g. 8 and 0 on an A100).
DEFAULT_COMPUTE_LABELS = CudaLabels(
    name="gfd-compute", major="nvidia.com/gpu.compute.major", minor="nvidia.com/gpu.compute.minor"
)
