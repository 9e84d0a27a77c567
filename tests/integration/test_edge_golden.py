"""The server's edge, byte for byte: a fixed sequence of requests through the real app gives
exactly the recorded answers, per-review log lines and /metrics text (tests/data/golden/edge).

What varies between runs is normalised, nothing else: log timestamps, `durationMs`, a
traceback's frames, `_created` times, and the latency histogram's sum and its finite buckets
(its `+Inf` bucket and `_count` are kept). The sequence covers what the edge does: patched,
allowed, warned, denied and internal-error answers, decision cache hits (byte key and
normalised key), DELETE, a subresource, dry run, and every way a body is refused.

Record again (only when a change of behaviour is intended): GPU_WEBHOOK_GOLDEN=record.
"""

from __future__ import annotations

import functools
import io
import json
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.helpers import DATA, GPU, GPUCORES, VCORE, VMEM, container, pod, standard_policies
from tests.helpers import workload as wrap
from tests.integration.helpers import CODECS, codec_named, crl_configmap
from tests.integration.test_decision_cache import body
from webhook.admission.app import create_app
from webhook.admission.logs import BatchedStreamHandler, LogFormatter
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import Decision, evaluate
from webhook.sources.store import PolicyStore

GOLDEN = DATA / "golden" / "edge"
RECORD = os.environ.get("GPU_WEBHOOK_GOLDEN") == "record"
JSON = {"Content-Type": "application/json"}


def _boom(obj: Any, *args: Any, **kwargs: Any) -> Decision:
    """The real evaluator, but for a pod named `boom`: an internal error (result "error")."""
    if isinstance(obj, dict) and obj.get("metadata", {}).get("name") == "boom":
        raise RuntimeError("the evaluator broke")
    return evaluate(obj, *args, **kwargs)


def _replica(name: str, second: int) -> dict[str, Any]:
    """A ReplicaSet's pod as the API server sends it (managedFields with the request's time;
    with `name`, as the validating call sees it)."""
    meta: dict[str, Any] = {"generateName": "train-7d9f8b6c5-", "namespace": "ml"}
    now = f"2026-11-23T10:00:{second:02d}Z"
    if name:
        meta = {**meta, "name": name, "uid": f"pod-uid-{second}", "creationTimestamp": now}
    meta["managedFields"] = [{"manager": "kube-controller-manager", "time": now}]
    gpu = container("c", "nvidia/cuda:12.4.1", limits={GPU: "1"})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [gpu]}}


def _configmap(max_value: str) -> dict[str, Any]:
    data = {"key": "example.com/gpu", "dataType": "integer", "max": max_value, "group": "x"}
    return crl_configmap("cf-crl-example-gpu", data)


def _requests() -> list[tuple[str, bytes, dict[str, str]]]:
    """(path, body, headers) of every request, in order."""
    known = pod(container("c", "nvidia/cuda:12.4.1", limits={GPU: "1"}))
    two = pod(
        container("a", "nvidia/cuda:12.4.1", limits={GPU: "1"}),
        container("b", "registry.example/team/app:1", limits={GPU: "1"}),
        container("cpu", "registry.example/team/side:1"),
        name="two",
    )
    over = pod(
        container("c", "nvidia/cuda:12.4.1", limits={GPU: "1", GPUCORES: "150"}),
        container("d", "busybox:1.36", limits={VMEM: "4"}, requests={VMEM: "2"}),
        name="over",
    )
    vgpu = pod(container("v", "registry.example/team/v:2", limits={VCORE: "50"}), name="vgpu")
    plain = pod(container("p", "busybox:1.36"), name="plain")
    sequence: list[tuple[str, dict[str, Any], str, dict[str, Any]]] = [
        ("mutate", known, "u-01", {}),
        ("validate", known, "u-02", {}),
        ("mutate", two, "u-03", {}),
        ("mutate", over, "u-04", {}),
        ("validate", over, "u-05", {}),
        ("mutate", vgpu, "u-06", {}),
        ("validate", vgpu, "u-07", {}),
        ("mutate", plain, "u-08", {}),
        ("validate", plain, "u-09", {}),
        ("mutate", wrap("Deployment", known), "u-10", {}),
        ("validate", wrap("Job", over), "u-11", {}),
        ("mutate", _replica("", 1), "u-12", {}),
        ("mutate", _replica("", 1), "u-13", {}),  # the same bytes: the byte key
        ("mutate", _replica("", 2), "u-14", {}),  # managedFields differ: the normalised key
        ("validate", _replica("train-7d9f8b6c5-aaaaa", 3), "u-15", {}),
        ("validate", _replica("train-7d9f8b6c5-bbbbb", 4), "u-16", {}),
        ("validate", _configmap("8"), "u-17", {}),
        ("validate", _configmap("eight"), "u-18", {}),
        ("mutate", pod(name="boom"), "u-19", {}),
        ("validate", known, "u-20", {"operation": "DELETE"}),
        ("mutate", known, "u-21", {"operation": "UPDATE"}),
        ("mutate", known, "u-22", {"dryRun": True}),
        ("mutate", known, "u-23", {"subResource": "ephemeralcontainers", "operation": "UPDATE"}),
        ("mutate", pod({"name": "x", "image": 7}, name="bad"), "u-24", {}),
    ]
    out: list[tuple[str, bytes, dict[str, str]]] = []
    for endpoint, obj, uid, change in sequence:
        review = json.loads(body(obj, uid))
        review["request"].update(change)
        data = json.dumps(review, separators=(",", ":")).encode()
        out.append((f"/{endpoint}", data, JSON))
    out += [
        ("/mutate", b"{not json", JSON),
        ("/validate", b'{"kind":"Pod"}', JSON),
        ("/mutate", b'{"kind":"AdmissionReview","request":{}}', JSON),
        ("/mutate", b"", JSON),
        ("/validate", b"{}", {"Content-Type": "text/plain"}),
        ("/mutate", b"{}", {**JSON, "Content-Encoding": "br"}),
    ]
    return out


_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
_DURATION = re.compile(r'(durationMs"?[=:])[0-9.e-]+')


def _normal_log(text: str) -> str:
    text = _TIME.sub("TIME", text)
    text = _DURATION.sub(r"\g<1>D", text)
    # A traceback's frames name files and line numbers: only its first line stays.
    lines = []
    for line in text.splitlines():
        if line.startswith(("Traceback", "  ", "RuntimeError")):
            continue
        lines.append(re.sub(r"\\nTraceback.*?(?=\")", "", line))
    return "\n".join(lines) + "\n"


def _varies(series: str) -> bool:
    """A series whose value depends on the clock: creation times, ages, latencies."""
    if series.startswith("gpu_webhook_review_duration_seconds_bucket"):
        return "+Inf" not in series
    return (
        "_created" in series
        or "timestamp" in series
        or "seconds_since" in series
        or series.endswith("_seconds")
        or series.startswith(("gpu_webhook_review_duration_seconds_sum", "process_", "python_"))
    )


def _normal_metrics(text: str) -> str:
    lines = []
    for line in text.splitlines():
        if line.startswith("#"):
            lines.append(line)
            continue
        series, _, value = line.rpartition(" ")
        if _varies(series):
            value = "X"
        lines.append(f"{series} {value}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def review_capture() -> Iterator[io.StringIO]:
    """The webhook's loggers written through logging with the text formatter, as tests see them."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(LogFormatter("text"))
    loggers = [logging.getLogger(n) for n in ("webhook.review", "webhook.admission.app")]
    saved = [(lg.level, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
        lg.propagate = False
    yield stream
    for lg, (level, propagate) in zip(loggers, saved, strict=True):
        lg.removeHandler(handler)
        lg.setLevel(level)
        lg.propagate = propagate


async def _run(app: Any) -> tuple[str, str]:
    """(the answers, the /metrics text) after the whole sequence."""
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        answers = []
        for path, data, headers in _requests():
            reply = await client.post(path, data=data, headers=headers)
            content = await reply.read()
            kind = reply.headers.get("Content-Type", "")
            answers.append(f"{path} {reply.status} {kind}\n{content.decode()}")
        metrics = await (await client.get("/metrics")).text()
    finally:
        await client.close()
    return "\n".join(answers) + "\n", metrics


def _compare(name: str, got: str) -> None:
    path: Path = GOLDEN / name
    if RECORD:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got)
    assert got == path.read_text(), f"{name} differs from its golden file"


@pytest.mark.parametrize("codec_name", CODECS)
async def test_served_as_serve_does(codec_name: str) -> None:
    """serve's setup: decision cache on, the review line through the batched handler (JSON)."""
    codec = codec_named(codec_name)
    stream = io.StringIO()
    handler = BatchedStreamHandler(stream, interval=3600)
    handler.setFormatter(LogFormatter("json"))
    store = PolicyStore()
    store.replace(standard_policies())
    sink = functools.partial(handler.write, logging.getLogger("webhook.review"), "review")
    app = create_app(
        WebhookConfig(),
        store,
        evaluator=_boom,
        codec=codec,
        review_sink=sink,
        decision_cache_bytes=1 << 20,
    )
    review = logging.getLogger("webhook.review")
    level = review.level
    review.setLevel(logging.INFO)
    try:
        answers, metrics = await _run(app)
    finally:
        review.setLevel(level)
    handler.flush()
    _compare(f"answers-{codec_name}.txt", answers)
    _compare("serve-log.txt", _normal_log(stream.getvalue()))
    _compare("serve-metrics.txt", _normal_metrics(metrics))


@pytest.mark.parametrize("codec_name", CODECS)
async def test_served_through_logging(codec_name: str, review_capture: io.StringIO) -> None:
    """No decision cache, the review line through `logging` with the text formatter."""
    store = PolicyStore()
    store.replace(standard_policies())
    app = create_app(WebhookConfig(), store, evaluator=_boom, codec=codec_named(codec_name))
    answers, metrics = await _run(app)
    _compare(f"answers-{codec_name}.txt", answers)
    _compare("logging-log.txt", _normal_log(review_capture.getvalue()))
    _compare("logging-metrics.txt", _normal_metrics(metrics))
