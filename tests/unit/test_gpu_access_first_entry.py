"""GPU access control on first-entry Ascend runtime builds (issue 46 item 1, SPEC §12): an image
configuration setting ASCEND_VISIBLE_DEVICES, tried as an attacker would, in every kind of
container of a pod that runs on an Ascend node, by CREATE and by UPDATE.

ascend-docker-runtime up to v5.0.0 reads the FIRST ASCEND_VISIBLE_DEVICES entry of the OCI
spec (Ascend/ascend-docker-runtime hook/main.go, runtime/main.go getValueByKey), and containerd
puts the image's entries before the pod's (internal/cri/server/container_create.go buildLinuxSpec,
containerd#7348): the written empty void and the device plugin's value come after the image's.
With `gpuAccess.nodeSettings.ascendRuntime: first-entry` (the default) the image's value is a
finding where a registry lookup read it, and under `enforce` the images are looked up.
"""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import apply, container, get, pod, standard_policies
from tests.helpers import load_without_shm as load_config
from tests.helpers import run_without_shm as run
from webhook.cli import main
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import Decision, evaluate
from webhook.core.images.facts import ImageQuery

WHY = "GPUs reached without a request are counted by no quota, CRL or scheduler."
NPU = {"huawei.com/Ascend910": 1}
IMAGE = "registry.corp/ascend/infer:v1"  # the NPU container's image
SIDE = "registry.corp/tools/side:v1"  # the other containers' image
FIX = (
    "rebuild it without ASCEND_VISIBLE_DEVICES, or run ascend-docker-runtime v6.0.0-RC3 or later "
    "and set gpuAccess.nodeSettings.ascendRuntime: last-entry"
)
ASCEND_VOID = {"name": "ASCEND_VISIBLE_DEVICES", "value": ""}
SIDE_AT = 'container "side"'


def config(mode: str, **access: Any) -> WebhookConfig:
    return load_config({"gpuAccess": {"mode": mode, **access}})


def check(
    mode: str, obj: dict[str, Any], env: dict[str, dict[str, str]] | None, **access: Any
) -> Decision:
    return evaluate(obj, standard_policies(), config(mode, **access), image_env=env)


def _text(where: str, image: str, value: str, device: bool = False) -> str:
    shown = f'{where} runs image "{image}" setting ASCEND_VISIBLE_DEVICES={value}'
    return f"{shown}: {FIX}" if device else f"{shown} but requests no NPU: {FIX}"


SETS = {"ASCEND_VISIBLE_DEVICES": "0-7"}
SETS_NAME = {"ASCEND_VISIBLE_DEVICES": "Ascend910-0"}


def _npu(**extra: Any) -> dict[str, Any]:
    return container("npu", IMAGE, limits=NPU, **extra)


def _side(**extra: Any) -> dict[str, Any]:
    return container("side", SIDE, **extra)


# (case, pod, image configs read, the finding): every kind of container of a pod with an NPU
# container, the NPU container itself, and a value in Ascend910-<n> form (v5.0.0 keeps the
# first entry naming `Ascend`).
FINDINGS: list[tuple[str, dict[str, Any], dict[str, dict[str, str]], str]] = [
    (
        "the NPU container's own image",
        pod(_npu()),
        {IMAGE: SETS},
        _text('container "npu"', IMAGE, "0-7", device=True),
    ),
    (
        "a container beside an NPU container",
        pod(_npu(), _side()),
        {SIDE: SETS},
        _text('container "side"', SIDE, "0-7"),
    ),
    (
        "an init container",
        pod(_npu(), init=[_side()]),
        {SIDE: SETS_NAME},
        _text('init container "side"', SIDE, "Ascend910-0"),
    ),
    (
        "a sidecar",
        pod(_npu(), init=[_side(restartPolicy="Always")]),
        {SIDE: SETS},
        _text('init container "side"', SIDE, "0-7"),
    ),
    (
        "beside an NPU init container",
        pod(_side(), init=[_npu()]),
        {SIDE: SETS},
        _text('container "side"', SIDE, "0-7"),
    ),
    (
        "a HAMi vNPU resource",
        pod(container("npu", IMAGE, limits={"huawei.com/Ascend910B3": 1}), _side()),
        {SIDE: SETS},
        _text('container "side"', SIDE, "0-7"),
    ),
    (
        "a value the webhook cannot print",
        pod(_npu(), _side()),
        {SIDE: {"ASCEND_VISIBLE_DEVICES": "0\x1b[2J"}},
        f'container "side" runs image "{SIDE}" setting ASCEND_VISIBLE_DEVICES but requests no '
        f"NPU: {FIX}",
    ),
]


@pytest.mark.parametrize(
    ("case", "obj", "env", "text"), FINDINGS, ids=[c for c, _, _, _ in FINDINGS]
)
def test_enforce_denies_and_warn_warns(
    case: str, obj: dict[str, Any], env: dict[str, dict[str, str]], text: str
) -> None:
    denied = check("enforce", obj, env)
    assert denied.denial_message() == f"Pod ml/train, {text}. {WHY}"
    warned = check("warn", obj, env)
    assert warned.allowed
    assert text[:119] + "…" in warned.warnings
    # The audit has it in every mode (the full text).
    assert f"Pod ml/train, {text}." in [v.detail for v in warned.access]


# (case, pod, image configs read, gpuAccess settings): what passes under enforce.
ALLOWED: list[tuple[str, dict[str, Any], dict[str, dict[str, str]], dict[str, Any]]] = [
    (
        "the empty value (no NPU on every build)",
        pod(_npu(), _side()),
        {SIDE: {"ASCEND_VISIBLE_DEVICES": ""}},
        {},
    ),
    ("void (no NPU)", pod(_npu(), _side()), {SIDE: {"ASCEND_VISIBLE_DEVICES": "void"}}, {}),
    (
        "a config that sets no Ascend variable",
        pod(_npu(), _side()),
        {SIDE: {"CUDA_VERSION": "12.4.1"}},
        {},
    ),
    # An NVIDIA pod does not run on an Ascend node: the written void stands on its runtime.
    (
        "a pod without an NPU",
        pod(container("gpu", IMAGE, limits={"nvidia.com/gpu": 1}), _side()),
        {SIDE: SETS, IMAGE: SETS},
        {},
    ),
    (
        "last-entry builds",
        pod(_npu(), _side()),
        {SIDE: SETS, IMAGE: SETS},
        {"nodeSettings": {"ascendRuntime": "last-entry"}},
    ),
    (
        "nodes that ignore the variable",
        pod(_npu(), _side()),
        {SIDE: SETS},
        {"nodeSettings": {"envIgnored": ["ascend"]}},
    ),
]


@pytest.mark.parametrize(
    ("case", "obj", "env", "access"), ALLOWED, ids=[c for c, _, _, _ in ALLOWED]
)
def test_what_no_first_entry_build_reads_passes(
    case: str, obj: dict[str, Any], env: dict[str, dict[str, str]], access: dict[str, Any]
) -> None:
    decision = check("enforce", obj, env, **access)
    assert decision.allowed
    assert not [v for v in decision.access if "ASCEND_VISIBLE_DEVICES" in v.detail]


def test_the_void_is_still_written_beside_the_finding() -> None:
    """Where the config says nothing (or is not read), the pod is admitted with every void the
    webhook can write: the side container gets the empty ASCEND_VISIBLE_DEVICES."""
    decision = check("enforce", pod(_npu(), _side()), {SIDE: {}})
    assert decision.allowed
    assert ASCEND_VOID in get(apply(decision), "spec", "containers", 1, "env")


def _asked(decision: Decision) -> list[ImageQuery]:
    return [q for q in decision.unresolved_images if q.runtime == "gpu-access"]


def test_enforce_asks_for_every_image_of_an_ascend_pod_not_read_yet() -> None:
    obj = pod(_npu(), _side(), init=[container("setup", "registry.corp/tools/setup:v2")])
    assert _asked(check("enforce", obj, None)) == [
        ImageQuery("registry.corp/tools/setup:v2", "amd64", "gpu-access"),
        ImageQuery(IMAGE, "amd64", "gpu-access"),
        ImageQuery(SIDE, "amd64", "gpu-access"),
    ]
    # Each architecture the pod may run on (the lookups' own rule, images.facts.pod_archs).
    arm = pod(_npu(), nodeSelector={"kubernetes.io/arch": "arm64"})
    assert _asked(check("enforce", arm, None)) == [ImageQuery(IMAGE, "arm64", "gpu-access")]
    # A config already read is not asked for again (the second evaluation after the lookups).
    assert _asked(check("enforce", obj, {IMAGE: {}, SIDE: {}})) == [
        ImageQuery("registry.corp/tools/setup:v2", "amd64", "gpu-access")
    ]


@pytest.mark.parametrize(
    ("mode", "obj", "access"),
    [
        ("warn", pod(_npu(), _side()), {}),
        ("enforce", pod(_npu(), _side()), {"nodeSettings": {"ascendRuntime": "last-entry"}}),
        ("enforce", pod(container("gpu", IMAGE, limits={"nvidia.com/gpu": 1})), {}),
    ],
    ids=["warn", "last-entry", "no NPU"],
)
def test_nothing_is_asked_where_the_rule_does_not_deny(
    mode: str, obj: dict[str, Any], access: dict[str, Any]
) -> None:
    assert _asked(check(mode, obj, None, **access)) == []


def test_an_ascend_runtime_class_makes_every_container_judged() -> None:
    runtime = {"vendorRuntimeClasses": {"ascend": ["ascend"]}}
    obj = pod(_npu(), _side(), runtimeClassName="ascend")
    denied = check("enforce", obj, {SIDE: SETS}, **runtime)
    assert denied.denial_message() == (f"Pod ml/train, {_text(SIDE_AT, SIDE, '0-7')}. {WHY}")


def _update(
    old: dict[str, Any],
    new: dict[str, Any],
    mode: str,
    env: dict[str, dict[str, str]] | None,
    sub: str,
) -> Decision:
    from tests.unit.test_pod_updates import update

    return update(new, old, mode, sub_resource=sub, image_env=env)


def test_kubectl_debug_into_an_npu_pod_is_judged() -> None:
    old = apply(run(pod(_npu()), config=config("enforce")))
    new = copy.deepcopy(old)
    new["spec"]["ephemeralContainers"] = [{"name": "dbg", "image": SIDE}]
    text = _text('ephemeral container "dbg"', SIDE, "0-7")
    denied = _update(old, new, "enforce", {SIDE: SETS}, "ephemeralcontainers")
    assert denied.denial_message() == f"Pod ml/train, {text}. {WHY}"
    # Not read yet: asked for, and admitted with its void meanwhile.
    unknown = _update(old, new, "enforce", None, "ephemeralcontainers")
    assert unknown.allowed
    assert _asked(unknown) == [ImageQuery(SIDE, "amd64", "gpu-access")]
    assert ASCEND_VOID in get(apply(unknown), "spec", "ephemeralContainers", 0, "env")
    # Only the new container: the NPU container's image is not asked for again.
    clean = _update(old, new, "enforce", {SIDE: {}}, "ephemeralcontainers")
    assert clean.allowed and _asked(clean) == []


def test_an_image_swapped_in_by_update_is_judged() -> None:
    old = apply(run(pod(_npu(), container("side", "busybox:1.36")), config=config("enforce")))
    new = copy.deepcopy(old)
    new["spec"]["containers"][1]["image"] = SIDE
    denied = _update(old, new, "enforce", {SIDE: SETS}, "")
    assert denied.denial_message() == (f"Pod ml/train, {_text(SIDE_AT, SIDE, '0-7')}. {WHY}")
    assert _asked(_update(old, new, "enforce", None, "")) == [
        ImageQuery(SIDE, "amd64", "gpu-access")
    ]
    # A label change swaps nothing: nothing is asked.
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"] = {"x": "y"}
    assert _asked(_update(old, relabelled, "enforce", None, "")) == []


def test_the_registry_keeps_the_first_value_that_may_select_npus() -> None:
    from tests.unit.test_vendor_image_config import blob, config_document
    from webhook.registry.documents import read_image_config

    body, digest = blob(
        config_document(["ASCEND_VISIBLE_DEVICES=0-7", "ASCEND_VISIBLE_DEVICES=", "X=1"])
    )
    assert read_image_config(body, digest).variables == {"ASCEND_VISIBLE_DEVICES": "0-7"}
    body, digest = blob(config_document(["ASCEND_VISIBLE_DEVICES=", "ASCEND_VISIBLE_DEVICES=3"]))
    assert read_image_config(body, digest).variables == {"ASCEND_VISIBLE_DEVICES": "3"}


async def test_the_resolver_hands_an_access_lookup_its_config() -> None:
    from tests.unit.test_registry_resolver import ScriptedClient, resolver
    from webhook.registry.results import NO_CUDA, UNREACHABLE, LookupResult

    env = (("ASCEND_VISIBLE_DEVICES", "0-7"),)
    answer = LookupResult(NO_CUDA, detail="its config sets no CUDA_VERSION", env=env)
    query = ImageQuery(SIDE, "amd64", "gpu-access")
    found = await resolver(ScriptedClient(lambda i, a: answer)).resolve([query])
    # The config, and no word on versions: this lookup was for the variable.
    assert (found.env, found.warnings, found.failed) == ({SIDE: dict(env)}, [], {})
    clean = LookupResult(NO_CUDA, detail="its config sets no CUDA_VERSION")
    found = await resolver(ScriptedClient(lambda i, a: clean)).resolve([query])
    assert (found.env, found.warnings) == ({SIDE: {}}, [])
    down = LookupResult(UNREACHABLE, detail="connection refused")
    found = await resolver(ScriptedClient(lambda i, a: down)).resolve([query])
    assert found.env == {}
    assert found.warnings == [f"Image config lookup of {SIDE}: connection refused"]


def test_lint_checks_the_setting(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpuAccess:\n  nodeSettings: {ascendRuntime: first}\n", encoding="utf-8")
    out = io.StringIO()
    assert main(["lint", "--config", str(bad)], out=out) == 1
    assert "gpuAccess.nodeSettings.ascendRuntime" in out.getvalue()
    assert "'first-entry' or 'last-entry'" in out.getvalue()
    good = tmp_path / "good.yaml"
    good.write_text("gpuAccess:\n  nodeSettings: {ascendRuntime: last-entry}\n", encoding="utf-8")
    assert main(["lint", "--config", str(good)], out=io.StringIO()) == 0
