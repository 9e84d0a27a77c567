"""Immutable, indexed set of CRL limitations (by key, by group) with conflict detection."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from webhook.core.policies.crl import CrlParse, ResourceLimitation, parse_configmap


@dataclass(frozen=True, slots=True)
class InvalidConfigMap:
    name: str  # namespace/name
    errors: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Conflict:
    """Two or more enabled CRLs define the same key; `winner` is the one in force."""

    key: str
    winner: str
    losers: tuple[str, ...]

    def message(self) -> str:
        return (
            f"{len(self.losers) + 1} enabled CRL ConfigMaps define {self.key}: "
            f"{self.winner} is in force (oldest, then first by name); "
            f"ignored: {', '.join(self.losers)}"
        )


def _winner_order(limitation: ResourceLimitation) -> tuple[int, str, str]:
    # Oldest first; a ConfigMap without a timestamp (file source) sorts after dated ones.
    return (0 if limitation.created else 1, limitation.created, limitation.configmap)


@dataclass(frozen=True)
class PolicySet:
    """A snapshot: built once per policy change, read by every review without locking."""

    by_key: Mapping[str, ResourceLimitation] = field(default_factory=dict)
    by_group: Mapping[str, tuple[ResourceLimitation, ...]] = field(default_factory=dict)
    invalid: tuple[InvalidConfigMap, ...] = ()
    conflicts: tuple[Conflict, ...] = ()
    inactive: tuple[str, ...] = ()
    warnings: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def empty(cls) -> PolicySet:
        return cls()

    @classmethod
    def from_parses(cls, parses: Iterable[CrlParse]) -> PolicySet:
        candidates: dict[str, list[ResourceLimitation]] = {}
        invalid: list[InvalidConfigMap] = []
        inactive: list[str] = []
        warnings: dict[str, tuple[str, ...]] = {}
        for parsed in parses:
            if not parsed.is_crl:
                continue
            if parsed.warnings:
                warnings[parsed.ref] = parsed.warnings
            if parsed.errors:
                invalid.append(InvalidConfigMap(parsed.ref, parsed.errors))
            elif not parsed.active or parsed.limitation is None:
                inactive.append(parsed.ref)
            else:
                candidates.setdefault(parsed.limitation.key, []).append(parsed.limitation)
        by_key: dict[str, ResourceLimitation] = {}
        conflicts: list[Conflict] = []
        for key, items in sorted(candidates.items()):
            ordered = sorted(items, key=_winner_order)
            by_key[key] = ordered[0]
            if len(ordered) > 1:
                conflicts.append(
                    Conflict(key, ordered[0].configmap, tuple(x.configmap for x in ordered[1:]))
                )
        groups: dict[str, list[ResourceLimitation]] = {}
        for limitation in by_key.values():
            groups.setdefault(limitation.group, []).append(limitation)
        return cls(
            by_key=MappingProxyType(by_key),
            by_group=MappingProxyType({g: tuple(v) for g, v in sorted(groups.items())}),
            invalid=tuple(sorted(invalid, key=lambda x: x.name)),
            conflicts=tuple(conflicts),
            inactive=tuple(sorted(inactive)),
            warnings=MappingProxyType(warnings),
        )

    @classmethod
    def from_configmaps(cls, configmaps: Iterable[Mapping[str, Any]]) -> PolicySet:
        return cls.from_parses(parse_configmap(cm) for cm in configmaps)

    @property
    def limitations(self) -> tuple[ResourceLimitation, ...]:
        return tuple(self.by_key.values())

    @property
    def keys(self) -> frozenset[str]:
        return frozenset(self.by_key)

    def to_json(self) -> dict[str, Any]:
        return {
            "policies": [lim.to_json() for lim in self.by_key.values()],
            "groups": {g: [lim.key for lim in lims] for g, lims in self.by_group.items()},
            "invalid": [{"configMap": i.name, "errors": list(i.errors)} for i in self.invalid],
            "conflicts": [
                {"key": c.key, "winner": c.winner, "ignored": list(c.losers)}
                for c in self.conflicts
            ],
            "inactive": list(self.inactive),
            "warnings": {name: list(w) for name, w in self.warnings.items()},
        }
