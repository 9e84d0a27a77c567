"""Build hook: everything is in pyproject.toml; `GPU_WEBHOOK_COMPILE=1` also compiles the
evaluation core with mypyc (issue 15: its cost is ~480 small Python calls per GPU pod, spread
over every rule, i.e. interpreter dispatch, which compiling removes rather than tunes).

The compiled modules are the same source, type-checked with `mypy --strict`; the pure-Python
package is the default install and stays a complete, tested fallback. `make compiled` builds
them beside a copy of the package (build/compiled), `make test` runs every test against both,
and the Dockerfile ships the compiled build.
"""

from __future__ import annotations

import os

from setuptools import setup

# The request path's pure core (webhook/core, no I/O), by family: every module a /mutate or
# /validate review runs (issue 40). Left out:
# - the config models (core/config): pydantic classes, which mypyc does not compile (a review
#   calls three small methods of them: GpuAccess.checks, RuntimeFixes.any_enabled,
#   Accelerators.gate);
# - workloads/claim_classes.py: ClaimClasses subclasses frozenset, which mypyc does not support
#   for native classes (a review reaches it only for a pod with a GPU DRA claim);
# - the package __init__ modules (families/__init__.py re-exports catalog.py's names);
# - admission/logs.py: its LogFormatter and BatchedStreamHandler subclass logging's classes,
#   which mypyc (2.4.1) makes native classes whose deallocator Py_CLEARs the `__weakref__` slot
#   instead of clearing the weak references (logging keeps weak references to every handler):
#   the interpreter crashed in its garbage collector (tests/unit/test_logs.py). They are thin
#   shells; the formatting and batching a review runs are admission/loglines.py's, compiled
#   (its docstring has the details). The rest of the admission layer a review runs is
#   compiled (below). Never per review: app.py, runner.py, lifecycle.py, gauges.py,
#   metrics.py, limits.py (start-up, scrapes);
# - the offline-only parts: base/manifests.py, core/audit, policies/native*.py,
#   evaluation/native_access*.py, images/knowledge.py (the CLI and the audit, never a review),
#   and placement/dra.py (read when ResourceSlices change and the node inventory is rebuilt,
#   not in a review).
# tests/unit/test_compiled_path.py checks that a review runs nothing else interpreted.
# A @dataclass built per review writes its __init__ out (pods.ContainerRef says why).
COMPILED = [
    "webhook/core/access/control.py",
    "webhook/core/access/links.py",
    "webhook/core/access/patterns.py",
    "webhook/core/access/routes.py",
    "webhook/core/access/sources.py",
    "webhook/core/base/annotations.py",
    "webhook/core/base/errors.py",
    "webhook/core/base/names.py",
    "webhook/core/base/nodeaffinity.py",
    "webhook/core/base/patches.py",
    "webhook/core/base/quantity.py",
    "webhook/core/base/shapes.py",
    "webhook/core/base/versions.py",
    "webhook/core/base/wording.py",
    "webhook/core/envfix/fixes.py",
    "webhook/core/evaluation/containers.py",
    "webhook/core/evaluation/evaluate.py",
    "webhook/core/evaluation/families.py",
    "webhook/core/evaluation/pods.py",
    "webhook/core/evaluation/unseen.py",
    "webhook/core/evaluation/updates.py",
    "webhook/core/families/catalog.py",
    "webhook/core/families/visible.py",
    "webhook/core/images/facts.py",
    "webhook/core/images/references.py",
    "webhook/core/images/requires.py",
    "webhook/core/kinds/builtin.py",
    "webhook/core/kinds/registry.py",
    "webhook/core/outcome/decision.py",
    "webhook/core/placement/cuda.py",
    "webhook/core/placement/engine.py",
    "webhook/core/placement/fit.py",
    "webhook/core/placement/gate.py",
    "webhook/core/placement/injection.py",
    "webhook/core/placement/inventory.py",
    "webhook/core/placement/needs.py",
    "webhook/core/placement/nodeclass.py",
    "webhook/core/placement/place.py",
    "webhook/core/placement/ranges.py",
    "webhook/core/placement/terms.py",
    "webhook/core/placement/vendor_nodes.py",
    "webhook/core/placement/vendors.py",
    "webhook/core/policies/crl.py",
    "webhook/core/policies/gpu_keys.py",
    "webhook/core/policies/policyset.py",
    "webhook/core/policies/resources.py",
    "webhook/core/runtimefix/apply.py",
    "webhook/core/runtimefix/arch.py",
    "webhook/core/runtimefix/rdma.py",
    "webhook/core/runtimefix/shm.py",
    "webhook/core/workloads/claims.py",
    "webhook/core/workloads/devices.py",
    "webhook/core/workloads/pods.py",
    # The admission request path's pure parts around the evaluation: decoding the review,
    # building the answer, the decision cache's keys: ~6 % of the server's CPU in a py-spy profile
    # (what compiling them saved was within this VM's noise; docs/benchmarks.md).
    "webhook/admission/decisions.py",
    "webhook/admission/reviews.py",
    "webhook/admission/body.py",
    "webhook/admission/decide.py",
    "webhook/admission/endpoints.py",
    "webhook/admission/jsoncodec.py",
    "webhook/admission/review_counts.py",
    "webhook/admission/review_handler.py",
    "webhook/admission/state.py",
    "webhook/admission/loglines.py",
]

if os.environ.get("GPU_WEBHOOK_COMPILE") == "1":
    from mypyc.build import mypycify

    # The same compilation wherever it runs (`make compiled`, the Dockerfile): mypy's defaults,
    # not pyproject.toml's checking options (its pydantic plugin is for `mypy --strict`).
    setup(ext_modules=mypycify(["--config-file=", *COMPILED], opt_level="3"))
else:
    setup()
