"""`gpu-webhook review`: evaluate manifests offline exactly as the webhook would."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import yaml

from webhook.cli.exits import EXIT_DENIED, EXIT_OK, EXIT_USAGE, CommandError
from webhook.cli.images import resolve_images
from webhook.cli.inputs import (
    Context,
    Manifests,
    claim_index,
    inventory_line,
    is_claim_object,
    load_claim_objects,
    load_nodes,
    read_manifests,
)
from webhook.cli.progress import Progress
from webhook.cli.quoting import printable, unquoted_values
from webhook.core.base.errors import ManifestError, WebhookError
from webhook.core.base.manifests import parse_documents
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.evaluation.evaluate import Decision, evaluate
from webhook.core.images.facts import ImageEnv, ImageFacts, ImageQuery
from webhook.core.outcome.decision import CUDA
from webhook.core.placement.inventory import NodeInventory
from webhook.core.placement.vendors import vendor_named
from webhook.core.policies.crl import parse_configmap
from webhook.core.policies.policyset import PolicySet
from webhook.core.workloads.claims import ClaimIndex
from webhook.core.workloads.pods import PodSpecRef, find_pod_specs, lookup
from webhook.sources.files import policy_files, read_documents

if TYPE_CHECKING:
    from webhook.registry.resolver import Resolution
    from webhook.sources.snapshot import ClusterSnapshot

DEFAULT_POLICIES = Path("configmaps")


class _NoAliasDumper(yaml.SafeDumper):
    """Mutated objects share unchanged subtrees; print them in full, not as YAML anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _dump_yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_NoAliasDumper, sort_keys=False, allow_unicode=True)


@dataclass
class TemplateResult:
    """What the pods of one pod template of a workload get: the template evaluated as the Pod
    its controller creates, the way the server evaluates that Pod."""

    template: str  # where the template is, e.g. spec.pytorchReplicaSpecs.Worker.template
    role: str  # "replica Worker", "head", ...; "" for single-template kinds
    verdict: str = "allowed"  # or denied: such pods are not created (nor mutated)
    patch: list[dict[str, Any]] = field(default_factory=list)
    mutated: Mapping[str, Any] | None = None  # the pod as mutated (None: not changed)

    def to_json(self) -> dict[str, Any]:
        return {
            "template": self.template,
            "role": self.role,
            "verdict": self.verdict,
            "patch": self.patch,
            "mutated": self.mutated,
        }


@dataclass
class DocumentResult:
    """The review of one document of a manifest, ready to print."""

    file: str
    index: int
    kind: str
    ref: str
    verdict: str  # allowed | denied | skipped
    reason: str = ""  # why it was skipped
    violations: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    patch: list[dict[str, Any]] = field(default_factory=list)
    mutated: Mapping[str, Any] | None = None
    # Accelerator images whose runtime nothing offline tells (what --resolve-images looks up).
    unresolved: tuple[ImageQuery, ...] = ()
    # (runtime, image) of each accelerator container whose runtime version (CUDA, ROCm, CANN)
    # nothing told where placement would have used it (Decision.runtime_unknown).
    unknown_runtimes: tuple[tuple[str, str], ...] = ()
    # A workload's pod templates as their pods will be mutated (empty for a Pod).
    templates: list[TemplateResult] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "document": self.index,
            "kind": self.kind,
            "object": self.ref,
            "verdict": self.verdict,
            "reason": self.reason,
            "violations": self.violations,
            "warnings": self.warnings,
            "changes": self.changes,
            "patch": self.patch,
            "mutated": self.mutated,
            "templates": [t.to_json() for t in self.templates],
            "unknownRuntimes": [
                {"runtime": runtime, "image": image or None}
                for runtime, image in self.unknown_runtimes
            ],
        }


def _group(doc: Mapping[str, Any]) -> str:
    """The API group of `apiVersion` ("" for the core group's "v1")."""
    api_version = doc.get("apiVersion")
    if not isinstance(api_version, str) or "/" not in api_version:
        return ""
    return api_version.split("/", 1)[0]


def review_document(
    file: str,
    index: int,
    doc: Any,
    policies: PolicySet,
    config: WebhookConfig,
    *,
    inventory: NodeInventory | None = None,
    claims: ClaimIndex | None = None,
    images: ImageFacts | None = None,
    image_platforms: Mapping[str, tuple[str, ...]] | None = None,
    image_env: ImageEnv | None = None,
) -> DocumentResult:
    if not isinstance(doc, Mapping) or not isinstance(doc.get("kind"), str):
        return DocumentResult(
            file, index, "", f"document {index}", "skipped", "not a Kubernetes object (no kind)"
        )
    kind = doc["kind"]
    unquoted = unquoted_values(doc)
    try:
        decision: Decision = evaluate(
            doc,
            policies,
            config,
            kind=kind,
            group=_group(doc),
            inventory=inventory,
            claims=claims,
            images=images,
            image_platforms=image_platforms,
            image_env=image_env,
        )
    except WebhookError as exc:
        violations = [*unquoted, f"cannot evaluate: {exc}"]
        return DocumentResult(file, index, kind, kind, "denied", violations=violations)
    if unquoted:
        # The API server refuses the object before any webhook sees it.
        return DocumentResult(file, index, kind, decision.object_ref, "denied", violations=unquoted)
    if not decision.handled:
        api_version = doc.get("apiVersion") or "no apiVersion"
        reason = decision.reason or f"{kind} ({api_version}) is not a kind the webhook checks"
        return DocumentResult(file, index, kind, decision.object_ref, "skipped", reason)
    if decision.reason and decision.allowed and not (decision.notes or decision.warnings):
        # Allowed without evaluation (e.g. an exempt namespace): say why, never "ALLOWED".
        return DocumentResult(file, index, kind, decision.object_ref, "skipped", decision.reason)
    templates = [
        TemplateResult(_path_text(spec.template_path), spec.role, "allowed", pod.patch, pod.mutated)
        if pod.allowed
        else TemplateResult(_path_text(spec.template_path), spec.role, "denied")
        for spec, pod in _template_pods(
            doc,
            kind,
            policies,
            config,
            inventory=inventory,
            claims=claims,
            images=images,
            image_platforms=image_platforms,
            image_env=image_env,
        )
    ]
    return DocumentResult(
        file,
        index,
        kind,
        decision.object_ref,
        "allowed" if decision.allowed else "denied",
        violations=[v.message for v in decision.violations],
        warnings=list(decision.warnings),
        changes=list(decision.notes),
        patch=decision.patch,
        mutated=decision.mutated,
        unresolved=decision.unresolved_images,
        unknown_runtimes=decision.runtime_unknown,
        templates=templates,
    )


def _found_text(results: Sequence[DocumentResult], resolutions: Sequence[Resolution | None]) -> str:
    """`2 with a CUDA version, 1 with a ROCm version`: the images whose registry answer named
    their runtime, per runtime (CUDA first), the same for every vendor."""
    runtimes: dict[str, str] = {}  # image -> the runtime its answer named
    for result, found in zip(results, resolutions, strict=True):
        if found is None:
            continue
        for query in found.facts:
            runtimes.setdefault(query.image, CUDA)
        for query in result.unresolved:
            vendor = vendor_named(query.runtime) if query.runtime else None
            if vendor is not None and query.image in found.env:
                runtimes.setdefault(query.image, vendor.runtime)
    counts: dict[str, int] = {}
    for runtime in runtimes.values():
        counts[runtime] = counts.get(runtime, 0) + 1
    ordered = sorted(counts.items(), key=lambda item: (item[0] != CUDA, item[0]))
    return ", ".join(f"{n} with a {runtime} version" for runtime, n in ordered) or (
        "none with a runtime version"
    )


def _path_text(path: Sequence[str | int]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def template_pod(doc: Mapping[str, Any], kind: str, spec: PodSpecRef) -> dict[str, Any]:
    """The Pod a workload's controller creates from one of its templates, as far as the
    webhook's evaluation can tell: the template's labels and the annotations its pods get,
    the workload's namespace, and (for a DaemonSet, whose pods the evaluation treats apart)
    the controller owner reference."""
    meta = doc.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name") if isinstance(meta.get("name"), str) else kind.lower()
    pod_meta: dict[str, Any] = {"generateName": f"{name}-"}
    if isinstance(meta.get("namespace"), str):
        pod_meta["namespace"] = meta["namespace"]
    node: Any = doc
    for key in spec.template_path:
        node = node[key]
    template_meta = node.get("metadata") if isinstance(node, Mapping) else None
    if spec.scratch is None and isinstance(template_meta, Mapping):
        labels = template_meta.get("labels")
        if isinstance(labels, Mapping) and labels:
            pod_meta["labels"] = dict(labels)
    if spec.annotations:
        pod_meta["annotations"] = dict(spec.annotations)
    if kind == "DaemonSet" and _group(doc) == "apps":
        # Its pods are pinned to their node by the controller: no CUDA affinity (SPEC §4).
        pod_meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": name, "controller": True}
        ]
    pod_spec = spec.scratch["spec"] if spec.scratch is not None else spec.spec
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": pod_spec}


def _template_pods(
    doc: Mapping[str, Any],
    kind: str,
    policies: PolicySet,
    config: WebhookConfig,
    **context: Any,
) -> list[tuple[PodSpecRef, Decision]]:
    """Each pod template of a workload with the evaluation of the Pod it makes; none for a Pod
    or a kind the webhook does not check. The workload object is never changed."""
    entry = lookup(kind, doc, _group(doc), config)
    if entry is None or not entry.templates:
        return []
    evaluated = []
    for spec in find_pod_specs(entry, doc):
        if not spec.is_template:
            continue
        try:
            pod = evaluate(
                template_pod(doc, kind, spec), policies, config, kind="Pod", group="", **context
            )
        except WebhookError:
            continue  # the workload's own result already says what is wrong with it
        evaluated.append((spec, pod))
    return evaluated


def _print_text(results: Sequence[DocumentResult], out: TextIO, unreadable: int = 0) -> None:
    for result in results:
        where = f"{result.file}, document {result.index}"
        reason = f" ({result.reason})" if result.reason else ""
        out.write(f"--- {result.ref} ({where}): {result.verdict.upper()}{reason}\n")
        for title, lines in (
            ("violations", result.violations),
            ("changes", result.changes),
            ("warnings", result.warnings),
        ):
            if lines:
                out.write(f"{title}:\n")
                for line in lines:
                    out.write("  - " + line.replace("\n", "\n    ") + "\n")
        if result.mutated is not None:
            out.write("mutated object:\n")
            text = _dump_yaml(dict(result.mutated))
            out.write("".join(f"  {line}\n" for line in text.splitlines()))
        for template in result.templates:
            role = f" ({template.role})" if template.role else ""
            if template.verdict == "denied":
                out.write(f"pods of {template.template}{role}: would be denied (not created)\n")
                continue
            if template.mutated is None:
                out.write(f"pods of {template.template}{role}: not changed by the webhook\n")
                continue
            out.write(f"pods of {template.template}{role}, as the webhook will mutate them:\n")
            text = _dump_yaml(dict(template.mutated))
            out.write("".join(f"  {line}\n" for line in text.splitlines()))
    denied = sum(r.verdict == "denied" for r in results)
    changed = sum(bool(r.changes) for r in results)
    files = f"; {unreadable} file(s) not readable, listed on stderr" if unreadable else ""
    out.write(
        f"\n{len(results)} document(s): {denied} denied, {changed} with changes, "
        f"{sum(r.verdict == 'skipped' for r in results)} skipped{files}\n"
    )


def _print_summary(results: Sequence[DocumentResult], out: TextIO) -> None:
    """One line per document for pipelines: verdict, where, object, counts or the reason."""
    for r in results:
        if r.verdict == "skipped":
            detail = r.reason
        else:
            detail = (
                f"{len(r.violations)} violation(s), {len(r.changes)} change(s), "
                f"{len(r.warnings)} warning(s)"
            )
        out.write(f"{r.verdict.upper():<8} {r.file}#{r.index} {r.ref}: {detail}\n")


def load_policies(path: Path | None) -> PolicySet:
    if path is None:
        if not DEFAULT_POLICIES.is_dir():
            raise ManifestError(
                "no policies: pass --policies PATH (a folder or file of CRL ConfigMaps: the "
                "project's configmaps/, or your cluster's: kubectl get configmaps -n kube-public "
                "-o yaml > crl.yaml)"
            )
        path = DEFAULT_POLICIES
    read = [
        (file, doc)
        for file in policy_files(path)
        for doc in read_documents(file)
        if isinstance(doc, Mapping) and doc.get("kind") == "ConfigMap"
    ]
    found = [doc for _, doc in read]
    if not any(_is_crl(doc) for doc in found):
        # A pipeline must not allow everything because --policies points at the wrong place.
        raise ManifestError(
            f"no CRL ConfigMap in {path} ({len(found)} ConfigMap(s), none a CRL): pass "
            "CRL ConfigMaps (cf-crl-*): the project's configmaps/, or your cluster's: "
            "kubectl get configmaps -n kube-public -o yaml > crl.yaml"
        )
    # A CRL that does not parse would be left out, and the pods it limits reviewed without it:
    # an error, as `lint` says of the same folder, never a silent pass.
    broken = [
        f"{file}: {parse_configmap(doc).ref}: {problems[0]}"
        + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
        for file, doc in read
        if _is_crl(doc) and (problems := [*unquoted_values(doc), *parse_configmap(doc).errors])
    ]
    if broken:
        shown = "; ".join(broken[:3]) + (f"; and {len(broken) - 3} more" if len(broken) > 3 else "")
        raise ManifestError(
            f"{len(broken)} CRL ConfigMap(s) in {path} do not parse: {shown}; fix or remove "
            f"them (`gpu-webhook lint {path}` lists every error)"
        )
    return PolicySet.from_configmaps(found)


def _is_crl(doc: Mapping[str, Any]) -> bool:
    parsed = parse_configmap(doc)
    return parsed.is_crl or parsed.name.startswith("cf-crl-")


def _read_cluster(args: argparse.Namespace, config: WebhookConfig) -> ClusterSnapshot:
    """The cluster's policies/nodes/claim templates, listed once (read-only)."""
    # Imported here: only --kubeconfig needs the kubernetes client (~13 MiB, slow to import).
    from webhook.sources.snapshot import ClusterReadError, read_cluster  # noqa: PLC0415

    try:
        return asyncio.run(
            read_cluster(
                args.kubeconfig,
                config,
                policies=args.policies is None,
                nodes=args.nodes is None,
            )
        )
    except ClusterReadError as exc:
        raise CommandError(str(exc)) from None


def _context(
    args: argparse.Namespace,
    config: WebhookConfig,
    cluster: ClusterSnapshot | None,
    manifest: list[tuple[str, list[Any]]],
) -> Context:
    context = Context()
    if args.nodes is not None:
        context.inventory = load_nodes(args.nodes, config)
        context.lines.append(inventory_line(context.inventory, str(args.nodes), config))
    elif cluster is not None and cluster.inventory is not None:
        context.inventory = cluster.inventory
        where = f"the cluster at {cluster.server}"
        context.lines.append(inventory_line(context.inventory, where, config))
    claim_sources: list[tuple[str, list[Any]]] = []
    if args.claims is not None:
        claim_sources.append((str(args.claims), load_claim_objects(args.claims)))
    claim_sources.extend(
        (name, [doc for doc in docs if is_claim_object(doc)]) for name, docs in manifest
    )
    context.claims, line = claim_index(cluster.claims if cluster else None, claim_sources)
    if line:
        context.lines.append(line)
    return context


def _table_line(cluster: ClusterSnapshot) -> str | None:
    if cluster.image_table is None:
        return None
    ref, count = cluster.image_table
    entries = f"{count} entr{'y' if count == 1 else 'ies'}"
    return f"image table: {entries} from ConfigMap {ref} in the cluster at {cluster.server}"


def cmd_review(args: argparse.Namespace, out: TextIO) -> int:
    config = load_config(args.config)
    cluster = _read_cluster(args, config) if args.kubeconfig is not None else None
    table = config.image_cuda_table_config_map
    if cluster is not None and cluster.config is not None:
        # The image-table ConfigMap's entries before the config file's, as the server does.
        config = cluster.config
    elif cluster is None and table is not None:
        sys.stderr.write(
            f"gpu-webhook review: note: the config names imageCudaTableConfigMap {table.ref}; "
            "pass --kubeconfig to use its entries as the server does\n"
        )
    if cluster is not None and cluster.policies is not None:
        policies = cluster.policies
        policy_line = (
            f"policies: {cluster.configmaps} CRL ConfigMap(s) from the cluster at {cluster.server}"
        )
    else:
        policies = load_policies(args.policies)
        policy_line = None
    for note in cluster.notes if cluster is not None else ():
        sys.stderr.write(f"gpu-webhook review: note: {printable(note)}\n")
    # A folder's files read and reviewed so far, on a terminal only and never in json or yaml.
    directory = args.file != "-" and Path(args.file).is_dir()
    machine = args.output in ("json", "yaml")
    progress = Progress(sys.stderr, "review", enabled=directory and not machine)
    try:
        if args.file == "-":
            manifests = Manifests([("<stdin>", parse_documents(sys.stdin.read(), "<stdin>"))])
        else:
            read = (lambda n: progress.update(f"read {n} file(s)")) if progress.on else None
            manifests = read_manifests(Path(args.file), read)
        sources = manifests.sources
        context = _context(args, config, cluster, sources)
        if cluster is not None and (line := _table_line(cluster)):
            context.lines.append(line)
        documents = [(name, i, doc) for name, docs in sources for i, doc in enumerate(docs, 1)]
        results: list[DocumentResult] = []
        for reviewed, (name, docs) in enumerate(sources, 1):
            results += [
                review_document(
                    name,
                    i,
                    doc,
                    policies,
                    config,
                    inventory=context.inventory,
                    claims=context.claims,
                )
                for i, doc in enumerate(docs, 1)
            ]
            progress.update(f"reviewed {reviewed}/{len(sources)} file(s)")
    finally:
        progress.done()
    if args.resolve_images and any(r.unresolved for r in results):
        resolutions = resolve_images(args, config, [r.unresolved for r in results])
        # Images, not (image, architecture) pairs: a pod allowed on several architectures
        # asks once for each.
        asked = {q.image for r in results for q in r.unresolved}
        context.lines.append(
            f"image lookups: {len(asked)} image(s) asked their registries, "
            f"{_found_text(results, resolutions)}"
        )
        for index, ((name, i, doc), resolution) in enumerate(
            zip(documents, resolutions, strict=True)
        ):
            if resolution is None:
                continue
            again = review_document(
                name,
                i,
                doc,
                policies,
                config,
                inventory=context.inventory,
                claims=context.claims,
                images=resolution.facts,
                # The indexes' platforms: the image-architecture runtime fix (SPEC §14).
                image_platforms=resolution.platforms or None,
                # Other vendors' variables of the configs (SPEC §13's driver-release gate).
                image_env=resolution.env or None,
            )
            again.warnings += resolution.warnings
            results[index] = again
    header = [policy_line, *context.lines] if policy_line else context.lines
    if args.output == "text":
        # What the answers depend on besides the manifest, before them.
        out.writelines(f"{line}\n" for line in header)
        _print_text(results, out, len(manifests.unreadable))
    else:
        # Machine formats keep their shape (a list of results; one line per document): the
        # same lines go to stderr.
        sys.stderr.writelines(f"gpu-webhook review: {printable(line)}\n" for line in header)
        if args.output == "json":
            json.dump([r.to_json() for r in results], out, indent=2, ensure_ascii=False)
            out.write("\n")
        elif args.output == "yaml":
            out.write(_dump_yaml([r.to_json() for r in results]))
        else:
            _print_summary(results, out)
    # Each unreadable file of a directory on one line, after the others' results; exit 2.
    sys.stderr.writelines(
        f"gpu-webhook review: {printable(line)}\n" for line in manifests.unreadable
    )
    if manifests.unreadable:
        return EXIT_USAGE
    return EXIT_DENIED if any(r.verdict == "denied" for r in results) else EXIT_OK
