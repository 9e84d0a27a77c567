"""AdmissionReview wire format: decode a request and build a response, pure functions on dicts."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.admission.jsoncodec import std_dumps
from webhook.core.base.errors import WebhookError
from webhook.core.base.shapes import is_mapping
from webhook.core.base.wording import MAX_MESSAGE_CHARS
from webhook.core.outcome.decision import clean_text

API_V1 = "admission.k8s.io/v1"
API_V1BETA1 = "admission.k8s.io/v1beta1"
SUPPORTED_API_VERSIONS = (API_V1, API_V1BETA1)

# The API server passes admission warnings on as they are until one response's warnings pass
# 4096 characters in total; from then on it cuts each at 256 and drops the rest
# (k8s.io/apiserver pkg/endpoints/filters/warning.go: truncateAtTotalRunes = 4 * 1024,
# truncateItemRunes = 256). We send at most 3 KiB, so what we send arrives whole. The core
# keeps each warning within 120 characters except when the image or role it names is longer
# (core/base/wording.py); MAX_MESSAGE_CHARS only bounds what no valid name reaches.
MAX_WARNING_CHARS = MAX_MESSAGE_CHARS
MAX_WARNINGS = 20
MAX_WARNINGS_BYTES = 3 * 1024
_ELLIPSIS = "…"

Dumps = Callable[[Any], bytes]


class ReviewDecodeError(WebhookError, ValueError):
    """The body is JSON but not an AdmissionReview this webhook can answer (HTTP 400)."""


@dataclass(slots=True)  # not frozen: built per review, and frozen __init__ is ~5x slower
class AdmissionRequest:
    """The fields of `request` the webhook uses; `object` stays a plain dict (hot path)."""

    api_version: str
    uid: str
    kind: str
    group: str
    operation: str
    namespace: str
    name: str
    object: Mapping[str, Any] | None
    dry_run: bool
    sub_resource: str
    old_object: Mapping[str, Any] | None
    username: str
    groups: tuple[str, ...]

    # Written out, as the core's per-review classes do (workloads/pods.ContainerRef says why):
    # mypyc compiles it, the one @dataclass generates stays interpreted (issue 40).
    def __init__(
        self,
        api_version: str,
        uid: str,
        kind: str,
        group: str,
        operation: str,
        namespace: str,
        name: str,
        object: Mapping[str, Any] | None,
        dry_run: bool,
        sub_resource: str,
        old_object: Mapping[str, Any] | None,
        username: str,
        groups: tuple[str, ...] = (),
    ) -> None:
        self.api_version = api_version
        self.uid = uid
        self.kind = kind
        self.group = group
        self.operation = operation
        self.namespace = namespace
        self.name = name
        self.object = object
        self.dry_run = dry_run
        self.sub_resource = sub_resource
        self.old_object = old_object
        self.username = username
        self.groups = groups

    @property
    def ref(self) -> str:
        """`namespace/name` for logs and messages (name may be a generateName prefix)."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


def _as_dict(value: Mapping[str, Any]) -> dict[str, Any]:
    """`value` typed as the dict it is (what JSON decodes to), so that compiled code reads it
    with direct dict calls rather than generic method calls; another Mapping (a hand-written
    test's) as a copy, which reads the same."""
    if isinstance(value, dict):
        return value
    return dict(value)


def _str_field(container: dict[str, Any], key: str, where: str) -> str:
    value = container.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ReviewDecodeError(f"{where}.{key} must be a string, got {type(value).__name__}")
    return value


def _object_name(obj: Mapping[str, Any] | None) -> str:
    if obj is None:
        return ""
    metadata = obj.get("metadata")
    if not is_mapping(metadata):
        return ""
    name = metadata.get("name")
    if isinstance(name, str) and name:
        return name
    generate = metadata.get("generateName")
    # Pods created by controllers only carry generateName at admission time.
    return f"{generate}*" if isinstance(generate, str) and generate else ""


def decode_review(data: Any) -> AdmissionRequest:
    """Validate a decoded JSON body as an AdmissionReview request; raise ReviewDecodeError."""
    if not is_mapping(data):
        raise ReviewDecodeError(
            f"the body is a JSON {type(data).__name__}, expected an AdmissionReview object"
        )
    data = _as_dict(data)
    kind = data.get("kind")
    if kind != "AdmissionReview":
        raise ReviewDecodeError(f"kind must be AdmissionReview, got {kind!r}")
    # controller-runtime decodes into an AdmissionReview with v1 preset, so a body without
    # apiVersion is read as v1; an explicit unknown version is refused.
    api_version = data.get("apiVersion") or API_V1
    if api_version not in SUPPORTED_API_VERSIONS:
        raise ReviewDecodeError(
            f"apiVersion {api_version!r} is not supported; "
            f"use {' or '.join(SUPPORTED_API_VERSIONS)}"
        )
    found = data.get("request")
    if not is_mapping(found):
        raise ReviewDecodeError("the AdmissionReview has no request object")
    request = _as_dict(found)
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewDecodeError("request.uid is missing; the API server always sends one")

    obj = request.get("object")
    if obj is not None and not is_mapping(obj):
        # e.g. a hand-written fixture with "object": "None"; nothing we could evaluate.
        raise ReviewDecodeError(f"request.object must be a JSON object, got {type(obj).__name__}")
    operation = _str_field(request, "operation", "request")
    # UPDATE carries the stored object as oldObject; DELETE carries only oldObject.
    old = request.get("oldObject")
    if operation in ("CREATE", "UPDATE") and obj is None:
        raise ReviewDecodeError(f"request.object is missing for operation {operation}")

    gvk = request.get("kind")
    if gvk is None:
        gvk = {}
    if not is_mapping(gvk):
        raise ReviewDecodeError(
            f"request.kind must be an object like {{group, version, kind}}, "
            f"got {type(gvk).__name__}"
        )
    kind_gvk = _as_dict(gvk)
    object_kind = _str_field(kind_gvk, "kind", "request.kind")
    if not object_kind and obj is not None:
        # Trimmed fixtures omit request.kind; the object's own kind is the next best source.
        fallback = obj.get("kind")
        object_kind = fallback if isinstance(fallback, str) else ""

    namespace = _str_field(request, "namespace", "request")
    if not namespace and obj is not None:
        metadata = obj.get("metadata")
        if is_mapping(metadata) and isinstance(metadata.get("namespace"), str):
            namespace = metadata["namespace"]

    user = request.get("userInfo")
    username = ""
    groups: tuple[str, ...] = ()
    if is_mapping(user):
        if isinstance(user.get("username"), str):
            username = user["username"]
        found_groups = user.get("groups")
        if isinstance(found_groups, list):
            groups = tuple(g for g in found_groups if isinstance(g, str))

    return AdmissionRequest(
        api_version=api_version,
        uid=uid,
        kind=object_kind,
        group=_str_field(kind_gvk, "group", "request.kind"),
        operation=operation,
        namespace=namespace,
        name=_str_field(request, "name", "request") or _object_name(obj),
        object=obj,
        dry_run=request.get("dryRun") is True,
        sub_resource=_str_field(request, "subResource", "request"),
        old_object=old if is_mapping(old) else None,
        username=username,
        groups=groups,
    )


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + _ELLIPSIS


# A warning's text as limit_warnings sends it (cleaned, shortened) and its size in UTF-8 bytes,
# by the warning: the same few warnings (a policy's, a placement's) come back review after
# review, and cleaning reads every character. The key is the whole input of the pure function
# _cleaned; at most _CLEANED_MAX entries (emptied when full: warnings name images and pods).
_CLEANED: dict[str, tuple[str, int]] = {}
_CLEANED_MAX = 4096


def _cleaned(warning: str) -> tuple[str, int]:
    text = clean_text(warning)
    if len(text) > MAX_WARNING_CHARS:
        text = _shorten(text, MAX_WARNING_CHARS)
    known = (text, len(text) if text.isascii() else len(text.encode()))
    if len(_CLEANED) >= _CLEANED_MAX:
        _CLEANED.clear()
    _CLEANED[warning] = known
    return known


def limit_warnings(warnings: Iterable[str]) -> list[str]:
    """Deduplicate, shorten each to MAX_WARNING_CHARS and summarise the tail past the budget."""
    # Warnings travel as HTTP Warning headers (the API server refuses control characters) to
    # terminals (escape codes, bidi overrides): clean_text removes both.
    # One pass: clean, drop the empty, shorten, keep the first of equal ones, add up sizes.
    seen: dict[str, None] = {}
    total = 0
    for warning in warnings:
        if not warning:
            continue
        known = _CLEANED.get(warning)
        if known is None:
            known = _cleaned(warning)
        text, size = known
        if not text:
            continue
        if text not in seen:
            seen[text] = None
            total += size
    unique = list(seen)
    if len(unique) <= MAX_WARNINGS and total <= MAX_WARNINGS_BYTES:
        return unique
    sizes = [len(w.encode()) for w in unique]
    kept: list[str] = []
    used = 0
    # The summary line is ASCII and short; 200 bytes keeps it inside the budget.
    for warning, size in zip(unique, sizes, strict=True):
        if len(kept) >= MAX_WARNINGS - 1 or used + size > MAX_WARNINGS_BYTES - 200:
            break
        kept.append(warning)
        used += size
    left = len(unique) - len(kept)
    kept.append(
        f"and {left} more warning{'s' if left > 1 else ''}; "
        "run `gpu-webhook review -f <manifest>` to see them all"
    )
    return kept


def build_response(
    api_version: str,
    uid: str,
    *,
    allowed: bool = True,
    message: str | None = None,
    code: int | None = None,
    reason: str | None = None,
    patch: Sequence[Mapping[str, Any]] | None = None,
    warnings: Sequence[str] = (),
    dumps: Dumps = std_dumps,
) -> dict[str, Any]:
    """The AdmissionReview answer; `patchType` is set only when there is a patch."""
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed or message:
        status: dict[str, Any] = {}
        if code is not None or not allowed:
            status["code"] = code if code is not None else 403
        if reason or not allowed:
            status["reason"] = reason or "Forbidden"
        if message:
            status["message"] = message
        response["status"] = status
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(dumps(list(patch))).decode("ascii")
    if warnings:
        response["warnings"] = limit_warnings(warnings)
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}


class Allowed:
    """An allowed answer before it is encoded (encode_allowed): its JSON patch in base64
    (empty: none) and its warnings, limited (limit_warnings).

    A plain class with its __init__ written out, not a NamedTuple: one is built per patched or
    warned review, and a NamedTuple's __new__ runs interpreted in the compiled build."""

    def __init__(self, patch: bytes, warnings: list[str] | None) -> None:
        self.patch = patch
        # None: the decision had none (a list emptied by limit_warnings is still written).
        self.warnings = warnings

    def __repr__(self) -> str:
        return f"Allowed(patch={self.patch!r}, warnings={self.warnings!r})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Allowed)
            and self.patch == other.patch
            and self.warnings == other.warnings
        )

    def __hash__(self) -> int:
        return hash((self.patch, None if self.warnings is None else tuple(self.warnings)))


ALLOWED = Allowed(b"", None)
# What dumps writes before the uid of an answer, per apiVersion (both plain ASCII constants).
_HEADS = {
    version: b'{"apiVersion":"'
    + version.encode()
    + b'","kind":"AdmissionReview","response":{"uid":'
    for version in SUPPORTED_API_VERSIONS
}


def allowed(
    patch: Sequence[Mapping[str, Any]] | None = None,
    warnings: Sequence[str] = (),
    dumps: Dumps = std_dumps,
) -> Allowed:
    """An allowed answer's parts: what build_response computes for it (patch and warnings)."""
    if not patch and not warnings:
        return ALLOWED
    encoded = base64.b64encode(dumps(list(patch))) if patch else b""
    return Allowed(encoded, limit_warnings(warnings) if warnings else None)


def encode_allowed(api_version: str, uid: str, answer: Allowed, dumps: Dumps = std_dumps) -> bytes:
    """The bytes `dumps(build_response(...))` writes for this allowed answer, without building
    the dicts and re-encoding the base64 patch."""
    head = _HEADS.get(api_version)
    if head is None:
        return dumps(allowed_dict(api_version, uid, answer))
    parts = [head, dumps(uid), b',"allowed":true']
    if answer.patch:
        parts += (b',"patchType":"JSONPatch","patch":"', answer.patch, b'"')
    if answer.warnings is not None:
        parts += (b',"warnings":', dumps(answer.warnings))
    parts.append(b"}}")
    return b"".join(parts)


def allowed_dict(api_version: str, uid: str, answer: Allowed) -> dict[str, Any]:
    """The answer encode_allowed writes, as build_response builds it."""
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if answer.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = answer.patch.decode("ascii")
    if answer.warnings is not None:
        response["warnings"] = answer.warnings
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}


def allowed_response(request: AdmissionRequest, *, warnings: Sequence[str] = ()) -> dict[str, Any]:
    return build_response(request.api_version, request.uid, warnings=warnings)


def denied_response(
    request: AdmissionRequest, message: str, *, warnings: Sequence[str] = ()
) -> dict[str, Any]:
    """A policy denial: HTTP-style 403 Forbidden inside the review, as controller-runtime does."""
    return build_response(
        request.api_version,
        request.uid,
        allowed=False,
        message=message,
        code=403,
        reason="Forbidden",
        warnings=warnings,
    )


def patched_response(
    request: AdmissionRequest,
    patch: Sequence[Mapping[str, Any]],
    *,
    warnings: Sequence[str] = (),
    dumps: Dumps = std_dumps,
) -> dict[str, Any]:
    return build_response(
        request.api_version, request.uid, patch=patch, warnings=warnings, dumps=dumps
    )
