"""The parts of the webhook config: label schemes, image and compute-capability rules, env-fix
rules, workload kinds; with the shared validation of label keys, regexes and versions."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from webhook.core.base.errors import ManifestError
from webhook.core.base.manifests import load_yaml_documents
from webhook.core.base.versions import CudaVersion
from webhook.core.images.knowledge import ImageKnowledge
from webhook.core.kinds.registry import Form, TemplateRule, WorkloadKind, rule, virtual_container

ANNOTATION_CUDA_VERSION = "features.alauda.io/cuda-version"
ANNOTATION_CUDA_AFFINITY = "features.alauda.io/cuda-affinity"
ANNOTATION_ENV_FIXES = "features.alauda.io/env-fixes"
ANNOTATION_MIN_COMPUTE = "features.alauda.io/min-compute-capability"
# A pod may ask for the stricter `backward` rule where the cluster says `minorVersion`.
ANNOTATION_CUDA_COMPATIBILITY = "features.alauda.io/cuda-compatibility"
# Written by the webhook, never read as a setting: the digest of the node affinity it injected
# into a pod template (SPEC §4 "The webhook's own terms are its own"; core/injection).
ANNOTATION_INJECTED_AFFINITY = "features.alauda.io/injected-node-affinity"

# Regexes searched in the normalised image reference (registry `docker.io/`, `library/` and the
# digest removed). Each must define the named groups `major` and `minor`; the first match wins.
# They are written so a search is linear in the reference length: every candidate start is a
# literal (`/cuda:`, `:` or `/`), and what follows it stays inside one `:`/`/`-free segment, so
# the segments scanned from different starts never overlap (no `.*` to backtrack over).
#
# The tag patterns come first (a tag is the more specific of the two). The repository path
# patterns start at a `/`, so they only ever read the components after the first one: the
# registry host (`cuda12-registry.corp:5000/x`, `registry.cu121.example.com/x`) is always the
# first component (distribution/reference normalize.go splitDockerDomain: a first component
# with `.` or `:`, or `localhost`, is the domain), and is never taken for a CUDA version.
DEFAULT_IMAGE_PATTERNS: tuple[str, ...] = (
    # nvidia/cuda:12.4.1-runtime-ubuntu22.04, nvcr.io/nvidia/cuda:11.8.0-base
    # (only repositories named "cuda": other tags like 3.3.9-3.6.1 are not CUDA versions)
    r"(?:^|/)cuda:(?P<major>\d{1,2})\.(?P<minor>\d{1,2})(?:\.\d+)?(?:[-_.]|$)",
    # pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime, paddle:2.6.1-gpu-cuda12.0-cudnn8.9,
    # ...-cuda-11.8-..., ..._cuda11.8
    r":(?:[^:/]*[-_.])?cuda[-_]?(?P<major>\d{1,2})\.(?P<minor>\d{1,2})(?:[-_.]|$)",
    # ...:cu121, ...:2.1.0-cu118-py310 (PyTorch wheel-style tags)
    r":(?:[^:/]*[-_.])?cu(?P<major>1\d)(?P<minor>\d)(?:[-_.]|$)",
    # The same spellings in a repository path component: team/train-cuda-11.8:v3,
    # team/app_cuda11.8, .../huggingface-text-generation-inference-cu124.2-3.ubuntu2204.py311
    r"/(?:[^:/]*[-_.])?cuda[-_]?(?P<major>\d{1,2})\.(?P<minor>\d{1,2})(?=[-_./:]|$)",
    r"/(?:[^:/]*[-_.])?cu(?P<major>1\d)(?P<minor>\d)(?=[-_./:]|$)",
)

# Label keys (apimachinery pkg/util/validation/validation.go IsQualifiedName): an optional
# DNS-1123 subdomain prefix (≤ 253 characters) and "/", then a name of ≤ 63 characters that
# starts and ends with an alphanumeric and holds only alphanumerics, "-", "_" and ".".
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def label_key_problem(key: str) -> str:
    """'' for a valid Kubernetes label key, else why it is not one."""
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return f"{key!r} is not a valid label key: the prefix before '/' is empty"
    if "/" in prefix:
        return f"{key!r} is not a valid label key: it may contain one '/' at most"
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return (
            f"{key!r} is not a valid label key: the prefix must be a lowercase DNS subdomain "
            "of at most 253 characters"
        )
    if len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        return (
            f"{key!r} is not a valid label key: the name must be at most 63 alphanumerics, "
            "'-', '_' or '.', starting and ending with an alphanumeric"
        )
    return ""


def _regex_problem(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        return f"not a valid regular expression ({exc}): {value!r}"
    return ""


def _valid_regex(value: str) -> str:
    problem = _regex_problem(value)
    if problem:
        raise ValueError(problem)
    return value


# A config field holding a regular expression: compiled (and refused) when the config loads.
Regex = Annotated[str, AfterValidator(_valid_regex)]


def _version_problem(value: str, what: str) -> str:
    version = CudaVersion.parse(value)
    if version is None or not re.fullmatch(r"[0-9]{1,6}(\.[0-9]{1,6}){0,2}", value):
        return f"{what} must look like 12.4 or 12.4.1, got {value!r}"
    if not version.plausible:
        return f"{what} {value!r} is not plausible (1.0 to 99.x)"
    return ""


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )


class CudaLabels(_Model):
    """A label scheme: node label keys carrying a version's major and minor number."""

    name: str = ""
    major: str = "cuda-major-version"
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


class NodeSelectorRequirement(_Model):
    """One expression of a node selector term (k8s.io/api core/v1 NodeSelectorRequirement),
    validated as the API server validates it (pkg/apis/core/validation
    ValidateNodeSelectorRequirement): In/NotIn need values, Exists/DoesNotExist take none,
    Gt/Lt exactly one integer."""

    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
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


class NodeSelectorTerm(_Model):
    """A node selector term (its expressions ANDed), as the config names a set of nodes."""

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


class ImageCudaEntry(_Model):
    """Admin table entry: images matching `image` (shell-style glob) need CUDA `cuda_version`."""

    image: str
    cuda_version: str

    @field_validator("cuda_version")
    @classmethod
    def _version(cls, value: str) -> str:
        problem = _version_problem(value, "cudaVersion")
        if problem:
            raise ValueError(problem)
        return value


class ImageTableConfigMap(_Model):
    """A ConfigMap holding more admin table entries, watched so they change without a restart:
    its data key `key` is a YAML list of {image, cudaVersion}, like imageCudaTable."""

    namespace: str = Field(default="kube-public", pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
    key: str = Field(default="imageCudaTable", pattern=r"^[-._a-zA-Z0-9]{1,253}$")

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_image_table(text: str, where: str) -> tuple[ImageCudaEntry, ...]:
    """A YAML list of {image, cudaVersion} (a ConfigMap's image table); ValueError with a
    one-line reason naming `where` and the entry."""
    try:
        documents = load_yaml_documents(text, where)
    except ManifestError as exc:
        raise ValueError(str(exc)) from None
    if len(documents) > 1:
        raise ValueError(f"{where} holds {len(documents)} YAML documents; expected one list")
    items = documents[0] if documents else []
    if not isinstance(items, list):
        raise ValueError(f"{where} must be a YAML list of {{image, cudaVersion}} entries")
    entries = []
    for index, item in enumerate(items):
        try:
            entries.append(ImageCudaEntry.model_validate(item))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'entry'}: {e['msg']}" for e in exc.errors()
            )
            raise ValueError(f"{where} entry {index}: {problems}") from None
    return tuple(entries)


class ComputeCapabilityRule(_Model):
    """Containers matching every given condition need `min_compute_capability` (e.g. "8.0")."""

    name: str
    description: str = ""
    # Regex searched (case-insensitive) in the image repository (the part before tag/digest).
    image: Regex | None = None
    # Regex searched in the container's command and args joined by single spaces.
    args: Regex | None = None
    # Env var name -> regex the variable's value must match in full (case-insensitive).
    env: Mapping[str, str] = Field(default_factory=dict)
    min_compute_capability: str

    @field_validator("env")
    @classmethod
    def _env(cls, value: Mapping[str, str]) -> Mapping[str, str]:
        for name, pattern in value.items():
            problem = _regex_problem(pattern)
            if problem:
                raise ValueError(f"env {name}: {problem}")
        return dict(value)

    @field_validator("min_compute_capability")
    @classmethod
    def _version(cls, value: str) -> str:
        problem = _version_problem(value, "minComputeCapability")
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _some_condition(self) -> ComputeCapabilityRule:
        if self.args is None and not self.env:
            raise ValueError(f"rule {self.name!r} must match on args or env")
        return self

    @cached_property
    def compiled(self) -> tuple[Any, ...]:
        """(image regex, args regex, ((env name, regex), ...), version), compiled once.

        A cached_property, not an lru_cache keyed by the rule (the dict field makes the model
        unhashable); pydantic (≥ 2.6) leaves it out of equality."""
        flags = re.IGNORECASE
        return (
            re.compile(self.image, flags) if self.image else None,
            re.compile(self.args) if self.args else None,
            tuple((name, re.compile(p, flags)) for name, p in self.env.items()),
            CudaVersion.parse(self.min_compute_capability),
        )


# bfloat16 needs compute capability 8.0 (Ampere); a V100 (7.0) or T4 (7.5) fails at start-up.
# vLLM (`vllm serve --dtype bfloat16`), SGLang (`--dtype bfloat16`) and Hugging Face TGI
# (`--dtype bfloat16`) spell the flag the same; TGI also reads it from env DTYPE.
DEFAULT_COMPUTE_RULES: tuple[ComputeCapabilityRule, ...] = (
    ComputeCapabilityRule(
        name="bfloat16-servers",
        description="bfloat16 inference needs compute capability 8.0 or newer",
        args=r"""--dtype(?:=|\s+)['"]?(?:bfloat16|bf16)\b""",
        min_compute_capability="8.0",
    ),
    ComputeCapabilityRule(
        name="bfloat16-tgi-env",
        description="bfloat16 inference needs compute capability 8.0 or newer",
        image=r"text-generation-inference|/tgi",
        env={"DTYPE": "bfloat16|bf16"},
        min_compute_capability="8.0",
    ),
)


class EnvFixRule(_Model):
    """Set `env` on containers that match every given condition (unset conditions match all)."""

    name: str
    description: str = ""
    # The container uses at least one of these resource keys (limits or requests).
    resources: tuple[str, ...] = ()
    # Regex searched (case-insensitive) in the image repository (the part before tag/digest).
    image: Regex | None = None
    # Regex matched (full match) against the container name.
    container: Regex | None = None
    env: Mapping[str, str]

    @field_validator("env")
    @classmethod
    def _env(cls, value: Mapping[str, str]) -> Mapping[str, str]:
        if not value:
            raise ValueError("env must set at least one variable")
        for name in value:
            if not re.fullmatch(r"[-._a-zA-Z][-._a-zA-Z0-9]*", name):
                raise ValueError(f"{name!r} is not a valid environment variable name")
        return dict(value)

    @cached_property
    def compiled(self) -> tuple[re.Pattern[str] | None, re.Pattern[str] | None]:
        """(image regex, case-insensitive; container-name regex), compiled once per rule: every
        GPU container's review tests them. (A cached_property, like ComputeCapabilityRule's.)"""
        return (
            re.compile(self.image, re.IGNORECASE) if self.image is not None else None,
            re.compile(self.container) if self.container is not None else None,
        )


DEFAULT_ENV_FIXES: tuple[EnvFixRule, ...] = (
    EnvFixRule(
        name="paddle-on-gpu-manager",
        description=(
            "PaddlePaddle's auto_growth allocator conflicts with GPU-Manager vGPU memory "
            "virtualization (OOM, random crashes)"
        ),
        resources=("tencent.com/vcuda-core", "tencent.com/vcuda-memory"),
        image=r"paddle",
        env={"FLAGS_allocator_strategy": "naive_best_fit"},
    ),
)


class WorkloadContainer(_Model):
    """A container an operator builds from fields of its own object (form `container`): paths
    relative to the template's path, no wildcards."""

    name: str = Field(min_length=1)
    resources: str
    image: str = ""
    env: str = ""


class WorkloadTemplate(_Model):
    """Where one pod template of an admin-added kind lives (paths: core/kinds/registry)."""

    path: str
    role: str = ""
    form: Literal["template", "podSpec", "container"] = "template"
    name_field: str = "name"
    containers: tuple[str, ...] = ()
    container: WorkloadContainer | None = None
    image_from: str = ""
    annotations: tuple[str, ...] | None = None

    def to_rule(self) -> TemplateRule:
        form: Form = "podspec" if self.form == "podSpec" else self.form
        c = self.container
        return rule(
            self.path,
            self.role,
            form,
            self.name_field,
            self.containers,
            virtual=virtual_container(c.name, c.resources, c.image, c.env) if c else None,
            image_from=self.image_from,
            annotations=self.annotations,
        )

    @model_validator(mode="after")
    def _valid(self) -> WorkloadTemplate:
        self.to_rule()  # raises ValueError with the reason
        return self


class WorkloadEntry(_Model):
    """An admin-added workload kind: `group` is the API group ("" for the core group)."""

    group: str
    kind: str = Field(pattern=r"^[A-Z][A-Za-z0-9]*$")
    templates: tuple[WorkloadTemplate, ...] = Field(min_length=1)

    def to_kind(self) -> WorkloadKind:
        return WorkloadKind(
            self.group, self.kind, tuple(t.to_rule() for t in self.templates), "webhook config"
        )


class ImageRules:
    """One config's image patterns, admin table and shipped knowledge (None: switched off),
    hashed by identity. The per-image detection cache is keyed on it: a tuple does not keep its
    hash, and hashing every table entry (a pydantic model) on every GPU container's review
    costs ~0.15 µs per entry."""

    __slots__ = ("knowledge", "patterns", "table")

    def __init__(
        self,
        patterns: tuple[str, ...],
        table: tuple[ImageCudaEntry, ...],
        knowledge: ImageKnowledge | None = None,
    ) -> None:
        self.patterns = patterns
        self.table = table
        self.knowledge = knowledge
