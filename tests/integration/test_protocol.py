"""Hardened input handling, probes, metrics, /policies, internal errors and review logs."""

from __future__ import annotations

import base64
import copy
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from tests.helpers import CORPUS, CORPUS_MISSING, DATA
from tests.integration.helpers import (
    Reply,
    RunningServer,
    metric_samples,
    ready_store,
    serve_in_thread,
)
from webhook.admission.app import create_app
from webhook.admission.body import MAX_BODY_BYTES
from webhook.admission.logs import LogFormatter
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import Decision
from webhook.core.policies.policyset import PolicySet
from webhook.sources.store import PolicyStore
from webhook.tls.certs import CertPaths, CertReloader

EMPTY = "request body is empty; expected an AdmissionReview JSON object"
UID = "0d9c2f4e-2222-4b4b-8c8c-000000000002"


def gpu_pod_review(**request: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "uid": UID,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "namespace": "ml",
        "name": "train",
        "operation": "CREATE",
        "userInfo": {"username": "bob"},
        "object": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "train", "namespace": "ml"},
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "image": "nvidia/cuda:12.2.0-base",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ]
            },
        },
    }
    fields.update(request)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": fields}


def decode_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    patch: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return patch


def post(server: RunningServer, endpoint: str, body: bytes, **kwargs: Any) -> Reply:
    return server.request("POST", endpoint, body, **kwargs)


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
@pytest.mark.parametrize(
    ("body", "content_type", "reason"),
    [
        (b"{}", "text/plain", "Content-Type must be application/json, got text/plain"),
        (b"{}", None, "Content-Type must be application/json, got none"),
        (b"", "application/json", "request body is empty; expected an AdmissionReview JSON object"),
        (
            b"  \n",
            "application/json",
            "request body is empty; expected an AdmissionReview JSON object",
        ),
        (b"{not json", "application/json", "request body is not valid JSON: "),
        (b"\xff\xfe\x00", "application/json", "request body is not valid JSON: "),
        (b"[" * 100_000, "application/json", "request body is not valid JSON: "),
        (
            b"[1, 2]",
            "application/json",
            "request body is not an AdmissionReview: the body is a JSON list, "
            "expected an AdmissionReview object",
        ),
        (
            b'{"kind": "Pod", "apiVersion": "v1"}',
            "application/json",
            "request body is not an AdmissionReview: kind must be AdmissionReview, got 'Pod'",
        ),
        (
            b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}',
            "application/json",
            "request body is not an AdmissionReview: the AdmissionReview has no request object",
        ),
        (
            b'{"kind": "AdmissionReview", "request": {"operation": "CREATE"}}',
            "application/json",
            "request body is not an AdmissionReview: request.uid is missing; "
            "the API server always sends one",
        ),
    ],
)
def test_bad_input_is_a_400_with_a_reason(
    server: RunningServer, endpoint: str, body: bytes, content_type: str | None, reason: str
) -> None:
    reply = post(server, endpoint, body, content_type=content_type)
    assert reply.status == 400
    assert reply.headers["Content-Type"].startswith("text/plain")
    assert reply.text.startswith(reason)
    assert reply.text.endswith("\n")


NOT_FINITE = "is not a JSON value (JSON numbers are finite: no NaN or Infinity)"


# A number JSON cannot hold -> what orjson says (and where), what the json codec says.
NOT_JSON_NUMBERS = {
    "NaN": ("unexpected character, expected a JSON value", f"NaN {NOT_FINITE}"),
    "Infinity": ("unexpected character, expected a JSON value", f"Infinity {NOT_FINITE}"),
    "-Infinity": ("no digit after sign", f"-Infinity {NOT_FINITE}"),
    "1e400": (
        "number is infinity when parsed as double",
        "the number 1e400 is beyond the range of a double",
    ),
}


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
@pytest.mark.parametrize("literal", sorted(NOT_JSON_NUMBERS))
def test_a_limit_json_cannot_hold_is_a_400_under_both_codecs(
    server: RunningServer, endpoint: str, literal: str
) -> None:
    orjson_says, json_says = NOT_JSON_NUMBERS[literal]
    # The standard library reads NaN and 1e400 (as inf); its codec once put them into the patch
    # (requests from limits), which is not JSON. Both codecs refuse the body instead.
    text = json.dumps(gpu_pod_review())
    body = text.replace('"nvidia.com/gpu": "1"', f'"nvidia.com/gpu": {literal}').encode()
    assert body != text.encode()
    reply = post(server, endpoint, body)
    if server.app_state().codec.name == "orjson":
        at = body.index(literal.encode()) + (1 if literal == "-Infinity" else 0)
        reason = f"{orjson_says}: line 1 column {at + 1} (char {at})"
    else:
        reason = json_says
    assert (reply.status, reply.text) == (400, f"request body is not valid JSON: {reason}\n")


def test_charset_parameter_is_accepted(server: RunningServer) -> None:
    reply = post(
        server,
        "/validate",
        json.dumps(gpu_pod_review()).encode(),
        content_type="application/json; charset=utf-8",
    )
    assert reply.status == 200


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
def test_oversized_body_is_a_413(server: RunningServer, endpoint: str) -> None:
    review = gpu_pod_review()
    review["request"]["object"]["metadata"]["annotations"] = {"big": "x" * MAX_BODY_BYTES}
    reply = post(server, endpoint, json.dumps(review).encode())
    assert reply.status == 413
    assert reply.text == (
        f"request body is larger than {MAX_BODY_BYTES} bytes (limit sized for an UPDATE review "
        "of two 3 MiB objects); this is not an AdmissionReview from the API server\n"
    )


def test_a_large_but_legal_update_review_is_answered(server: RunningServer) -> None:
    # Two objects of nearly 3 MiB each: the biggest review the API server can send.
    review = gpu_pod_review(operation="UPDATE")
    review["request"]["object"]["metadata"]["annotations"] = {"big": "x" * (3 * 1024 * 1024 - 4096)}
    review["request"]["oldObject"] = review["request"]["object"]
    reply = post(server, "/validate", json.dumps(review).encode())
    assert reply.status == 200
    assert reply.json()["response"] == {"uid": UID, "allowed": True}


def payload_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.json"))


def answer_of(server: RunningServer, endpoint: str, path: Path) -> tuple[Reply, dict[str, Any]]:
    """POST the file as it is; the reply and the review that was sent."""
    body = path.read_bytes()
    return post(server, endpoint, body), json.loads(body)


NO_UID = (
    "request body is not an AdmissionReview: request.uid is missing; "
    "the API server always sends one\n"
)


def assert_answers(reply: Reply, sent: dict[str, Any], name: str) -> dict[str, Any]:
    """A 200 whose uid and apiVersion are the request's; returns the response part."""
    assert reply.status == 200, (name, reply.text)
    answer = reply.json()
    assert answer["apiVersion"] == sent.get("apiVersion", "admission.k8s.io/v1"), name
    assert answer["kind"] == "AdmissionReview", name
    response: dict[str, Any] = answer["response"]
    assert response["uid"] == sent["request"]["uid"], name
    return response


# The repository's own AdmissionReviews (tests/data), in the shapes the API server sends:
# what /mutate answers for each (allowed, the object after the patch is checked below).
OWN_PAYLOADS = {
    "BROKEN-no-uid.json": None,
    "deployment-applied-v1beta1.json": {
        "uid": "3b4c5d6e-7f80-4912-a3b4-c5d6e7f80912",
        "allowed": True,
    },
    "pod-deleted-by-user.json": {"uid": "2a3b4c5d-6e7f-4809-9a1b-2c3d4e5f6071", "allowed": True},
    "replicaset-scaled-by-deployment-controller.json": {
        "uid": "c4f1e2d3-5a6b-4c7d-8e9f-0a1b2c3d4e5f",
        "allowed": True,
    },
}
# Required: a driver for CUDA ≥ 12.4; preferred (weight 100): at most one major newer (SPEC §4).
CUDA_12_4_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "cuda-major-version", "operator": "Gt", "values": ["11"]},
                        {"key": "cuda-major-version", "operator": "Lt", "values": ["13"]},
                        {"key": "cuda-minor-version", "operator": "Gt", "values": ["3"]},
                    ]
                },
                {
                    "matchExpressions": [
                        {"key": "cuda-major-version", "operator": "Gt", "values": ["12"]},
                    ]
                },
            ]
        },
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 100,
                "preference": {
                    "matchExpressions": [
                        {"key": "cuda-major-version", "operator": "Lt", "values": ["14"]}
                    ]
                },
            }
        ],
    }
}


def test_the_repository_payloads_are_all_listed() -> None:
    names = {p.name for p in payload_files(DATA / "admissionreviews")}
    assert names == {*OWN_PAYLOADS, "pod-created-by-replicaset-controller.json"}


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
@pytest.mark.parametrize("name", sorted(OWN_PAYLOADS))
def test_repository_payloads_get_their_answer(
    server: RunningServer, endpoint: str, name: str
) -> None:
    reply, sent = answer_of(server, endpoint, DATA / "admissionreviews" / name)
    expected = OWN_PAYLOADS[name]
    if expected is None:
        assert (reply.status, reply.text) == (400, NO_UID)
    else:
        assert assert_answers(reply, sent, name) == expected


def test_a_gpu_pod_from_its_replicaset_gets_cuda_placement(server: RunningServer) -> None:
    path = DATA / "admissionreviews" / "pod-created-by-replicaset-controller.json"
    reply, sent = answer_of(server, "/mutate", path)
    response = assert_answers(reply, sent, path.name)
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    assert response["warnings"] == [
        "required GPU nodes with CUDA ≥ 12.4 (image nvidia/cuda:12.4.1-runtime-ubuntu22.04), "
        "preferably < 14.0",
        # The /dev/shm fix (on by default): half of the container's 16Gi memory limit.
        'mounted a 8Gi memory-backed /dev/shm in container "train" (shm fix)',
    ]
    expected = copy.deepcopy(sent["request"]["object"])
    expected["spec"]["affinity"] = CUDA_12_4_AFFINITY
    expected["spec"]["volumes"].append(
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}
    )
    expected["spec"]["containers"][0]["volumeMounts"].append(
        {"name": "dshm", "mountPath": "/dev/shm"}
    )
    # The mark naming the webhook's own volume (a reinvocation resizes it).
    expected["metadata"].setdefault("annotations", {})["features.alauda.io/injected-shm"] = "dshm"
    assert jsonpatch.apply_patch(sent["request"]["object"], decode_patch(response)) == expected
    reply, sent = answer_of(server, "/validate", path)
    assert assert_answers(reply, sent, path.name) == {
        "uid": sent["request"]["uid"],
        "allowed": True,
    }


@pytest.mark.skipif(not payload_files(CORPUS / "admissionreviews"), reason=CORPUS_MISSING)
@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
def test_every_corpus_payload_gets_an_answer(server: RunningServer, endpoint: str) -> None:
    for path in payload_files(CORPUS / "admissionreviews"):
        reply, sent = answer_of(server, endpoint, path)
        if "BROKEN" in path.name:
            assert (reply.status, reply.text) == (400, NO_UID), path.name
            continue
        response = assert_answers(reply, sent, path.name)
        # None of the upstream payloads asks for a GPU: none may be denied, patched or warned.
        assert response == {"uid": sent["request"]["uid"], "allowed": True}, path.name


def test_healthz_and_policies(server: RunningServer) -> None:
    assert server.request("GET", "/healthz").text == "ok\n"
    policies = server.request("GET", "/policies")
    assert policies.status == 200
    document = policies.json()
    assert document["ready"] is True
    assert sorted(p["key"] for p in document["policies"]) == [
        "nvidia.com/gpu",
        "tencent.com/vcuda-core",
        "tencent.com/vcuda-memory",
    ]
    assert document["groups"] == {
        "gpu-manager": ["tencent.com/vcuda-core", "tencent.com/vcuda-memory"],
        "nvidia": ["nvidia.com/gpu"],
    }
    assert document["invalid"] == []
    assert document["conflicts"] == []


COUNTED = (
    "gpu_webhook_reviews_total{",
    "gpu_webhook_mutations_total{",
    "gpu_webhook_rejected_requests_total{",
    "gpu_webhook_review_duration_seconds_count{",
)


def counted(samples: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in samples.items() if k.startswith(COUNTED)}


def test_metrics_after_some_reviews(server: RunningServer) -> None:
    # The module's server is shared: what these requests add is compared, not the totals.
    before = counted(metric_samples(server.request("GET", "/metrics").text))
    server.review("/mutate", gpu_pod_review())
    server.review("/validate", gpu_pod_review())
    post(server, "/mutate", b"nope")
    reply = server.request("GET", "/metrics")
    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith("text/plain; version=")
    samples = metric_samples(reply.text)
    after = counted(samples)
    added = {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}
    assert added == {
        'gpu_webhook_reviews_total{endpoint="mutate",kind="Pod",operation="CREATE",'
        'result="patched"}': 1.0,
        'gpu_webhook_reviews_total{endpoint="validate",kind="Pod",operation="CREATE",'
        'result="allowed"}': 1.0,
        'gpu_webhook_mutations_total{type="cuda-affinity"}': 1.0,
        'gpu_webhook_mutations_total{type="requests-from-limits"}': 1.0,
        'gpu_webhook_mutations_total{type="shm"}': 1.0,
        'gpu_webhook_rejected_requests_total{endpoint="mutate",status="400"}': 1.0,
        'gpu_webhook_review_duration_seconds_count{endpoint="mutate"}': 1.0,
        'gpu_webhook_review_duration_seconds_count{endpoint="validate"}': 1.0,
    }
    assert samples["gpu_webhook_policies_loaded"] == 3
    assert samples["gpu_webhook_invalid_configmaps"] == 0
    assert samples["gpu_webhook_policy_conflicts"] == 0
    assert samples["gpu_webhook_ready"] == 1
    assert samples["gpu_webhook_watch_restarts_total"] == 0
    assert samples["gpu_webhook_seconds_since_last_sync"] >= 0
    expiry = samples["gpu_webhook_serving_certificate_expiry_timestamp_seconds"]
    certificate = server.app_state().cert_reloader.certificate  # type: ignore[union-attr]
    assert certificate is not None
    assert expiry == pytest.approx(certificate.not_valid_after_utc.timestamp())


def test_unknown_kinds_do_not_become_metric_labels(server: RunningServer) -> None:
    review = gpu_pod_review(kind={"group": "x", "version": "v1", "kind": "Made-Up-Kind-123"})
    review["request"]["operation"] = "PATCH-ME"
    review["request"]["object"] = {"kind": "Made-Up-Kind-123"}
    assert server.review("/validate", review)["response"]["allowed"] is True
    text = server.request("GET", "/metrics").text
    assert "Made-Up-Kind-123" not in text
    assert 'kind="other",operation="other"' in text


@pytest.fixture
def unready(tls: CertPaths) -> Iterator[RunningServer]:
    store = PolicyStore()
    app = create_app(WebhookConfig(), store)
    ctx = CertReloader(tls.cert, tls.key).context
    with serve_in_thread(app, ctx, tls.ca_cert, store) as running:
        yield running


def test_readyz_is_503_until_the_first_sync(unready: RunningServer, policy_dir: Path) -> None:
    reply = unready.request("GET", "/readyz")
    assert (reply.status, reply.text) == (
        503,
        "policies not synced yet: waiting for the first list of CRL ConfigMaps\n",
    )
    metrics = unready.request("GET", "/metrics").text
    assert "gpu_webhook_ready 0.0" in metrics
    assert "gpu_webhook_seconds_since_last_sync" not in metrics
    unready.store.stats.last_error = "cannot list ConfigMaps in kube-public: 403 Forbidden"
    assert unready.request("GET", "/readyz").text == (
        "policies not synced yet: cannot list ConfigMaps in kube-public: 403 Forbidden\n"
    )
    unready.store.replace(ready_store(policy_dir).current)
    reply = unready.request("GET", "/readyz")
    assert (reply.status, reply.text) == (200, "ok\n")
    assert unready.request("GET", "/healthz").status == 200


def exploding_evaluator(*args: Any, **kwargs: Any) -> Decision:
    raise RuntimeError("boom while reading the spec")


@pytest.fixture
def faulty(tls: CertPaths, policy_dir: Path) -> Iterator[RunningServer]:
    store = ready_store(policy_dir)
    app = create_app(WebhookConfig(), store, evaluator=exploding_evaluator)
    ctx = CertReloader(tls.cert, tls.key).context
    with serve_in_thread(app, ctx, tls.ca_cert, store) as running:
        yield running


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
def test_an_exception_in_evaluation_is_a_denial_naming_the_object(
    faulty: RunningServer, endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="webhook.admission.app"):
        response = faulty.review(endpoint, gpu_pod_review())["response"]
    assert response == {
        "uid": UID,
        "allowed": False,
        "status": {
            "code": 403,
            "reason": "Forbidden",
            "message": "internal error evaluating Pod ml/train: RuntimeError: "
            "boom while reading the spec; see the webhook logs",
        },
    }
    assert f"internal error evaluating Pod ml/train (uid {UID})" in caplog.text
    assert "Traceback (most recent call last)" in caplog.text
    assert "exploding_evaluator" in caplog.text
    # The process is still serving.
    assert faulty.request("GET", "/healthz").status == 200


def test_a_malformed_object_is_denied_with_the_shape_error(server: RunningServer) -> None:
    review = gpu_pod_review()
    review["request"]["object"]["spec"]["containers"] = {"not": "a list"}
    response = server.review("/validate", review)["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert response["status"]["message"].startswith("cannot evaluate Pod ml/train: ")
    assert "containers" in response["status"]["message"]


def test_one_json_log_line_per_review(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="webhook.review"):
        server.review("/mutate", gpu_pod_review(dryRun=True))
    records = [r for r in caplog.records if r.name == "webhook.review"]
    assert len(records) == 1
    line = json.loads(LogFormatter("json").format(records[0]))
    duration = line.pop("durationMs")
    assert isinstance(duration, float)
    assert duration >= 0
    line.pop("time")
    assert line == {
        "level": "info",
        "logger": "webhook.review",
        "msg": "review",
        "endpoint": "mutate",
        "uid": UID,
        "kind": "Pod",
        "namespace": "ml",
        "name": "train",
        "operation": "CREATE",
        "user": "bob",
        "dryRun": True,
        "allowed": True,
        "result": "patched",
        "mutations": 3,
        "warnings": 3,
    }
    text = LogFormatter("text").format(records[0])
    assert " INFO    webhook.review: review endpoint=mutate uid=" in text
    assert "dryRun=True allowed=True result=patched mutations=3" in text


def test_a_subresource_review_names_it_in_its_log_line(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    """`kubectl debug` arrives as an UPDATE of pods/ephemeralcontainers: the line says so."""
    review = gpu_pod_review()
    old = json.loads(json.dumps(review["request"]["object"]))
    review["request"].update(operation="UPDATE", subResource="ephemeralcontainers", oldObject=old)
    review["request"]["object"]["spec"]["ephemeralContainers"] = [
        {"name": "debugger", "image": "busybox:1.36"}
    ]
    with caplog.at_level(logging.INFO, logger="webhook.review"):
        server.review("/validate", review)
    (record,) = [r for r in caplog.records if r.name == "webhook.review"]
    line = json.loads(LogFormatter("json").format(record))
    assert (line["operation"], line["subResource"]) == ("UPDATE", "ephemeralcontainers")
    assert "operation=UPDATE subResource=ephemeralcontainers user=" in (
        LogFormatter("text").format(record)
    )


def test_empty_policy_set_allows_gpu_pods_untouched_by_policies(tls: CertPaths) -> None:
    store = PolicyStore()
    store.replace(PolicySet.empty())
    app = create_app(WebhookConfig(), store)
    ctx = CertReloader(tls.cert, tls.key).context
    with serve_in_thread(app, ctx, tls.ca_cert, store) as running:
        response = running.review("/validate", gpu_pod_review())["response"]
        assert response == {"uid": UID, "allowed": True}


@pytest.mark.parametrize(
    "image",
    [
        ":-" * 24_000,  # made two former image patterns backtrack quadratically (9.5 s)
        "registry.example/" + "a" * (1024 * 1024) + ":2.3.0-cuda12.1-cudnn8-runtime",  # 1 MB
    ],
)
def test_a_hostile_image_reference_neither_stalls_the_server_nor_is_matched(
    server: RunningServer, image: str
) -> None:
    review = gpu_pod_review()
    review["request"]["object"]["spec"]["containers"][0]["image"] = image
    body = json.dumps(review).encode()
    probes: list[int] = []

    def probe() -> None:
        # /healthz while the review is in flight: the event loop must keep answering.
        for _ in range(5):
            probes.append(server.request("GET", "/healthz", content_type=None).status)

    thread = threading.Thread(target=probe)
    thread.start()
    reply = post(server, "/mutate", body)
    thread.join(timeout=30)
    assert probes == [200] * 5
    assert reply.status == 200
    response = reply.json()["response"]
    assert response["allowed"] is True
    # Longer than any valid image reference: not matched at all, so no CUDA version from it
    # (even the 1 MB one whose tag names cuda12.1) and no affinity in the patch.
    assert "patch" not in response or all(
        "affinity" not in op["path"] for op in decode_patch(response)
    )
    # Named by its start and length: a string this long is no image reference.
    assert response["warnings"] == [
        'set requests.nvidia.com/gpu=1 from limits in container "c"',
        'mounted a 16Gi memory-backed /dev/shm in container "c" (shm fix)',
        f"CUDA of {image[:40]}… ({len(image)} characters) unknown: set "
        "features.alauda.io/cuda-version",
    ]
