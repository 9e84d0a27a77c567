"""The rule families applied to one container (SPEC §3, §5, §12): CRL resource defaults and
checks, environment fixes, and GPU access control, written into the pod's state."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from webhook.core.access import control as access
from webhook.core.access import links
from webhook.core.base.errors import ObjectShapeError
from webhook.core.base.quantity import format_quantity
from webhook.core.base.wording import after
from webhook.core.config.model import WebhookConfig
from webhook.core.envfix.fixes import env_fixes
from webhook.core.evaluation.unseen import access_violation as _access_violation
from webhook.core.evaluation.unseen import first_entry, image_config
from webhook.core.evaluation.unseen import report as _report
from webhook.core.images.facts import ImageEnv
from webhook.core.outcome.decision import (
    PodState,
    Violation,
    container_label,
)
from webhook.core.placement.cuda import known_cuda_image
from webhook.core.policies.gpu_keys import GpuKeys, cuda_or_unknown, says_gpu
from webhook.core.policies.policyset import PolicySet
from webhook.core.policies.resources import (
    MISSING,
    NO_DERIVED,
    ResourceLists,
    ResourceProblem,
    check,
    defaults,
    used_policies,
    value_checks,
)
from webhook.core.workloads.claims import container_claim_refs as claim_refs
from webhook.core.workloads.devices import DEVICE_ENV_NAMES, VISIBLE_DEVICES
from webhook.core.workloads.pods import (
    ContainerRef,
)


def _violation(ref: str, where: str, problem: ResourceProblem) -> Violation:
    policy = problem.policy
    value = "" if problem.value is MISSING else f"={format_quantity(problem.value)!r}"
    field_name = f"{problem.field}.{policy.key}"
    detail = (
        f"{ref}, {where}: {field_name}{value} {problem.problem} "
        f"({problem.rule} in ConfigMap {policy.configmap})"
    )
    description = policy.description_en.rstrip(".")
    text = f"{detail}. {description}." if description else f"{detail}."
    return Violation(
        text,
        ref,
        where,
        field_name,
        problem.rule,
        policy.configmap,
        detail=f"{detail}.",
        description=f"{description}." if description else "",
    )


def apply_resources(
    state: PodState, c: ContainerRef, policies: PolicySet, config: WebhookConfig
) -> GpuKeys:
    """Defaults then checks for one container; returns what its keys ask for.

    A key set to zero asks for nothing (SPEC §3): it uses no group, is not asked for, makes
    no GPU container, and only its own value checks run.
    """
    where = container_label(c)
    lists = ResourceLists.of(c.container, state.ref, where)
    keys = lists.keys()
    if not keys:
        return GpuKeys(keys, False, False, [])
    # Only keys that can make a GPU container need their values read (cpu, memory need not:
    # an extended resource is always domain-prefixed, so without a "/" only an exact name can
    # match, and no pattern or name check runs for them).
    by_key, gpu_names = policies.by_key, config.gpu_resources
    candidates = [
        key
        for key in keys
        if key in by_key
        or key in gpu_names.exact
        or ("/" in key and (key in gpu_names or says_gpu(key, config)))
    ]
    if not candidates:
        return GpuKeys(keys, False, False, [])
    zero_keys = lists.zero_keys(candidates)
    asked = keys - zero_keys if zero_keys else keys
    gpu = False
    unknown: list[str] = []
    for key in candidates:
        if key in zero_keys or key in policies.by_key:
            continue
        if key in gpu_names:
            gpu = True
        elif cuda_or_unknown(key):
            unknown.append(key)
    used = used_policies(asked, policies)
    is_pod = not state.pod.is_template
    if zero_keys:
        used_groups = {p.group for p in used}
        zero = [
            policy
            for key in sorted(zero_keys)
            if (policy := policies.by_key.get(key)) is not None and policy.group not in used_groups
        ]
        state.violations += [
            _violation(state.ref, where, p) for p in value_checks(lists, zero, is_pod=is_pod)
        ]
    if not used:
        return GpuKeys(asked, False, gpu, unknown)
    changes = defaults(lists, used)
    derived = NO_DERIVED
    if changes:
        limits, requests = dict(lists.limits), dict(lists.requests)
        resources = (*state.container_path(c), "resources")
        for change in changes:
            state.draft.set((*resources, change.field), change.key, change.value)
            (limits if change.field == "limits" else requests)[change.key] = change.value
            value = format_quantity(change.value)
            if change.kind == "resource-default":
                state.note(change.kind, f"defaulted {change.key}={value} in {where}")
            else:
                state.note(change.kind, f"set requests.{change.key}={value} from limits in {where}")
        lists = ResourceLists(limits, requests)
        asked |= {change.key for change in changes}
        derived = frozenset((change.field, change.key) for change in changes)
    state.violations += [
        _violation(state.ref, where, p) for p in check(lists, used, is_pod=is_pod, derived=derived)
    ]
    # A CRL group of another vendor's devices (AMD, Ascend: SPEC §13) has its resource rules
    # applied, but does not make a CUDA container: that vendor's gate places it.
    return GpuKeys(asked, any(cuda_or_unknown(p.key) for p in used), gpu, unknown)


def apply_fixes(state: PodState, c: ContainerRef, keys: set[str], config: WebhookConfig) -> None:
    additions, warnings = env_fixes(c.container, keys, config.env_fixes)
    where = container_label(c)
    state.warnings += [after(f"{where}: ", w) for w in warnings]
    if not additions:
        return
    env = c.container.get("env")
    if env is not None and not isinstance(env, list):
        raise ObjectShapeError(f"{state.ref} {where}: env must be a list")
    state.draft.extend(
        state.container_path(c), "env", [{"name": a.name, "value": a.value} for a in additions]
    )
    for add in additions:
        state.note("env-fix", f"set {add.name}={add.value} in {where} ({add.rule} fix)")


_IMAGE_FINDING = (
    "runs a CUDA image, which gives it every GPU of its node, but requests no GPU: "
    "gpuAccess enforce sets NVIDIA_VISIBLE_DEVICES=void"
)


class AccessUpdate(NamedTuple):
    """What a Pod UPDATE judges (SPEC §12 "What reaches the webhook"): only what the update
    introduces. `old_findings` are the texts the old pod already had; `old_images` the old
    pod's image per container (list name, name); `patchable` the containers the webhook may
    still write env to (new ephemeral containers, on the pods/ephemeralcontainers subresource:
    kubernetes pkg/apis/core/validation ValidatePodEphemeralContainersUpdate lets the new ones
    be anything valid, while ValidatePodUpdate forbids any env change)."""

    old_findings: frozenset[str]
    old_images: Mapping[tuple[str, str], Any]
    patchable: frozenset[tuple[str, str]]
    # The update removes the pod's last scheduling gate: its claims, which may have been
    # replaced while it was gated, are judged again (a claim container whose voids are unwritten).
    ungated: bool = False
    # Annotations a container reads a device variable from, changed by someone who is not one
    # of gpuAccess.annotationWriters (evaluate.py annotation_writes).
    written: tuple[access.AccessFinding, ...] = ()


def _suspicious(prefixes: tuple[str, ...]) -> str:
    """An envFrom prefix that makes device variables' names (`NVIDIA_`, `AMD_`, ...)."""
    for prefix in prefixes:
        if prefix and any(name.startswith(prefix) for name in DEVICE_ENV_NAMES):
            return prefix
    return ""


def access_findings(
    state: PodState,
    devices: Mapping[int, frozenset[str]],
    config: WebhookConfig,
    containers: list[ContainerRef] | None = None,
) -> tuple[list[access.AccessFinding], list[access.Candidate]]:
    rules = config.gpu_access
    return access.findings(
        state.pod,
        devices,
        config.gpu_request_advice,
        rules.runtime_class_families,
        rules.node_settings.env_ignored,
        containers,
    )


def apply_access(
    state: PodState,
    devices: Mapping[int, frozenset[str]],
    config: WebhookConfig,
    violations_only: bool,
    audit: bool,
    update: AccessUpdate | None = None,
    image_env: ImageEnv | None = None,
) -> None:
    """GPU access control for one pod spec (SPEC §12): findings become warnings (`warn`) or
    violations (`enforce`); under `enforce` the device variables of the vendors a container
    requests no device of are set to their void (voidImageDevices), which closes the image
    config and envFrom routes; where they cannot be set, what they would close is a finding.

    `devices` maps id(container) to the device families it requests. `update`: a Pod UPDATE
    (only what it introduces is judged, and env is written to new ephemeral containers only);
    `image_env` the configs registry lookups read (their device variables no void closes)."""
    rules = config.gpu_access
    enforce = rules.mode == "enforce"
    if violations_only and not enforce and not audit:
        # Outside `enforce` GPU access control gives a violations-only review (/validate)
        # nothing: its findings are warnings, which that review does not return (the mutating
        # call returned them), and only `enforce` asks a registry (unseen.py first_entry). The
        # audit (`audit`) still lists them. Pod CREATEs and UPDATEs alike.
        return
    mode = rules.void_image_devices
    found, candidates = access_findings(state, devices, config)
    if update is None:
        # A device container the kubelet may give no device (spec.nodeName): judged as one
        # without a device, whose image's variables `warn` lists in the audit, not as a warning.
        for finding in links.bound_findings(state.pod.spec, state.pod.containers, devices):
            if enforce:
                _report(state, finding, enforce, violations_only)
            else:
                state.access.append(_access_violation(state, finding))
    grouped: dict[tuple[tuple[str, str], ...], list[str]] = {}
    judged: list[access.Candidate] = []  # whose image a first-entry runtime build may read
    for finding in (*found, *(update.written if update is not None else ())):
        if update is not None and finding.text() in update.old_findings:
            continue
        _report(state, finding, enforce, violations_only)
    for candidate in candidates:
        c = candidate.ref
        if update is not None and (c.list_name, c.name) not in update.patchable:
            key = (c.list_name, c.name)
            # Env cannot change on a Pod UPDATE: an image swapped in a container without void
            # is what the image config route needs (the old pod's own gaps were judged at create).
            image = c.container.get("image")
            swapped = key in update.old_images and update.old_images[key] != image
            if swapped:
                judged.append(candidate)
            regated = update.ungated and not candidate.device and bool(claim_refs(c.container))
            if not enforce or not (swapped or regated):
                continue
            # The pins too (an AMD device container's void, a share's core policy): a swapped
            # image's value would stand where they are not written.
            voids = candidate.voids + candidate.pins
            if mode == "known":
                cuda = candidate.cuda or known_cuda_image(image, config)
                voids = tuple(v for v in voids if v[0] == VISIBLE_DEVICES) if cuda else ()
            elif mode == "off":
                voids = ()
            if voids:
                what = (
                    "changes its image while its device variables are not void"
                    if swapped
                    else _REGATED
                )
                _report(
                    state,
                    access.AccessFinding(
                        container_label(c),
                        what,
                        "recreate the pod: env cannot change on update",
                        gpu=True,
                    ),
                    enforce,
                    violations_only,
                )
            continue
        judged.append(candidate)
        if image_env and isinstance(image := c.container.get("image"), str) and image in image_env:
            image_config(state, candidate, image_env[image], devices, config, violations_only)
        voided = _void(state, candidate, config, enforce, violations_only, audit, mode)
        if voided:
            grouped.setdefault(voided, []).append(container_label(c))
        if candidate.pins and enforce and mode == "all" and not violations_only:
            # A device container's own variable no plugin sets, its share's safe values
            # (core/access/control.py container_findings).
            where = container_label(c)
            state.draft.extend(
                state.container_path(c), "env", [{"name": n, "value": v} for n, v in candidate.pins]
            )
            for name, value in candidate.pins:
                state.note("gpu-access", access.pin_note(name, value, where))
    # One note per set of variables, not one per container: every container of every pod gets
    # them under `all`, and each note is a warning the user reads.
    for voids, wheres in grouped.items():
        listed = _listed(voids)
        if len(wheres) == 1:
            text = (
                f"set {listed} device variables to void in {wheres[0]}: it requests no such device"
            )
        else:
            text = (
                f"set {listed} device variables to void in {len(wheres)} containers: they request "
                "no such device"
            )
        state.note("gpu-access", text)
    if enforce or rules.mode == "warn":
        first_entry(state, judged, devices, config, image_env, violations_only)
    if update is None:
        _service_links(state, devices, enforce, violations_only)


_REGATED = "may get no device from its claims now, and its device variables are not void"


def _service_links(
    state: PodState, devices: Mapping[int, frozenset[str]], enforce: bool, violations_only: bool
) -> None:
    """A pod with a device container of a family whose runtime reads variables a Service link
    can make (core/access/links.py: AMD's DOCKER_RESOURCE_*): the kubelet adds the links'
    variables after the written void, so under `enforce` enableServiceLinks is set to false.
    The API server defaults it to true before admission (pkg/apis/core/v1/defaults.go
    SetDefaults_Pod), so an explicit true cannot be told from none: the mutation writes false
    over either, and the validating entry sees what it wrote (as the voids); under `warn` the
    audit lists it (a warning would go to every AMD pod)."""
    family = links.link_family(state.pod.spec, devices)
    if family is None or violations_only:
        return
    if enforce:
        state.draft.set(state.pod.spec_path, "enableServiceLinks", False)
        state.note("gpu-access", links.link_note(family))
    else:
        state.access.append(_access_violation(state, links.link_finding(family)))


def _void(
    state: PodState,
    candidate: access.Candidate,
    config: WebhookConfig,
    enforce: bool,
    violations_only: bool,
    audit: bool,
    mode: str,
) -> tuple[tuple[str, str], ...]:
    """Write the container's voids under `enforce` (and list what `known` would for the
    audit). Returns the voids written when the caller is to say so (several variables), or ().
    `mode` is config.gpu_access.void_image_devices (read once per pod by the caller)."""
    c = candidate.ref
    env_from = candidate.env_from
    # The image config and envFrom stay open where void is not written: under `enforce` a
    # container that takes envFrom is then a finding; under `warn` only an envFrom prefix that
    # makes device variables' names is (every other envFrom would warn every pod).
    if env_from and not candidate.device:
        prefix = _suspicious(env_from)
        # An envFrom prefix that makes a variable no void closes (a family without one, AMD's
        # DOCKER_RESOURCE_*) is a finding in every mode (core/access/control.py).
        unvoidable = access.unvoidable_prefix(env_from)
        # (An unprefixed envFrom the pod's runtime reads open names from is one already.)
        unclosed = enforce and mode != "all" and not candidate.unseen
        if unclosed or (not enforce and prefix) or unvoidable:
            prefix = unvoidable or prefix
            shown = f"envFrom with prefix {prefix}" if prefix else "envFrom"
            advice = (
                "list the variables in env instead"
                if not enforce or unvoidable
                else "list the variables in env or set gpuAccess.voidImageDevices: all"
            )
            _report(
                state,
                access.AccessFinding(container_label(c), f"uses {shown}", advice),
                enforce,
                violations_only,
            )
    # Outside enforce, what void would change is only listed for the audit.
    if violations_only or mode == "off" or not (enforce or audit) or not candidate.voids:
        return ()
    # Whether the image is a known CUDA image matters to `known`, the audit and a note that
    # names NVIDIA's variable alone: `all` writes every void without asking (the detection
    # reads the whole env, a cost a padded pod must not multiply).
    ask = mode == "known" or audit or not enforce or len(candidate.voids) == 1
    nvidia = tuple(v for v in candidate.voids if v[0] == VISIBLE_DEVICES) if ask else ()
    known = bool(nvidia) and (candidate.cuda or known_cuda_image(c.container.get("image"), config))
    where = container_label(c)
    if not enforce:
        if known:
            # Not a warning: every CPU pod on a CUDA image would get one. The audit lists it,
            # so an admin sees what `enforce` would change before switching it on.
            state.access.append(
                Violation(
                    f"{state.ref}, {where} {_IMAGE_FINDING}.",
                    state.ref,
                    where,
                    rule=access.RULE,
                    configmap=access.POLICY,
                )
            )
        return ()
    voids = candidate.voids if mode == "all" else (nvidia if known else ())
    # The audit lists what void would change where it matters (a known CUDA image), not the
    # same three variables on every pod of the cluster.
    if not voids or (audit and not known):
        return ()
    env = c.container.get("env")
    if env is not None and not isinstance(env, list):
        raise ObjectShapeError(f"{state.ref} {where}: env must be a list")
    state.draft.extend(
        state.container_path(c), "env", [{"name": name, "value": value} for name, value in voids]
    )
    if len(voids) == 1:
        ((name, value),) = voids
        family = access.VOID_FAMILIES.get(name)
        noun = family.noun if family is not None else "GPU"
        why = "its CUDA image would give it every GPU" if known else f"it requests no {noun}"
        shown = f"{name}={value}" if value else f"{name} empty"
        state.note("gpu-access", f"set {shown} in {where}: {why}")
        return ()
    return voids


_LISTED: dict[tuple[tuple[str, str], ...], str] = {}


def _listed(voids: tuple[tuple[str, str], ...]) -> str:
    """`NVIDIA, AMD and Ascend` for the variables of those families."""
    text = _LISTED.get(voids)
    if text is None:
        vendors = [access.VOID_FAMILIES[name].vendor for name, _ in voids]
        text = ", ".join(vendors[:-1]) + f" and {vendors[-1]}"
        _LISTED[voids] = text
    return text
