"""Facts about images learnt outside the evaluation (the CUDA version in an image's own
configuration, read from its registry: SPEC §4 step 6), as an immutable input of evaluate().

The evaluation never fetches anything: it lists the images whose CUDA it could not determine
(`Decision.unresolved_images`), the caller (admission handler, `review --resolve-images`) looks
them up within its budget, and evaluates again with the answers as `images=`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from webhook.core.rules.cuda import Requirement

# The well-known node label the kubelet sets from GOARCH (k8s.io/api/core/v1
# well_known_labels.go: LabelArchStable "kubernetes.io/arch"; the beta key is deprecated
# but still set by older kubelets).
ARCH_LABELS = ("kubernetes.io/arch", "beta.kubernetes.io/arch")
DEFAULT_ARCH = "amd64"


class ImageQuery(NamedTuple):
    """An image as written in a container, and the architecture its pod runs on."""

    image: str
    arch: str = DEFAULT_ARCH


# What lookups found: only images with a CUDA version are in it.
ImageFacts = Mapping[ImageQuery, "Requirement"]


def pod_arch(spec: Mapping[str, Any]) -> str:
    """The architecture a pod pins with its nodeSelector, else amd64 (what most GPU nodes are)."""
    selector = spec.get("nodeSelector")
    if isinstance(selector, Mapping):
        for key in ARCH_LABELS:
            value = selector.get(key)
            if isinstance(value, str) and value:
                return value
    return DEFAULT_ARCH


def facts_for_arch(images: ImageFacts, arch: str) -> dict[str, Requirement]:
    """image -> requirement for one pod's architecture (the mapping cuda.detect reads)."""
    return {query.image: req for query, req in images.items() if query.arch == arch}
