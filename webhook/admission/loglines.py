"""The log lines' work, compiled: formatting a line (LineFormat) and writing lines in batches
(LineBatch), the per-review line's fast path included (LineBatch.write).

logs.py's LogFormatter and BatchedStreamHandler are the logging-facing shells around these two:
they subclass logging.Formatter and logging.Handler, and a class with a Python base cannot be
compiled here. mypyc (2.4.1) makes such a subclass a native class with the base's `__dict__`
and `__weakref__` slots, and its generated tp_clear/tp_dealloc `Py_CLEAR` the `__weakref__`
slot (the head of the instance's weak-reference list, which the object does not own) instead of
calling PyObject_ClearWeakRefs. logging.Handler.__init__ always makes weak references to the
handler (logging's `_handlers` registry, the at-fork lock WeakSet), so a freed compiled handler
left those weak references dangling and decremented one it did not own: the interpreter crashed
later in its garbage collector or in WeakSet.add (tests/unit/test_logs.py creating its second
handler). The only opt-out, `@mypyc_attr(native_class=False)`, needs mypy_extensions at run
time, which the image does not install. So the shells stay interpreted (logs.py) and everything
a review runs is here, in plain classes.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

# Encoded line heads kept by a LineFormat: messages with their arguments are unbounded.
MAX_HEADS = 32


# ".000Z" ... ".999Z": the end of a line's time.
_MILLIS = tuple(f".{n:03d}Z" for n in range(1000))


class Stream(Protocol):
    def write(self, text: str, /) -> Any: ...

    def flush(self) -> Any: ...


class Lock(Protocol):
    def acquire(self) -> Any: ...

    def release(self) -> Any: ...


class LineFormat:
    """One line per record: JSON objects for log pipelines, or key=value text for humans."""

    def __init__(self, json_lines: bool, dumps: Callable[[Any], bytes]) -> None:
        self.json = json_lines
        self._dumps = dumps
        self._second = -1
        self._prefix = ""
        self._heads: dict[tuple[str, str, str], str] = {}

    def line(
        self, created: float, level: str, logger: str, message: str, fields: Mapping[str, Any]
    ) -> str:
        """The formatted line of a record (`fields`: its extra key/values)."""
        second = int(created)
        if second != self._second:
            # time.strftime is several times cheaper than datetime.isoformat; once per second.
            self._second = second
            self._prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        # The milliseconds from a table: compiled, an f-string with a format spec is two
        # str.format calls (~3k instructions a line).
        millis = int((created - second) * 1000)
        if 0 <= millis < 1000:
            when = self._prefix + _MILLIS[millis]
        else:  # unreachable for a time after 1970 (0 <= created - second < 1)
            when = f"{self._prefix}.{millis:03d}Z"
        if self.json:
            if "time" in fields or "level" in fields or "logger" in fields or "msg" in fields:
                return self._merged(when, level, logger, message, fields)
            # The text `dumps({**head, **fields})` writes, without merging the two dicts: the
            # head's fixed part is encoded once per (level, logger, message), then joined.
            head = self._heads.get((level, logger, message))
            if head is None:
                head = self._head(level, logger, message)
            try:
                body = self._dumps(fields).decode()
            except TypeError:
                return self._merged(when, level, logger, message, fields)
            if len(body) == 2:  # "{}"
                return f'{{"time":"{when}",{head}}}'
            return f'{{"time":"{when}",{head},{body[1:]}'
        text = " ".join(f"{k}={v}" for k, v in fields.items())
        return f"{when} {level:<7} {logger}: {message}{' ' + text if text else ''}"

    def _merged(
        self, when: str, level: str, logger: str, message: str, fields: Mapping[str, Any]
    ) -> str:
        merged = {"time": when, "level": level.lower(), "logger": logger, "msg": message, **fields}
        try:
            return self._dumps(merged).decode()
        except TypeError:
            return json.dumps(merged, ensure_ascii=False, default=str)

    def _head(self, level: str, logger: str, message: str) -> str:
        """`"level":…,"logger":…,"msg":…` as dumps writes them; kept for the first few
        (level, logger, message), which the per-review line always is among."""
        head = self._dumps({"level": level.lower(), "logger": logger, "msg": message})
        text = head.decode()[1:-1]
        if len(self._heads) < MAX_HEADS:
            self._heads[(level, logger, message)] = text
        return text


class LineBatch:
    """Lines waiting to be written to `stream` in one write (logs.BatchedStreamHandler says
    when). `lock` is the handler's (reentrant) lock, held while the batch changes."""

    def __init__(self, stream: Stream, interval: float, max_lines: int, lock: Lock) -> None:
        self.stream = stream
        self.interval = interval
        self.max_lines = max_lines
        self.lock = lock
        # The handler's formatter when it is a LogFormatter (None: another one): write's line.
        self.format: LineFormat | None = None
        self._lines: list[str] = []
        self._due = 0.0

    def write(self, logger: logging.Logger, message: str, fields: Mapping[str, Any]) -> None:
        """An INFO line for `logger` without a LogRecord: the per-review line's fast path.

        The same text `logger.info(message, extra={"fields": fields})` produces through the
        handler, for about a quarter of the cost under load; the caller checks the level.
        """
        line_format = self.format
        if line_format is None:
            logger.info(message, extra={"fields": fields})
            return
        line = line_format.line(time.time(), "INFO", logger.name, message, fields)
        lock = self.lock
        lock.acquire()
        try:
            self.add(line, logging.INFO)
        finally:
            lock.release()

    def add(self, line: str, level: int) -> None:
        """Keep `line`; write the batch if `level` is WARNING or above, the batch is full or
        the last write is older than the interval. The caller holds the lock."""
        lines = self._lines
        lines.append(line)
        if (
            level >= logging.WARNING
            or len(lines) >= self.max_lines
            or time.monotonic() >= self._due
        ):
            self.flush()

    def flush(self) -> None:
        lock = self.lock
        lock.acquire()
        try:
            if not self._lines:
                return
            text = "\n".join(self._lines) + "\n"
            self._lines.clear()
            self._due = time.monotonic() + self.interval
            try:
                self.stream.write(text)
                self.stream.flush()
            except (OSError, ValueError):
                # stderr closed or broken (ValueError: I/O on a closed file): there is nowhere
                # left to report this, and admission must go on.
                pass
        finally:
            lock.release()
