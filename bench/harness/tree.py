"""The webhook's modules imported from a checkout given by path (`--tree`: this one, or a
previous release to measure "before"), by name, so that no import runs before the path is set."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

# What a benchmark asks for -> the module of the core that holds it (one place to follow a move).
MODULES = {
    "config": "webhook.core.config.model",
    "cuda": "webhook.core.placement.cuda",
    "images": "webhook.core.images.references",
    "workloads": "webhook.core.workloads.pods",
    "manifests": "webhook.core.base.manifests",
}
# The same modules in a checkout from before the core's families (issue 32), for `--tree`.
BEFORE_FAMILIES = {
    "config": "webhook.core.config",
    "cuda": "webhook.core.rules.cuda",
    "images": "webhook.core.rules.images",
    "workloads": "webhook.core.workloads",
    "manifests": "webhook.core.manifests",
}


def load(tree: Path, *names: str) -> dict[str, ModuleType]:
    """The modules `names` (keys of MODULES) of the webhook in `tree`, put first on the path
    (once per process: the first tree imported is the one measured)."""
    if str(tree) not in sys.path:
        sys.path.insert(0, str(tree))
    return {name: _module(name) for name in names}


def _module(name: str) -> ModuleType:
    try:
        return importlib.import_module(MODULES[name])
    except ModuleNotFoundError:
        return importlib.import_module(BEFORE_FAMILIES[name])
