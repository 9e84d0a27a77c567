"""Facts about images learnt outside the evaluation (the CUDA version in an image's own
configuration, read from its registry: SPEC §4 step 6), as an immutable input of evaluate().

The evaluation never fetches anything: it lists the images whose CUDA it could not determine
(`Decision.unresolved_images`), the caller (admission handler, `review --resolve-images`) looks
them up within its budget, and evaluates again with the answers as `images=`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from webhook.core.base.nodeaffinity import is_empty_term, required_terms
from webhook.core.base.shapes import is_mapping
from webhook.core.base.versions import CudaVersion
from webhook.core.images.requires import Branches

# The well-known node label the kubelet sets from GOARCH (k8s.io/api/core/v1
# well_known_labels.go: LabelArchStable "kubernetes.io/arch"; the beta key is deprecated
# but still set by older kubelets).
ARCH_LABELS = ("kubernetes.io/arch", "beta.kubernetes.io/arch")
DEFAULT_ARCH = "amd64"
# The label's values are GOARCH values (the kubelet sets it from runtime.GOARCH): Go's list of
# known architectures (go/src/internal/syslist/syslist.go KnownArch). A pod's affinity may
# hold anything (mutating webhooks run before validation), and each value would be a registry
# lookup of its own: only these names are looked up, each once, at most MAX_ARCHS per pod.
KNOWN_ARCHS = frozenset(
    {
        "386", "amd64", "amd64p32", "arm", "armbe", "arm64", "arm64be", "loong64", "mips",
        "mipsle", "mips64", "mips64le", "mips64p32", "mips64p32le", "ppc", "ppc64", "ppc64le",
        "riscv", "riscv64", "s390", "s390x", "sparc", "sparc64", "wasm",
    }
)  # fmt: skip
MAX_ARCHS = 4
# Which architectures are kept first when a pod allows more than MAX_ARCHS: those NVIDIA
# builds CUDA for (x86_64, sbsa/arm64, ppc64le), then by name.
GPU_ARCHS = ("amd64", "arm64", "ppc64le")


class Requirement(NamedTuple):
    """A CUDA runtime a container needs, with where it was read (for the note)."""

    version: CudaVersion
    source: str  # where it came from, for the note
    # Driver branches the image declares it runs on through forward compatibility (its
    # NVIDIA_REQUIRE_* variables, requires.forward_branches): () when it declares none.
    forward: Branches = ()
    # The CUDA version NVIDIA's toolkit checks the driver against in legacy mode: the
    # `cuda>=X` of NVIDIA_REQUIRE_CUDA, or CUDA_VERSION's major.minor when that variable is
    # unset (nvidia-container-toolkit internal/config/image/cuda_image.go GetRequirements,
    # IsLegacy); None when the env declares none or NVIDIA_DISABLE_REQUIRE turns checks off.
    # minorVersion never places the container below it (SPEC §4, issue 37 defect 5).
    declared: CudaVersion | None = None


class ImageQuery(NamedTuple):
    """An image as written in a container, and the architecture its pod runs on."""

    image: str
    arch: str = DEFAULT_ARCH
    # What the answer is for: '' the CUDA version; a vendor's name ('rocm') its driver-release
    # gate (SPEC §13), which reads the vendor's variables of the image config (ImageEnv).
    runtime: str = ""


# What lookups found: only images with a CUDA version are in it.
ImageFacts = Mapping[ImageQuery, Requirement]
# image -> other vendors' variables its config sets (ROCM_VERSION, PYTORCH_ROCM_ARCH): only
# images whose config names a vendor's runtime version are in it.
ImageEnv = Mapping[str, Mapping[str, str]]


def pod_archs(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The architectures a pod may run on, sorted: those its registry lookups are for.

    - `nodeSelector` with the arch label: that one (it must hold whatever the affinity says).
    - Else the required node affinity, when every term pins the arch label with `In`: the
      union of what the terms allow. Terms are ORed and a term's expressions ANDed; empty
      terms match nothing and are skipped (k8s.io/component-helpers scheduling/corev1/
      nodeaffinity: LazyErrorNodeSelector.Match, NewLazyErrorNodeSelector,
      isEmptyNodeSelectorTerm). In a term, several `In` on the arch keys intersect and a
      `NotIn` removes its values.
    - Else amd64 (what most GPU nodes are): a term without an `In` on the arch label lets any
      architecture in, and nothing tells which one the pod will get.

    Values that are no architecture name (KNOWN_ARCHS) are left out; of more than MAX_ARCHS,
    the GPU architectures first, then by name.
    """
    selector = spec.get("nodeSelector")
    if is_mapping(selector):
        for key in ARCH_LABELS:
            value = selector.get(key)
            if isinstance(value, str) and value:
                return (value,) if value in KNOWN_ARCHS else (DEFAULT_ARCH,)
    terms = [t for t in required_terms(spec) or () if not is_empty_term(t)]
    allowed: set[str] = set()
    for term in terms:
        archs = term_archs(term)
        if archs is None:
            return (DEFAULT_ARCH,)
        allowed |= archs
    if len(allowed) > MAX_ARCHS:
        allowed = set(sorted(allowed, key=_preference)[:MAX_ARCHS])
    return tuple(sorted(allowed)) or (DEFAULT_ARCH,)


def _preference(arch: str) -> tuple[int, str]:
    return (GPU_ARCHS.index(arch) if arch in GPU_ARCHS else len(GPU_ARCHS), arch)


def term_archs(term: Mapping[str, Any]) -> set[str] | None:
    """The architectures one node selector term allows; None: any."""
    exprs = term.get("matchExpressions")
    allowed: set[str] | None = None
    excluded: set[str] = set()
    for expr in exprs if isinstance(exprs, list) else ():
        if not is_mapping(expr) or expr.get("key") not in ARCH_LABELS:
            continue
        values = expr.get("values")
        names = (
            {v for v in values if isinstance(v, str) and v in KNOWN_ARCHS}
            if isinstance(values, list)
            else set()
        )
        if expr.get("operator") == "In":
            allowed = names if allowed is None else allowed & names
        elif expr.get("operator") == "NotIn":
            excluded |= names
    return None if allowed is None else allowed - excluded


def facts_for_archs(images: ImageFacts, archs: tuple[str, ...]) -> dict[str, Requirement]:
    """image -> requirement for a pod that may run on `archs` (the mapping cuda.detect reads):
    the strictest (highest) one the lookups found among them; with several architectures its
    source says which one it is from."""
    best: dict[str, tuple[Requirement, str]] = {}
    for query, requirement in images.items():
        if query.arch in archs:
            current = best.get(query.image)
            if current is None or requirement.version > current[0].version:
                best[query.image] = (requirement, query.arch)
    if len(archs) == 1:
        return {image: requirement for image, (requirement, _) in best.items()}
    return {
        image: requirement._replace(source=f"{requirement.source} for linux/{arch}")
        for image, (requirement, arch) in best.items()
    }
