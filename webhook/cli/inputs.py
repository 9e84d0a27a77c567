"""What `gpu-webhook review` evaluates with besides policies (SPEC §9): a node inventory
(`--nodes FILE`, or the cluster's with `--kubeconfig`) and DRA claims (`--claims FILE`,
ResourceClaimTemplates/ResourceClaims in the reviewed manifest, or the cluster's templates)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook.core.base.errors import ManifestError
from webhook.core.config.model import WebhookConfig
from webhook.core.placement.dra import from_objects as dra_facts
from webhook.core.placement.gate import inventory_summary
from webhook.core.placement.inventory import NodeInventory
from webhook.core.workloads.claims import BUILT_IN_CLASSES, ClaimIndex, DeviceClasses
from webhook.sources.files import policy_files, read_documents

NODES_HINT = "pass the output of `kubectl get nodes -o yaml` (or -o json)"
# DeviceClasses too (SPEC §13): a class's vendor is its driver, its KEP-5004 names its devices.
CLAIM_KINDS = ("ResourceClaimTemplate", "ResourceClaim", "DeviceClass")
CLAIMS_HINT = (
    "pass ResourceClaimTemplates, ResourceClaims or DeviceClasses, "
    "e.g. `kubectl get resourceclaimtemplates -A -o yaml`"
)


@dataclass
class Manifests:
    """The documents of each readable file, and one line for each file that is not."""

    sources: list[tuple[str, list[Any]]] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)


def read_manifests(path: Path, progress: Callable[[int], None] | None = None) -> Manifests:
    """`review -f FILE|DIR`: one file that cannot be read (binary, invalid YAML, no
    permission) is an error (exit 2); in a directory it is reported and the others are still
    reviewed, and the review ends with exit 2. `progress`: called with the files read so far."""
    found = Manifests()
    if not path.is_dir():
        found.sources.append((str(path), read_documents(path)))
        return found
    for count, file in enumerate(policy_files(path), 1):
        try:
            found.sources.append((str(file), read_documents(file)))
        except ManifestError as exc:
            found.unreadable.append(" ".join(str(exc).split()))  # one line per file
        if progress is not None:
            progress(count)
    return found


@dataclass
class Context:
    """The cluster facts a review uses, and the lines that say where they came from."""

    inventory: NodeInventory | None = None
    claims: ClaimIndex | None = None
    lines: list[str] = field(default_factory=list)  # "node inventory: 3 nodes from nodes.yaml"


def _typed_items(docs: Iterable[Any]) -> list[tuple[int, Any]]:
    """(position, object): a typed list (`NodeList` from the API, whose items carry no kind)
    is expanded with its item kind; `kind: List` is already expanded by the manifest reader."""
    found: list[tuple[int, Any]] = []
    for doc in docs:
        kind = doc.get("kind") if isinstance(doc, Mapping) else None
        items = doc.get("items") if isinstance(doc, Mapping) else None
        if isinstance(kind, str) and kind.endswith("List") and isinstance(items, list):
            item_kind = kind[: -len("List")]
            found.extend(
                (len(found) + 1, {"kind": item_kind, **i} if isinstance(i, Mapping) else i)
                for i in items
            )
        else:
            found.append((len(found) + 1, doc))
    return found


def _kind(obj: Any) -> str:
    kind = obj.get("kind") if isinstance(obj, Mapping) else None
    if isinstance(kind, str):
        return f"a {kind}"
    return "an object without a kind" if isinstance(obj, Mapping) else f"a {type(obj).__name__}"


def load_nodes(path: Path, config: WebhookConfig) -> NodeInventory:
    """The inventory of a `kubectl get nodes -o yaml|json` file (a List of Nodes, or Node
    documents, and the ResourceSlices of `kubectl get nodes,resourceslices`); ManifestError
    (exit 2) for a file holding anything else, or no Node.

    kubectl (k8s.io/kubectl pkg/cmd/get/get.go) wraps zero or several objects into a
    `v1 List` whose items keep their kind; one named object (`kubectl get node gpu-1 -o yaml`)
    is printed bare, so a Node document, or several joined with `---`, is read as well.
    """
    nodes: list[Mapping[str, Any]] = []
    slices: list[Mapping[str, Any]] = []
    for position, obj in _typed_items(read_documents(path)):
        if isinstance(obj, Mapping) and obj.get("kind") == "ResourceSlice":
            # `kubectl get nodes,resourceslices -o yaml`: DRA-only nodes (SPEC §13).
            slices.append(obj)
            continue
        if not isinstance(obj, Mapping) or obj.get("kind") != "Node":
            raise ManifestError(
                f"{path}: item {position} is {_kind(obj)}, not a Node; {NODES_HINT}"
            )
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
            raise ManifestError(f"{path}: item {position} is a Node without metadata.name")
        nodes.append(obj)
    if not nodes:
        raise ManifestError(f"{path} holds no Node; {NODES_HINT}")
    return NodeInventory.from_objects(nodes, config, dra=dra_facts(slices) if slices else None)


def load_claim_objects(path: Path) -> list[Mapping[str, Any]]:
    """The ResourceClaimTemplates/ResourceClaims of a `--claims` file; anything else is an
    error (exit 2), as a mistyped path must not silently mean "no claims"."""
    objs: list[Mapping[str, Any]] = []
    for position, obj in _typed_items(read_documents(path)):
        if not isinstance(obj, Mapping) or obj.get("kind") not in CLAIM_KINDS:
            what = _kind(obj)
            raise ManifestError(
                f"{path}: item {position} is {what}, not a ResourceClaimTemplate, "
                f"ResourceClaim or DeviceClass; {CLAIMS_HINT}"
            )
        api_version = obj.get("apiVersion")
        if not isinstance(api_version, str) or not api_version.startswith("resource.k8s.io/"):
            raise ManifestError(
                f"{path}: item {position} is a {obj['kind']} with apiVersion "
                f"{api_version!r}; DRA objects are resource.k8s.io/v1"
            )
        objs.append(obj)
    if not objs:
        raise ManifestError(
            f"{path} holds no ResourceClaimTemplate, ResourceClaim or DeviceClass; {CLAIMS_HINT}"
        )
    return objs


def is_claim_object(doc: Any) -> bool:
    api_version = doc.get("apiVersion") if isinstance(doc, Mapping) else None
    return (
        isinstance(api_version, str)
        and api_version.startswith("resource.k8s.io/")
        and doc.get("kind") in CLAIM_KINDS
    )


def claim_index(
    cluster: ClaimIndex | None, sources: Sequence[tuple[str, Sequence[Mapping[str, Any]]]]
) -> tuple[ClaimIndex | None, str | None]:
    """The cluster's templates overlaid with the claim objects of each (name, objects) source
    (a manifest's own template is what its pods will use once applied); None when there is
    nothing at all, as the evaluation then says "no DRA claim data here". Also the header line.
    """
    named = [(name, objs) for name, objs in sources if objs]
    if cluster is None and not named:
        return None, None
    local = ClaimIndex.from_objects(obj for _, objs in named for obj in objs)
    templates = {**(cluster.templates if cluster else {}), **local.templates}
    claims = {**(cluster.claims if cluster else {}), **local.claims}
    facts = {**(cluster.classes.facts if cluster else {}), **local.classes.facts}
    where = [name for name, _ in named] + (["the cluster"] if cluster is not None else [])
    classes = f", {len(facts)} DeviceClass(es)" if facts else ""
    line = (
        f"DRA claims: {len(templates)} ResourceClaimTemplate(s), {len(claims)} "
        f"ResourceClaim(s){classes} from {', '.join(where)}"
    )
    known = DeviceClasses.of(facts) if facts else BUILT_IN_CLASSES
    return ClaimIndex(templates=templates, claims=claims, classes=known), line


def inventory_line(inventory: NodeInventory, source: str, config: WebhookConfig) -> str:
    """E.g. "node inventory: 12 nodes from nodes.yaml (8 with CUDA labels: GFD)"."""
    facts = inventory.facts(config)
    schemes = ", ".join(s.label for s in facts.carried) or "no known scheme"
    # Other vendors' nodes by driver release (SPEC §13), when some node carries their labels.
    vendors = "".join(f"; {line}" for line in inventory_summary(inventory, config))
    return (
        f"node inventory: {facts.total} node(s) from {source} "
        f"({facts.labelled} with CUDA labels; scheme(s): {schemes}){vendors}"
    )
