"""`gpu-webhook nodes` (SPEC §13): what the webhook knows about each node of a kubeconfig's
cluster or of a nodes file (and the ResourceSlices beside it) — its accelerator vendor, its
driver release as read, its device target or chip, the table row that applies, and, with
`--image`, whether the node runs that image (fit, unfit, unknown), with the label that makes
an unknown node known (the placement warnings' own hint: core/placement/nodeclass.py).

It reads nodes exactly as placement does: the CUDA label schemes and DRA ResourceSlices of
NVIDIA nodes (core/placement/inventory.py), and each vendor gate's labels through its tables
(core/placement/vendor_nodes.py), the config's rows added to the shipped ones."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from webhook.cli.exits import EXIT_OK, CommandError
from webhook.cli.inputs import load_nodes
from webhook.core.base.errors import ManifestError
from webhook.core.base.versions import CudaVersion
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.placement import cuda
from webhook.core.placement import ranges as cuda_ranges
from webhook.core.placement.dra import DraNode
from webhook.core.placement.dra import from_objects as dra_facts
from webhook.core.placement.gate import _hints as vendor_hints
from webhook.core.placement.gate import facts_of
from webhook.core.placement.inventory import DRA_SCHEME, InventoryFacts, NodeInventory
from webhook.core.placement.vendor_nodes import NodeDriver, VendorFacts, Want, node_class
from webhook.core.placement.vendors import (
    Vendor,
    container_finding,
    device_matches,
    in_force,
    shipped_vendors,
)
from webhook.sources.files import read_documents

NVIDIA = "NVIDIA GPU"
SLICES_HINT = "pass the output of `kubectl get resourceslices -o yaml`"


def add_nodes_parser(sub: Any) -> None:
    nodes = sub.add_parser(
        "nodes",
        help="per node: accelerator vendor, driver release, device, table row, and whether "
        "it runs an image (--image); the label that makes an unknown node known",
    )
    source = nodes.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--kubeconfig", help="read the cluster's Nodes and ResourceSlices through this kubeconfig"
    )
    source.add_argument(
        "--nodes",
        type=Path,
        help="a `kubectl get nodes -o yaml` file (ResourceSlices in it are read too)",
    )
    nodes.add_argument(
        "--slices",
        type=Path,
        help="a `kubectl get resourceslices -o yaml` file, with --nodes (DRA-only nodes)",
    )
    nodes.add_argument(
        "--config", type=Path, help="webhook config YAML (label schemes, table rows; default: none)"
    )
    nodes.add_argument("--image", help="say per node whether it runs this image")
    nodes.add_argument(
        "-o",
        "--output",
        choices=("text", "json"),
        default="text",
        help="a listing, or JSON for scripts (default: %(default)s)",
    )


def _slices(path: Path) -> dict[str, DraNode]:
    objs = [
        obj
        for doc in read_documents(path)
        for obj in (
            doc.get("items") or [] if isinstance(doc, Mapping) and "items" in doc else [doc]
        )
    ]
    for position, obj in enumerate(objs, 1):
        if not isinstance(obj, Mapping) or obj.get("kind") != "ResourceSlice":
            kind = obj.get("kind") if isinstance(obj, Mapping) else type(obj).__name__
            raise ManifestError(
                f"{path}: item {position} is a {kind}, not a ResourceSlice; {SLICES_HINT}"
            )
    return dra_facts(objs)


def _inventory(args: argparse.Namespace, config: WebhookConfig) -> tuple[NodeInventory, str]:
    if args.kubeconfig is not None:
        if args.slices is not None:
            raise CommandError("--slices goes with --nodes; --kubeconfig reads the cluster's")
        # Imported here: only --kubeconfig needs the kubernetes client (slow to import).
        from webhook.sources.snapshot import ClusterReadError, read_cluster  # noqa: PLC0415

        try:
            snapshot = asyncio.run(read_cluster(args.kubeconfig, config, policies=False))
        except ClusterReadError as exc:
            raise CommandError(str(exc)) from None
        if snapshot.inventory is None:
            raise CommandError("the cluster's Nodes could not be listed; see the notes above")
        return snapshot.inventory, f"the cluster at {snapshot.server}"
    inventory = load_nodes(args.nodes, config)
    where = str(args.nodes)
    if args.slices is not None:
        dra = {**inventory.dra, **_slices(args.slices)}
        inventory = NodeInventory.build(inventory.nodes, config=config, dra=dra)
        where += f" and {args.slices}"
    return inventory, where


class _Image:
    """What `--image` needs, per vendor: NVIDIA's CUDA, or a gate's runtime and devices."""

    def __init__(self, image: str, config: WebhookConfig, vendors: list[Vendor]) -> None:
        self.image = image
        container = {"name": "c", "image": image}
        found = cuda.detect(container, config).requirement
        self.cuda: CudaVersion | None = found.version if found is not None else None
        self.vendor: str | None = NVIDIA if self.cuda is not None else None
        self.want: Want | None = None
        self.runtime = f"CUDA {self.cuda}" if self.cuda is not None else ""
        for vendor in vendors if self.vendor is None else ():
            gate = config.accelerators.gate(vendor.name)
            assert gate is not None
            finding = container_finding(vendor, container, {}, gate)
            if finding is not None and finding.version is not None:
                self.vendor = _vendor_name(vendor)
                devices = (finding.devices,) if finding.devices else ()
                self.want = Want((finding.version,), devices)
                self.runtime = f"{vendor.runtime} {vendor.shown(finding.version)}"
                break


def _vendor_name(vendor: Vendor) -> str:
    """`AMD GPU`, `Ascend NPU`: the vendor's nodes, singular."""
    return vendor.nodes.removesuffix(" nodes")


def _nvidia(
    name: str,
    labels: Mapping[str, str],
    facts: InventoryFacts,
    published: DraNode | None,
    config: WebhookConfig,
    image: _Image | None,
) -> dict[str, Any] | None:
    node = facts.nodes.get(name)
    signed = any(key in labels for key in config.gpu_node_labels)
    if node is None and not signed and (published is None or published.driver is None):
        return None
    version: CudaVersion | None = None
    driver: dict[str, Any] = {"label": None, "value": None, "release": None, "problem": ""}
    if node is not None and node.cuda:
        index, version = node.cuda[0]
        scheme = facts.schemes[index]
        if scheme is DRA_SCHEME:
            driver.update(label="ResourceSlice gpu.nvidia.com cudaDriverVersion")
        else:
            driver.update(label=f"{scheme.major}, {scheme.minor}")
        driver.update(value=str(version), release=f"CUDA {version}")
    else:
        driver["problem"] = "no CUDA version label"
    if published is not None and published.driver is not None:
        driver["driverVersion"] = published.driver
    compute = node.compute if node is not None else None
    device = {
        "label": "compute capability",
        "value": str(compute) if compute is not None else None,
        "target": f"compute {compute}" if compute is not None else None,
        "product": published.product if published is not None else None,
    }
    result: dict[str, Any] = {
        "vendor": NVIDIA,
        "driver": driver,
        "device": device,
        # NVIDIA's CUDA rule needs no table: a driver runs every CUDA up to its own version.
        "row": {"rule": "CUDA backward compatibility", "source": "SPEC §4"}
        if version is not None
        else None,
    }
    hint = " ".join(map(str, cuda_ranges._hints(config))) if version is None else None
    if image is not None:
        result["image"] = _nvidia_fit(version, compute, image, config)
        if result["image"]["fit"] != "unknown":
            hint = None
    result["hint"] = hint
    return result


def _nvidia_fit(
    version: CudaVersion | None,
    compute: CudaVersion | None,
    image: _Image,
    config: WebhookConfig,
) -> dict[str, Any]:
    shown = {"image": image.image, "runtime": image.runtime or None}
    if image.vendor != NVIDIA or image.cuda is None:
        return {**shown, **_other_vendor(image, NVIDIA)}
    skew = config.max_major_skew if config.major_skew == "require" else None
    rng = cuda.cuda_range(image.cuda, vgpu=False, skew=skew)
    floor = cuda.architecture_floor(image.cuda)
    if compute is not None and floor is not None and compute < floor:
        return {**shown, "fit": "unfit", "why": f"compute {compute} is below {floor}"}
    if version is None:
        return {**shown, "fit": "unknown", "why": "its CUDA version is not labelled"}
    if rng.holds(version):
        return {**shown, "fit": "fit", "why": f"CUDA {version} {rng.text()}"}
    return {**shown, "fit": "unfit", "why": f"CUDA {version} is not {rng.text()}"}


def _other_vendor(image: _Image, vendor: str) -> dict[str, Any]:
    if image.vendor is None:
        return {"fit": "unknown", "why": "no table or tag tells the image's runtime version"}
    return {"fit": "unfit", "why": f"{vendor} node; the image needs {image.runtime}"}


def _gate_node(
    facts: VendorFacts, node: NodeDriver, image: _Image | None, published: DraNode | None
) -> dict[str, Any]:
    vendor = facts.vendor
    name = _vendor_name(vendor)
    release = node.release
    driver = {
        "label": node.driver_key or None,
        "value": node.driver_value if node.driver_key else None,
        "release": release.release if release is not None else None,
        "problem": node.problem,
    }
    device = {
        "label": node.device_key or None,
        "value": node.device_value if node.device_key else None,
        "target": node.device,
        "product": published.product if published is not None else None,
    }
    row = None
    if release is not None:
        runtimes = list(release.runtimes) + [
            f"{q.runtime} ({', '.join(q.devices)})" for q in release.qualified
        ]
        row = {
            "release": release.release,
            "runtimes": [vendor.shown(r) for r in runtimes],
            "source": release.source,
        }
    result: dict[str, Any] = {"vendor": name, "driver": driver, "device": device, "row": row}
    unknown = release is None or node.device is None
    if image is not None:
        shown = {"image": image.image, "runtime": image.runtime or None}
        if image.vendor != name or image.want is None:
            result["image"] = {**shown, **_other_vendor(image, name)}
        else:
            kind = node_class(node, image.want, device_matches)
            result["image"] = {**shown, "fit": kind, "why": _why(kind, node, vendor)}
        unknown = result["image"]["fit"] == "unknown" and image.vendor == name
    result["hint"] = " ".join(map(str, vendor_hints(facts, [node]))) if unknown else None
    return result


def _why(kind: str, node: NodeDriver, vendor: Vendor) -> str:
    if kind == "fit":
        return f"{vendor.driver} {node.release.release if node.release else ''} runs it".strip()
    if kind == "unfit":
        return f"its {vendor.driver} or {vendor.device} does not run it"
    return node.problem or f"its {vendor.device} is unknown"


def node_reports(
    inventory: NodeInventory, config: WebhookConfig, image: str | None
) -> list[dict[str, Any]]:
    """One report per node (sorted by name), as `-o json` prints them."""
    facts = inventory.facts(config)
    gates: list[VendorFacts] = []
    for vendor in shipped_vendors():
        gate = config.accelerators.gate(vendor.name)
        if gate is not None and gate.enabled:
            gates.append(facts_of(in_force(vendor, gate), inventory, config))
    wanted = _Image(image, config, [f.vendor for f in gates]) if image else None
    reports = []
    for name in sorted(inventory.nodes):
        labels = inventory.nodes[name]
        published = inventory.dra.get(name)
        found = _nvidia(name, labels, facts, published, config, wanted)
        for vendor_facts in gates if found is None else ():
            node = vendor_facts.nodes.get(name)
            if node is not None:
                found = _gate_node(vendor_facts, node, wanted, published)
                break
        if found is None:
            found = {"vendor": None, "driver": None, "device": None, "row": None, "hint": None}
            if wanted is not None:
                found["image"] = {
                    "image": wanted.image,
                    "runtime": wanted.runtime or None,
                    "fit": "unfit",
                    "why": "no accelerator this webhook knows",
                }
        reports.append({"node": name, **found})
    return reports


def vendor_release(release: str) -> str:
    return f"release {release}"


def _text(report: Mapping[str, Any]) -> list[str]:
    name, vendor = report["node"], report["vendor"]
    if vendor is None:
        lines = [f"{name}: no accelerator labels or ResourceSlices the webhook reads"]
    else:
        lines = [f"{name}: {vendor}"]
        driver, device, row = report["driver"], report["device"], report["row"]
        read = f"{driver['label']}={driver['value']}" if driver["label"] else ""
        if vendor == NVIDIA and driver["release"]:
            lines.append(f"  driver: {driver['release']} (from {driver['label']})")
        elif driver["release"]:
            lines.append(f"  driver: {read} -> {vendor_release(driver['release'])}")
        else:
            lines.append(f"  driver: unknown ({driver['problem']})")
        if driver.get("driverVersion"):
            lines.append(f"  driver version (ResourceSlice): {driver['driverVersion']}")
        if vendor == NVIDIA:
            if device["value"] is not None:
                lines.append(f"  device: compute capability {device['value']}")
        elif device["label"]:
            target = device["target"] or "not in the device table"
            lines.append(f"  device: {device['label']}={device['value']} -> {target}")
        else:
            lines.append("  device: not labelled")
        if device.get("product"):
            lines.append(f"  product (ResourceSlice): {device['product']}")
        if row is not None and "runtimes" in row:
            lines.append(f"  row: {row['release']} runs {', '.join(row['runtimes'])}")
            lines.append(f"       [{row['source']}]")
        elif row is not None:
            lines.append(f"  row: {row['rule']}")
    image = report.get("image")
    if image is not None:
        lines.append(f"  {image['image']}: {image['fit']} ({image['why']})")
    if report.get("hint"):
        lines.append(f"  to make it known: label {report['hint']}")
    return lines


def cmd_nodes(args: argparse.Namespace, out: TextIO) -> int:
    config = load_config(args.config)
    inventory, where = _inventory(args, config)
    reports = node_reports(inventory, config, args.image)
    if args.output == "json":
        out.write(json.dumps(reports, indent=2) + "\n")
        return EXIT_OK
    text = [f"{len(reports)} node(s) from {where}"]
    for report in reports:
        text += _text(report)
    out.write("\n".join(text) + "\n")
    return EXIT_OK
