"""Environment fixes (SPEC §5): set known-good env vars, never overriding a user's value."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

from webhook.core.base.shapes import is_mapping
from webhook.core.base.wording import Message, Wording, cut
from webhook.core.config.model import EnvFixRule


@dataclass(frozen=True, slots=True)
class EnvAddition:
    rule: str
    name: str
    value: str

    # Written out, frozen: as wording.Wording's.
    def __init__(self, rule: str, name: str, value: str) -> None:
        object.__setattr__(self, "rule", rule)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "value", value)


@lru_cache(maxsize=4096)
def repository_path(image: str) -> str:
    """`paddle-registry.corp:5000/ml/pytorch:2.1@sha256:…` -> `ml/pytorch`.

    The registry host is not part of what an image is: `paddle-registry.corp:5000/ml/pytorch`
    is PyTorch. The first component is a host when it has a '.' or ':' or is `localhost`, as
    in the reference grammar the container runtimes use (distribution/reference,
    splitDockerDomain); the tag and digest are dropped.
    """
    ref = image.split("@", 1)[0]
    first, slash, rest = ref.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        ref = rest
    last_slash = ref.rfind("/")
    colon = ref.rfind(":")
    return ref[:colon] if colon > last_slash else ref


class _Rule:
    """What env_fixes reads of an EnvFixRule (a pydantic model: each attribute read costs
    hundreds of instructions interpreted), read once per loaded config."""

    def __init__(self, rule: EnvFixRule) -> None:
        self.name = rule.name
        self.resources = rule.resources
        self.image_re, self.container_re = rule.compiled
        self.env = tuple(rule.env.items())


# The last config's rules (one slot: a new config's tuple replaces it). Keyed by the tuple
# itself, held: config parts are frozen, so the same tuple is the same rules.
_LAST: Final[list[tuple[tuple[EnvFixRule, ...], tuple[_Rule, ...]]]] = []


def _plain(rules: Iterable[EnvFixRule]) -> tuple[_Rule, ...]:
    if type(rules) is not tuple:
        return tuple(_Rule(rule) for rule in rules)
    if _LAST:
        held, plain = _LAST[0]
        if held is rules:
            return plain
    plain = tuple(_Rule(rule) for rule in rules)
    _LAST[:] = [(rules, plain)]
    return plain


def rule_matches(rule: _Rule, container: Mapping[str, Any], used: Iterable[str]) -> bool:
    if rule.resources:
        keys = used if isinstance(used, (set, frozenset)) else set(used)
        if keys.isdisjoint(rule.resources):
            return False
    image_re = rule.image_re
    if image_re is not None:
        image = container.get("image")
        repository = repository_path(image) if isinstance(image, str) else ""
        if not image_re.search(repository):
            return False
    container_re = rule.container_re
    if container_re is not None:
        name = container.get("name")
        if not isinstance(name, str) or not container_re.fullmatch(name):
            return False
    return True


def env_fixes(
    container: Mapping[str, Any], used: set[str], rules: Iterable[EnvFixRule]
) -> tuple[list[EnvAddition], list[Message]]:
    """(variables to add, warnings about user values that conflict with a fix)."""
    matching = [rule for rule in _plain(rules) if rule_matches(rule, container, used)]
    if not matching:  # most GPU containers: no fix applies, the env is not read
        return [], []
    env = container.get("env")
    existing: dict[str, Any] = {}
    if isinstance(env, list):
        # A later entry overwrites an earlier one of the same name: the kubelet builds the
        # environment into a map in list order (kubernetes pkg/kubelet/kubelet_pods.go,
        # makeEnvironmentVariables), so the last duplicate is the one in force.
        for item in env:
            if is_mapping(item) and isinstance(item.get("name"), str):
                existing[item["name"]] = item
    # envFrom may set any variable from a ConfigMap or Secret the webhook cannot see, and an
    # `env` entry would silently override it (env wins over envFrom in the same function).
    env_from = bool(container.get("envFrom"))
    additions: list[EnvAddition] = []
    warnings: list[Message] = []
    for rule in matching:
        for name, value in rule.env:
            if name not in existing:
                if any(a.name == name for a in additions):
                    continue
                if env_from:
                    warnings.append(
                        Wording(
                            (
                                f"did not set {name}={value} because of envFrom; add it to env",
                                f"{name}={value} not set (envFrom); add it to env",
                            )
                        )
                    )
                else:
                    additions.append(EnvAddition(rule.name, name, value))
                continue
            current = existing[name]
            if current.get("value") != value or "valueFrom" in current:
                written = repr(current.get("value"))
                shown = "valueFrom" if "valueFrom" in current else cut(written, 40)
                # Shorter wordings for behind a role: the recommended value is never cut.
                warnings.append(
                    Wording(
                        (
                            f"{name}={shown} kept; the {rule.name} fix recommends {value}",
                            f"{name}={shown} kept; {rule.name} recommends {value}",
                            f"{name}={shown} kept; recommended: {value}",
                        )
                    )
                )
    return additions, warnings
