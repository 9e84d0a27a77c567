"""GPU access control's findings as a user sees them (a warning under `warn`, a denial's line
under `enforce`, the audit's entry in every mode), and what an image configuration a registry
lookup read hands a container unseen (SPEC §12 "Nothing the webhook cannot see passes as safe"):
its device variables no fixed void closes (core/access/sources.py image_routes)."""

from __future__ import annotations

from collections.abc import Mapping

from webhook.core.access import control as access
from webhook.core.access import sources
from webhook.core.base.shapes import is_mapping
from webhook.core.config.model import WebhookConfig
from webhook.core.images.facts import ImageEnv, ImageQuery, pod_archs
from webhook.core.outcome.decision import PodState, Violation, container_label, short

# Said once per denial, after the findings (Violation.description).
_ACCESS_WHY = "GPUs reached without a request are counted by no quota, CRL or scheduler."


def access_violation(state: PodState, finding: access.AccessFinding) -> Violation:
    detail = f"{state.ref}, {finding.text()}."
    return Violation(
        f"{detail} {_ACCESS_WHY}",
        state.ref,
        finding.container,
        rule=access.RULE,
        configmap=access.POLICY,
        detail=detail,
        description=_ACCESS_WHY,
    )


def report(state: PodState, finding: access.AccessFinding, enforce: bool, quiet: bool) -> None:
    violation = access_violation(state, finding)
    state.access.append(violation)
    if enforce:
        state.violations.append(violation)
    elif not quiet:
        state.warnings.append(short(finding.text()))


def image_config(
    state: PodState,
    candidate: access.Candidate,
    config_env: Mapping[str, str],
    devices: Mapping[int, frozenset[str]],
    config: WebhookConfig,
    violations_only: bool,
) -> None:
    """An image config's device variables no fixed void closes (core/access/sources.py
    image_routes): AMD's DOCKER_RESOURCE_* names written over with its void under `enforce`
    (voidImageDevices all), the others findings."""
    c, rules = candidate.ref, config.gpu_access
    runtime = state.pod.spec.get("runtimeClassName")
    vendor = rules.runtime_class_families.get(runtime, "") if isinstance(runtime, str) else ""
    readers = sources.readers(devices, vendor, rules.node_settings.env_ignored)
    env = c.container.get("env")
    entries = env if isinstance(env, list) else []
    written = [n for e in entries if is_mapping(e) and isinstance(n := e.get("name"), str)]
    where, enforce = container_label(c), rules.mode == "enforce"
    write = enforce and rules.void_image_devices == "all"
    own = devices.get(id(c.container), frozenset())
    pins, found = sources.image_routes(where, config_env, written, own, readers, write)
    for finding in found:
        report(state, finding, enforce, violations_only)
    if pins and not violations_only:
        state.draft.extend(
            state.container_path(c), "env", [{"name": n, "value": v} for n, v in pins]
        )
        for name, value in pins:
            state.note("gpu-access", sources.image_note(name, value, where))


def first_entry(
    state: PodState,
    candidates: list[access.Candidate],
    devices: Mapping[int, frozenset[str]],
    config: WebhookConfig,
    image_env: ImageEnv | None,
    violations_only: bool,
) -> None:
    """The image configurations a pod's runtime reads unseen, asked for and judged:

    - a first-entry device variable (catalog first_entry_env: Ascend's ASCEND_VISIBLE_DEVICES)
      in a pod whose runtime may be a first-entry build (nodeSettings.ascendRuntime
      `first-entry`): on containerd the image's entry comes before the written void and the
      device plugin's value, and such a build keeps it. Every container of a pod with a device
      container of the family, or running under its RuntimeClass, is judged (its `candidates`):
      a finding where a registry lookup read the image's config (sources.first_entry_finding);
    - the open names of a pod whose runtime reads them (sources.readers: AMD's DOCKER_RESOURCE_*,
      the families without a void), judged by `image_config` once the config is read.

    Under `enforce`, an image not read yet is asked for (ImageQuery.runtime ACCESS_LOOKUP, the
    caller's lookups within their budget); what no lookup answers is admitted with every void
    written (docs/concepts/gpu-access.md "Keys the webhook cannot see")."""
    rules = config.gpu_access
    settings = rules.node_settings
    runtime = state.pod.spec.get("runtimeClassName")
    vendor = rules.runtime_class_families.get(runtime, "") if isinstance(runtime, str) else ""
    family = None
    if settings.ascend_runtime == "first-entry":
        family = sources.first_entry_family(devices, vendor, settings.env_ignored)
    enforce = rules.mode == "enforce"
    if family is None and not (enforce and sources.readers(devices, vendor, settings.env_ignored)):
        return
    asked: list[str] = []
    for candidate in candidates:
        c = candidate.ref
        image = c.container.get("image")
        if not isinstance(image, str) or not image:
            continue
        config_env = image_env.get(image) if image_env else None
        if config_env is None:
            if enforce and image not in asked:
                asked.append(image)
            continue
        if family is None:
            continue
        own = family.name in devices.get(id(c.container), frozenset())
        finding = sources.first_entry_finding(container_label(c), image, config_env, family, own)
        if finding is not None:
            report(state, finding, enforce, violations_only)
    if asked:
        archs = pod_archs(state.pod.spec)
        state.unresolved += [
            ImageQuery(image, arch, sources.ACCESS_LOOKUP) for image in asked for arch in archs
        ]
