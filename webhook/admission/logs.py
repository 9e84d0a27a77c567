"""Log lines for the server: JSON or text formatting, and a batching handler for the hot path."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from webhook.admission.jsoncodec import json_codec

# Under load the per-review line is most of what is logged; writing each line with its own
# write(2) cost the server about a tenth of its throughput (bench/bench_server.py). Lines are
# therefore written in batches, at most `FLUSH_INTERVAL` seconds late.
FLUSH_INTERVAL = 0.5
MAX_BATCH_LINES = 512
# Encoded line heads kept by a LogFormatter: messages with their arguments are unbounded.
MAX_HEADS = 32


class LogFormatter(logging.Formatter):
    """One line per record: JSON objects for log pipelines, or key=value text for humans."""

    def __init__(self, fmt: str, dumps: Callable[[Any], bytes] | None = None) -> None:
        super().__init__()
        self.json = fmt == "json"
        # The per-review line is on the hot path: orjson when installed, like the responses.
        self._dumps = dumps or json_codec().dumps
        self._second = -1
        self._prefix = ""
        self._heads: dict[tuple[str, str, str], str] = {}

    def format(self, record: logging.LogRecord) -> str:
        fields: Mapping[str, Any] = getattr(record, "fields", {})
        message = record.getMessage()
        if record.exc_info:
            message = f"{message}\n{self.formatException(record.exc_info)}"
        return self.line(record.created, record.levelname, record.name, message, fields)

    def line(
        self, created: float, level: str, logger: str, message: str, fields: Mapping[str, Any]
    ) -> str:
        """The formatted line; also used directly by `BatchedStreamHandler.write`."""
        second = int(created)
        if second != self._second:
            # time.strftime is several times cheaper than datetime.isoformat; once per second.
            self._second = second
            self._prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        when = f"{self._prefix}.{int((created - second) * 1000):03d}Z"
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


class BatchedStreamHandler(logging.Handler):
    """Writes formatted lines to `stream` in batches instead of one write per record.

    A line is written at once when it is WARNING or above, when the batch is full, or when the
    previous write is older than `interval` (so a quiet server logs without delay); otherwise it
    waits for the next of those or for `flush()`, which the server calls every `interval`
    seconds and `logging.shutdown()` calls at exit. Lines keep their order.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        interval: float = FLUSH_INTERVAL,
        max_lines: int = MAX_BATCH_LINES,
    ) -> None:
        super().__init__()
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.max_lines = max_lines
        self._lines: list[str] = []
        self._due = 0.0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        self._add(line, record.levelno)

    def write(self, logger: logging.Logger, message: str, fields: Mapping[str, Any]) -> None:
        """An INFO line for `logger` without a LogRecord: the per-review line's fast path.

        The same text `logger.info(message, extra={"fields": fields})` produces through this
        handler, for about a quarter of the cost under load; the caller checks the level.
        """
        formatter = self.formatter
        if not isinstance(formatter, LogFormatter):
            logger.info(message, extra={"fields": fields})
            return
        line = formatter.line(time.time(), "INFO", logger.name, message, fields)
        self.acquire()
        try:
            self._add(line, logging.INFO)
        finally:
            self.release()

    def _add(self, line: str, level: int) -> None:
        self._lines.append(line)
        if (
            level >= logging.WARNING
            or len(self._lines) >= self.max_lines
            or time.monotonic() >= self._due
        ):
            self.flush()

    def flush(self) -> None:
        self.acquire()
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
            self.release()


def configure_logging(fmt: str, level: str) -> BatchedStreamHandler:
    """Route every logger to one batched stderr handler; returns it so serve can flush it."""
    # One log line per review is on the hot path. The logging docs' own advice for speed:
    # skip the caller lookup and the thread/process fields, which no line here prints.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = BatchedStreamHandler(sys.stderr)
    handler.setFormatter(LogFormatter(fmt))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log would repeat every review line; ours carries the admission details.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    return handler
