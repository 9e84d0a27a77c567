"""The images the e2e registry mode serves (`E2E_REGISTRY=1 scripts/e2e-kapi.sh`): pushed to
the CNCF registry by scripts/e2e-registry.py, looked up by the webhook, and predicted by
tests/e2e/test_e2e_registry.py from the same Envs. Names are `repository:tag` on that registry.
"""

from __future__ import annotations

from tests.ociimages import (
    OCI_INDEX,
    Built,
    bloated_config,
    config_image,
    empty_objects_index,
    image,
    padded_cuda_config,
    raw_top,
)

# A plain image (one manifest) whose config sets CUDA_VERSION=12.4.1; its name tells nothing
# (a name like cuda:12.4 would tell the webhook CUDA 12.4 without a lookup).
NORMAL = "e2e/plain:v1"
NORMAL_ENV = ("CUDA_VERSION=12.4.1",)
# One tag over two images (and BuildKit's attestation entry first): amd64 CUDA 12.4.1, arm64
# 12.6.0. WIDE is the same index under another tag, so its lookups start from an empty cache.
INDEX = "e2e/trainer:v3"
WIDE = "e2e/trainer:wide"
INDEX_ENVS = {"arm64": ("CUDA_VERSION=12.6.0",), "amd64": ("CUDA_VERSION=12.4.1",)}
# Hostile: the 8 MiB config of 1.7 million empty Env strings, its 4 MiB index of 1.3
# million empty objects, and a config whose CUDA_VERSION is "12.4" and 6 MiB of spaces. The
# first two under several tags (0, 1, ...): every tag is a lookup of its own (the cache is by
# tag). The registry itself takes ~1.2 s to serve the index (it parses it), so fewer of those.
BLOATED = "hostile/bloated-config"
BLOATED_TAGS = 17
EMPTY_INDEX = "hostile/empty-objects-index"
EMPTY_INDEX_TAGS = 5
PADDED = "hostile/padded-cuda:1"
# A ROCm image whose tag says nothing: its config names ROCm 6.4.1 and the one gfx target it
# was built for (as PyTorch's ROCm images set them), gfx942 (MI300X), not gfx90a (MI210).
ROCM = "e2e/rocm-train:v1"
ROCM_ENV = ("ROCM_VERSION=6.4.1", "PYTORCH_ROCM_ARCH=gfx942")
# The same ROCm image with a Docker Swarm generic-resource variable AMD's runtime reads as a
# device list (ROCm/container-toolkit internal/oci/oci.go getAMDEnv: every DOCKER_RESOURCE_*),
# and AMD_VISIBLE_DEVICES=all as ROCm's images set it (issue 46: an image config's open names).
ROCM_DOCKER = "hostile/rocm-docker-resource:v1"
ROCM_DOCKER_ENV = (*ROCM_ENV, "AMD_VISIBLE_DEVICES=all", "DOCKER_RESOURCE_GPU=0-7")
# An image that keeps NPUs on first-entry ascend-docker-runtime builds (issue 46): containerd puts
# its ASCEND_VISIBLE_DEVICES before the written void and the device plugin's value.
ASCEND_VISIBLE = "hostile/ascend-visible:v1"
ASCEND_VISIBLE_ENV = ("ASCEND_VISIBLE_DEVICES=0-7",)
# An arm64-only build (Grace/GH200) pushed as a single manifest, no index: its config's
# architecture is its one platform (SPEC §14).
ARM_ONLY = "e2e/grace-only:v1"
ARM_ONLY_ENV = ("CUDA_VERSION=12.4.1",)


def tagged(repository: str, count: int) -> list[str]:
    return [f"{repository}:{i}" for i in range(count)]


def catalogue() -> dict[str, Built]:
    """`repository:tag` -> the image pushed there."""
    trainer = image({arch: list(env) for arch, env in INDEX_ENVS.items()})
    bloated = config_image(bloated_config())
    empty = raw_top(OCI_INDEX, empty_objects_index())
    out = {
        NORMAL: image(list(NORMAL_ENV), index=False),
        INDEX: trainer,
        WIDE: trainer,
        PADDED: config_image(padded_cuda_config()),
        ROCM: image(list(ROCM_ENV), index=False),
        ROCM_DOCKER: image(list(ROCM_DOCKER_ENV), index=False),
        ARM_ONLY: image({"arm64": list(ARM_ONLY_ENV)}, index=False),
        ASCEND_VISIBLE: image(list(ASCEND_VISIBLE_ENV), index=False),
    }
    out.update(dict.fromkeys(tagged(BLOATED, BLOATED_TAGS), bloated))
    out.update(dict.fromkeys(tagged(EMPTY_INDEX, EMPTY_INDEX_TAGS), empty))
    return out
