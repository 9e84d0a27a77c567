"""`gpu-webhook images IMAGE…`: each image's runtime (CUDA, ROCm, CANN: one output for every
vendor) and where it came from (the admin table, the reference, shipped knowledge, or the
image's configuration in its registry), what placement reads of it, and the config entries
(`imageCudaTable`, `accelerators.<vendor>.imageTable`) that pin the registry answers for clusters
that cannot look them up.
Also the registry flags shared by `serve` and `review --resolve-images`."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TextIO

import yaml

from webhook.cli.exits import EXIT_DENIED, EXIT_OK, CommandError
from webhook.core.base.wording import fit
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.images.facts import DEFAULT_ARCH
from webhook.core.images.references import normalize
from webhook.core.images.requires import branch_list
from webhook.core.outcome.decision import CUDA
from webhook.core.placement import cuda
from webhook.core.placement.vendor_nodes import Want
from webhook.core.placement.vendors import (
    Release,
    Vendor,
    container_finding,
    device_matches,
    in_force,
    release_order,
    shipped_vendors,
)

if TYPE_CHECKING:
    from webhook.core.images.facts import ImageQuery
    from webhook.registry.client import RegistryClient
    from webhook.registry.resolver import Resolution
    from webhook.registry.results import LookupResult


def add_registry_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--registry-auth",
        type=Path,
        metavar="FILE",
        help="registry credentials for image lookups: a dockerconfigjson file (`auths`), e.g. "
        "the .dockerconfigjson of a kubernetes.io/dockerconfigjson Secret; its registries may "
        "be asked",
    )
    parser.add_argument(
        "--registry-ca",
        type=Path,
        metavar="FILE",
        help="PEM CA certificates trusted for registries besides the system's",
    )


def registry_client(args: argparse.Namespace, config: WebhookConfig) -> RegistryClient:
    """The client the flags describe; CommandError (exit 2) when a file is unusable."""
    # Imported here: aiohttp (~40 ms) only for the commands that talk to registries.
    from webhook.registry.client import RegistryClient  # noqa: PLC0415
    from webhook.registry.credentials import CredentialsError  # noqa: PLC0415

    try:
        return RegistryClient(config, auth_file=args.registry_auth, ca_file=args.registry_ca)
    except (CredentialsError, ValueError) as exc:
        raise CommandError(str(exc)) from None


def resolve_images(
    args: argparse.Namespace, config: WebhookConfig, pending: Sequence[Sequence[ImageQuery]]
) -> list[Resolution | None]:
    """`review --resolve-images`: every document's unresolved images looked up at once (each
    lookup bounded by registryLookups.timeoutSeconds), then answered per document."""
    from webhook.registry.resolver import ImageResolver  # noqa: PLC0415

    resolver = ImageResolver(registry_client(args, config), config.registry_lookups)
    # The CLI waits for every lookup: each one ends by its own timeout.
    budget = config.registry_lookups.timeout_seconds + 1

    async def run() -> list[Resolution | None]:
        try:
            await resolver.resolve([q for queries in pending for q in queries], budget)
            return [
                await resolver.resolve(queries, budget) if queries else None for queries in pending
            ]
        finally:
            await resolver.close()

    return asyncio.run(run())


def add_images_parser(sub: Any) -> None:
    images = sub.add_parser(
        "images",
        help="print each image's runtime version (CUDA, ROCm, CANN), where it came from, and the "
        "config entries that pin it (exit 1 if some image's runtime stays unknown)",
    )
    images.add_argument("image", nargs="+", help="image references, as in a pod spec")
    images.add_argument("--config", type=Path, help="webhook config YAML (default: built-in)")
    images.add_argument(
        "--arch",
        default=DEFAULT_ARCH,
        help="architecture the pods run on: the entry of a multi-platform image to read, and "
        "shipped knowledge that differs by architecture (default: %(default)s)",
    )
    images.add_argument(
        "--no-lookup",
        action="store_true",
        help="never ask a registry: only the config, the reference and shipped knowledge",
    )
    images.add_argument(
        "-o",
        "--output",
        choices=("text", "json"),
        default="text",
        help="a table, or JSON for scripts (default: %(default)s)",
    )
    add_registry_arguments(images)


class VendorRuntime(NamedTuple):
    """Another vendor's runtime an image needs (SPEC §13), as the driver-release gate reads it."""

    vendor: Vendor  # its tables in force (the shipped rows and the config's)
    version: str  # the version as read (7.14.0, 8.3.rc1): what the table rows cover
    devices: tuple[str, ...]  # the gfx targets or chips its code is built for (() unknown)

    @property
    def shown(self) -> str:
        return self.vendor.shown(self.version)

    def releases(self) -> tuple[str, ...]:
        """The driver releases of the vendor's table that run it (on its devices, where it
        names them), oldest first: where the gate's terms can send its pods."""
        want = Want((self.version,), (self.devices,) if self.devices else ())
        found = sorted(
            {r.release for r in self.vendor.releases if _runs(want, r)}, key=release_order
        )
        return tuple(dict.fromkeys(self.vendor.shown(r) for r in found))


def _runs(want: Want, release: Release) -> bool:
    """Whether `release` runs what `want` needs on some device it is built for (any device,
    when it names none)."""
    if not want.devices:
        return want.runs_somewhere(release)
    return want.runs(release) or any(
        want.runs(release, d)
        for q in release.qualified
        for d in q.devices
        if want.fits_device(d, device_matches)
    )


@dataclass
class ImageAnswer:
    image: str
    version: cuda.CudaVersion | None
    origin: str  # "admin table" | "reference" | "shipped knowledge" | "registry" | ""
    source: str  # the rule or env entry it came from; why it is unknown otherwise
    digest: str = ""
    # Driver branches the image declares forward compatibility for (its NVIDIA_REQUIRE_CUDA).
    forward: tuple[int, ...] = ()
    # Another vendor's runtime the image needs (SPEC §13): ROCm, CANN.
    accelerator: VendorRuntime | None = None

    @property
    def known(self) -> bool:
        return self.version is not None or self.accelerator is not None

    @property
    def runtime(self) -> str:
        """The runtime placement reads for the image: CUDA, or the vendor's (ROCm, CANN)."""
        return self.accelerator.vendor.runtime if self.accelerator else CUDA

    @property
    def shown_version(self) -> str | None:
        if self.accelerator is not None:
            return self.accelerator.shown
        return str(self.version) if self.version else None

    @property
    def floor(self) -> cuda.CudaVersion | None:
        """The lowest compute capability the image's CUDA supports (SPEC §4)."""
        return cuda.architecture_floor(self.version) if self.version else None

    def to_json(self) -> dict[str, Any]:
        """The same fields for every runtime; the CUDA-only facts empty for the others."""
        vendor = self.accelerator
        return {
            "image": self.image,
            "runtime": self.runtime if self.known else None,
            "version": self.shown_version,
            "devices": list(vendor.devices) if vendor else [],
            "driverReleases": list(vendor.releases()) if vendor else [],
            "origin": self.origin or None,
            "source": self.source,
            "digest": self.digest or None,
            "cudaVersion": str(self.version) if self.version else None,
            "minComputeCapability": str(self.floor) if self.floor else None,
            "forwardCompatibleDriverBranches": list(self.forward),
        }

    def line(self) -> str:
        """The image's line: its runtime and version, and where they came from."""
        if not self.known:
            return f"{self.image}: CUDA unknown ({self.source})\n"
        if self.origin == "reference":
            origin = "the reference"
        elif self.origin == "registry":
            origin = f"its registry ({self.source})"
        else:
            # Shipped knowledge's source: CUDA's says so, another vendor's names the image.
            source = self.source.removeprefix("shipped knowledge: ")
            origin = f"the {self.origin} ({source.removeprefix(f'{self.image}: ')})"
        return f"{self.image}: {self.runtime} {self.shown_version} from {origin}\n"

    def details(self) -> str:
        """The indented lines under the image's line, what placement reads of it: the CUDA
        floor and forward-compatible branches; another vendor's devices and driver releases."""
        lines = ""
        if self.floor is not None:
            lines += (
                f"  GPUs with compute capability ≥ {self.floor} "
                f"(architecture floor of CUDA {self.version})\n"
            )
        if self.forward:
            branches = ", ".join(str(b) for b in self.forward)
            lines += (
                f"  forward compatible on driver branches {branches} (on forwardCompatibleNodes)\n"
            )
        found = self.accelerator
        if found is not None:
            vendor = found.vendor
            if found.devices:
                lines += f"  built for {vendor.device} {', '.join(found.devices)}\n"
            releases = found.releases()
            runtime = f"{vendor.runtime} {found.shown}"
            if releases:
                lines += f"  {vendor.driver} releases that run {runtime}: {', '.join(releases)}\n"
            else:
                lines += (
                    f"  no {vendor.driver} release the webhook knows lists {runtime}: no affinity\n"
                )
        return lines


def _offline(image: str, config: WebhookConfig, arch: str) -> ImageAnswer:
    detection = cuda.detect({"image": image}, config, archs=(arch,))
    if detection.requirement is not None:
        req = detection.requirement
        return ImageAnswer(image, req.version, _origin(req.source), req.source)
    for shipped in shipped_vendors():
        gate = config.accelerators.gate(shipped.name)
        if gate is None:
            continue
        vendor = in_force(shipped, gate)
        found = vendor.image(image, gate.image_table)
        if found is not None and found.version is not None:
            origin = "admin table" if found.source.startswith("image table") else "reference"
            if found.source.startswith(f"{image}: "):
                origin = "shipped knowledge"
            accelerator = VendorRuntime(vendor, found.version, found.devices)
            return ImageAnswer(image, None, origin, found.source, accelerator=accelerator)
    return ImageAnswer(
        image, None, "", "; ".join(fit(w) for w in detection.warnings) or "nothing offline names it"
    )


def _origin(source: str) -> str:
    """Which step of SPEC §4 answered, from the source text the core gives its requirement."""
    if source.startswith("image table entry"):
        return "admin table"
    if source.startswith("shipped knowledge"):
        return "shipped knowledge"
    return "reference"


async def _look_up(client: RegistryClient, images: Sequence[str], arch: str) -> list[LookupResult]:
    try:
        return await asyncio.gather(*(client.lookup(image, arch) for image in images))
    finally:
        await client.close()


def answers(
    images: Sequence[str], config: WebhookConfig, client: RegistryClient | None, arch: str
) -> list[ImageAnswer]:
    found = [_offline(image, config, arch) for image in dict.fromkeys(images)]
    unknown = [a for a in found if not a.known]
    # Asked explicitly: registryLookups.enabled (the server's switch) does not apply here.
    if client is not None and unknown:
        results = asyncio.run(_look_up(client, [a.image for a in unknown], arch))
        for answer, result in zip(unknown, results, strict=True):
            answer.source = result.detail
            answer.digest = result.digest
            if result.requirement is not None:
                answer.version = result.requirement.version
                answer.origin = "registry"
                answer.forward = tuple(branch_list(result.requirement.forward))
            elif result.env:
                _accelerator_from_config(answer, dict(result.env), config)
    return found


def _accelerator_from_config(
    answer: ImageAnswer, env: dict[str, str], config: WebhookConfig
) -> None:
    """Another vendor's runtime the image config names (ROCM_VERSION, SPEC §13), read as the
    driver-release gate reads it."""
    for shipped in shipped_vendors():
        gate = config.accelerators.gate(shipped.name)
        if gate is None:
            continue
        vendor = in_force(shipped, gate)
        found = container_finding(vendor, {"image": answer.image}, {}, gate, {answer.image: env})
        if found is not None and found.version is not None:
            answer.accelerator = VendorRuntime(vendor, found.version, found.devices)
            answer.origin, answer.source = "registry", found.source
            return


def table(found: Sequence[ImageAnswer]) -> str:
    """The config entries that pin the registry answers (others are known without a lookup):
    imageCudaTable for CUDA, accelerators.<vendor>.imageTable for the other vendors."""
    entries = [
        {"image": normalize(a.image) or a.image, "cudaVersion": str(a.version)}
        for a in found
        if a.origin == "registry" and a.version is not None
    ]
    vendors: dict[str, list[dict[str, Any]]] = {}
    for a in found:
        if a.origin == "registry" and a.accelerator is not None:
            row: dict[str, Any] = {
                "image": normalize(a.image) or a.image,
                "version": a.accelerator.version,
            }
            if a.accelerator.devices:
                row["devices"] = list(a.accelerator.devices)
            vendors.setdefault(a.accelerator.vendor.name, []).append(row)
    pinned: dict[str, Any] = {"imageCudaTable": entries} if entries else {}
    if vendors:
        pinned["accelerators"] = {name: {"imageTable": rows} for name, rows in vendors.items()}
    if not pinned:
        return ""
    return yaml.safe_dump(pinned, sort_keys=False, default_style=None)


def cmd_images(args: argparse.Namespace, out: TextIO) -> int:
    config = load_config(args.config)
    client = None if args.no_lookup else registry_client(args, config)
    found = answers(args.image, config, client, args.arch)
    if args.output == "json":
        json.dump([a.to_json() for a in found], out, indent=2)
        out.write("\n")
    else:
        for a in found:
            out.write(a.line())
            out.write(a.details())
        pinned = table(found)
        if pinned:
            out.write(
                "\n# webhook config entries that pin the registry answers (for clusters whose "
                "webhook cannot ask the registries):\n"
            )
            out.write(pinned)
    return EXIT_DENIED if any(not a.known for a in found) else EXIT_OK
