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

# The request path's pure core (webhook/core, no I/O). Left out: the config models (pydantic
# classes are not compiled by mypyc), claims.py (ClaimClasses subclasses frozenset, which mypyc
# does not support for native classes), and the offline-only parts (manifests, audit, reports).
COMPILED = [
    "webhook/core/annotations.py",
    "webhook/core/crl.py",
    "webhook/core/decision.py",
    "webhook/core/errors.py",
    "webhook/core/evaluate.py",
    "webhook/core/gpu_keys.py",
    "webhook/core/injection.py",
    "webhook/core/inventory.py",
    "webhook/core/kinds.py",
    "webhook/core/names.py",
    "webhook/core/patches.py",
    "webhook/core/placement.py",
    "webhook/core/policyset.py",
    "webhook/core/quantity.py",
    "webhook/core/registry.py",
    "webhook/core/shapes.py",
    "webhook/core/updates.py",
    "webhook/core/wording.py",
    "webhook/core/workloads.py",
    "webhook/core/rules/cuda.py",
    "webhook/core/rules/envfix.py",
    "webhook/core/rules/fit.py",
    "webhook/core/rules/imagefacts.py",
    "webhook/core/rules/images.py",
    "webhook/core/rules/requires.py",
    "webhook/core/rules/resources.py",
    "webhook/core/rules/terms.py",
    "webhook/core/rules/versions.py",
    # The admission request path's pure parts around the evaluation: decoding the review,
    # building the answer, the decision cache's keys: ~6 % of the server's CPU in a py-spy profile
    # (what compiling them saved was within this VM's noise; README, Benchmark).
    "webhook/admission/decisions.py",
    "webhook/admission/reviews.py",
]

if os.environ.get("GPU_WEBHOOK_COMPILE") == "1":
    from mypyc.build import mypycify

    # The same compilation wherever it runs (`make compiled`, the Dockerfile): mypy's defaults,
    # not pyproject.toml's checking options (its pydantic plugin is for `mypy --strict`).
    setup(ext_modules=mypycify(["--config-file=", *COMPILED], opt_level="3"))
else:
    setup()
