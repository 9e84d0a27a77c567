"""The compiled log line's parts (admission/loglines.py) give what the general code gives."""

from __future__ import annotations

import time

from webhook.admission.jsoncodec import json_codec
from webhook.admission.loglines import LineFormat


def test_the_milliseconds_table_writes_what_the_format_spec_writes() -> None:
    lines = LineFormat(True, json_codec().dumps)
    for created in (0.0, 1.0005, 1764268799.999, 1764268800.0004, 1764268800.5, 1764268800.9999):
        second = int(created)
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        when = f"{prefix}.{int((created - second) * 1000):03d}Z"
        line = lines.line(created, "INFO", "webhook.review", "review", {"uid": "u"})
        assert line == (
            f'{{"time":"{when}","level":"info","logger":"webhook.review","msg":"review","uid":"u"}}'
        )


def test_a_line_without_fields_and_with_a_reserved_key() -> None:
    lines = LineFormat(True, json_codec().dumps)
    assert lines.line(0.25, "WARNING", "x", "m", {}) == (
        '{"time":"1970-01-01T00:00:00.250Z","level":"warning","logger":"x","msg":"m"}'
    )
    assert lines.line(0.25, "INFO", "x", "m", {"msg": "other"}) == (
        '{"time":"1970-01-01T00:00:00.250Z","level":"info","logger":"x","msg":"other"}'
    )
