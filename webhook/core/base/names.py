"""Resource names from the config, each an exact name or a glob pattern (SPEC §4, "Which
containers"): `nvidia.com/gpu`, `nvidia.com/mig-*`, `volcano.sh/vgpu-*`.

A set is compiled once per config (WebhookConfig's cached properties) and asked once per
resource key of every container, so a key that is no GPU resource (`cpu`, `memory`) must cost
next to nothing: the exact names are a frozenset, and the patterns' literal prefixes are
tried (one `str.startswith` with a tuple) before the one regular expression that holds them
all.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_GLOB = re.compile(r"[*?]")
# Resource names are qualified names with an optional DNS-subdomain prefix (k8s.io/apimachinery
# pkg/util/validation IsQualifiedName); a pattern may add `*` (any run) and `?` (one character).
_PATTERN_CHARS = re.compile(r"[A-Za-z0-9._/*?-]{1,320}")


def name_problem(name: str) -> str:
    """Why `name` is no resource name or pattern ('' when it is one), for config validation."""
    if not _PATTERN_CHARS.fullmatch(name):
        return (
            f"{name!r} is not a resource name or pattern (letters, digits, '.', '_', '-', '/', "
            "and the wildcards '*' and '?')"
        )
    return ""


def _regex(pattern: str) -> str:
    return "".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern)


class ResourceNames:
    """Exact names and glob patterns; `key in names` tells whether a resource key matches."""

    __slots__ = ("_prefixes", "_regex", "exact", "patterns")

    def __init__(self, names: Iterable[str]) -> None:
        exact: set[str] = set()
        patterns: list[str] = []
        prefixes: list[str] = []
        for name in names:
            wildcard = _GLOB.search(name)
            if wildcard is None:
                exact.add(name)
            elif name not in patterns:
                patterns.append(name)
                # The literal text before the first wildcard ("" for "*..."): a key starting
                # with none of these cannot match, and most keys are turned away by that alone.
                prefixes.append(name[: wildcard.start()])
        self.exact = frozenset(exact)
        self.patterns = tuple(patterns)
        self._prefixes = tuple(prefixes)
        self._regex = (
            re.compile("|".join(f"(?:{_regex(p)})" for p in self.patterns))
            if self.patterns
            else None
        )

    def __contains__(self, key: object) -> bool:
        if key in self.exact:
            return True
        regex = self._regex
        return (
            regex is not None
            and isinstance(key, str)
            and key.startswith(self._prefixes)
            and regex.fullmatch(key) is not None
        )

    def any_of(self, keys: Iterable[str]) -> bool:
        """Whether some key matches (one set operation when there are no patterns)."""
        if not self.exact.isdisjoint(keys):
            return True
        regex, prefixes = self._regex, self._prefixes
        if regex is None:
            return False
        # A plain loop: any() over a generator costs more, and this runs for every GPU container.
        for key in keys:  # noqa: SIM110
            if key.startswith(prefixes) and regex.fullmatch(key) is not None:
                return True
        return False

    def __repr__(self) -> str:
        return f"ResourceNames({sorted(self.exact) + list(self.patterns)})"
