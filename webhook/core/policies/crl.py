"""CRL ConfigMap -> validated ResourceLimitation, or precise lint errors (SPEC §2)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from webhook.core.base.errors import QuantityError
from webhook.core.base.quantity import parse_quantity, trim_space

CRL_NAMESPACE = "kube-public"
CRL_PREFIX = "cf-crl-"
LABEL_TYPE = "features.alauda.io/type"
LABEL_GROUP = "features.alauda.io/group"
LABEL_ENABLED = "features.alauda.io/enabled"
TYPE_VALUE = "CustomResourceLimitation"

KNOWN_FIELDS = frozenset(
    {
        "key",
        "dataType",
        "defaultValue",
        "descriptionEn",
        "descriptionZh",
        "group",
        "limits",
        "requests",
        "min",
        "max",
        "wholeUnit",
    }
)
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_RESOURCE_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_NOT_KEY_CHAR = re.compile(r"[^a-z0-9-]")


class LimitsPolicy(StrEnum):
    DISABLED = "disabled"
    REQUIRED = "required"
    OPTIONAL = "optional"


class RequestsPolicy(StrEnum):
    DISABLED = "disabled"
    REQUIRED = "required"
    FROM_LIMITS = "fromLimits"


@dataclass(frozen=True, slots=True)
class ResourceLimitation:
    """One validated CRL policy: the rules for one extended resource key."""

    key: str
    group: str
    limits: LimitsPolicy
    requests: RequestsPolicy
    data_type: str = "integer"
    default: int | None = None
    default_text: str | None = None
    description_en: str = ""
    description_zh: str = ""
    min: int | None = None
    max: int | None = None
    whole_unit: int | None = None
    configmap: str = ""  # "kube-public/cf-crl-..." for messages
    name: str = ""
    created: str = ""  # metadata.creationTimestamp, for the deterministic conflict winner

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "group": self.group,
            "configMap": self.configmap,
            "dataType": self.data_type,
            "defaultValue": self.default_text,
            "limits": self.limits.value,
            "requests": self.requests.value,
            "min": self.min,
            "max": self.max,
            "wholeUnit": self.whole_unit,
            "descriptionEn": self.description_en,
        }


@dataclass(frozen=True, slots=True)
class CrlParse:
    """The outcome of reading one ConfigMap as a CRL."""

    name: str
    namespace: str
    is_crl: bool  # carries the CustomResourceLimitation type label
    active: bool  # is_crl, in kube-public, enabled "true" and without errors
    limitation: ResourceLimitation | None
    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def ref(self) -> str:
        return f"{self.namespace or '(no namespace)'}/{self.name or '(no name)'}"


def key_name_forms(key: str) -> tuple[str, str]:
    """The two accepted `keyName` spellings: full key and the part after '/'."""
    full = _NOT_KEY_CHAR.sub("-", key.lower())
    short = _NOT_KEY_CHAR.sub("-", key.rsplit("/", 1)[-1].lower())
    return full, short


def _check_key(key: str) -> list[str]:
    errors: list[str] = []
    if "/" not in key:
        return [
            f"data.key {key!r} is not an extended resource name: it must be domain-qualified, "
            "like tencent.com/vcuda-core"
        ]
    prefix, _, name = key.partition("/")
    if not _DNS_SUBDOMAIN.fullmatch(prefix) or len(prefix) > 253:
        errors.append(f"data.key {key!r} has an invalid domain prefix {prefix!r}")
    if not _RESOURCE_NAME.fullmatch(name) or len(name) > 63:
        errors.append(
            f"data.key {key!r} has an invalid name part {name!r} (letters, digits, '-', '_', '.', "
            "at most 63 characters)"
        )
    if prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io"):
        errors.append(
            f"data.key {key!r} is in the kubernetes.io domain, which is reserved for native "
            "resources; extended resources use your own domain"
        )
    if key.startswith("requests."):
        errors.append(f"data.key {key!r} must not start with 'requests.' (that is quota syntax)")
    return errors


def _check_name(name: str, key: str | None) -> list[str]:
    if not name.startswith(CRL_PREFIX):
        return [f"the name must start with {CRL_PREFIX!r} (cf-crl-{{customName}}-{{keyName}})"]
    if key is None:
        return []
    rest = name[len(CRL_PREFIX) :]
    full, short = key_name_forms(key)
    for form in (full, short):
        if rest.endswith("-" + form):
            custom = rest[: -len(form) - 1]
            if _DNS_LABEL.fullmatch(custom):
                return []
    return [
        f"the name must be cf-crl-{{customName}}-{{keyName}} with keyName {short!r} or "
        f"{full!r} for key {key!r} and a non-empty customName, e.g. cf-crl-mygroup-{short}"
    ]


def _whole(data: Mapping[str, Any], field: str, errors: list[str]) -> int | None:
    """A whole-number field, read by the same parser as the pods' values (SPEC §3), so a value
    lint accepts is one the API server parses when the webhook writes it into a pod."""
    raw = data.get(field)
    if raw is None:
        return None
    if not isinstance(raw, str):
        errors.append(f'data.{field} must be a string (quote it: {field}: "{raw}")')
        return None
    try:
        value = parse_quantity(raw)
    except QuantityError as exc:
        errors.append(f"data.{field}: {exc}")
        return None
    if value.denominator != 1 or value < 0:
        errors.append(f"data.{field} must be a whole number ≥ 0, got {raw!r}")
        return None
    return int(value)


def _check_string_fields(data: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    errors: list[str] = []
    warnings: list[str] = []
    for field, value in data.items():
        if field not in KNOWN_FIELDS:
            warnings.append(
                f"data.{field} is not a CRL field and is ignored "
                f"(known fields: {', '.join(sorted(KNOWN_FIELDS))})"
            )
        elif field in {"key", "dataType", "group", "limits", "requests", "descriptionEn"} and (
            not isinstance(value, str)
        ):
            errors.append(f"data.{field} must be a string, got {value!r}")
    return errors, warnings


def parse_configmap(cm: Mapping[str, Any]) -> CrlParse:
    """Read a ConfigMap as a CRL: never raises on bad input, returns errors instead."""
    meta = cm.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name") if isinstance(meta.get("name"), str) else ""
    namespace = meta.get("namespace") if isinstance(meta.get("namespace"), str) else ""
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    created = meta.get("creationTimestamp")
    created = created if isinstance(created, str) else ""
    assert isinstance(name, str) and isinstance(namespace, str) and isinstance(labels, Mapping)

    is_crl = labels.get(LABEL_TYPE) == TYPE_VALUE
    errors: list[str] = []
    warnings: list[str] = []
    if cm.get("kind", "ConfigMap") != "ConfigMap":
        errors.append(f"kind must be ConfigMap, got {cm.get('kind')!r}")
    if not name:
        errors.append("metadata.name is missing")
    if namespace != CRL_NAMESPACE:
        errors.append(
            f"namespace must be {CRL_NAMESPACE!r}, got {namespace or '(none)'!r}: "
            "CRL ConfigMaps elsewhere are ignored"
        )
    if LABEL_TYPE not in labels:
        errors.append(f"label {LABEL_TYPE}: {TYPE_VALUE} is missing")
    elif not is_crl:
        errors.append(f"label {LABEL_TYPE} must be {TYPE_VALUE!r}, got {labels.get(LABEL_TYPE)!r}")
    group_label = labels.get(LABEL_GROUP)
    if not isinstance(group_label, str) or not group_label:
        errors.append(f"label {LABEL_GROUP} is missing (the device family, e.g. gpu-manager)")
        group_label = None
    enabled = labels.get(LABEL_ENABLED)
    if enabled is None:
        errors.append(f'label {LABEL_ENABLED}: "true" is missing (use "false" to disable)')
    elif enabled != "true":
        warnings.append(
            f'label {LABEL_ENABLED} is {enabled!r}, not "true": this policy is inactive'
        )

    data = cm.get("data")
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        errors.append("data must be a mapping of string fields")
        data = {}
    type_errors, field_warnings = _check_string_fields(data)
    errors += type_errors
    warnings += field_warnings

    key = data.get("key")
    if not isinstance(key, str) or not key:
        errors.append("data.key is required (the extended resource name, e.g. nvidia.com/gpu)")
        key = None
    elif any(c.isspace() or c == "," for c in key):
        errors.append(
            f"data.key {key!r} names more than one resource: "
            "a CRL ConfigMap defines exactly one key"
        )
        key = None
    else:
        errors += _check_key(key)
    if name:
        errors += _check_name(name, key)

    data_type = data.get("dataType")
    if data_type is None:
        errors.append('data.dataType is required (supported: "integer")')
    elif data_type != "integer":
        errors.append(f'data.dataType {data_type!r} is not supported (supported: "integer")')

    group = data.get("group")
    if not isinstance(group, str) or not group:
        errors.append("data.group is required and must equal the features.alauda.io/group label")
    elif group_label is not None and group != group_label:
        errors.append(f"data.group {group!r} differs from label {LABEL_GROUP} {group_label!r}")

    limits: LimitsPolicy | None = None
    raw_limits = data.get("limits")
    if raw_limits is None:
        errors.append("data.limits is required (disabled, required or optional)")
    elif raw_limits not in LimitsPolicy.__members__.values():
        errors.append(f"data.limits {raw_limits!r} is not one of: disabled, required, optional")
    else:
        limits = LimitsPolicy(raw_limits)

    requests: RequestsPolicy | None = None
    raw_requests = data.get("requests")
    if raw_requests is None:
        errors.append("data.requests is required (disabled, required or fromLimits)")
    elif raw_requests not in RequestsPolicy.__members__.values():
        errors.append(
            f"data.requests {raw_requests!r} is not one of: disabled, required, fromLimits"
        )
    else:
        requests = RequestsPolicy(raw_requests)

    if limits is LimitsPolicy.DISABLED and requests not in (None, RequestsPolicy.DISABLED):
        errors.append(
            f"limits: disabled with requests: {requests} is contradictory: the API server "
            "requires a limit for every extended resource, so a disabled limit only makes "
            "sense with requests: disabled"
        )

    default = _whole(data, "defaultValue", errors)
    minimum = _whole(data, "min", errors)
    maximum = _whole(data, "max", errors)
    whole_unit = _whole(data, "wholeUnit", errors)
    if whole_unit == 0:
        errors.append("data.wholeUnit must be greater than 0")
        whole_unit = None
    if minimum is not None and maximum is not None and minimum > maximum:
        errors.append(f"data.min {minimum} is greater than data.max {maximum}")
    if default is not None:
        if limits is LimitsPolicy.DISABLED:
            warnings.append("data.defaultValue is never applied because limits is disabled")
        problem = bound_problem(default, minimum, maximum, whole_unit)
        if problem:
            errors.append(f"data.defaultValue {default} {problem}")

    limitation = None
    if not errors and key and limits is not None and requests is not None:
        assert isinstance(group, str)
        raw_default = data.get("defaultValue")
        limitation = ResourceLimitation(
            key=key,
            group=group,
            limits=limits,
            requests=requests,
            default=default,
            # Written into pods as the admin wrote it (the API server canonicalises it), but
            # without the surrounding space UnmarshalJSON would trim anyway.
            default_text=trim_space(raw_default) if isinstance(raw_default, str) else None,
            description_en=str(data.get("descriptionEn") or "").strip(),
            description_zh=str(data.get("descriptionZh") or "").strip(),
            min=minimum,
            max=maximum,
            whole_unit=whole_unit,
            configmap=f"{namespace}/{name}",
            name=name,
            created=created,
        )
    return CrlParse(
        name=name,
        namespace=namespace,
        is_crl=is_crl,
        active=limitation is not None and enabled == "true",
        limitation=limitation,
        errors=tuple(errors),
        warnings=tuple(warnings),
    )


def crl_configmap(
    name: str,
    data: Mapping[str, str],
    *,
    enabled: bool | str = True,
    namespace: str = CRL_NAMESPACE,
    group: str | None = None,
) -> dict[str, Any]:
    """Build the manifest of a CRL ConfigMap: the inverse of `parse_configmap`.

    The labels are the type label, `group` as the group label (None: `data["group"]`, or ""
    when data has none) and `enabled` ("true"/"false" for a bool; a string is used as given,
    so tests can build deliberately wrong labels). `data` is copied, not validated: pass it
    to `parse_configmap` for the lint errors.
    """
    if isinstance(enabled, bool):
        enabled = "true" if enabled else "false"
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                LABEL_TYPE: TYPE_VALUE,
                LABEL_GROUP: data.get("group", "") if group is None else group,
                LABEL_ENABLED: enabled,
            },
        },
        "data": dict(data),
    }


def bound_problem(value: int, minimum: int | None, maximum: int | None, unit: int | None) -> str:
    """Why a whole value breaks min/max/wholeUnit, or "" when it does not."""
    if minimum is not None and value < minimum:
        return f"is below the minimum {minimum}"
    if maximum is not None and value > maximum:
        return f"is above the maximum {maximum}"
    if unit is not None and value > unit and value % unit:
        return (
            f"is above {unit} but not a multiple of {unit} (values up to {unit} are fractional "
            f"shares; above it only whole units {unit}, {2 * unit}, {3 * unit}… are allowed)"
        )
    return ""
