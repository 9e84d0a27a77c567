"""Root conftest: makes `tests.*` importable (tests.helpers, tests.fakekube); no fixtures here."""

from __future__ import annotations

import sys
from pathlib import Path

# pytest's default (prepend) import mode puts only the test file's own directory on sys.path,
# and the editable install maps just the `webhook` package; test modules import shared
# helpers as `tests.helpers`, so the repository root must be importable however pytest runs.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
