"""Environment fixes (SPEC §5): set known-good env vars, never overriding a user's value."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from webhook.core.config import EnvFixRule
from webhook.core.rules.cuda import image_repository


@dataclass(frozen=True, slots=True)
class EnvAddition:
    rule: str
    name: str
    value: str


@lru_cache(maxsize=256)
def _regex(pattern: str, flags: int) -> re.Pattern[str]:
    return re.compile(pattern, flags)


def rule_matches(rule: EnvFixRule, container: Mapping[str, Any], used: Iterable[str]) -> bool:
    if rule.resources and set(used).isdisjoint(rule.resources):
        return False
    if rule.image is not None:
        image = container.get("image")
        repository = image_repository(image) if isinstance(image, str) else ""
        if not _regex(rule.image, re.IGNORECASE).search(repository):
            return False
    if rule.container is not None:
        name = container.get("name")
        if not isinstance(name, str) or not _regex(rule.container, 0).fullmatch(name):
            return False
    return True


def env_fixes(
    container: Mapping[str, Any], used: set[str], rules: Iterable[EnvFixRule]
) -> tuple[list[EnvAddition], list[str]]:
    """(variables to add, warnings about user values that conflict with a fix)."""
    env = container.get("env")
    existing: dict[str, Any] = {}
    if isinstance(env, list):
        for item in env:
            if isinstance(item, Mapping) and isinstance(item.get("name"), str):
                existing[item["name"]] = item
    additions: list[EnvAddition] = []
    warnings: list[str] = []
    for rule in rules:
        if not rule_matches(rule, container, used):
            continue
        for name, value in rule.env.items():
            if name not in existing:
                if all(a.name != name for a in additions):
                    additions.append(EnvAddition(rule.name, name, value))
                continue
            current = existing[name]
            if current.get("value") != value or "valueFrom" in current:
                shown = "valueFrom" if "valueFrom" in current else repr(current.get("value"))
                # Short enough that the recommended value survives the ~120-character cut.
                warnings.append(f"{name}={shown} kept; the {rule.name} fix recommends {value}")
    return additions, warnings
