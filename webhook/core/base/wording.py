"""Warnings and notes within 120 characters, without cutting what the reader needs whole.

A message that names an image reference comes in several wordings, longest first, each a whole
sentence naming the image whole (`Wording`); a role ("replica Worker") goes in front as a
prefix. `fit` picks the longest wording that fits behind the prefix, so it is the fixed words
that get shorter, never the image or the role (SPEC §4 and §6).

When even the shortest wording does not fit, it is kept whole: a warning is then longer than
120 characters because of the image (or role) it names, and for no other reason. That happens
for image references of about 80 characters and more (a valid one has at most 779,
images.MAX_REFERENCE_LENGTH). The API server passes such a warning on whole: it cuts warnings
only when one response's warnings pass 4096 characters in total, and then cuts each at 256
(k8s.io/apiserver pkg/endpoints/filters/warning.go: truncateAtTotalRunes = 4 * 1024,
truncateItemRunes = 256, AddWarning); the webhook sends at most 3 KiB of warnings
(admission/reviews.py), and the shortest wordings put the image first so that even that cut
keeps it up to about 240 characters.
"""

from __future__ import annotations

from dataclasses import dataclass

NOTE_LIMIT = 120
# No message is longer than this, whatever it names: a name this long (a multi-kilobyte
# "image" string, a replica name of a megabyte) is not a valid image reference or role.
MAX_MESSAGE_CHARS = 1024


@dataclass(frozen=True, slots=True)
class Wording:
    """One message in several wordings, longest first, each a whole sentence that names the
    image (or other name the reader needs) whole."""

    wordings: tuple[str, ...]

    # Written out: @dataclass's own __init__ stays interpreted under mypyc (2-7k instructions
    # per object, issue 40); frozen, so through object.__setattr__ as the generated one does.
    def __init__(self, wordings: tuple[str, ...]) -> None:
        object.__setattr__(self, "wordings", wordings)

    def after(self, prefix: str) -> Wording:
        """The same message behind `prefix` (`container "app": `), in every wording."""
        return Wording(tuple(prefix + w for w in self.wordings))


Message = str | Wording


def after(prefix: str, message: Message) -> Message:
    return message.after(prefix) if isinstance(message, Wording) else prefix + message


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def fit(message: Message, prefixes: tuple[str, ...] = ("",)) -> str:
    """`message` within NOTE_LIMIT characters, behind one of `prefixes` (longest first).

    The longest wording wins, behind the longest prefix it fits behind. A plain text that fits
    behind no prefix has its end cut, never its prefix. A Wording whose shortest wording does
    not fit is returned whole: its wordings are written so that only the names they keep can
    make them long.
    """
    wordings = message.wordings if isinstance(message, Wording) else (message,)
    for wording in wordings:
        for prefix in prefixes:
            if len(prefix) + len(wording) <= NOTE_LIMIT:
                return prefix + wording
    prefix, text = prefixes[-1], wordings[-1]
    if isinstance(message, str):
        # At least 40 characters of the text stay, however long the prefix is.
        text = cut(text, max(NOTE_LIMIT - len(prefix), 40))
    return cut(prefix + text, MAX_MESSAGE_CHARS)
