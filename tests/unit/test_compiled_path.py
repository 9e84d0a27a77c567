"""The request path compiled and lean (issue 40): every module of webhook/core a review runs is
in setup.py's compiled list (or among the few it leaves out, with the reason there), and no
object built during a review takes the __init__ @dataclass generates, which mypyc leaves
interpreted.

Both builds: with the source, every module's Python code is seen running; with the compiled
core (`make unit-compiled`), only the modules left interpreted are, and they must be the ones
setup.py leaves out.
"""

from __future__ import annotations

import ast
import copy
import posixpath
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from tests.helpers import GPU, VCORE, container, pod, standard_policies, workload
from webhook.admission.reviews import ALLOWED, decode_review
from webhook.admission.state import Outcome
from webhook.core.access.routes import normpath as _normpath
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.placement.inventory import NodeInventory
from webhook.core.workloads.claims import ClaimIndex

ROOT = Path(__file__).resolve().parents[2]
CORE = "webhook/core/"
# What setup.py leaves out that a review still runs (its comment says why): the pydantic config
# models, and ClaimClasses (a frozenset subclass).
LEFT_OUT = ("webhook/core/config/", "webhook/core/workloads/claim_classes.py")


def compiled_list() -> set[str]:
    """setup.py's COMPILED, read without running setup()."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "COMPILED" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    raise AssertionError("setup.py has no COMPILED list")


def _reviews() -> Iterator[Callable[[], object]]:
    """/mutate (with its patch) and /validate of objects that reach every rule family: CRL
    defaults, CUDA placement on an inventory, env fixes, GPU access findings, AMD and Ascend
    gates, DRA claims, a violation, workloads and a Pod UPDATE."""
    policies = standard_policies()
    configs: list[WebhookConfig] = [
        load_config({"registryLookups": {"publicRegistries": False}}),
        load_config({"gpuAccess": {"mode": "enforce"}}),
    ]
    inventory = NodeInventory.build(
        {
            "gpu-a": {
                "nvidia.com/cuda.runtime-version.major": "12",
                "nvidia.com/cuda.runtime-version.minor": "4",
                "nvidia.com/gpu.compute.major": "8",
                "nvidia.com/gpu.compute.minor": "0",
            },
            "amd-a": {"amd.com/gpu.driver-version": "6.12.12", "amd.com/gpu.device-id": "74a1"},
            "npu-a": {
                "huawei.com/driver.version": "25.3.RC1",
                "node.kubernetes.io/npu.chip.name": "910B3",
            },
            "cpu-a": {},
        }
    )
    claims = ClaimIndex.from_objects([])
    env = [{"name": "EPOCHS", "value": "10"}]
    paddle = pod(
        container(
            "train",
            "paddlepaddle/paddle:2.6.1-gpu-cuda12.0-cudnn8.9-trt8.6",
            limits={VCORE: "50", "cpu": "4"},
            env=env,
            volumeMounts=[{"name": "data", "mountPath": "/data"}],
        ),
        volumes=[{"name": "data", "emptyDir": {}}],
    )
    hostile = pod(
        container("model", "nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04", limits={GPU: "1"}),
        container(
            "sidecar",
            "python:3.12-slim",
            env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
            securityContext={"privileged": True},
            volumeMounts=[{"name": "dev", "mountPath": "/dev/nvidia0"}],
            envFrom=[{"configMapRef": {"name": "x"}}],
        ),
        init=[container("fetch", "busybox:1.36", limits={"cpu": "1"})],
        volumes=[{"name": "dev", "hostPath": {"path": "/dev/nvidia0"}}],
        resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
    )
    amd = pod(
        container(
            "rocm",
            "rocm/vllm:rocm7.0.0_vllm_0.10.2_20251006",
            limits={"amd.com/gpu": "1"},
            env=[{"name": "PYTORCH_ROCM_ARCH", "value": "gfx942"}],
        )
    )
    ascend = pod(
        container(
            "cann",
            "ascendai/cann:8.3.rc1-910b-ubuntu22.04-py3.11",
            limits={"huawei.com/Ascend910": "1"},
        )
    )
    too_many = pod(
        container("big", "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime", limits={VCORE: "150"})
    )
    objects = [paddle, hostile, amd, ascend, too_many, workload("Deployment", paddle)]
    for config in configs:
        for obj in objects:
            mutated = evaluate(obj, policies, config, inventory=inventory, claims=claims).mutated

            def mutate(obj: Any = obj, config: WebhookConfig = config) -> object:
                return evaluate(obj, policies, config, inventory=inventory, claims=claims).patch

            def validate(obj: Any = mutated or obj, config: WebhookConfig = config) -> object:
                return evaluate(
                    obj, policies, config, inventory=inventory, violations_only=True
                ).allowed

            yield mutate
            yield validate
        old = copy.deepcopy(hostile)
        old["spec"]["containers"][1]["env"] = []

        def update(config: WebhookConfig = config, old: Any = old) -> object:
            return evaluate(
                hostile, policies, config, operation="UPDATE", old_object=old, claims=claims
            ).patch

        yield update


def _run_reviews() -> tuple[set[str], set[str]]:
    """(repository paths of the webhook/core modules whose Python code ran, classes of
    webhook/core whose generated __init__ ran) while the reviews run."""
    reviews = list(_reviews())
    for review in reviews:  # first calls fill caches (a review's steady state is measured)
        review()
    modules: set[str] = set()
    generated: set[str] = set()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        if code.co_filename == "<string>" and code.co_name == "__init__":
            cls = type(frame.f_locals.get("self"))
            if cls.__module__.startswith("webhook.core."):
                generated.add(f"{cls.__module__}.{cls.__qualname__}")
        elif CORE in code.co_filename:
            modules.add(CORE + code.co_filename.split(CORE, 1)[1])

    sys.setprofile(profile)
    try:
        for review in reviews:
            review()
    finally:
        sys.setprofile(None)
    return modules, generated


def test_every_core_module_a_review_runs_is_compiled() -> None:
    ran, _ = _run_reviews()
    compiled = compiled_list()
    interpreted = sorted(m for m in ran if m not in compiled and not m.startswith(LEFT_OUT))
    assert interpreted == []


def test_no_object_of_a_review_takes_the_dataclass_generated_init() -> None:
    _, generated = _run_reviews()
    assert sorted(generated) == []


def test_the_compiled_list_names_existing_modules() -> None:
    missing = sorted(m for m in compiled_list() if not (ROOT / m).is_file())
    assert missing == []


def test_a_normal_mount_path_is_kept_as_normpath_would() -> None:
    # GPU access control skips posixpath.normpath (interpreted) for a path that is normal
    # already: every path built from these parts must come out as normpath makes it.
    parts = ["", ".", "..", "dev", "nvidia0", ".x", "x.", " ", "..."]
    paths = {" ", "", "/", "//", "dev"}
    for a in parts:
        for b in parts:
            for c in parts:
                for lead in ("", "/", "//", " /"):
                    for tail in ("", "/", " "):
                        paths.add(f"{lead}{a}/{b}/{c}{tail}")
                        paths.add(f"{lead}{a}/{b}{tail}")
    wrong = {
        p: _normpath(p)
        for p in paths
        if _normpath(p) != "/" + posixpath.normpath("/" + p.strip()).lstrip("/")
    }
    assert wrong == {}


# The admission layer's modules a /mutate or /validate review runs, around the core (issue 40):
# all compiled but logs.py (setup.py says why). app.py (building the app), runner.py,
# lifecycle.py, gauges.py, metrics.py and limits.py run at start-up or on a scrape, never per
# review.
ADMISSION_PATH = {
    f"webhook/admission/{m}.py"
    for m in (
        "body",
        "decide",
        "decisions",
        "endpoints",
        "jsoncodec",
        "review_counts",
        "review_handler",
        "reviews",
        "state",
    )
}


def test_every_admission_module_a_review_runs_is_compiled() -> None:
    assert sorted(ADMISSION_PATH - compiled_list()) == []


def test_no_admission_object_of_a_review_takes_a_generated_constructor() -> None:
    # A review's AdmissionRequest (decode_review) and Outcome (decide): neither the __init__
    # @dataclass generates nor a NamedTuple's __new__, both code compiled from a string.
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": "ml",
            "object": pod(container("train", "busybox:1.36", limits={GPU: "1"})),
        },
    }
    generated: set[str] = set()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename == "<string>":
            made = frame.f_locals.get("self", frame.f_locals.get("_cls"))
            cls = made if isinstance(made, type) else type(made)
            generated.add(f"{cls.__module__}.{cls.__qualname__}")

    sys.setprofile(profile)
    try:
        req = decode_review(body)
        outcome = Outcome(ALLOWED, "allowed", 0, 0)
    finally:
        sys.setprofile(None)
    assert sorted(g for g in generated if g.startswith("webhook.")) == []
    # What the handler reads of them.
    assert (req.uid, req.kind, req.namespace, req.operation, req.ref) == (
        "u-1",
        "Pod",
        "ml",
        "CREATE",
        "ml/train",
    )
    assert (outcome.result, outcome.cacheable, outcome.placements) == ("allowed", True, ())
