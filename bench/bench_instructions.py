"""User-space instructions per admission review, counted by valgrind's callgrind: in-process on
the real /mutate and /validate handlers (with a breakdown by stage and by ELF object), and in the
live server over TLS against the no-op server; deterministic enough to compare two trees on a
busy machine (the benchmark of record of issue 40). `--ab` is the wall-clock counterpart: two
trees' servers under wrk in alternating rounds of one sitting.

**In-process** (`--mode inprocess`): a child process under `valgrind --tool=callgrind` builds
the admission app as `gpu-webhook serve` does (create_app with the shipped configmaps/, the JSON
codec, the batched review log writing to /dev/null, the decision cache, gc.freeze and serve's
collector thresholds), takes the aiohttp handlers of POST /mutate and /validate from its router
and awaits them on requests made by aiohttp's make_mocked_request (the body already in the
request's stream, as the API server sends it). The bodies are bench_server.py's *distinct* mix
(bench/harness/objects.py `server_templates("distinct")`, filled as its load generators fill
them, with a fixed time), generated once by this process so that two trees get the same bytes.
After a warm-up, the /mutate reviews and then the /validate reviews run inside the C functions
gwb_measure_mutate and gwb_measure_validate (bench/harness/callgrind_marks.c); callgrind runs
with `--collect-atstart=no --toggle-collect=` and `--dump-after=` those two, so each measured
loop is one dump and nothing else is counted.

How the stages get their figures. CPython 3.11 runs every Python function inside
_PyEval_EvalFrameDefault, so callgrind cannot tell Python functions apart; mypyc-compiled ones
it can (CPyDef_<module>___<function>). So each stage is a list of the Python-level callables
that do its work (STAGES below), and:

- a callable defined in Python (or a compiled one called from interpreted code, such as the
  admission layer calling reviews.py) is replaced, in every module that holds it, by
  `functools.partial(gwb_stage_<stage>, callable)`: a C function of the marker extension that
  calls it. The stage's figure is that C function's inclusive cost (callgrind counts the call
  to it once per nesting level: a stage's callable called inside the same stage is not counted
  twice);
- a compiled callable called from compiled code (a native call no Python name can intercept)
  counts by its symbol: the inclusive cost of the calls to CPyDef_<module>___<name> from other
  functions than its Python entry point (CPyPy_..., reached through an interceptor) and than
  the stage's other compiled callables.

Top-level stages (decode, evaluation, patch, answer, aiohttp's Response object, log line,
counters) do not overlap; "other" is the rest of the measured loop: aiohttp's request object,
reading the body, the handler's own code (snapshots, the decision's glue: Outcome, warning
lists, the fields dict), the event loop's task steps. "GPU access control" and "placement" are
parts of "evaluation"; "the cyclic GC" (CPython's gc_collect_main) is inside whichever stage's
allocation set it off. A callable that does not exist in the measured tree is listed as missing
and its cost stays in "other" (rename STAGES' entries when the code moves). The markers add
~2 % to a review (`--no-stages` runs without them: the total to compare when one tree lacks a
stage's callable). The ELF object shares are callgrind's self costs per object (libpython is
the interpreter: interpreted code and the C runtime that compiled code calls too).

**Live server** (`--mode live`): `gpu-webhook serve` (and, for the ratio, the no-op aiohttp TLS
server of bench/harness/servers.py) under callgrind with `--instr-atstart=no`, the policy files
loaded once (`--policies-poll 0`); once it is ready, `callgrind_control --instr=on`, a client
outside valgrind (this script's `client` command: one keep-alive TLS connection, http.client)
sends a warm-up, `callgrind_control --zero`, then `--live-reviews` reviews of the mix one after
another, then `callgrind_control --dump`. Instructions per review = the dump's total / reviews
(the mix: /mutate and /validate alike; the server's idle work during the window, its timers
and log flushes, is in it). One connection, one review at a time: every review pays a full
event-loop turn (wrk's 32 connections batch them).

Live, by stage: the webhook runs through this script's `live-server` command (serve_child), the
same `gpu-webhook serve` command line with the in-process mode's interceptors (STAGES,
intercept()) installed on the app when aiohttp's runner binds it to the loop, before its
start-up and first request; the live dump's gwb_stage_* inclusive costs give the same stages
per review, and the rest is "aiohttp, TLS and the event loop" (reading and parsing the request,
the handler's glue, writing the answer, the loop's turn), printed beside the no-op's total. The
ELF object table prints each server's instructions per review per object and each webhook
minus the no-op: where the webhook's extra instructions run. `--no-stages` starts the webhook
unwrapped (the unmarked total); `--overhead` runs each webhook both ways and prints what the
markers add.

Determinism: every figure is a count, not a time; the measured processes run with
PYTHONHASHSEED=0; `--repeat 2` runs everything twice and prints the spread, (max - min) / min.

    .venv/bin/python bench/bench_instructions.py                      # this tree, both modes
    .venv/bin/python bench/bench_instructions.py --compiled           # build/compiled
    .venv/bin/python bench/bench_instructions.py --baseline ../main --compiled --json out.json
    .venv/bin/python bench/bench_instructions.py --mode live --baseline ../main --compiled \
        --repeat 2 --overhead                                          # live, by stage
    .venv/bin/python bench/bench_instructions.py --ab ../main --compiled --rounds 5  # wall clock

Needs valgrind (`make bench-deps`: Debian's valgrind, with its headers for the markers), a C
compiler and the Python headers; `--ab` needs wrk. Slow: callgrind runs Python ~50x slower
(in-process ~1 min per build and repeat, the live server ~2 min with its start-up).
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import inspect
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

REPO = Path(__file__).resolve().parents[1]
# `python bench/bench_instructions.py` puts bench/ on sys.path, not the repository root.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.harness import cli  # noqa: E402
from bench.harness.callgrind import (  # noqa: E402
    Profile,
    build_marks,
    footprint,
    grouped,
    read,
    valgrind_path,
)
from bench.harness.report import Column, Table  # noqa: E402

# A fixed time in the bodies (managedFields, creationTimestamp): the same bytes every run.
FIXED_TIME = "2026-11-27T12:00:00Z"
REVIEW_LOG = "webhook.review"  # the per-review logger (webhook/admission/review_handler.py)


@dataclass(frozen=True)
class Target:
    """A callable doing (part of) a stage's work: `module`'s `name` (a dotted path: a function,
    or Class.method/property; Class.* is every public method the class defines), or
    `state:ATTR` for what create_app takes as a seam."""

    module: str
    name: str
    # Replaced in every module holding it (False: only as `module`'s attribute; a class by a
    # subclass whose __init__ runs in the marker, so isinstance checks still work).
    everywhere: bool = True

    def label(self) -> str:
        return f"{self.module}:{self.name}"


# Stage -> the callables that do its work. Top-level stages must not call each other's.
STAGES: dict[str, tuple[Target, ...]] = {
    "decode": (
        Target("state", "codec.loads"),
        Target("webhook.admission.reviews", "decode_review"),
    ),
    "evaluation": (Target("state", "evaluator"),),
    "access": (Target("webhook.core.evaluation.containers", "apply_access"),),
    "placement": (
        # The one engine (issue 45); before it, the CUDA and the vendors' entries (a baseline
        # checkout from before holds those, each tree reports the others missing).
        Target("webhook.core.placement.engine", "place_family"),
        Target("webhook.core.placement.place", "place"),
        Target("webhook.core.placement.gate", "place_vendor"),
    ),
    "patch": (Target("webhook.core.outcome.decision", "Decision.patch"),),
    "answer": (
        Target("webhook.admission.reviews", "allowed_response"),
        Target("webhook.admission.reviews", "denied_response"),
        Target("webhook.admission.reviews", "patched_response"),
        Target("state", "codec.dumps"),
    ),
    # The aiohttp Response the handler returns (here only made: sending it is aiohttp's).
    "response": (Target("aiohttp.web", "Response", everywhere=False),),
    "log": (Target("state", "review_sink"),),
    # Every public method of the per-review counters (review_done, mutated, evaluated, ...).
    "counters": (Target("webhook.admission.review_counts", "ReviewCounts.*"),),
}
TOP_STAGES = ("decode", "evaluation", "patch", "answer", "response", "log", "counters")
# CPython's cyclic garbage collector, wherever a stage's allocations set it off.
GC_FUNCTION = "gc_collect_main"
SUB_STAGES = {"access": "evaluation", "placement": "evaluation"}
TITLES = {
    "decode": "decode (JSON, AdmissionRequest)",
    "evaluation": "evaluation (evaluate)",
    "access": "  of which GPU access control",
    "placement": "  of which placement",
    "patch": "the JSONPatch (Decision.patch)",
    "answer": "building the answer (+ encoding)",
    "response": "aiohttp's Response object",
    "log": "the review log line",
    "counters": "the counters",
    "other": "other (aiohttp, handler, loop)",
    "total": "total",
    "gc": "the cyclic GC (inside the rows above)",
}
ENDPOINTS = ("mutate", "validate")
UNMARKED = " unmarked"  # live, --overhead: a webhook's run without the markers


# ---------------------------------------------------------------------------------------------
# The bodies (this process, this checkout's webhook: the same bytes for every tree measured)


def fill(template: str, index: int) -> str:
    """A template of bench/harness/objects.py filled as the load generators fill it."""
    return (
        template.replace("@UID@", f"00000000-0000-4000-8000-{index:012x}")
        .replace("@SEQ@", str(index))
        .replace("@NAME@", f"{index:05d}"[-5:])
        .replace("@PODUID@", f"00000000-1111-4000-8000-{index:012x}")
        .replace("@TIME@", FIXED_TIME)
    )


def mix_bodies(count: int, start: int = 0) -> list[tuple[str, str]]:
    """`count` (endpoint, body) pairs of the distinct mix, in its order, from index `start`."""
    from bench.harness.objects import server_templates

    templates = server_templates("distinct")
    return [
        (templates[i % len(templates)][0], fill(templates[i % len(templates)][1], i))
        for i in range(start, start + count)
    ]


# ---------------------------------------------------------------------------------------------
# In-process: the child under callgrind


def _symbols(target: Target) -> list[str]:
    """mypyc's C names of a compiled callable: CPyDef_<module>___<Class>___<name>, where
    <module> is the module's last part, or as many more parts as make it unique
    (CPyDef_evaluation___pods___evaluate_pod; `nm` of build/compiled's __mypyc .so)."""
    tail = target.name.replace(".", "___")
    parts = target.module.split(".")
    return [f"CPyDef_{'___'.join(parts[-k:])}___{tail}" for k in range(1, len(parts) + 1)]


def _replace_everywhere(original: Any, replacement: Any) -> int:
    """`replacement` for `original` in every loaded module's globals; how many were replaced."""
    count = 0
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for key, value in list(namespace.items()):
            if value is original:
                try:
                    namespace[key] = replacement
                except TypeError:
                    continue
                count += 1
    return count


def _compiled(value: Any) -> bool:
    """A callable compiled by mypyc (a C function or a native class's member)."""
    func = getattr(value, "fget", None) or getattr(value, "func", None) or value
    return not inspect.isfunction(func) and not inspect.ismethod(func)


def intercept(state: Any, marks: Any) -> dict[str, dict[str, list[str]]]:
    """Route every STAGES callable through its stage's marker; returns per stage the callables
    intercepted, the compiled ones counted by symbol ("symbols": every call; "native": the
    calls other than through the Python entry point, which an interceptor counts) and the
    missing ones."""
    plan: dict[str, dict[str, list[str]]] = {}
    for stage, targets in STAGES.items():
        mark = getattr(marks, f"gwb_stage_{stage}")
        done: dict[str, list[str]] = {"intercepted": [], "symbols": [], "native": [], "missing": []}
        for target in (t for each in targets for t in _expanded(each)):
            kind = _intercept_one(state, target, mark)
            if kind in ("symbols", "native"):
                done[kind].extend(_symbols(target))
            if kind != "symbols":
                done["intercepted" if kind == "native" else kind].append(target.label())
        plan[stage] = done
    return plan


def _expanded(target: Target) -> list[Target]:
    """Class.* as one Target per public method the class defines; others as they are."""
    class_name, _, attr = target.name.rpartition(".")
    if attr != "*":
        return [target]
    try:
        owner = getattr(importlib.import_module(target.module), class_name, None)
    except ImportError:
        owner = None
    if not isinstance(owner, type):
        return [target]  # reported missing
    return [
        Target(target.module, f"{class_name}.{name}")
        for name, value in vars(owner).items()
        if not name.startswith("_") and callable(value)
    ]


def _intercept_one(state: Any, target: Target, mark: Any) -> str:
    if target.module == "state":
        # The seams create_app keeps on the state: codec (a NamedTuple), evaluator, review_sink.
        owner_name, _, attr = target.name.rpartition(".")
        owner = getattr(state, owner_name) if owner_name else state
        value = getattr(owner, attr, None)
        if value is None:
            return "missing"
        wrapped = functools.partial(mark, value)
        if owner_name:
            setattr(state, owner_name, owner._replace(**{attr: wrapped}))
        else:
            setattr(state, attr, wrapped)
        return "intercepted"
    try:
        module = importlib.import_module(target.module)
    except ImportError:
        return "missing"
    class_name, _, attr = target.name.rpartition(".")
    owner = getattr(module, class_name, None) if class_name else module
    if owner is None:
        return "missing"
    value = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
    if value is None:
        return "missing"
    if isinstance(owner, type):
        # A native class's members cannot be replaced: every call counts by symbol.
        if _compiled(value) or _intercept_member(owner, attr, value, mark) == "missing":
            return "symbols"
        return "intercepted"
    # Interpreted callers call through the module's name, so through the marker; a compiled
    # function's compiled callers call it natively, which only its symbol shows.
    if target.everywhere:
        _replace_everywhere(value, functools.partial(mark, value))
    elif isinstance(value, type):
        # A subclass whose __init__ runs in the marker: still a type for isinstance checks.
        init: Any = value.__init__  # type: ignore[misc]

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            mark(init, self, *args, **kwargs)

        setattr(module, attr, type(value.__name__, (value,), {"__init__": __init__}))
        return "intercepted"
    else:
        setattr(module, attr, functools.partial(mark, value))
        return "intercepted"
    return "native" if _compiled(value) else "intercepted"


def _intercept_member(owner: type, attr: str, value: Any, mark: Any) -> str:
    if isinstance(value, functools.cached_property):
        func = value.func

        def compute(self: Any) -> Any:
            return mark(func, self)

        replacement: Any = functools.cached_property(compute)
        replacement.__set_name__(owner, attr)
    elif isinstance(value, property):
        getter = value.fget
        replacement = property(lambda self: mark(getter, self))
    elif inspect.isfunction(value):
        method = value

        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            return mark(method, self, *args, **kwargs)

        replacement = call
    else:
        return "missing"
    try:
        setattr(owner, attr, replacement)
    except (AttributeError, TypeError):
        return "missing"
    return "intercepted"


class _Protocol:
    """What the request's body stream calls on its connection (aiohttp StreamReader): nothing
    to do here. (A unittest.mock.Mock cost ~80,000 instructions a review in `resume_reading`.)"""

    _reading_paused = False

    def pause_reading(self, *args: Any, **kwargs: Any) -> None:
        pass

    def resume_reading(self, *args: Any, **kwargs: Any) -> None:
        pass


def inprocess_child(args: argparse.Namespace) -> int:
    """Runs under callgrind: the app, the requests, the interceptors, the measured loops."""
    sys.path.insert(0, str(args.marks))
    # The marker extension (bench/harness/callgrind_marks.c), built by this script's parent.
    gwb_marks: Any = importlib.import_module("gwb_marks")

    # The measured tree's webhook first on the path, before anything imports it.
    sys.path.insert(0, str(args.tree))
    import asyncio
    import logging

    from aiohttp import streams
    from aiohttp.test_utils import make_mocked_request

    import webhook
    from webhook.admission.app import create_app
    from webhook.admission.jsoncodec import json_codec
    from webhook.admission.logs import configure_logging
    from webhook.admission.state import STATE
    from webhook.core.config.model import load_config
    from webhook.sources.files import load_policy_dir
    from webhook.sources.store import PolicyStore

    bodies: dict[str, list[tuple[str, bytes]]] = json.loads(Path(args.bodies).read_text())
    config = load_config(Path(args.config))
    store = PolicyStore()
    store.replace(load_policy_dir(REPO / "configmaps"))
    handler = configure_logging("json", "info")
    handler.stream = open(os.devnull, "w")  # noqa: SIM115 (lives as long as the process)
    # Written when a batch is full, as under load (thousands of reviews/s fill a batch well
    # within its interval); not every 0.5 s of valgrind's slow wall clock, which would make
    # the count depend on the machine's speed.
    handler.interval = 1e9
    sink = functools.partial(handler.write, logging.getLogger(REVIEW_LOG), "review")
    app = create_app(
        config, store, codec=json_codec(), review_sink=sink, decision_cache_bytes=16 << 20
    )
    handlers = {
        route.resource.canonical.lstrip("/"): route.handler
        for route in app.router.routes()
        if route.method == "POST" and route.resource is not None
    }
    state = app[STATE]
    empty: dict[str, list[str]] = {"intercepted": [], "symbols": [], "native": [], "missing": []}
    plan = dict.fromkeys(STAGES, empty) if args.no_stages else intercept(state, gwb_marks)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)

    def requests(endpoint: str, key: str) -> list[Any]:
        made = []
        for path, body in bodies[key]:
            if path != f"/{endpoint}":
                continue
            raw = body.encode() if isinstance(body, str) else body
            payload = streams.StreamReader(cast(Any, _Protocol()), 2**16, loop=loop)
            payload.feed_data(raw)
            payload.feed_eof()
            headers = {"Content-Type": "application/json", "Content-Length": str(len(raw))}
            made.append(
                make_mocked_request(
                    "POST", f"/{endpoint}", headers=headers, app=app, payload=payload, loop=loop
                )
            )
        return made

    async def drive(endpoint: str, batch: list[Any]) -> list[int]:
        handle = handlers[endpoint]
        statuses = []
        for request in batch:
            statuses.append((await handle(request)).status)
        return statuses

    def run(endpoint: str, batch: list[Any]) -> list[int]:
        return loop.run_until_complete(drive(endpoint, batch))

    warm = {e: requests(e, "warmup") for e in ENDPOINTS}
    measured = {e: requests(e, "measured") for e in ENDPOINTS}
    # As serve: the start-up objects out of the collector's passes, its thresholds.
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)
    gwb_marks.start_instrumentation()
    statuses: dict[str, dict[str, int]] = {}
    for endpoint in ENDPOINTS:
        run(endpoint, warm[endpoint])
    for endpoint in ENDPOINTS:
        measure = getattr(gwb_marks, f"gwb_measure_{endpoint}")
        done = measure(run, endpoint, measured[endpoint])
        statuses[endpoint] = {str(s): done.count(s) for s in set(done)}
    python_footprint = {
        e: _python_footprint(state, requests(e, "measured"), e, run) for e in ENDPOINTS
    }
    evaluate_module = importlib.import_module("webhook.core.evaluation.evaluate")
    info = {
        "python_footprint": python_footprint,
        "webhook": str(Path(webhook.__file__).resolve().parent),
        "compiled": not str(evaluate_module.__file__).endswith(".py"),
        "reviews": {e: len(measured[e]) for e in ENDPOINTS},
        "statuses": statuses,
        "plan": plan,
        "on_valgrind": gwb_marks.on_valgrind(),
    }
    Path(args.out).write_text(json.dumps(info, indent=2))
    return 0


def _module_of(filename: str) -> str:
    """A code object's file as a module group: `webhook/<package>/<module>`, a third-party
    distribution's top-level package, or `stdlib/<module>`."""
    path = filename.replace("\\", "/")
    at = path.rfind("/webhook/")
    if at >= 0:
        return path[at + 1 :].removesuffix(".py")
    at = path.rfind("-packages/")
    if at >= 0:
        return path[at + len("-packages/") :].split("/", 1)[0].removesuffix(".py")
    return "stdlib/" + path.rsplit("/", 1)[-1].removesuffix(".py")


def _python_footprint(state: Any, batch: list[Any], endpoint: str, run: Any) -> dict[str, Any]:
    """The Python-level code footprint of the measured reviews, after the measured loop: per
    review, the distinct interpreted functions (`sys.setprofile` "call" events: code objects)
    and the distinct C-level callables called from Python ("c_call": builtins, and compiled
    webhook functions called from interpreted code; native calls between compiled functions
    never reach the profiler), and the modules they are in; mean per review and union."""
    cache = getattr(state, "decisions", None)
    per_review: list[tuple[set[tuple[str, str]], set[tuple[str, str]]]] = []
    current: tuple[set[tuple[str, str]], set[tuple[str, str]]] = (set(), set())

    def profiler(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            current[0].add((_module_of(code.co_filename), code.co_qualname))
        elif event == "c_call":
            module = getattr(arg, "__module__", None)
            module = module or type(getattr(arg, "__self__", None)).__name__
            current[1].add((str(module), getattr(arg, "__qualname__", repr(arg))))

    for request in batch:
        if cache is not None:
            # The measured loop saw each body once: empty the decision cache so that this pass
            # takes the same (uncached) path, not a cached answer.
            cache.check_generation((object(),))
        current = (set(), set())
        sys.setprofile(profiler)
        try:
            run(endpoint, [request])
        finally:
            sys.setprofile(None)
        per_review.append(current)
    if not per_review:
        return {}
    union_py = set().union(*(r[0] for r in per_review))
    union_c = set().union(*(r[1] for r in per_review))
    modules = sorted({m for m, _ in union_py})
    return {
        "reviews": len(per_review),
        "python_functions": round(statistics.mean(len(r[0]) for r in per_review), 1),
        "python_modules": round(statistics.mean(len({m for m, _ in r[0]}) for r in per_review), 1),
        "c_callables": round(statistics.mean(len(r[1]) for r in per_review), 1),
        "union_python_functions": len(union_py),
        "union_python_modules": len(modules),
        "union_c_callables": len(union_c),
        "webhook_python_functions": len({f for f in union_py if f[0].startswith("webhook/")}),
    }


# ---------------------------------------------------------------------------------------------
# In-process: this side


def stage_costs(profile: Profile, plan: dict[str, dict[str, list[str]]]) -> dict[str, int]:
    """Instructions per stage in one measured loop's profile (see the module docstring)."""
    functions = set(profile.functions())
    costs: dict[str, int] = {}
    for stage, done in plan.items():
        cost = profile.inclusive(f"gwb_stage_{stage}")
        every = {s for s in done["symbols"] if s in functions}
        native = {s for s in done.get("native", []) if s in functions}
        own = every | native
        for (caller, callee), call in profile.edges.items():
            if callee not in own or caller in own:
                continue
            if callee in native and caller == "CPyPy_" + callee.removeprefix("CPyDef_"):
                continue  # through the Python entry point: the marker counted it
            cost += call
        costs[stage] = cost
    costs["total"] = profile.total
    costs["other"] = profile.total - sum(costs.get(s, 0) for s in TOP_STAGES)
    costs["gc"] = profile.inclusive(GC_FUNCTION)
    return costs


def fixed_hashes(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` with one string hash seed: with a random one per process, dict and set
    layouts differ and so do the counts (runs 1-1.5 % apart instead of 0.1-0.3 %)."""
    return {**environ, "PYTHONHASHSEED": "0"}


def valgrind_argv(out: Path, *extra: str) -> list[str]:
    valgrind = valgrind_path()
    assert valgrind is not None
    return [valgrind, "--tool=callgrind", f"--callgrind-out-file={out}", *extra]


def run_inprocess(
    tree: Path, work: Path, marks: Path, bodies: Path, config: Path, tag: str, no_stages: bool
) -> dict[str, Any]:
    out = work / f"inprocess-{tag}"
    out.mkdir(parents=True, exist_ok=True)
    argv = valgrind_argv(
        out / "cg.%p",
        "--instr-atstart=no",
        "--collect-atstart=no",
        # One pattern: two --toggle-collect options for two functions collected nothing (3.19).
        "--toggle-collect=gwb_measure_*",
        *(f"--dump-after=gwb_measure_{e}" for e in ENDPOINTS),
    )
    argv += [sys.executable, str(Path(__file__).resolve()), "inprocess"]
    argv += ["--tree", str(tree), "--marks", str(marks), "--bodies", str(bodies)]
    argv += ["--config", str(config), "--out", str(out / "info.json")]
    if no_stages:
        argv.append("--no-stages")
    started = time.monotonic()
    done = subprocess.run(
        argv, cwd=tree, env=fixed_hashes(os.environ), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"the in-process run failed:\n{done.stdout}\n{done.stderr[-3000:]}")
    info = json.loads((out / "info.json").read_text())
    dumps = sorted(out.glob("cg.*.[0-9]"), key=lambda p: int(p.suffix[1:]))
    if len(dumps) < len(ENDPOINTS):
        raise RuntimeError(f"callgrind wrote {len(dumps)} dumps, expected {len(ENDPOINTS)}")
    result: dict[str, Any] = {"info": info, "seconds": round(time.monotonic() - started, 1)}
    for endpoint, dump in zip(ENDPOINTS, dumps, strict=False):
        profile = read(dump)
        reviews = info["reviews"][endpoint]
        costs = stage_costs(profile, info["plan"])
        result[endpoint] = {
            "reviews": reviews,
            "per_review": {k: round(v / reviews) for k, v in costs.items()},
            "objects": {k: round(v / reviews) for k, v in grouped(profile.by_object).items()},
            "footprint": footprint(profile),
        }
    return result


# ---------------------------------------------------------------------------------------------
# Live server


def client_child(args: argparse.Namespace) -> int:
    """Outside valgrind: one keep-alive TLS connection; warm-up, then the measured reviews when
    told (stdin `go`), then wait for `quit`."""
    import http.client
    import ssl

    bodies: dict[str, list[tuple[str, str]]] = json.loads(Path(args.bodies).read_text())
    context = ssl.create_default_context(cafile=args.ca)
    conn = http.client.HTTPSConnection("localhost", args.port, context=context, timeout=600)
    headers = {"Content-Type": "application/json"}

    def send(batch: list[tuple[str, str]]) -> dict[str, int]:
        statuses: dict[str, int] = {}
        for path, body in batch:
            conn.request("POST", path, body=body.encode(), headers=headers)
            response = conn.getresponse()
            response.read()
            statuses[str(response.status)] = statuses.get(str(response.status), 0) + 1
        return statuses

    send(bodies["warmup"])
    print("warm", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 1
    statuses = send(bodies["measured"])
    print(json.dumps({"statuses": statuses}), flush=True)
    sys.stdin.readline()
    conn.close()
    return 0


def serve_child(args: argparse.Namespace) -> int:
    """Runs under callgrind: `gpu-webhook serve` (`args.serve`, its command line) with the
    stage interceptors of the in-process mode installed on its app before it serves: when
    aiohttp's runner binds the app to the event loop (Application._set_loop, before the app's
    start-up and its first request), the app holding the webhook's state gets intercept();
    the plan (what was intercepted, counted by symbol, missing) goes to `args.out`."""
    sys.path.insert(0, str(args.marks))
    gwb_marks: Any = importlib.import_module("gwb_marks")
    # The measured tree's webhook first on the path, before anything imports it.
    sys.path.insert(0, str(args.tree))
    from aiohttp import web_app

    import webhook
    from webhook.admission.state import STATE
    from webhook.cli import main as webhook_main

    set_loop = web_app.Application._set_loop
    done: list[Any] = []

    def _set_loop(app: Any, loop: Any) -> None:
        set_loop(app, loop)
        state = app.get(STATE)
        if state is None or any(state is seen for seen in done):
            return
        done.append(state)
        plan = intercept(state, gwb_marks)
        evaluate_module = importlib.import_module("webhook.core.evaluation.evaluate")
        info = {
            "webhook": str(Path(webhook.__file__).resolve().parent),
            "compiled": not str(evaluate_module.__file__).endswith(".py"),
            "plan": plan,
            "on_valgrind": gwb_marks.on_valgrind(),
        }
        Path(args.out).write_text(json.dumps(info, indent=2))

    setattr(web_app.Application, "_set_loop", _set_loop)  # noqa: B010 (a method replaced)
    return webhook_main(args.serve)


def _control(pid: int, *options: str) -> None:
    done = subprocess.run(
        ["callgrind_control", *options, str(pid)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if done.returncode != 0 or "OK" not in done.stdout:
        raise RuntimeError(f"callgrind_control {' '.join(options)}: {done.stdout}{done.stderr}")


def run_live(
    kind: str,
    tree: Path,
    work: Path,
    tls: Any,
    bodies: Path,
    config: Path,
    tag: str,
    marks: Path | None = None,
) -> dict[str, Any]:
    """One server under callgrind; instructions per review in the measured window, by ELF
    object and, for the webhook started with the `marks` extension (serve_child), by stage."""
    from bench.harness.servers import env, free_port, server_argv, wait_ready

    out = work / f"live-{tag}"
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    # The policy files loaded once: polling them every 2 s (and hashing them every 30 s) is
    # work per second of valgrind's slow wall clock, not per review (runs 1.1 % apart with it).
    once = ("--policies-poll", "0")
    server = server_argv(kind, port, tls, REPO / "configmaps", config=config, extra=once)
    # `python -c` imports the webhook of the directory it runs in.
    cwd = tree if kind == "webhook" else REPO
    marked = kind == "webhook" and marks is not None
    if marked:
        # The same `gpu-webhook serve` command line, through serve_child's interceptors.
        server = [
            *(sys.executable, str(Path(__file__).resolve()), "live-server"),
            *("--tree", str(tree), "--marks", str(marks), "--out", str(out / "info.json")),
            *server[server.index("serve") :],
        ]
    argv = valgrind_argv(out / "cg.%p", "--instr-atstart=no") + server
    started = time.monotonic()
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=fixed_hashes(env(tree=tree if kind == "webhook" else None)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = None
    try:
        wait_ready_long(port, tls.ca_cert, process, wait_ready)
        _control(process.pid, "--instr=on")
        client = subprocess.Popen(
            [
                *(sys.executable, str(Path(__file__).resolve()), "client"),
                *("--port", str(port), "--ca", str(tls.ca_cert), "--bodies", str(bodies)),
            ],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert client.stdin is not None and client.stdout is not None
        if client.stdout.readline().strip() != "warm":
            raise RuntimeError("the client's warm-up failed")
        _control(process.pid, "--zero")
        client.stdin.write("go\n")
        client.stdin.flush()
        statuses = json.loads(client.stdout.readline())["statuses"]
        _control(process.pid, "--dump=measured")
        client.stdin.write("quit\n")
        client.stdin.flush()
        client.wait(timeout=60)
    finally:
        if client is not None and client.poll() is None:
            client.kill()
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    dumps = sorted(out.glob("cg.*.[0-9]"), key=lambda p: int(p.suffix[1:]))
    if not dumps:
        raise RuntimeError("callgrind wrote no dump of the measured window")
    profile = read(dumps[0])
    reviews = sum(statuses.values())
    result: dict[str, Any] = {
        "server": kind,
        "reviews": reviews,
        "statuses": statuses,
        "marked": marked,
        "per_review": round(profile.total / reviews),
        "objects": {k: round(v / reviews) for k, v in grouped(profile.by_object).items()},
        "seconds": round(time.monotonic() - started, 1),
    }
    if marked:
        info = json.loads((out / "info.json").read_text())
        costs = stage_costs(profile, info["plan"])
        result["info"] = info
        result["stages"] = {k: round(v / reviews) for k, v in costs.items()}
    return result


def wait_ready_long(port: int, ca: Path, process: Any, wait_ready: Callable[..., None]) -> None:
    """wait_ready's 60 s, several times: the webhook starts in ~1 min under valgrind."""
    for attempt in range(10):
        try:
            wait_ready(port, ca, process)
            return
        except RuntimeError:
            if process.poll() is not None or attempt == 9:
                raise


# ---------------------------------------------------------------------------------------------
# Wall clock: interleaved A/B under wrk


def run_ab(args: argparse.Namespace, trees: dict[str, Path], work: Path, tls: Any) -> Any:
    """Rounds of (no-op, each tree) under wrk, alternating in one sitting: reviews/s, server
    CPU µs per review (and its user and system parts, /proc/PID/stat's utime and stime) and the
    server's minor page faults per review (minflt), medians over rounds and the round-by-round
    ratio tree/baseline."""
    from bench.harness.load.wrk import run_wrk, write_templates, wrk_path
    from bench.harness.objects import server_templates
    from bench.harness.servers import server

    if wrk_path() is None:
        raise SystemExit("--ab needs wrk: apt-get install wrk (make bench-deps)")
    templates = write_templates(work / "wrk-distinct", server_templates("distinct"))
    pin = (os.cpu_count() or 1) >= 2
    server_cpus, wrk_cpus = ({1}, {0}) if pin else (None, None)
    rows: dict[str, list[dict[str, float]]] = {"noop": [], **{name: [] for name in trees}}
    for round_ in range(args.rounds):
        order = ["noop", *trees] if round_ % 2 == 0 else ["noop", *reversed(list(trees))]
        for name in order:
            kind = "noop" if name == "noop" else "webhook"
            with server(kind, tls, REPO / "configmaps", tree=trees.get(name), cpus=server_cpus) as (
                port,
                pid,
            ):
                result = run_wrk(
                    f"https://localhost:{port}",
                    templates,
                    pid,
                    seconds=args.seconds,
                    connections=32,
                    cpus=wrk_cpus,
                    warmup=2,
                )
            per_review = 1e6 / result.rps if result.rps else 0.0
            sample = {
                "rps": result.rps,
                "cpu_us": result.server_cpu * per_review,
                "user_us": result.server_user_cpu * per_review,
                "system_us": result.server_system_cpu * per_review,
                "minor_faults": result.server_minor_faults_per_request,
                **result.server_activity_per_request,
            }
            rows[name].append(sample)
            print(
                f"  round {round_ + 1} {name}: {result.rps:,.0f}/s, "
                f"{sample['cpu_us']:.1f} CPU µs/review (user {sample['user_us']:.1f}, "
                f"system {sample['system_us']:.1f}), per review: "
                f"{sample['minor_faults']:.2f} minor page faults, "
                + ", ".join(f"{k} {v:g}" for k, v in result.server_activity_per_request.items())
            )
    summary: dict[str, Any] = {}
    for name, samples in rows.items():
        summary[name] = {
            "rps": round(statistics.median(s["rps"] for s in samples)),
            **{
                key: round(statistics.median(s[key] for s in samples), 2 - key.endswith("_us"))
                for key in samples[0]
                if key != "rps"
            },
            "vs_noop": round(
                statistics.median(
                    s["rps"] / n["rps"] for s, n in zip(samples, rows["noop"], strict=True)
                ),
                3,
            ),
        }
    if "baseline" in rows:
        summary["tree_vs_baseline"] = round(
            statistics.median(
                t["rps"] / b["rps"] for t, b in zip(rows["tree"], rows["baseline"], strict=True)
            ),
            3,
        )
    return {"rounds": args.rounds, "seconds": args.seconds, "summary": summary, "runs": rows}


# ---------------------------------------------------------------------------------------------
# Report


def spread(values: Sequence[float]) -> float:
    """(max - min) / min, in %: how far repeated counts of one figure are apart."""
    low = min(values)
    return round((max(values) - low) / low * 100, 3) if low else 0.0


def print_inprocess(results: dict[str, list[dict[str, Any]]]) -> None:
    names = list(results)
    columns = [Column("in-process: instructions per review", 36, align="<")]
    for name in names:
        for endpoint in ENDPOINTS:
            columns.append(Column(f"{name} /{endpoint}", 18, ",.0f"))
    table = Table(*columns)
    print()
    print(table.header())
    rows = (*TOP_STAGES[:2], "access", "placement", *TOP_STAGES[2:], "other", "total", "gc")
    for stage in rows:
        cells: list[object] = [TITLES[stage]]
        for name in names:
            for endpoint in ENDPOINTS:
                runs = results[name]
                cells.append(statistics.median(r[endpoint]["per_review"][stage] for r in runs))
        print(table.row(*cells))
    if "baseline" in results and "tree" in results:
        ratios = {
            e: round(
                statistics.median(r[e]["per_review"]["total"] for r in results["tree"])
                / statistics.median(r[e]["per_review"]["total"] for r in results["baseline"]),
                4,
            )
            for e in ENDPOINTS
        }
        print(f"tree / baseline, total instructions per review: {ratios}")
    for name in names:
        runs = results[name]
        if len(runs) > 1:
            totals = {e: spread([r[e]["per_review"]["total"] for r in runs]) for e in ENDPOINTS}
            stages = max(
                spread([r[e]["per_review"][stage] for r in runs])
                for e in ENDPOINTS
                for stage in runs[0][e]["per_review"]
            )
            print(
                f"{name}: {len(runs)} runs; spread of the totals {totals} %, "
                f"of any stage at most {stages} %"
            )
        plan = runs[0]["info"]["plan"]
        missing = [m for done in plan.values() for m in done["missing"]]
        if missing:
            print(f"{name}: not in this tree (their cost is in 'other'): {', '.join(missing)}")
        build = "compiled" if runs[0]["info"]["compiled"] else "source"
        print(f"{name}: webhook from {runs[0]['info']['webhook']} ({build})")
    print()
    objects = Table(
        Column("share by ELF object (/mutate + /validate)", 44, align="<"),
        *(Column(name, 14, ".1%") for name in names),
    )
    print(objects.header())
    groups: list[str] = []
    for name in names:
        for group in results[name][0]["mutate"]["objects"]:
            if group not in groups:
                groups.append(group)
    for group in groups:
        cells = [group]
        for name in names:
            run = results[name][0]
            both = sum(run[e]["objects"].get(group, 0) for e in ENDPOINTS)
            total = sum(run[e]["per_review"]["total"] for e in ENDPOINTS)
            cells.append(both / total if total else 0.0)
        print(objects.row(*cells))


def print_footprint(results: dict[str, list[dict[str, Any]]]) -> None:
    """The code footprint of the measured reviews (issue 49 item 3): native functions that ran
    and their code bytes per ELF object group (callgrind, the whole measured loop), and the
    Python-level functions and modules per review (a profiled pass after it)."""
    names = list(results)
    columns = [Column("code footprint of the mix (functions, KiB)", 60, align="<")]
    for name in names:
        for endpoint in ENDPOINTS:
            columns.append(Column(f"{name} /{endpoint}", 18, align=">"))
    table = Table(*columns)
    print()
    print(table.header())
    groups: list[str] = []
    for name in names:
        for endpoint in ENDPOINTS:
            for group in results[name][0][endpoint].get("footprint", {}):
                if group not in groups:
                    groups.append(group)
    for group in groups:
        cells: list[object] = [group]
        for name in names:
            for endpoint in ENDPOINTS:
                got = results[name][0][endpoint].get("footprint", {}).get(group)
                cells.append(f"{got['functions']}, {got['bytes'] / 1024:.0f}" if got else "-")
        print(table.row(*cells))
    cells = ["native code in all"]
    for name in names:
        for endpoint in ENDPOINTS:
            found = results[name][0][endpoint].get("footprint", {}).values()
            functions = sum(g["functions"] for g in found)
            cells.append(f"{functions}, {sum(g['bytes'] for g in found) / 1024:.0f}")
    print(table.row(*cells))
    rows = (
        ("python_functions", "per review: interpreted functions"),
        ("python_modules", "per review: their modules"),
        ("c_callables", "per review: C callables called from Python"),
        ("union_python_functions", "mix: interpreted functions"),
        ("union_python_modules", "mix: their modules"),
        ("webhook_python_functions", "mix: of them the webhook's"),
        ("union_c_callables", "mix: C callables called from Python"),
    )
    for key, title in rows:
        cells = [title]
        for name in names:
            for endpoint in ENDPOINTS:
                got = results[name][0]["info"].get("python_footprint", {}).get(endpoint, {})
                cells.append(f"{got[key]}" if key in got else "-")
        print(table.row(*cells))


def print_ab(ab: dict[str, Any]) -> None:
    summary = ab["summary"]
    table = Table(
        Column(f"wall clock, wrk, {ab['rounds']} rounds (medians)", 40, align="<"),
        Column("reviews/s", 11, ",.0f"),
        Column("CPU µs/review", 14, ".1f"),
        Column("user µs", 8, ".1f"),
        Column("system µs", 10, ".1f"),
        Column("minflt/review", 14, ".2f"),
        Column("vs no-op", 9, ".3f"),
    )
    print()
    print(table.header())
    for name in ("noop", "baseline", "tree"):
        if name in summary:
            row = summary[name]
            cells = (row["cpu_us"], row["user_us"], row["system_us"], row["minor_faults"])
            print(table.row(name, row["rps"], *cells, row["vs_noop"]))
    if "tree_vs_baseline" in summary:
        ratio = summary["tree_vs_baseline"]
        print(f"tree / baseline, reviews/s, median of the rounds' ratios: {ratio}")


LIVE_REST = "aiohttp, TLS and the event loop (the rest)"
LIVE_ROWS = (*TOP_STAGES[:2], "access", "placement", *TOP_STAGES[2:], "other", "total", "gc")


def _median(runs: Sequence[dict[str, Any]], *keys: str) -> float:
    """The median over runs of run[keys[0]][keys[1]]...; 0 where a run lacks it."""
    values = []
    for run in runs:
        value: Any = run
        for key in keys:
            value = value.get(key, 0) if isinstance(value, dict) else 0
        values.append(value)
    return statistics.median(values) if values else 0


def live_stages(results: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float | None]]:
    """Live: per row of LIVE_ROWS, per marked server, the median instructions per review; the
    no-op's column holds its total as "other" (aiohttp, TLS, the loop and its own handler) and
    as "total", None elsewhere (it has no stages)."""
    marked = [name for name, runs in results.items() if runs and "stages" in runs[0]]
    table: dict[str, dict[str, float | None]] = {}
    for row in LIVE_ROWS:
        cells: dict[str, float | None] = {}
        if "no-op" in results:
            noop = _median(results["no-op"], "per_review")
            cells["no-op"] = noop if row in ("other", "total") else None
        for name in marked:
            cells[name] = _median(results[name], "stages", row)
        table[row] = cells
    return table


def live_objects(results: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """Live: per ELF object group, the median instructions per review of each server and, for
    each webhook, `NAME - no-op`: what it runs there beyond the no-op server (negative: less)."""
    groups: list[str] = []
    for runs in results.values():
        for group in runs[0]["objects"] if runs else ():
            if group not in groups:
                groups.append(group)
    table: dict[str, dict[str, float]] = {}
    for group in groups:
        cells = {name: _median(runs, "objects", group) for name, runs in results.items()}
        if "no-op" in results:
            for name in results:
                if name != "no-op":
                    cells[f"{name} - no-op"] = cells[name] - cells["no-op"]
        table[group] = cells
    return table


def markers_overhead(results: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """Live, --overhead: per webhook, its total with the markers / without, - 1, in %."""
    overhead = {}
    for name, runs in results.items():
        unmarked = results.get(f"{name}{UNMARKED}")
        if runs and "stages" in runs[0] and unmarked:
            plain = _median(unmarked, "per_review")
            with_marks = _median(runs, "per_review")
            overhead[name] = round((with_marks / plain - 1) * 100, 2) if plain else 0.0
    return overhead


def _cell(value: float | None) -> str:
    return "" if value is None else f"{value:,.0f}"


def print_live(results: dict[str, list[dict[str, Any]]]) -> None:
    table = Table(
        Column("live server (TLS, 1 connection)", 34, align="<"),
        Column("instr/review", 14, ",.0f"),
        Column("vs no-op", 10, ".2f"),
        Column("runs spread %", 14, ".3f"),
    )
    print()
    print(table.header())
    noop_runs = results.get("no-op", [])
    noop = statistics.median(r["per_review"] for r in noop_runs) if noop_runs else 0
    for name, runs in results.items():
        value = statistics.median(r["per_review"] for r in runs)
        ratio = value / noop if noop else 0.0
        print(table.row(name, value, ratio, spread([r["per_review"] for r in runs])))
    if "baseline" in results and "tree" in results:
        tree = statistics.median(r["per_review"] for r in results["tree"])
        base = statistics.median(r["per_review"] for r in results["baseline"])
        print(f"tree / baseline, instructions per review: {tree / base:.4f}")
    for name, percent in markers_overhead(results).items():
        print(f"{name}: the markers add {percent:+.2f} % to the total (vs '{name}{UNMARKED}')")
    stages = live_stages(results)
    names = list(stages["total"])
    if len(names) > ("no-op" in names):
        # By stage: the in-process mode's stages, measured in the live server.
        columns = [Column("live: instructions per review by stage", 44, align="<")]
        columns += [Column(name, 14) for name in names]
        by_stage = Table(*columns)
        print()
        print(by_stage.header())
        for row in LIVE_ROWS:
            title = LIVE_REST if row == "other" else TITLES[row]
            print(by_stage.row(title, *(_cell(stages[row][name]) for name in names)))
        for name in names:
            runs = results[name]
            if name == "no-op" or len(runs) < 2:
                continue
            most = max(spread([r["stages"][row] for r in runs]) for row in LIVE_ROWS)
            print(f"{name}: {len(runs)} runs; spread of any stage at most {most} %")
        for name in names:
            if name == "no-op":
                continue
            plan = results[name][0]["info"]["plan"]
            missing = [m for done in plan.values() for m in done["missing"]]
            if missing:
                print(f"{name}: not in this tree (their cost is in the rest): {', '.join(missing)}")
    # Per ELF object: each server's instructions per review, and what a webhook adds to the
    # no-op's there (where the webhook's extra instructions are).
    # (An unmarked run's objects are its marked run's but for the markers: not repeated.)
    shown = {
        name: runs
        for name, runs in results.items()
        if not (name.endswith(UNMARKED) and name.removesuffix(UNMARKED) in results)
    }
    objects = live_objects(shown)
    if not objects:
        return
    columns = [Column("live: instructions per review by object", 44, align="<")]
    columns += [Column(name, max(12, len(name))) for name in next(iter(objects.values()))]
    by_object = Table(*columns)
    print()
    print(by_object.header())
    for group, cells in objects.items():
        print(by_object.row(group, *(_cell(value) for value in cells.values())))
    names = list(next(iter(objects.values())))
    totals = [sum(cells[name] for cells in objects.values()) for name in names]
    print(by_object.row("total", *(_cell(value) for value in totals)))


# ---------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = cli.parser(__doc__)
    commands = parser.add_subparsers(dest="command")
    child = commands.add_parser("inprocess", help=argparse.SUPPRESS)
    for option in ("--tree", "--marks", "--bodies", "--config", "--out"):
        child.add_argument(option, required=True)
    child.add_argument("--no-stages", action="store_true")
    live_server = commands.add_parser("live-server", help=argparse.SUPPRESS)
    for option in ("--tree", "--marks", "--out"):
        live_server.add_argument(option, required=True)
    live_server.add_argument("serve", nargs=argparse.REMAINDER)
    client = commands.add_parser("client", help=argparse.SUPPRESS)
    client.add_argument("--port", type=int, required=True)
    client.add_argument("--ca", required=True)
    client.add_argument("--bodies", required=True)
    parser.add_argument("--mode", choices=("both", "inprocess", "live"), default="both")
    cli.add_tree(parser)
    parser.add_argument(
        "--baseline", type=Path, help="also measure this checkout, alternately, in this sitting"
    )
    parser.add_argument(
        "--compiled",
        action="store_true",
        help="measure each tree's build/compiled (`make compiled` in that tree) instead",
    )
    parser.add_argument("--reviews", type=int, default=400, help="measured, per endpoint")
    parser.add_argument(
        "--no-stages",
        action="store_true",
        help="without the stage markers, in-process and live (the total only: what the "
        "markers add)",
    )
    parser.add_argument(
        "--overhead",
        action="store_true",
        help="live: also run each webhook without the markers and print what they add",
    )
    parser.add_argument("--warmup", type=int, default=100, help="per endpoint, not measured")
    parser.add_argument("--live-reviews", type=int, default=1000, help="live: measured reviews")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each; 2+ prints the spread")
    parser.add_argument(
        "--ab",
        type=Path,
        metavar="BASELINE",
        help="instead: wall clock, this tree vs BASELINE's server under wrk, alternating rounds",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="keep callgrind's files in DIR (callgrind_annotate reads them) instead of a "
        "scratch directory",
    )
    parser.add_argument("--rounds", type=int, default=5, help="--ab: rounds")
    parser.add_argument("--seconds", type=float, default=6.0, help="--ab: seconds per wrk run")
    cli.add_json_file(parser)
    args = parser.parse_args(argv)
    if args.command == "inprocess":
        return inprocess_child(args)
    if args.command == "client":
        return client_child(args)
    if args.command == "live-server":
        return serve_child(args)
    return run_main(args)


def _trees(args: argparse.Namespace, baseline: Path | None) -> dict[str, Path]:
    trees = {"tree": args.tree.resolve()}
    if baseline is not None:
        trees = {"baseline": baseline.resolve(), **trees}
    if args.compiled:
        for name, tree in trees.items():
            built = tree / "build" / "compiled"
            if not (built / ".built").exists():
                raise SystemExit(f"{built} is not built: run `make compiled` in {tree}")
            trees[name] = built
    return trees


def run_main(args: argparse.Namespace) -> int:
    from bench.harness.objects import server_templates
    from bench.harness.servers import certificates, workdir

    report: dict[str, Any] = {"command": cli.command(), "python": sys.version.split()[0]}
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    scratch = workdir("gpu-webhook-instr-") if args.keep is None else nullcontext(args.keep)
    with scratch as work:
        tls = certificates(work)
        config = work / "config.yaml"
        # No lookups outside loopback, ever (the bodies' images are known from their names).
        config.write_text("registryLookups:\n  publicRegistries: false\n")
        if args.ab is not None:
            trees = _trees(args, args.ab)
            report["ab"] = run_ab(args, trees, work, tls)
            print_ab(report["ab"])
            if args.json:
                cli.write_json(args.json, report)
            return 0
        if valgrind_path() is None:
            print("SKIPPED: valgrind is not installed (apt-get install valgrind; make bench-deps)")
            return 0
        trees = _trees(args, args.baseline)
        report["trees"] = {name: str(path) for name, path in trees.items()}
        marks, why = build_marks(work / "marks")
        if marks is None:
            raise SystemExit(f"the callgrind markers cannot be built: {why}")
        if args.mode in ("both", "inprocess"):
            bodies = work / "inprocess-bodies.json"
            # Whole turns of the mix (10 objects, each to /mutate and /validate).
            turn = len(server_templates("distinct"))
            total = max(turn, args.reviews * 2 // turn * turn)
            bodies.write_text(
                json.dumps(
                    {
                        "warmup": mix_bodies(args.warmup * 2, start=10_000_000),
                        "measured": mix_bodies(total),
                    }
                )
            )
            inproc: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
            for repeat in range(args.repeat):
                for name, tree in trees.items():
                    print(f"in-process under callgrind: {name} ({tree}), run {repeat + 1}")
                    tag = f"{name}-{repeat}"
                    inproc[name].append(
                        run_inprocess(tree, work, marks, bodies, config, tag, args.no_stages)
                    )
            report["inprocess"] = inproc
            print_inprocess(inproc)
            print_footprint(inproc)
        if args.mode in ("both", "live"):
            bodies = work / "live-bodies.json"
            bodies.write_text(
                json.dumps(
                    {
                        "warmup": mix_bodies(200, start=20_000_000),
                        "measured": mix_bodies(args.live_reviews, start=30_000_000),
                    }
                )
            )
            # name -> (tree, with the markers); "no-op" is the no-op server.
            servers: dict[str, tuple[Path, bool]] = {"no-op": (REPO, False)}
            servers.update({n: (t, not args.no_stages) for n, t in trees.items()})
            if args.overhead and not args.no_stages:
                servers.update({f"{n}{UNMARKED}": (t, False) for n, t in trees.items()})
            live: dict[str, list[dict[str, Any]]] = {name: [] for name in servers}
            for repeat in range(args.repeat):
                for name, (tree, marked) in servers.items():
                    print(f"live server under callgrind: {name}, run {repeat + 1}", flush=True)
                    kind = "noop" if name == "no-op" else "webhook"
                    tag = f"{name.replace(' ', '-')}-{repeat}"
                    with_marks = marks if marked else None
                    live[name].append(
                        run_live(kind, tree, work, tls, bodies, config, tag, with_marks)
                    )
            report["live"] = live
            print_live(live)
    if args.json:
        cli.write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
