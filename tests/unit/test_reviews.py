"""AdmissionReview decoding and the pure response builder."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from webhook.admission.reviews import (
    MAX_WARNING_CHARS,
    MAX_WARNINGS,
    MAX_WARNINGS_BYTES,
    ReviewDecodeError,
    allowed_response,
    build_response,
    decode_review,
    denied_response,
    limit_warnings,
    patched_response,
)


def review(api_version: str | None = "admission.k8s.io/v1", **request: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "AdmissionReview", "request": request}
    if api_version is not None:
        body["apiVersion"] = api_version
    return body


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "train", "namespace": "ml"},
    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
}


def pod_review(api_version: str | None = "admission.k8s.io/v1", **extra: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "uid": "u-1",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": "CREATE",
        "namespace": "ml",
        "name": "train",
        "object": POD,
        "userInfo": {"username": "alice"},
    }
    fields.update(extra)
    return review(api_version, **fields)


@pytest.mark.parametrize("version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
def test_decode_keeps_the_request_api_version_and_fields(version: str) -> None:
    req = decode_review(pod_review(version, dryRun=True))
    assert req.api_version == version
    assert (req.uid, req.kind, req.operation, req.namespace, req.name) == (
        "u-1",
        "Pod",
        "CREATE",
        "ml",
        "train",
    )
    assert req.username == "alice"
    assert req.dry_run is True
    assert req.object == POD
    assert req.ref == "ml/train"


def test_missing_api_version_is_read_as_v1() -> None:
    assert decode_review(pod_review(None)).api_version == "admission.k8s.io/v1"


def test_fallbacks_for_trimmed_requests() -> None:
    # Like the surik-k8s-image-warden fixture: no request.kind, namespace, operation or name.
    obj = {"kind": "Pod", "metadata": {"generateName": "web-7d9f-", "namespace": "apps"}}
    req = decode_review(review(uid="x", object=obj))
    assert (req.kind, req.namespace, req.name, req.operation) == ("Pod", "apps", "web-7d9f-*", "")
    assert req.dry_run is False


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ([], "the body is a JSON list, expected an AdmissionReview object"),
        ({"kind": "Pod", "request": {"uid": "a"}}, "kind must be AdmissionReview, got 'Pod'"),
        ({"request": {"uid": "a"}}, "kind must be AdmissionReview, got None"),
        (
            review("admission.k8s.io/v2", uid="a"),
            "apiVersion 'admission.k8s.io/v2' is not supported; "
            "use admission.k8s.io/v1 or admission.k8s.io/v1beta1",
        ),
        ({"kind": "AdmissionReview"}, "the AdmissionReview has no request object"),
        (review(operation="CREATE"), "request.uid is missing; the API server always sends one"),
        (review(uid=""), "request.uid is missing; the API server always sends one"),
        (review(uid="a", object="None"), "request.object must be a JSON object, got str"),
        (review(uid="a", operation="CREATE"), "request.object is missing for operation CREATE"),
        (review(uid="a", operation=5, object={}), "request.operation must be a string, got int"),
        (
            review(uid="a", kind="Pod", object={}),
            "request.kind must be an object like {group, version, kind}, got str",
        ),
    ],
)
def test_not_an_admission_review_is_refused_with_a_reason(body: Any, reason: str) -> None:
    with pytest.raises(ReviewDecodeError) as info:
        decode_review(body)
    assert str(info.value) == reason


def test_allowed_response_echoes_uid_and_version() -> None:
    req = decode_review(pod_review("admission.k8s.io/v1beta1"))
    assert allowed_response(req) == {
        "apiVersion": "admission.k8s.io/v1beta1",
        "kind": "AdmissionReview",
        "response": {"uid": "u-1", "allowed": True},
    }


def test_denied_response_carries_403_and_message() -> None:
    req = decode_review(pod_review())
    assert denied_response(req, "limits.x is required")["response"] == {
        "uid": "u-1",
        "allowed": False,
        "status": {"code": 403, "reason": "Forbidden", "message": "limits.x is required"},
    }


def test_patched_response_is_base64_jsonpatch() -> None:
    req = decode_review(pod_review())
    patch = [{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]
    response = patched_response(req, patch, warnings=["defaulted x"])["response"]
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == patch
    assert response["warnings"] == ["defaulted x"]
    assert response["allowed"] is True


def test_empty_patch_sets_no_patch_type() -> None:
    response = build_response("admission.k8s.io/v1", "u", patch=[])["response"]
    assert response == {"uid": "u", "allowed": True}


def test_each_warning_is_bounded_and_cleaned() -> None:
    long = "x" * 5000
    assert MAX_WARNING_CHARS == 1024
    assert limit_warnings([long, "two\nlines", "two lines", ""]) == [
        "x" * (MAX_WARNING_CHARS - 1) + "…",
        "two lines",
    ]


def test_a_warning_naming_a_long_image_arrives_whole() -> None:
    # The core keeps warnings within 120 characters unless the image they name is longer
    # (issue 17 item 6); the response does not cut it again. The API server passes it on
    # whole while a response's warnings stay under 4096 characters (filters/warning.go).
    image = "registry.example.com/" + "team/" * 40 + "model-server:2024.06.01"
    warning = f"CUDA of {image} unknown: set features.alauda.io/cuda-version"
    assert len(warning) == 297
    assert limit_warnings([warning, "another"]) == [warning, "another"]


def test_many_warnings_are_summarised_inside_the_budget() -> None:
    warnings = [f"warning number {i} " + "y" * 90 for i in range(200)]
    limited = limit_warnings(warnings)
    assert len(limited) == MAX_WARNINGS
    assert limited[:3] == warnings[:3]
    assert limited[-1] == (
        f"and {200 - MAX_WARNINGS + 1} more warnings; "
        "run `gpu-webhook review -f <manifest>` to see them all"
    )
    assert sum(len(w.encode()) for w in limited) <= MAX_WARNINGS_BYTES
    assert all(len(w) <= MAX_WARNING_CHARS for w in limited)


def test_multibyte_warnings_respect_the_byte_budget() -> None:
    # Chinese descriptions take 3 bytes per character: the byte budget binds before the count.
    warnings = [f"{i} " + "显存" * 60 for i in range(MAX_WARNINGS)]
    limited = limit_warnings(warnings)
    assert sum(len(w.encode()) for w in limited) <= MAX_WARNINGS_BYTES
    assert limited[-1].startswith("and ")
    assert len(limited) < MAX_WARNINGS


def test_few_warnings_are_kept_as_they_are() -> None:
    assert limit_warnings(["a", "b"]) == ["a", "b"]


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("bell\x01here", "bell here"),
        ("\x1b[31mred\x1b[0m image", "red image"),
        ("evil\u202egnp.exe", "evil gnp.exe"),
        ("\u2066isolated\u2069 \u2067rtl\u2068", "isolated rtl"),
        ("marks\u200e\u200fgone", "marks gone"),
        ("zero\u200bwidth\ufeff", "zero width"),
        ("line\u2028separator\u2029end", "line separator end"),
        ("tab\tand\r\nnewline", "tab and newline"),
        ("unicode stays: 中文 ≥ 8.0 …", "unicode stays: 中文 ≥ 8.0 …"),
    ],
)
def test_warnings_are_cleaned_of_control_escape_and_bidi_characters(raw: str, clean: str) -> None:
    assert limit_warnings([raw]) == [clean]


def test_a_warning_of_only_control_characters_is_dropped() -> None:
    assert limit_warnings(["\x01\x02", "\u202e", "kept"]) == ["kept"]
