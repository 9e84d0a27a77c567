"""CRL ConfigMap lint (SPEC §2): names, labels, namespace, every data field, key validation."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import VCORE, crl
from webhook.core.policies.crl import (
    LimitsPolicy,
    RequestsPolicy,
    ResourceLimitation,
    bound_problem,
    crl_configmap,
    key_name_forms,
    parse_configmap,
)

G = "gpu-manager"
QUANTITY_HINT = "(expected a number with an optional suffix such as 1, 100, 1k, 500m, 1e3 or 2Gi)"
NAME_ERROR_VCORE = (
    "the name must be cf-crl-{customName}-{keyName} with keyName 'vcuda-core' or "
    "'tencent-com-vcuda-core' for key 'tencent.com/vcuda-core' and a non-empty customName, "
    "e.g. cf-crl-mygroup-vcuda-core"
)


def test_valid_reference_configmap_gives_a_limitation() -> None:
    cm = crl(
        VCORE,
        G,
        defaultValue="20",
        descriptionEn="vGPU compute ",
        descriptionZh="虚拟算力",
        wholeUnit="100",
        min="1",
        max="800",
        created="2024-01-01T00:00:00Z",
    )
    parsed = parse_configmap(cm)
    assert parsed.errors == ()
    assert parsed.warnings == ()
    assert parsed.is_crl and parsed.active
    assert parsed.ref == "kube-public/cf-crl-gpu-manager-vcuda-core"
    assert parsed.limitation == ResourceLimitation(
        key=VCORE,
        group=G,
        limits=LimitsPolicy.OPTIONAL,
        requests=RequestsPolicy.DISABLED,
        data_type="integer",
        default=20,
        default_text="20",
        description_en="vGPU compute",
        description_zh="虚拟算力",
        min=1,
        max=800,
        whole_unit=100,
        configmap="kube-public/cf-crl-gpu-manager-vcuda-core",
        name="cf-crl-gpu-manager-vcuda-core",
        created="2024-01-01T00:00:00Z",
    )


@pytest.mark.parametrize(
    ("key", "name"),
    [
        (VCORE, "cf-crl-gpu-manager-vcuda-core"),  # short form (the reference example)
        (VCORE, "cf-crl-gpu-manager-tencent-com-vcuda-core"),  # full-key form
        (VCORE, "cf-crl-x-vcuda-core"),
        ("nvidia.com/gpu", "cf-crl-nvidia-gpu"),
        ("nvidia.com/gpu", "cf-crl-nvidia-nvidia-com-gpu"),
        ("nvidia.com/mps.core", "cf-crl-mps-mps-core"),  # '.' becomes '-'
        ("example.com/GPU_Slice", "cf-crl-team-gpu-slice"),  # lower-cased, '_' becomes '-'
    ],
)
def test_accepted_name_forms(key: str, name: str) -> None:
    parsed = parse_configmap(crl(key, G, name=name))
    assert parsed.errors == ()
    assert parsed.active


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("cf-crl-vcuda-core", NAME_ERROR_VCORE),  # no customName
        ("cf-crl-gpu-manager-vcuda-memory", NAME_ERROR_VCORE),  # another key's name
        ("cf-crl-Bad_Name-vcuda-core", NAME_ERROR_VCORE),  # customName not a DNS label
        ("cf-crl--vcuda-core", NAME_ERROR_VCORE),
        (
            "crl-gpu-manager-vcuda-core",
            "the name must start with 'cf-crl-' (cf-crl-{customName}-{keyName})",
        ),
        (
            "gpu-manager-vcuda-core",
            "the name must start with 'cf-crl-' (cf-crl-{customName}-{keyName})",
        ),
    ],
)
def test_wrong_names(name: str, error: str) -> None:
    parsed = parse_configmap(crl(VCORE, G, name=name))
    assert parsed.errors == (error,)
    assert parsed.limitation is None and not parsed.active


def test_key_name_forms() -> None:
    assert key_name_forms("tencent.com/vcuda-core") == ("tencent-com-vcuda-core", "vcuda-core")
    assert key_name_forms("nvidia.com/mps.core") == ("nvidia-com-mps-core", "mps-core")


@pytest.mark.parametrize(
    ("overrides", "errors", "warnings", "is_crl"),
    [
        (
            {"type_label": None},
            ("label features.alauda.io/type: CustomResourceLimitation is missing",),
            (),
            False,
        ),
        (
            {"type_label": "ResourceLimitation"},
            (
                "label features.alauda.io/type must be "
                "'CustomResourceLimitation', got 'ResourceLimitation'",
            ),
            (),
            False,
        ),
        (
            {"group_label": ""},
            ("label features.alauda.io/group is missing (the device family, e.g. gpu-manager)",),
            (),
            True,
        ),
        (
            {"enabled": None},
            ('label features.alauda.io/enabled: "true" is missing (use "false" to disable)',),
            (),
            True,
        ),
        (
            {"namespace": "default"},
            (
                "namespace must be 'kube-public', got 'default': "
                "CRL ConfigMaps elsewhere are ignored",
            ),
            (),
            True,
        ),
        (
            {"namespace": None},
            (
                "namespace must be 'kube-public', got "
                "'(none)': CRL ConfigMaps elsewhere are ignored",
            ),
            (),
            True,
        ),
    ],
)
def test_labels_and_namespace_errors(
    overrides: dict[str, Any], errors: tuple[str, ...], warnings: tuple[str, ...], is_crl: bool
) -> None:
    parsed = parse_configmap(crl(VCORE, G, **overrides))
    assert parsed.errors == errors
    assert parsed.warnings == warnings
    assert parsed.is_crl is is_crl
    assert not parsed.active


@pytest.mark.parametrize("value", ["false", "False", "TRUE", "yes", "1", ""])
def test_enabled_other_than_true_is_inactive_not_invalid(value: str) -> None:
    parsed = parse_configmap(crl(VCORE, G, enabled=value))
    assert parsed.errors == ()
    assert parsed.warnings == (
        f'label features.alauda.io/enabled is {value!r}, not "true": this policy is inactive',
    )
    assert parsed.limitation is not None  # valid, just not in force
    assert not parsed.active


def test_group_label_must_match_data_group() -> None:
    parsed = parse_configmap(crl(VCORE, G, group_label="hami"))
    assert parsed.errors == (
        "data.group 'gpu-manager' differs from label features.alauda.io/group 'hami'",
    )


@pytest.mark.parametrize(
    ("field", "error"),
    [
        ("key", "data.key is required (the extended resource name, e.g. nvidia.com/gpu)"),
        ("dataType", 'data.dataType is required (supported: "integer")'),
        ("group", "data.group is required and must equal the features.alauda.io/group label"),
        ("limits", "data.limits is required (disabled, required or optional)"),
        ("requests", "data.requests is required (disabled, required or fromLimits)"),
    ],
)
def test_required_fields(field: str, error: str) -> None:
    cm = crl(VCORE, G)
    del cm["data"][field]
    parsed = parse_configmap(cm)
    assert parsed.errors == (error,)
    assert parsed.limitation is None


@pytest.mark.parametrize(
    "field", ["defaultValue", "descriptionEn", "descriptionZh", "min", "max", "wholeUnit"]
)
def test_optional_fields_may_be_absent(field: str) -> None:
    cm = crl(VCORE, G, defaultValue="1", descriptionEn="d", descriptionZh="d", min="0", max="9")
    cm["data"].pop(field, None)
    assert parse_configmap(cm).errors == ()


def test_data_missing_or_not_a_mapping() -> None:
    cm = crl(VCORE, G)
    cm["data"] = ["key"]
    errors = parse_configmap(cm).errors
    assert errors[0] == "data must be a mapping of string fields"
    assert "data.key is required (the extended resource name, e.g. nvidia.com/gpu)" in errors
    del cm["data"]
    assert len(parse_configmap(cm).errors) == 5  # key, dataType, group, limits, requests


@pytest.mark.parametrize("limits", ["disabled", "required", "optional"])
@pytest.mark.parametrize("requests", ["disabled", "required", "fromLimits"])
def test_allowed_limits_and_requests_values(limits: str, requests: str) -> None:
    parsed = parse_configmap(crl(VCORE, G, limits=limits, requests=requests))
    if limits == "disabled" and requests != "disabled":
        assert parsed.errors == (
            f"limits: disabled with requests: {requests} is contradictory: the API server "
            "requires a limit for every extended resource, so a disabled limit only makes "
            "sense with requests: disabled",
        )
    else:
        assert parsed.errors == ()
        assert parsed.limitation is not None
        assert parsed.limitation.limits.value == limits
        assert parsed.limitation.requests.value == requests


@pytest.mark.parametrize(
    ("data", "errors"),
    [
        (
            {"limits": "maybe"},
            ("data.limits 'maybe' is not one of: disabled, required, optional",),
        ),
        (
            {"limits": "Required"},  # values are case-sensitive, like the reference
            ("data.limits 'Required' is not one of: disabled, required, optional",),
        ),
        (
            {"requests": "always"},
            ("data.requests 'always' is not one of: disabled, required, fromLimits",),
        ),
        (
            {"requests": "fromlimits"},
            ("data.requests 'fromlimits' is not one of: disabled, required, fromLimits",),
        ),
        (
            {"dataType": "float"},
            ("data.dataType 'float' is not supported (supported: \"integer\")",),
        ),
        (
            {"dataType": "string"},
            ("data.dataType 'string' is not supported (supported: \"integer\")",),
        ),
        (
            {"defaultValue": "abc"},
            (f"data.defaultValue: 'abc' is not a Kubernetes quantity {QUANTITY_HINT}",),
        ),
        ({"defaultValue": "-1"}, ("data.defaultValue must be a whole number ≥ 0, got '-1'",)),
        ({"defaultValue": "0.5"}, ("data.defaultValue must be a whole number ≥ 0, got '0.5'",)),
        ({"defaultValue": "500m"}, ("data.defaultValue must be a whole number ≥ 0, got '500m'",)),
        (
            {"defaultValue": 5},
            ('data.defaultValue must be a string (quote it: defaultValue: "5")',),
        ),
        ({"min": "10", "max": "5"}, ("data.min 10 is greater than data.max 5",)),
        ({"min": "abc"}, (f"data.min: 'abc' is not a Kubernetes quantity {QUANTITY_HINT}",)),
        ({"max": "1.5"}, ("data.max must be a whole number ≥ 0, got '1.5'",)),
        ({"wholeUnit": "-3"}, ("data.wholeUnit must be a whole number ≥ 0, got '-3'",)),
        ({"wholeUnit": "0"}, ("data.wholeUnit must be greater than 0",)),
        (
            {"min": "10", "max": "50", "defaultValue": "5"},
            ("data.defaultValue 5 is below the minimum 10",),
        ),
        ({"max": "50", "defaultValue": "60"}, ("data.defaultValue 60 is above the maximum 50",)),
        (
            {"wholeUnit": "100", "defaultValue": "150"},
            (
                "data.defaultValue 150 is above 100 but not a multiple of 100 (values up to 100 "
                "are fractional shares; above it only whole units 100, 200, 300… are allowed)",
            ),
        ),
        (
            {"limits": 1},
            (
                "data.limits must be a string, got 1",
                "data.limits 1 is not one of: disabled, required, optional",
            ),
        ),
    ],
)
def test_field_value_errors(data: dict[str, Any], errors: tuple[str, ...]) -> None:
    parsed = parse_configmap(crl(VCORE, G, **data))
    assert parsed.errors == errors
    assert parsed.limitation is None
    assert not parsed.active


@pytest.mark.parametrize(
    ("data", "default", "minimum", "maximum", "unit"),
    [
        ({"defaultValue": "0"}, 0, None, None, None),
        ({"defaultValue": "1k"}, 1000, None, None, None),
        ({"defaultValue": "1e2", "wholeUnit": "100"}, 100, None, None, 100),
        ({"defaultValue": "300", "wholeUnit": "100"}, 300, None, None, 100),
        ({"defaultValue": "50", "wholeUnit": "100"}, 50, None, None, 100),
        ({"min": "1", "max": "1", "defaultValue": "1"}, 1, 1, 1, None),
        ({"min": "2Ki"}, None, 2048, None, None),
    ],
)
def test_whole_number_fields_parse_as_quantities(
    data: dict[str, str],
    default: int | None,
    minimum: int | None,
    maximum: int | None,
    unit: int | None,
) -> None:
    parsed = parse_configmap(crl(VCORE, G, **data))
    assert parsed.errors == ()
    lim = parsed.limitation
    assert lim is not None
    assert (lim.default, lim.min, lim.max, lim.whole_unit) == (default, minimum, maximum, unit)


def test_default_with_disabled_limits_is_a_warning() -> None:
    parsed = parse_configmap(
        crl(VCORE, G, limits="disabled", requests="disabled", defaultValue="1")
    )
    assert parsed.errors == ()
    assert parsed.warnings == ("data.defaultValue is never applied because limits is disabled",)
    assert parsed.active


def test_unknown_fields_are_warnings_not_errors() -> None:
    parsed = parse_configmap(crl(VCORE, G, color="red", unit="cores"))
    assert parsed.errors == ()
    assert parsed.active
    known = (
        "(known fields: dataType, defaultValue, descriptionEn, descriptionZh, group, key, "
        "limits, max, min, requests, wholeUnit)"
    )
    assert parsed.warnings == (
        f"data.color is not a CRL field and is ignored {known}",
        f"data.unit is not a CRL field and is ignored {known}",
    )


@pytest.mark.parametrize(
    ("key", "name", "errors"),
    [
        (
            "vcuda-core",
            "cf-crl-x-vcuda-core",
            (
                "data.key 'vcuda-core' is not an extended resource name: it must be "
                "domain-qualified, like tencent.com/vcuda-core",
            ),
        ),
        (
            "kubernetes.io/gpu",
            "cf-crl-x-gpu",
            (
                "data.key 'kubernetes.io/gpu' is in the kubernetes.io domain, which is reserved "
                "for native resources; extended resources use your own domain",
            ),
        ),
        (
            "node.kubernetes.io/gpu",
            "cf-crl-x-gpu",
            (
                "data.key 'node.kubernetes.io/gpu' is in the kubernetes.io domain, which is "
                "reserved for native resources; extended resources use your own domain",
            ),
        ),
        (
            "requests.nvidia.com/gpu",
            "cf-crl-x-gpu",
            (
                "data.key 'requests.nvidia.com/gpu' must not "
                "start with 'requests.' (that is quota syntax)",
            ),
        ),
        (
            "nvidia.com/gpu,nvidia.com/gpumem",
            "cf-crl-x-gpu",
            (
                "data.key 'nvidia.com/gpu,nvidia.com/gpumem' names more than one resource: "
                "a CRL ConfigMap defines exactly one key",
            ),
        ),
        (
            "nvidia.com/gpu nvidia.com/gpumem",
            "cf-crl-x-gpu",
            (
                "data.key 'nvidia.com/gpu nvidia.com/gpumem' names more than one resource: "
                "a CRL ConfigMap defines exactly one key",
            ),
        ),
        (
            "Nvidia.com/gpu",
            "cf-crl-x-gpu",
            ("data.key 'Nvidia.com/gpu' has an invalid domain prefix 'Nvidia.com'",),
        ),
        (
            "nvidia.com/gpu/x",
            "cf-crl-x-gpu-x",
            (
                "data.key 'nvidia.com/gpu/x' has an invalid name part 'gpu/x' (letters, digits, "
                "'-', '_', '.', at most 63 characters)",
            ),
        ),
    ],
)
def test_key_validation(key: str, name: str, errors: tuple[str, ...]) -> None:
    parsed = parse_configmap(crl(key, "nvidia", name=name))
    assert parsed.errors == errors
    assert parsed.limitation is None


def test_not_a_configmap_and_empty_object() -> None:
    parsed = parse_configmap({"kind": "Secret", **crl(VCORE, G)} | {"kind": "Secret"})
    assert parsed.errors == ("kind must be ConfigMap, got 'Secret'",)
    empty = parse_configmap({})
    assert empty.ref == "(no namespace)/(no name)"
    assert not empty.is_crl
    assert "metadata.name is missing" in empty.errors


@pytest.mark.parametrize(
    "cm",
    [
        {"metadata": "x", "data": 1},
        {"metadata": {"name": 1, "labels": ["a"]}, "data": {"key": ["a"], "group": {}}},
        {"metadata": {"labels": {"features.alauda.io/enabled": ["true"]}}},
        {"data": {"key": "a.b/c", "limits": ["x"], "requests": {"a": 1}, "min": None}},
    ],
)
def test_malformed_configmaps_give_errors_not_exceptions(cm: dict[str, Any]) -> None:
    parsed = parse_configmap(cm)
    assert parsed.errors
    assert parsed.limitation is None


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (50, ""),
        (100, ""),
        (
            150,
            "is above 100 but not a multiple of 100 (values up to 100 are fractional "
            "shares; above it only whole units 100, 200, 300… are allowed)",
        ),
        (200, ""),
        (0, "is below the minimum 1"),
        (900, "is above the maximum 800"),
    ],
)
def test_bound_problem(value: int, problem: str) -> None:
    assert bound_problem(value, 1, 800, 100) == problem


BUILT_DATA = {
    "key": VCORE,
    "dataType": "integer",
    "group": G,
    "limits": "optional",
    "requests": "disabled",
    "defaultValue": "20",
}


def test_built_configmap_parses_back_without_errors() -> None:
    cm = crl_configmap("cf-crl-gpu-manager-vcuda-core", BUILT_DATA)
    parsed = parse_configmap(cm)
    assert parsed.errors == ()
    assert parsed.warnings == ()
    assert parsed.active
    assert parsed.ref == "kube-public/cf-crl-gpu-manager-vcuda-core"
    assert parsed.limitation is not None
    assert parsed.limitation.key == VCORE
    assert parsed.limitation.group == G
    assert cm["data"] == BUILT_DATA and cm["data"] is not BUILT_DATA


def test_built_configmap_labels_follow_enabled_group_and_namespace() -> None:
    disabled = parse_configmap(crl_configmap("cf-crl-x-vcuda-core", BUILT_DATA, enabled=False))
    assert disabled.errors == ()
    assert not disabled.active
    assert disabled.limitation is not None and disabled.limitation.key == VCORE
    other = crl_configmap("n", BUILT_DATA, enabled="yes", group="other", namespace="default")
    assert other["metadata"]["namespace"] == "default"
    assert other["metadata"]["labels"] == {
        "features.alauda.io/type": "CustomResourceLimitation",
        "features.alauda.io/group": "other",
        "features.alauda.io/enabled": "yes",
    }


# --- one quantity parser for lint and evaluation (SPEC §3) ---------------------------------------

HINT = "expected a number with an optional suffix such as 1, 100, 1k, 500m, 1e3 or 2Gi"


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        # Python's int() reads these as 4 and 50; Kubernetes does not, so neither does lint:
        # a default "４" would otherwise be written into every pod and rejected there.
        ("defaultValue", "４", f"data.defaultValue: '４' is not a Kubernetes quantity ({HINT})"),
        ("max", "٥٠", f"data.max: '٥٠' is not a Kubernetes quantity ({HINT})"),
        ("min", "1_0", f"data.min: '1_0' is not a Kubernetes quantity ({HINT})"),
        (
            "wholeUnit",
            "1e",
            f"data.wholeUnit: '1e' is not a Kubernetes quantity: 'e' is not a suffix ({HINT})",
        ),
    ],
)
def test_non_kubernetes_numbers_fail_lint(field: str, value: str, error: str) -> None:
    parsed = parse_configmap(crl(VCORE, G, **{field: value}))
    assert parsed.errors == (error,)
    assert parsed.limitation is None


@pytest.mark.parametrize(
    ("value", "default", "text"),
    [
        ("1E", 10**18, "1E"),  # exa, not an exponent
        ("1E1", 10, "1E1"),
        ("+", 0, "+"),  # Kubernetes reads an empty number as zero
        (" 4\t", 4, "4"),  # UnmarshalJSON trims; the webhook writes the trimmed text
    ],
)
def test_default_value_read_as_kubernetes_reads_it(value: str, default: int, text: str) -> None:
    parsed = parse_configmap(crl(VCORE, G, defaultValue=value))
    assert parsed.errors == ()
    assert parsed.limitation is not None
    assert (parsed.limitation.default, parsed.limitation.default_text) == (default, text)
