#!/usr/bin/env python3
"""The registry of the e2e registry mode (`E2E_REGISTRY=1 scripts/e2e-kapi.sh`): the CNCF
distribution registry (~/.cache/registry/registry, as ../shared/tools/registry/build.sh leaves
it; or $GPU_WEBHOOK_REGISTRY_BIN) on 127.0.0.1, a free port, with TLS from a throwaway CA, and
the images of tests/e2e/registryimages.py pushed to it (normal, per-architecture, hostile).

    scripts/e2e-registry.py WORKDIR

Leaves the registry running and writes WORKDIR/registry.env for the shell:
REGISTRY_PID (stop it with kill), REGISTRY_HOST (127.0.0.1:PORT), REGISTRY_CA (PEM).
Exit 2 when there is no registry binary. Loopback only.
"""

from __future__ import annotations

import asyncio
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.e2e.registryimages import catalogue  # noqa: E402
from tests.ociimages import Built  # noqa: E402
from tests.realregistry import Registry, push, registry_binary, skip_reason  # noqa: E402
from webhook.tls.certs import write_certificates  # noqa: E402

# distribution refuses an index whose entries name manifests it does not hold (by default it
# checks every entry: registry/handlers/app.go, validation.manifests.indexes.platforms "all");
# "none" lets the hostile index of empty objects in, as a registry configured so would.
ACCEPT_ANY_INDEX = {"validation": {"manifests": {"indexes": {"platforms": "none"}}}}


async def push_all(registry: Registry, images: dict[str, Built]) -> None:
    for name, built in images.items():
        repository, _, tag = name.rpartition(":")
        await push(registry.host, registry.tls.ca_cert, repository, tag, built)


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    binary = registry_binary()
    if binary is None:
        print(f"e2e-registry: {skip_reason()}", file=sys.stderr)
        return 2
    work = Path(sys.argv[1]).resolve()
    work.mkdir(parents=True, exist_ok=True)
    tls = write_certificates(work / "tls", ["localhost"], ["127.0.0.1"])
    registry = Registry(binary, tls, work / "storage", extra=ACCEPT_ANY_INDEX)
    registry.start(work)
    try:
        started = time.monotonic()
        images = catalogue()
        asyncio.run(push_all(registry, images))
    except BaseException:
        registry.stop()
        raise
    assert registry.process is not None
    values = {
        "REGISTRY_PID": str(registry.process.pid),
        "REGISTRY_HOST": registry.host,
        "REGISTRY_CA": str(tls.ca_cert),
    }
    (work / "registry.env").write_text(
        "".join(f"{key}={shlex.quote(value)}\n" for key, value in values.items())
    )
    print(
        f"e2e-registry: {registry.host} (pid {registry.process.pid}), "
        f"{len(images)} images pushed in {time.monotonic() - started:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
