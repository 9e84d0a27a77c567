"""GPU access control's envFrom route where no written void closes it (issue 46, SPEC §12
"Nothing the webhook cannot see passes as safe"): AMD's DOCKER_RESOURCE_* names and the
variables of the vendors without a known void (AWS Neuron, Moore Threads, Enflame), tried as an
attacker would, in every kind of container, by CREATE and by the ephemeral-containers UPDATE.

A ConfigMap's or Secret's keys reach the container unseen through an unprefixed envFrom; an env
entry of the same name would win (k8s.io/api core/v1 Container.EnvFrom), which closes the fixed
names the webhook voids, but no written name closes a prefix family (ROCm/container-toolkit
internal/oci/oci.go getAMDEnv reads every DOCKER_RESOURCE_* variable) or a variable with no void.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.helpers import apply, container, get, pod, standard_policies
from tests.helpers import load_without_shm as load_config
from tests.helpers import run_without_shm as run
from webhook.core.access.sources import makes, readers, unvoidable_prefix
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import Decision, evaluate
from webhook.core.families import family_named
from webhook.core.images.facts import ImageQuery

WHY = "GPUs reached without a request are counted by no quota, CRL or scheduler."
CM = {"configMapRef": {"name": "settings"}}
SECRET = {"secretRef": {"name": "creds"}}
AMD = {"amd.com/gpu": 1}
NVIDIA_VOID = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
AMD_VOID = {"name": "AMD_VISIBLE_DEVICES", "value": "void"}
ASCEND_VOID = {"name": "ASCEND_VISIBLE_DEVICES", "value": ""}
SIDE = 'container "side"'
DBG = 'ephemeral container "dbg"'


def config(mode: str, **access: Any) -> WebhookConfig:
    return load_config({"gpuAccess": {"mode": mode, **access}})


def _amd_text(where: str, source: str = 'configMap "settings"') -> str:
    return (
        f"{where} uses envFrom {source} but requests no AMD GPU: set an envFrom prefix: "
        "DOCKER_RESOURCE_* keys pick AMD GPUs"
    )


def _kinds(device: dict[str, Any], env_from: list[dict[str, Any]]) -> list[tuple[str, Any, str]]:
    """(kind, pod, container label): the envFrom in a container, an init container and a
    sidecar of a pod whose device container is `device`."""
    side = container("side", envFrom=env_from)
    return [
        ("container", pod(device, side), 'container "side"'),
        ("init container", pod(device, init=[side]), 'init container "side"'),
        (
            "sidecar",
            pod(device, init=[{**side, "restartPolicy": "Always"}]),
            'init container "side"',
        ),
    ]


# (case, pod, the finding): unprefixed envFrom beside each vendor's device container whose
# runtime reads names no void closes.
FINDINGS: list[tuple[str, dict[str, Any], str]] = [
    *[
        (f"AMD {kind}, configMap", obj, _amd_text(where))
        for kind, obj, where in _kinds(container("gpu", limits=AMD), [CM])
    ],
    *[
        (f"AMD {kind}, secret", obj, _amd_text(where, 'secret "creds"'))
        for kind, obj, where in _kinds(container("gpu", limits=AMD), [SECRET])
    ],
    # An empty prefix is none; a second, prefixed entry does not make the first safe.
    (
        "AMD, empty prefix",
        pod(container("gpu", limits=AMD), container("side", envFrom=[{"prefix": "", **CM}])),
        _amd_text('container "side"'),
    ),
    (
        "AMD, one safe and one unprefixed entry",
        pod(
            container("gpu", limits=AMD),
            container("side", envFrom=[{"prefix": "CFG_", **SECRET}, CM]),
        ),
        _amd_text('container "side"'),
    ),
    # A HAMi share of an AMD GPU is an AMD device too.
    (
        "AMD HAMi share",
        pod(container("gpu", limits={"amd.com/gpumem": 1024}), container("side", envFrom=[CM])),
        _amd_text('container "side"'),
    ),
    (
        "AWS Neuron sidecar",
        pod(
            container("gpu", limits={"aws.amazon.com/neuron": 1}),
            init=[{**container("side", envFrom=[CM]), "restartPolicy": "Always"}],
        ),
        'init container "side" uses envFrom configMap "settings" but requests no Neuron device: '
        "set an envFrom prefix: AWS_NEURON_VISIBLE_DEVICES keys pick Neuron devices",
    ),
    (
        "Moore Threads container",
        pod(container("gpu", limits={"mthreads.com/vgpu": 1}), container("side", envFrom=[CM])),
        'container "side" uses envFrom configMap "settings" but requests no Moore Threads GPU: '
        "set an envFrom prefix: MTHREADS_VISIBLE_DEVICES keys pick Moore Threads GPUs",
    ),
    (
        "Enflame init container",
        pod(
            container("gpu", limits={"enflame.com/vgcu": 1}), init=[container("side", envFrom=[CM])]
        ),
        'init container "side" uses envFrom configMap "settings" but requests no Enflame GCU: '
        "set an envFrom prefix: ENFLAME_VISIBLE_DEVICES keys pick Enflame GCUs",
    ),
    # A device container's envFrom whose prefix makes a name its runtime or limiter reads.
    *[
        (
            f"AMD device container, prefix {prefix}",
            pod(container("gpu", limits=AMD, envFrom=[{"prefix": prefix, **CM}])),
            f'container "gpu" uses envFrom with prefix {prefix}: change its prefix: envFrom can '
            "choose its AMD GPUs or raise its limits",
        )
        for prefix in ["DOCKER_", "DOCKER_RESOURCE_", "D", "AMD_", "AMD_VISIBLE_DEVICE"]
    ],
    *[
        (
            f"NVIDIA device container, prefix {prefix}",
            pod(container("gpu", limits={"nvidia.com/gpu": 1}, envFrom=[{"prefix": prefix, **CM}])),
            f'container "gpu" uses envFrom with prefix {prefix}: change its prefix: envFrom can '
            "choose its GPUs or raise its limits",
        )
        # NVIDIA_VISIBLE_DEVICES, HAMi-core's CUDA_DEVICE_MEMORY_LIMIT_<i>,
        # GPU_CORE_UTILIZATION_POLICY, ACTIVE_OOM_KILLER.
        for prefix in ["NVIDIA_", "CUDA_", "CUDA_DEVICE_MEMORY_LIMIT_", "GPU_", "ACTIVE_"]
    ],
]


@pytest.mark.parametrize(("case", "obj", "text"), FINDINGS, ids=[c for c, _, _ in FINDINGS])
def test_enforce_denies_and_warn_warns(case: str, obj: dict[str, Any], text: str) -> None:
    denied = run(obj, config=config("enforce"))
    assert denied.denial_message() == f"Pod ml/train, {text}. {WHY}"
    warned = run(obj, config=config("warn"))
    assert warned.allowed
    shown = text if len(text) <= 120 else text[:119] + "…"
    assert shown in warned.warnings


# (case, pod): what must pass under enforce — a prefix that makes no name the runtime reads
# (case-sensitive), NVIDIA's fixed names closed by the written void, nodes declared to ignore
# the variables.
ALLOWED: list[tuple[str, dict[str, Any]]] = [
    *[
        (
            f"AMD sidecar, prefix {prefix}",
            pod(
                container("gpu", limits=AMD), container("side", envFrom=[{"prefix": prefix, **CM}])
            ),
        )
        # AMD_VISIBLE_DEVICES is closed by the written void; the rest make no name AMD reads.
        for prefix in ["CFG_", "AMD_", "docker_resource_", "Docker_", "DOCKER_RESOURCEX"]
    ],
    *[
        (
            f"AMD device container, prefix {prefix}",
            pod(container("gpu", limits=AMD, envFrom=[{"prefix": prefix, **CM}])),
        )
        for prefix in ["CFG_", "docker_", "AMD_VISIBLE_DEVICES", "amd_"]
    ],
    (
        "Neuron device container, prefix equal to the variable",
        pod(
            container(
                "gpu",
                limits={"aws.amazon.com/neuron": 1},
                envFrom=[{"prefix": "AWS_NEURON_VISIBLE_DEVICES", **CM}],
            )
        ),
    ),
    (
        "NVIDIA device container, prefix CFG_",
        pod(container("gpu", limits={"nvidia.com/gpu": 1}, envFrom=[{"prefix": "CFG_", **CM}])),
    ),
    # No false positive for NVIDIA's containers: the void written closes its fixed name.
    (
        "NVIDIA sidecar, unprefixed",
        pod(container("gpu", limits={"nvidia.com/gpu": 1}), container("side", envFrom=[CM])),
    ),
    ("plain pod, unprefixed", pod(container("app", envFrom=[CM, SECRET]))),
    # A family whose runtime reads no variable: its device container's envFrom chooses nothing.
    (
        "Intel device container, unprefixed",
        pod(container("gpu", limits={"gpu.intel.com/i915": 1}, envFrom=[CM])),
    ),
    (
        "Ascend sidecar, unprefixed",
        pod(container("npu", limits={"huawei.com/Ascend910": 1}), container("side", envFrom=[CM])),
    ),
]


@pytest.mark.parametrize(("case", "obj"), ALLOWED, ids=[c for c, _ in ALLOWED])
def test_what_no_runtime_reads_passes_under_enforce(case: str, obj: dict[str, Any]) -> None:
    decision = run(obj, config=config("enforce"))
    assert decision.allowed, decision.denial_message()
    assert not [w for w in decision.warnings if "envFrom" in w]


def test_a_safe_prefix_still_gets_the_voids() -> None:
    obj = pod(container("gpu", limits=AMD), container("side", envFrom=[{"prefix": "CFG_", **CM}]))
    after = apply(run(obj, config=config("enforce")))
    assert get(after, "spec", "containers", 1, "env") == [NVIDIA_VOID, AMD_VOID, ASCEND_VOID]
    assert get(after, "spec", "containers", 0, "env") == [NVIDIA_VOID, ASCEND_VOID, AMD_VOID]


def test_nodes_declared_to_ignore_the_variables_pass() -> None:
    obj = pod(container("gpu", limits=AMD), container("side", envFrom=[CM]))
    ignored = config("enforce", nodeSettings={"envIgnored": ["amd"]})
    assert run(obj, config=ignored).allowed
    # Only the vendor declared: a Neuron pod's sidecar is still one.
    neuron = pod(
        container("gpu", limits={"aws.amazon.com/neuron": 1}), container("s", envFrom=[CM])
    )
    assert not run(neuron, config=ignored).allowed


def test_one_finding_where_void_is_not_written() -> None:
    """Under voidImageDevices known/off every envFrom of a container without a device is a
    finding already; the container is named once, with the open names' fix."""
    obj = pod(container("gpu", limits=AMD), container("side", envFrom=[CM]))
    for mode in ("known", "off"):
        decision = run(obj, config=config("enforce", voidImageDevices=mode))
        assert decision.denial_message() == "Pod ml/train, " + _amd_text(SIDE) + f". {WHY}"


def _debug(obj: dict[str, Any], debugger: dict[str, Any], mode: str) -> Decision:
    old = apply(run(obj, config=config("enforce")))
    new = copy.deepcopy(old)
    new["spec"]["ephemeralContainers"] = [debugger]
    return evaluate(
        new,
        standard_policies(),
        config(mode),
        operation="UPDATE",
        sub_resource="ephemeralcontainers",
        old_object=old,
    )


def test_an_ephemeral_container_with_unprefixed_env_from_is_judged() -> None:
    """kubectl debug into an AMD pod: the ephemeral container runs on the AMD node under its
    runtime, so its unprefixed envFrom hands it GPUs as a sidecar's would."""
    amd_pod = pod(container("gpu", limits=AMD))
    debugger = {"name": "dbg", "image": "busybox", "envFrom": [CM]}
    denied = _debug(amd_pod, debugger, "enforce")
    assert denied.denial_message() == ("Pod ml/train, " + _amd_text(DBG) + f". {WHY}")
    warned = _debug(amd_pod, debugger, "warn")
    assert warned.allowed and _amd_text(DBG)[:119] + "…" in warned.warnings
    # With a prefix it is voided like any new ephemeral container.
    prefixed = _debug(amd_pod, {**debugger, "envFrom": [{"prefix": "CFG_", **CM}]}, "enforce")
    assert prefixed.allowed
    assert get(apply(prefixed), "spec", "ephemeralContainers", 0, "env") == [
        NVIDIA_VOID,
        AMD_VOID,
        ASCEND_VOID,
    ]
    # In an NVIDIA pod the same debugger passes (its fixed names are voided).
    nvidia = _debug(pod(container("gpu", limits={"nvidia.com/gpu": 1})), debugger, "enforce")
    assert nvidia.allowed


def test_an_update_does_not_judge_an_old_env_from_again() -> None:
    """A pod admitted under warn keeps what it had: a label change is no new route."""
    old = pod(container("gpu", limits=AMD), container("side", envFrom=[CM]))
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"x": "y"}
    decision = evaluate(
        new, standard_policies(), config("enforce"), operation="UPDATE", old_object=old
    )
    assert decision.allowed


@pytest.mark.parametrize(
    ("prefix", "made"),
    [
        ("", True),
        ("D", True),
        ("DOCKER_RESOURCE_", True),
        ("DOCKER_RESOURCE_GPU", True),
        ("AWS_NEURON_", True),
        ("AWS_NEURON_VISIBLE_DEVICE", True),
        # A key is never empty: the prefix alone is no name.
        ("AWS_NEURON_VISIBLE_DEVICES", False),
        ("aws_neuron_", False),
        ("AMD_", False),  # closed by the void written
        ("NVIDIA_", False),
        ("CFG_", False),
    ],
)
def test_which_prefixes_make_open_names(prefix: str, made: bool) -> None:
    if prefix:  # an envFrom prefix that makes an open name is a finding in every pod
        assert bool(unvoidable_prefix((prefix,))) is made
    exact = ("AWS_NEURON_VISIBLE_DEVICES", "MTHREADS_VISIBLE_DEVICES", "ENFLAME_VISIBLE_DEVICES")
    assert makes(prefix, exact, ("DOCKER_RESOURCE_",)) is made


def test_readers_follow_the_pods_devices_and_runtime_class() -> None:
    amd = family_named("amd")
    neuron = family_named("neuron")
    assert readers({1: frozenset({"amd"}), 2: frozenset({"nvidia"})}, "", ()) == (amd,)
    assert readers({1: frozenset({"nvidia"})}, "", ()) == ()
    assert readers({}, "neuron", ()) == (neuron,)
    assert readers({1: frozenset({"amd"})}, "", ("amd",)) == ()


# --- the image configuration: what a registry lookup read (ImageEnv) ----------------------------

ROCM_IMAGE = "registry.corp/team/train:v3"  # a tag that says nothing: looked up for its ROCm


def _with_config(mode: str, obj: dict[str, Any], env: dict[str, str], **access: Any) -> Decision:
    return evaluate(
        obj,
        standard_policies(),
        config(mode, **access),
        image_env={ROCM_IMAGE: {"ROCM_VERSION": "6.4.1", **env}},
    )


def test_an_images_docker_resource_variable_is_written_over_with_amds_void() -> None:
    """A config's DOCKER_RESOURCE_GPU=0-7 is read by AMD's runtime beside the written
    AMD_VISIBLE_DEVICES=void (getAMDEnv, the last one wins; CRI-O puts the image's entries after
    the container's, server/utils.go mergeEnvs): the exact name written with AMD's void replaces
    the config's entry on containerd and CRI-O alike."""
    obj = pod(container("gpu", ROCM_IMAGE, limits=AMD))
    decision = _with_config("enforce", obj, {"DOCKER_RESOURCE_GPU": "0-7"})
    assert decision.allowed
    env = get(apply(decision), "spec", "containers", 0, "env")
    assert {"name": "DOCKER_RESOURCE_GPU", "value": "void"} in env
    assert (
        'set DOCKER_RESOURCE_GPU=void in container "gpu": its image\'s value would choose its AMD '
        "GPUs" in decision.notes
    )
    # Its own value in env replaces the config's: judged as its own (a finding), not written.
    own = pod(
        container(
            "gpu", ROCM_IMAGE, limits=AMD, env=[{"name": "DOCKER_RESOURCE_GPU", "value": "0"}]
        )
    )
    assert not _with_config("enforce", own, {"DOCKER_RESOURCE_GPU": "0-7"}).allowed
    # A value AMD's parser reads as no GPU needs nothing.
    quiet = _with_config("enforce", obj, {"DOCKER_RESOURCE_GPU": "none"})
    assert "DOCKER_RESOURCE_GPU" not in [
        e["name"] for e in get(apply(quiet), "spec", "containers", 0, "env")
    ]


def _asked(decision: Decision) -> list[ImageQuery]:
    return [q for q in decision.unresolved_images if q.runtime == "gpu-access"]


KNOWN_ROCM = "rocm/pytorch:rocm6.4_ubuntu24.04_py3.12_pytorch_release_2.6.0"  # its tag tells


def test_enforce_asks_for_the_config_of_every_image_an_amd_runtime_reads() -> None:
    """An image whose ROCm version its tag tells is not looked up for placement, but its config
    may still set DOCKER_RESOURCE_*: under enforce every image of a pod whose runtime reads open
    names is asked for (the sidecar's too), once its config is read it is judged, and under
    warn nothing is asked for (the lookups cost the request path)."""
    side = container("side", "registry.corp/tools/log:v1")
    obj = pod(container("gpu", KNOWN_ROCM, limits=AMD), side)
    assert _asked(evaluate(obj, standard_policies(), config("enforce"))) == [
        ImageQuery(KNOWN_ROCM, "amd64", "gpu-access"),
        ImageQuery("registry.corp/tools/log:v1", "amd64", "gpu-access"),
    ]
    assert _asked(evaluate(obj, standard_policies(), config("warn"))) == []
    read = {KNOWN_ROCM: {"DOCKER_RESOURCE_GPU": "0-7"}, "registry.corp/tools/log:v1": {}}
    decision = evaluate(obj, standard_policies(), config("enforce"), image_env=read)
    assert _asked(decision) == []
    env = get(apply(decision), "spec", "containers", 0, "env")
    assert {"name": "DOCKER_RESOURCE_GPU", "value": "void"} in env
    # An NVIDIA pod's images are not asked for: its runtime reads no open name.
    gpu = pod(container("gpu", "nvidia/cuda:12.4.1-base", limits={"nvidia.com/gpu": 1}), side)
    assert _asked(evaluate(gpu, standard_policies(), config("enforce"))) == []


def test_where_no_void_is_written_the_images_variable_is_a_finding() -> None:
    obj = pod(container("gpu", ROCM_IMAGE, limits=AMD))
    text = 'container "gpu" runs an image setting DOCKER_RESOURCE_GPU=0-7: use another image'
    denied = _with_config("enforce", obj, {"DOCKER_RESOURCE_GPU": "0-7"}, voidImageDevices="known")
    assert denied.denial_message() == f"Pod ml/train, {text}. {WHY}"
    warned = _with_config("warn", obj, {"DOCKER_RESOURCE_GPU": "0-7"})
    assert warned.allowed and text in warned.warnings


def test_an_image_with_more_open_names_than_were_read_is_a_finding() -> None:
    obj = pod(container("gpu", ROCM_IMAGE, limits=AMD))
    denied = _with_config("enforce", obj, {"=": ""})
    assert denied.denial_message() == (
        'Pod ml/train, container "gpu" runs an image setting more DOCKER_RESOURCE_* variables '
        f"than are read: use another image. {WHY}"
    )


def test_the_registry_keeps_the_open_names_of_a_config() -> None:
    from tests.unit.test_vendor_image_config import blob, config_document
    from webhook.registry.documents import MAX_OPEN_VARIABLES, read_image_config

    body, digest = blob(
        config_document(
            ["ROCM_VERSION=6.4.1", "DOCKER_RESOURCE_GPU=0-7", "MTHREADS_VISIBLE_DEVICES=all"]
        )
    )
    assert read_image_config(body, digest).variables == {
        "ROCM_VERSION": "6.4.1",
        "DOCKER_RESOURCE_GPU": "0-7",
        "MTHREADS_VISIBLE_DEVICES": "all",
    }
    many = [f"DOCKER_RESOURCE_{i}=0" for i in range(MAX_OPEN_VARIABLES + 1)]
    body, digest = blob(config_document(many))
    found = read_image_config(body, digest).variables
    assert len(found) == MAX_OPEN_VARIABLES + 1 and found["="] == ""


async def test_the_resolver_keeps_open_names_of_a_config_without_a_version() -> None:
    from tests.unit.test_registry_resolver import ScriptedClient, resolver
    from webhook.core.images.facts import ImageQuery
    from webhook.registry.results import NO_CUDA, LookupResult

    env = (("DOCKER_RESOURCE_GPU", "0-7"),)
    answer = LookupResult(NO_CUDA, detail="its config sets no CUDA_VERSION", env=env)
    found = await resolver(ScriptedClient(lambda i, a: answer)).resolve(
        [ImageQuery(ROCM_IMAGE, "amd64", "rocm")]
    )
    assert found.env == {ROCM_IMAGE: dict(env)}
    # The version is still unknown, and said so.
    assert found.warnings == [f"ROCm lookup of {ROCM_IMAGE}: its config sets no ROCM_VERSION"]


def test_a_sidecar_beside_an_amd_dra_claim_is_judged_as_beside_amd_gpu() -> None:
    """ROCm/k8s-gpu-dra-driver's class gpu.amd.com: the claimed container runs on an AMD node
    as an amd.com/gpu one does, so its sidecar's unprefixed envFrom is the same finding."""
    from tests.unit.test_gpu_access_vendor_claims import check as check_claims
    from tests.unit.test_gpu_access_vendor_claims import claim_pod, claimed

    side = container("side", "busybox", envFrom=[CM])
    denied = check_claims(claim_pod("amd", claimed(), side))
    assert denied.denial_message() == "Pod ml/train, " + _amd_text(SIDE) + f". {WHY}"
    prefixed = container("side", "busybox", envFrom=[{"prefix": "CFG_", **CM}])
    assert check_claims(claim_pod("amd", claimed(), prefixed)).allowed
