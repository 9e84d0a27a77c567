"""The webhook config's image rules: the patterns that read a CUDA version in an image
reference, the admin image table (in the config or a watched ConfigMap), and ImageRules, one
config's image patterns, table and shipped knowledge as the detection cache's key."""

from __future__ import annotations

from pydantic import Field, ValidationError, field_validator

from webhook.core.base.errors import ManifestError
from webhook.core.base.manifests import load_yaml_documents
from webhook.core.config.fields import ConfigModel, version_problem
from webhook.core.images.knowledge import ImageKnowledge

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


class ImageCudaEntry(ConfigModel):
    """Admin table entry: images matching `image` (shell-style glob) need CUDA `cuda_version`."""

    # A shell-style glob matched against the image reference, both in Docker's short form
    # (`docker.io/nvidia/cuda:*` and `nvidia/cuda:*` match the same images).
    image: str
    # The CUDA runtime version the matching images need ("major.minor", e.g. "12.4").
    cuda_version: str

    @field_validator("cuda_version")
    @classmethod
    def _version(cls, value: str) -> str:
        problem = version_problem(value, "cudaVersion")
        if problem:
            raise ValueError(problem)
        return value


class ImageTableConfigMap(ConfigModel):
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
