"""Each vendor's device variables read as its runtime reads them (issue 46 item 1, SPEC §12):
table-driven from the runtimes' own documented values and parsers (the sources are cited in
webhook/core/families/visible.py), then through the webhook under `enforce` as an attacker
would write them, in every kind of container."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import apply, container, get, pod, standard_policies
from tests.helpers import load_without_shm as load_config
from tests.helpers import run_without_shm as run
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.families import FAMILIES, family_named
from webhook.core.families.visible import (
    PARSERS,
    amd_selects,
    ascend_selects,
    go_trim_space,
    hami_core_disables,
    nvidia_selects,
    selects_devices,
)

WHY = "GPUs reached without a request are counted by no quota, CRL or scheduler."

# NVIDIA's toolkit (cuda_image.go DevicesFromEnvvars, devices.go NewVisibleDevices; the
# toolkit's docs "docker-specialized.md": indexes, UUIDs, `all`, `none`, `void` or empty).
NVIDIA = [
    ("all", True),
    ("0,1", True),
    ("GPU-fef8089b-4820-abfc-e83e-94318197576e", True),
    ("MIG-GPU-5c89852c/1/0", True),
    ("", False),
    (" , ,", False),  # every item empty after trimming
    ("void", False),
    ("none", False),
    ("all,void", False),  # void wins over all
    ("all,none", False),  # none wins over all: the driver, no device
    (" void ", False),  # Go's TrimSpace trims ASCII spaces
    ("void\u3000", False),  # ...and Unicode space separators
    ("all,VOID", True),  # case-sensitive: VOID is a device name and `all` stands
    ("all,Void", True),
    ("all,void\x1f", True),  # \x1f is no space to Go (Python's strip() would take it)
    ("all,NONE", True),
    ("0;void", True),  # ";" is no separator
]

# AMD's runtime (ROCm/container-toolkit oci.go getAMDEnv, gpu-tracker.go parseGPUsList; its
# README: `AMD_VISIBLE_DEVICES=0,1`, ranges `0-3`, `all`, unique ids `0xef2c1799a1f3e2ed`).
AMD = [
    ("all", True),
    ("All", True),
    ("ALL", True),
    ("0", True),
    ("0,1", True),
    ("0-7", True),
    ("0-7,void", True),  # void is ignored beside a range: GPUs 0 to 7
    ("void,3", True),
    ("+3", True),  # Go's Atoi takes a sign
    ("0xef2c1799a1f3e2ed", True),
    ("ef2c1799a1f3e2ed", True),  # more than 8 hex digits: a unique id
    ("void", False),
    ("none", False),  # AMD's parser knows no "none": ignored
    ("", False),
    ("aLL", False),  # only all/All/ALL
    ("all,0", True),  # "all" is ignored as an item, 0 stands
    ("all,void", False),  # neither item is a GPU
    (" 1", False),  # items are not trimmed: Atoi(" 1") fails
    ("7-0", False),  # start > end
    ("-1", False),  # SplitN("-1", "-") is ("", "1"): no range
    ("1-", False),
]

# Ascend's runtime (Ascend/mind-cluster runtime/process/process.go checkVisibleDevice; the
# older ascend-docker-runtime hook/main.go): indexes and ranges (`0-3`), chip names
# (`Ascend910-0,Ascend910-1`); empty is no device on both, `void` on MindCluster's.
ASCEND = [
    ("0-3", True),
    ("0,1", True),
    ("Ascend910-0,Ascend910-1", True),
    ("Ascend910-0", True),
    (" ", True),  # not empty: parsed, fails the container, never "no device" by design
    ("VOID", True),
    ("", False),
    ("void", False),
]


@pytest.mark.parametrize(("value", "selects"), NVIDIA)
def test_nvidia_toolkit(value: str, selects: bool) -> None:
    assert nvidia_selects(value) is selects


@pytest.mark.parametrize(("value", "selects"), AMD)
def test_amd_container_runtime(value: str, selects: bool) -> None:
    assert amd_selects(value) is selects


@pytest.mark.parametrize(("value", "selects"), ASCEND)
def test_ascend_docker_runtime(value: str, selects: bool) -> None:
    assert ascend_selects(value) is selects


def test_go_trim_space_keeps_what_go_keeps() -> None:
    assert go_trim_space("\t void \n") == "void"
    assert go_trim_space("void\x1f") == "void\x1f"
    assert go_trim_space("\x1cvoid") == "\x1cvoid"
    assert go_trim_space("\xa0void\u2028") == "void"


@pytest.mark.parametrize(
    ("value", "disables"),
    [("disable", True), ("DISABLE", True), ("Disable", False), ("force", False), ("", False)],
)
def test_hami_core_policy(value: str, disables: bool) -> None:
    assert hami_core_disables(value) is disables


def test_every_family_with_variables_names_a_parser() -> None:
    """The catalog keys each family's variables to its runtime's parser; a family whose parser
    has no source reads every value as devices and writes no void."""
    for family in FAMILIES:
        assert family.selection in PARSERS, family.name
    keyed = {f.name: f.selection for f in FAMILIES if f.device_env}
    assert keyed == {
        "nvidia": "nvidia",
        "amd": "amd",
        "ascend": "ascend",
        "enflame": "any",
        "mthreads": "any",
        "neuron": "any",
    }
    for name in ("enflame", "mthreads", "neuron"):
        found = family_named(name)
        assert found is not None and found.void is None
        assert selects_devices(found.selection, "")


# --- through the webhook, under warn and enforce, in every kind of container ------------------


def config(mode: str) -> Any:
    return load_config({"gpuAccess": {"mode": mode}})


def _in(kind: str, c: dict[str, Any]) -> dict[str, Any]:
    if kind == "container":
        return pod(c)
    if kind == "init container":
        return pod(container("main"), init=[c])
    return _ephemeral(c)


def _ephemeral(c: dict[str, Any]) -> dict[str, Any]:
    obj = pod(container("main"))
    obj["spec"]["ephemeralContainers"] = [c]
    return obj


LABEL = {
    "container": 'container "x"',
    "init container": 'init container "x"',
    "ephemeral container": 'ephemeral container "x"',
}

ATTACKS = [
    (
        "NVIDIA_VISIBLE_DEVICES",
        "all,VOID",
        "but requests no GPU: request nvidia.com/gpu or set it to void",
    ),
    (
        "NVIDIA_VISIBLE_DEVICES",
        "all,Void",
        "but requests no GPU: request nvidia.com/gpu or set it to void",
    ),
    (
        "NVIDIA_VISIBLE_DEVICES",
        "all,void\x1f",
        "but requests no GPU: request nvidia.com/gpu or set it to void",
    ),
    (
        "AMD_VISIBLE_DEVICES",
        "0-7,void",
        "but requests no AMD GPU: request amd.com/gpu or set it to void",
    ),
    (
        "AWS_NEURON_VISIBLE_DEVICES",
        "ALL",
        "but requests no Neuron device: request aws.amazon.com/neuron or remove it",
    ),
    (
        "MTHREADS_VISIBLE_DEVICES",
        "all",
        "but requests no Moore Threads GPU: request mthreads.com/gpu or remove it",
    ),
    (
        "ENFLAME_VISIBLE_DEVICES",
        "0,1",
        "but requests no Enflame GCU: request enflame.com/gcu or remove it",
    ),
]


@pytest.mark.parametrize("kind", list(LABEL))
@pytest.mark.parametrize(("name", "value", "tail"), ATTACKS, ids=[a[1] for a in ATTACKS])
def test_an_attackers_value_is_read_as_the_runtime_reads_it(
    kind: str, name: str, value: str, tail: str
) -> None:
    obj = _in(kind, container("x", env=[{"name": name, "value": value}]))
    shown = value.replace("\x1f", "\\x1f")  # an unprintable character is shown escaped
    text = f"{LABEL[kind]} sets {name}={shown} {tail}"
    warned = run(obj, config=config("warn"))
    # The warning is the finding, its end cut to the 120 characters of a warning.
    assert warned.allowed
    (warning,) = warned.warnings
    assert len(warning) <= 120
    assert warning == text or text.startswith(warning.removesuffix("…").rstrip())
    denied = run(obj, config=config("enforce"))
    assert not denied.allowed
    assert denied.denial_message() == f"Pod ml/train, {text}. {WHY}"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("NVIDIA_VISIBLE_DEVICES", "all,void"),
        ("NVIDIA_VISIBLE_DEVICES", "none"),
        ("AMD_VISIBLE_DEVICES", "void"),
        ("AMD_VISIBLE_DEVICES", "all,void"),
        ("ASCEND_VISIBLE_DEVICES", ""),
        ("ASCEND_VISIBLE_DEVICES", "void"),
    ],
)
def test_a_value_its_runtime_reads_as_no_device_passes(name: str, value: str) -> None:
    decision = run(
        pod(container("x", env=[{"name": name, "value": value}])), config=config("enforce")
    )
    assert decision.allowed
    # The user's own value stays, first; the other vendors' voids follow.
    assert get(apply(decision), "spec", "containers", 0, "env")[0] == {
        "name": name,
        "value": value,
    }


def test_an_update_adding_an_ephemeral_container_with_a_runtime_value_is_denied() -> None:
    """The pods/ephemeralcontainers subresource: an ephemeral container added by UPDATE is
    judged like any."""
    old = pod(container("main"))
    new = _ephemeral(container("x", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all,VOID"}]))
    decision = evaluate(
        new,
        standard_policies(),
        config("enforce"),
        operation="UPDATE",
        old_object=old,
        sub_resource="ephemeralcontainers",
    )
    assert not decision.allowed
    assert (
        'ephemeral container "x" sets NVIDIA_VISIBLE_DEVICES=all,VOID but requests no GPU'
        in decision.denial_message()
    )
