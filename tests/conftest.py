"""Root conftest: makes `tests.*` importable (tests.helpers, tests.fakekube), and keeps every
test's HTTP traffic off any proxy the environment names."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# pytest's default (prepend) import mode puts only the test file's own directory on sys.path,
# and the editable install maps just the `webhook` package; test modules import shared
# helpers as `tests.helpers`, so the repository root must be importable however pytest runs.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

# `make unit-compiled`: every test again with the evaluation core compiled by mypyc, from the
# tree `make compiled` builds (build/compiled: the package with its compiled modules beside).
# It goes before the source tree, here and (PYTHONPATH) in the processes tests start.
COMPILED_TREE = os.environ.get("GPU_WEBHOOK_COMPILED", "")
if COMPILED_TREE:
    COMPILED_TREE = str(Path(COMPILED_TREE).resolve())
    sys.path.insert(0, COMPILED_TREE)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [COMPILED_TREE, os.environ.get("PYTHONPATH")])
    )


def pytest_configure(config: pytest.Config) -> None:
    """A compiled run that imports the source instead would pass while testing nothing new."""
    if not COMPILED_TREE:
        return
    import webhook.core.evaluation.evaluate

    where = webhook.core.evaluation.evaluate.__file__ or ""
    if not where.startswith(COMPILED_TREE) or where.endswith(".py"):
        raise pytest.UsageError(
            f"GPU_WEBHOOK_COMPILED={COMPILED_TREE} but the core was imported from {where}: "
            "run `make compiled` first"
        )


def pytest_report_header(config: pytest.Config) -> str:
    return f"evaluation core: {'compiled, ' + COMPILED_TREE if COMPILED_TREE else 'source'}"


# Read by aiohttp sessions created with trust_env=True, as the kubernetes client's are
# (kubernetes/aio/client/rest.py), and by urllib: a proxy named here would receive the
# requests tests send to the fake API server and to the webhook on loopback.
PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)
LOOPBACK = "127.0.0.1,localhost,::1"


@pytest.fixture(autouse=True, scope="session")
def _no_proxy() -> Iterator[None]:
    """For the whole session (subprocesses inherit it): no proxy, and loopback bypasses one
    that a test sets on purpose. Session-scoped so it is in force before any other fixture
    starts a client."""
    with pytest.MonkeyPatch.context() as patch:
        for name in PROXY_VARIABLES:
            patch.delenv(name, raising=False)
        patch.setenv("NO_PROXY", LOOPBACK)
        patch.setenv("no_proxy", LOOPBACK)
        yield
