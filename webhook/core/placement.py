"""GPU placement (SPEC §4): the CUDA requirement of a pod's GPU containers -> node affinity."""

from __future__ import annotations

from webhook.core.config import ANNOTATION_CUDA_AFFINITY, WebhookConfig
from webhook.core.decision import PodState, Violation, container_label, short
from webhook.core.rules import cuda
from webhook.core.workloads import ContainerRef


def place(
    state: PodState,
    gpu: list[tuple[ContainerRef, set[str]]],
    config: WebhookConfig,
    inventory: cuda.NodeInventory | None,
) -> None:
    labels = config.cuda_labels
    pod_req, warning = cuda.annotation_requirement(state.pod.annotations)
    if warning:
        state.warnings.append(short(warning))
    requirements: list[tuple[ContainerRef, set[str], cuda.Requirement]] = []
    unknown: list[str] = []
    for c, keys in gpu:
        req = pod_req or cuda.container_requirement(c.container, config)
        if req is None:
            unknown.append(c.name)
        else:
            requirements.append((c, keys, req))
    for c, keys, req in requirements:
        where = container_label(c)
        gpu_manager = not keys.isdisjoint(config.gpu_manager_resource_names)
        if gpu_manager and req.version >= cuda.CudaVersion(12, 4):
            state.warnings.append(
                short(f"{where} needs CUDA {req.version}: GPU-Manager vGPU supports CUDA < 12.4")
            )
        mps_memory = not keys.isdisjoint(config.mps_memory_resource_names)
        if mps_memory and req.version < cuda.CudaVersion(11, 4):
            state.warnings.append(
                short(f"{where} needs CUDA {req.version}: MPS memory limits need CUDA ≥ 11.4")
            )
    if not config.cuda_affinity or state.pod.annotations.get(ANNOTATION_CUDA_AFFINITY) == "false":
        return
    if not requirements:
        state.warnings.append(
            "CUDA version unknown, no node affinity added: set annotation "
            'features.alauda.io/cuda-version (e.g. "12.4") or env CUDA_VERSION'
        )
        return
    if unknown:
        state.warnings.append(
            short(
                f"CUDA version unknown for {', '.join(unknown)}; affinity uses the other containers"
            )
        )
    _, _, top = max(requirements, key=lambda item: item[2].version)
    vgpu = any(not keys.isdisjoint(config.vgpu_resource_names) for _, keys in gpu)
    skew = config.max_major_skew
    label_text = f"{labels.major}/{labels.minor}"
    if inventory is not None:
        if not inventory.labelled:
            state.warnings.append(
                short(f"no node carries the {label_text} labels: no CUDA node affinity added")
            )
            return
        if not cuda.satisfying(inventory, top.version, vgpu=vgpu, skew=skew):
            highest = max(inventory.versions)
            text = (
                f"no node supports CUDA {top.version}{' on vGPU' if vgpu else ''}; "
                f"highest available is {highest}"
            )
            if config.no_compatible_node == "deny":
                state.violations.append(
                    Violation(f"{state.ref}: {text} ({top.source}).", state.ref, rule="cuda")
                )
                return
            state.warnings.append(short(text))
    injected = cuda.injected_terms(top.version, vgpu=vgpu, skew=skew, labels=labels)
    usage = cuda.existing_cuda_usage(state.pod.spec, labels, injected)
    if usage == "ours":
        return
    if usage == "user":
        state.warnings.append(
            short(
                f"your {label_text} node affinity is kept as is; "
                f"this pod needs CUDA ≥ {top.version}"
            )
        )
        return
    merged = cuda.merge_terms(cuda.required_terms(state.pod.spec), injected)
    required = state.draft.writable(
        (
            *state.pod.spec_path,
            "affinity",
            "nodeAffinity",
            "requiredDuringSchedulingIgnoredDuringExecution",
        )
    )
    required["nodeSelectorTerms"] = merged
    mode = "vGPU" if vgpu else "GPU"
    state.note("cuda-affinity", f"required {mode} nodes with CUDA ≥ {top.version} ({top.source})")
