"""What every part of the webhook config shares: the frozen camelCase model base, and the
validation of label keys, regular expressions and versions."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from webhook.core.base.versions import CudaVersion

# Label keys (apimachinery pkg/util/validation/validation.go IsQualifiedName): an optional
# DNS-1123 subdomain prefix (≤ 253 characters) and "/", then a name of ≤ 63 characters that
# starts and ends with an alphanumeric and holds only alphanumerics, "-", "_" and ".".
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def label_key_problem(key: str) -> str:
    """'' for a valid Kubernetes label key, else why it is not one."""
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return f"{key!r} is not a valid label key: the prefix before '/' is empty"
    if "/" in prefix:
        return f"{key!r} is not a valid label key: it may contain one '/' at most"
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return (
            f"{key!r} is not a valid label key: the prefix must be a lowercase DNS subdomain "
            "of at most 253 characters"
        )
    if len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        return (
            f"{key!r} is not a valid label key: the name must be at most 63 alphanumerics, "
            "'-', '_' or '.', starting and ending with an alphanumeric"
        )
    return ""


def regex_problem(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        return f"not a valid regular expression ({exc}): {value!r}"
    return ""


def _valid_regex(value: str) -> str:
    problem = regex_problem(value)
    if problem:
        raise ValueError(problem)
    return value


# A config field holding a regular expression: compiled (and refused) when the config loads.
Regex = Annotated[str, AfterValidator(_valid_regex)]


def version_problem(value: str, what: str) -> str:
    version = CudaVersion.parse(value)
    if version is None or not re.fullmatch(r"[0-9]{1,6}(\.[0-9]{1,6}){0,2}", value):
        return f"{what} must look like 12.4 or 12.4.1, got {value!r}"
    if not version.plausible:
        return f"{what} {value!r} is not plausible (1.0 to 99.x)"
    return ""


class ConfigModel(BaseModel):
    """What every config part is: frozen, unknown keys refused, camelCase keys in the file."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )
