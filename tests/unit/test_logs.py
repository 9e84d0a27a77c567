"""The batching log handler: order kept, warnings at once, nothing lost on flush."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest

from webhook.admission.logs import BatchedStreamHandler, LogFormatter


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def logger_with(
    name: str, formatter: logging.Formatter, **options: Any
) -> tuple[logging.Logger, BatchedStreamHandler, CountingStream]:
    """A logger writing only through a fresh BatchedStreamHandler into a CountingStream."""
    stream = CountingStream()
    handler = BatchedStreamHandler(stream, **options)
    handler.setFormatter(formatter)
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger, handler, stream


@pytest.fixture
def logged() -> Iterator[tuple[logging.Logger, BatchedStreamHandler, CountingStream]]:
    # A long interval: only a warning, a full batch or flush() may write in these tests.
    logger, handler, stream = logger_with(
        "test.batched", LogFormatter("text"), interval=3600, max_lines=5
    )
    yield logger, handler, stream
    logger.handlers.clear()


def messages(stream: CountingStream) -> list[str]:
    return [line.split(": ", 1)[1] for line in stream.getvalue().splitlines()]


def test_the_first_line_after_a_quiet_period_is_written_at_once(
    logged: tuple[logging.Logger, BatchedStreamHandler, CountingStream],
) -> None:
    logger, _, stream = logged
    logger.info("first")
    assert messages(stream) == ["first"]
    logger.info("second")
    logger.info("third")
    # Within the interval: waiting for the next flush.
    assert messages(stream) == ["first"]


def test_a_warning_writes_the_waiting_lines_in_order(
    logged: tuple[logging.Logger, BatchedStreamHandler, CountingStream],
) -> None:
    logger, _, stream = logged
    for n in range(3):
        logger.info("review %d", n)
    logger.warning("policy skipped")
    assert messages(stream) == ["review 0", "review 1", "review 2", "policy skipped"]
    assert stream.writes == 2


def test_a_full_batch_is_written_in_one_write_and_flush_writes_the_rest(
    logged: tuple[logging.Logger, BatchedStreamHandler, CountingStream],
) -> None:
    logger, handler, stream = logged
    for n in range(8):
        logger.info("review %d", n)
    # Line 0 went out alone (quiet before), lines 1-5 as one full batch of 5.
    assert messages(stream) == [f"review {n}" for n in range(6)]
    assert stream.writes == 2
    handler.flush()
    assert messages(stream) == [f"review {n}" for n in range(8)]
    assert stream.writes == 3
    handler.flush()
    assert stream.writes == 3


def test_a_closed_stream_never_raises_into_the_caller() -> None:
    stream = io.StringIO()
    handler = BatchedStreamHandler(stream)
    handler.setFormatter(LogFormatter("json"))
    stream.close()
    record = logging.LogRecord("x", logging.ERROR, "", 0, "boom", (), None)
    handler.handle(record)
    handler.flush()


def test_the_direct_write_gives_the_line_logging_would_give() -> None:
    fields = {"uid": "u-1", "kind": "Pod", "dryRun": True, "durationMs": 0.25}
    lines = []
    for direct in (False, True):
        logger, handler, stream = logger_with(f"test.direct.{direct}", LogFormatter("json"))
        if direct:
            handler.write(logger, "review", fields)
        else:
            logger.info("review", extra={"fields": fields})
        handler.flush()
        line = json.loads(stream.getvalue())
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line.pop("time"))
        line["logger"] = line["logger"].rsplit(".", 1)[0]
        lines.append(line)
    assert (
        lines[0]
        == lines[1]
        == {
            "level": "info",
            "logger": "test.direct",
            "msg": "review",
            **fields,
        }
    )


def test_the_direct_write_falls_back_to_logging_with_another_formatter() -> None:
    plain = logging.Formatter("%(levelname)s %(message)s")
    logger, handler, stream = logger_with("test.direct.plain", plain)
    handler.write(logger, "review", {"uid": "u-1"})
    handler.flush()
    assert stream.getvalue() == "INFO review\n"
