"""`WWW-Authenticate` challenges (RFC 7235) as registries send them: `Bearer realm="…",
service="…",scope="…"` (Docker Hub, ghcr.io, nvcr.io, Harbor, distribution's token auth) or
`Basic realm="…"`. Parsed as containerd does (core/remotes/docker/auth/parse.go:
parseValueAndParams): a scheme token, then comma-separated key=token or key="quoted\\"string"
pairs; a challenge it cannot read ends the parameters there. Bearer sorts before Basic.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

# RFC 2616 separators: a token is any visible ASCII but these.
_SEPARATORS = frozenset(' \t"(),/:;<=>?@[]\\{}')
_SPACES = " \t\r\n"
# A registry's header is short; anything longer is not read (linear work, bounded).
MAX_CHALLENGE_CHARS = 4096


@dataclass(frozen=True)
class Challenge:
    scheme: str  # "bearer" or "basic"
    params: dict[str, str] = field(default_factory=dict)


def _token(text: str, i: int) -> tuple[str, int]:
    start = i
    while i < len(text) and 32 < ord(text[i]) < 127 and text[i] not in _SEPARATORS:
        i += 1
    return text[start:i], i


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _SPACES:
        i += 1
    return i


def _quoted(text: str, i: int) -> tuple[str | None, int]:
    """`"a\\"b"` at text[i] -> ('a"b', index after the closing quote); None when unterminated."""
    out: list[str] = []
    i += 1
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
            continue
        if ch == '"':
            return "".join(out), i + 1
        out.append(ch)
        i += 1
    return None, i


def parse_challenge(header: str) -> Challenge | None:
    text = header[:MAX_CHALLENGE_CHARS]
    scheme, i = _token(text, _skip(text, 0))
    if not scheme:
        return None
    params: dict[str, str] = {}
    while True:
        key, i = _token(text, _skip(text, i))
        if not key or i >= len(text) or text[i] != "=":
            break
        i += 1
        if i < len(text) and text[i] == '"':
            value, i = _quoted(text, i)
            if value is None:
                break
        else:
            value, i = _token(text, i)
        params[key.lower()] = value
        i = _skip(text, i)
        if i >= len(text) or text[i] != ",":
            break
        i += 1
    return Challenge(scheme.lower(), params)


def parse_challenges(headers: Iterable[str]) -> list[Challenge]:
    """Bearer and Basic challenges of a 401, Bearer first (containerd's byScheme order)."""
    found = [c for c in map(parse_challenge, headers) if c and c.scheme in ("bearer", "basic")]
    return sorted(found, key=lambda c: c.scheme != "bearer")
