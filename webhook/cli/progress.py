"""A progress line on stderr for long commands (`audit`, `review -f DIR`), as kubectl and helm
users expect: one line rewritten in place (carriage return), only when stderr is a terminal,
and erased when the command is done so the output that follows starts on a clean line."""

from __future__ import annotations

from typing import TextIO


class Progress:
    def __init__(self, stream: TextIO, command: str, *, enabled: bool = True) -> None:
        self._stream = stream
        self._prefix = f"gpu-webhook {command}: "
        # isatty() is False for files, pipes and CI logs: nothing is written there.
        self.on = enabled and stream.isatty()
        self._width = 0

    def update(self, text: str) -> None:
        if not self.on:
            return
        line = self._prefix + text
        # Spaces over what is left of a longer previous line.
        pad = " " * max(self._width - len(line), 0)
        self._stream.write(f"\r{line}{pad}")
        self._stream.flush()
        self._width = len(line)

    def done(self) -> None:
        """Erase the line (if one was written)."""
        if self.on and self._width:
            self._stream.write("\r" + " " * self._width + "\r")
            self._stream.flush()
            self._width = 0
