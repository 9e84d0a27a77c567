"""Log lines for the server: JSON or text formatting, and a batching handler for the hot path."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from webhook.admission.jsoncodec import json_codec
from webhook.admission.loglines import LineBatch, LineFormat

# Under load the per-review line is most of what is logged; writing each line with its own
# write(2) cost the server about a tenth of its throughput (bench/bench_server.py). Lines are
# therefore written in batches, at most `FLUSH_INTERVAL` seconds late.
FLUSH_INTERVAL = 0.5
MAX_BATCH_LINES = 512


class LogFormatter(logging.Formatter):
    """One line per record: JSON objects for log pipelines, or key=value text for humans.

    The work is loglines.LineFormat's (compiled); this class is what logging calls."""

    def __init__(self, fmt: str, dumps: Callable[[Any], bytes] | None = None) -> None:
        super().__init__()
        self.json = fmt == "json"
        # The per-review line is on the hot path: orjson when installed, like the responses.
        self.lines = LineFormat(self.json, dumps or json_codec().dumps)

    def format(self, record: logging.LogRecord) -> str:
        fields: Mapping[str, Any] = getattr(record, "fields", {})
        message = record.getMessage()
        if record.exc_info:
            message = f"{message}\n{self.formatException(record.exc_info)}"
        return self.lines.line(record.created, record.levelname, record.name, message, fields)

    def line(
        self, created: float, level: str, logger: str, message: str, fields: Mapping[str, Any]
    ) -> str:
        """The formatted line; what `BatchedStreamHandler.write` writes."""
        return self.lines.line(created, level, logger, message, fields)


class BatchedStreamHandler(logging.Handler):
    """Writes formatted lines to `stream` in batches instead of one write per record.

    A line is written at once when it is WARNING or above, when the batch is full, or when the
    previous write is older than `interval` (so a quiet server logs without delay); otherwise it
    waits for the next of those or for `flush()`, which the server calls every `interval`
    seconds and `logging.shutdown()` calls at exit. Lines keep their order.

    The batch is a loglines.LineBatch (compiled), and `write` (the per-review line without a
    LogRecord, `logger.info(message, extra={"fields": fields})`'s text for about a quarter of
    its cost; the caller checks the level) is its bound method: a review runs no code of this
    class.
    """

    # LineBatch.write: (logger, message, fields); an attribute, set once in __init__.
    write: Callable[[logging.Logger, str, Mapping[str, Any]], None]

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        interval: float = FLUSH_INTERVAL,
        max_lines: int = MAX_BATCH_LINES,
    ) -> None:
        # Before logging.Handler.__init__, which sets `formatter` (the property below).
        self._batch = LineBatch(
            stream if stream is not None else sys.stderr, interval, max_lines, _NO_LOCK
        )
        super().__init__()
        # Handler.__init__ made the lock (createLock): the batch holds the same one.
        if self.lock is not None:
            self._batch.lock = self.lock
        self.write = self._batch.write

    # The formatter, the stream and the timings live in the batch; these keep the handler's
    # attributes (setFormatter, `handler.stream = ...`, `handler.interval`) working.
    @property
    def formatter(self) -> logging.Formatter | None:
        return self._formatter

    @formatter.setter
    def formatter(self, value: logging.Formatter | None) -> None:
        self._formatter = value
        self._batch.format = value.lines if isinstance(value, LogFormatter) else None

    @property
    def stream(self) -> Any:
        return self._batch.stream

    @stream.setter
    def stream(self, value: Any) -> None:
        self._batch.stream = value

    @property
    def interval(self) -> float:
        return self._batch.interval

    @interval.setter
    def interval(self, value: float) -> None:
        self._batch.interval = value

    @property
    def max_lines(self) -> int:
        return self._batch.max_lines

    @max_lines.setter
    def max_lines(self, value: int) -> None:
        self._batch.max_lines = value

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        self._batch.add(line, record.levelno)

    def flush(self) -> None:
        self._batch.flush()


class _NoLock:
    """The batch's lock until logging.Handler.__init__ has made the handler's."""

    def acquire(self) -> None:
        pass

    def release(self) -> None:
        pass


_NO_LOCK = _NoLock()


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
