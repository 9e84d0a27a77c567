"""Per-pod opt-out annotations (features.alauda.io/env-fixes, .../cuda-affinity): one reading."""

from __future__ import annotations

# SPEC §4/§5: "false/no/0/off in any case" opt out; their counterparts keep the feature on.
_OFF = frozenset({"false", "no", "0", "off"})
_ON = frozenset({"true", "yes", "1", "on"})


def parse_opt_out(annotation: str, value: str | None) -> tuple[bool, str]:
    """(opted out, warning or "") for an opt-out annotation's value (None: not set).

    An unrecognised value is not an opt-out: a typo must not silently switch a fix off, and the
    warning says what was read so the user can correct it.
    """
    if value is None:
        return False, ""
    word = value.strip().lower()
    if word in _OFF:
        return True, ""
    if word in _ON:
        return False, ""
    shown = value if len(value) <= 20 else value[:19] + "…"
    return False, f"annotation {annotation}={shown!r} not understood: use false/no/0/off to opt out"
