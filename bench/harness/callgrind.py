"""valgrind's callgrind for the instruction-count benchmark (bench/bench_instructions.py): where
valgrind is, the marker extension (callgrind_marks.c beside this file) built on first use, and
a reader of callgrind's output files (self cost by ELF object and by function, inclusive cost
of a function).

The reader follows the format valgrind documents (docs/callgrind-format, "Callgrind Format
Specification", valgrind 3.19): `ob=`/`cob=` name the ELF object, `fn=`/`cfn=` the function,
each with name compression `(id) name` on first use and `(id)` after; a `calls=` line is
followed by one cost line, the inclusive cost of that call, which is not the caller's self cost;
every other cost line is the current function's self cost (positions, then one number per
event; a missing number is 0).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sysconfig
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

SOURCE = Path(__file__).resolve().with_name("callgrind_marks.c")
MODULE = "gwb_marks"


def valgrind_path() -> str | None:
    """valgrind's launcher, or None (Debian: `apt-get install valgrind`, `make bench-deps`)."""
    return shutil.which("valgrind")


def build_marks(cache_dir: Path) -> tuple[Path | None, str]:
    """The marker extension's directory (importable as `gwb_marks`), built into `cache_dir` if
    needed: (directory, "") or (None, why not)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None, "no C compiler (cc) on PATH: apt-get install gcc (make bench-deps)"
    include = sysconfig.get_paths()["include"]
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    source = SOURCE.read_bytes()
    directory = cache_dir / f"marks-{hashlib.sha256(source + include.encode()).hexdigest()[:16]}"
    target = directory / f"{MODULE}{suffix}"
    if target.exists():
        return directory, ""
    directory.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=".marks-", dir=directory)
    os.close(fd)
    argv = [compiler, "-O2", "-Wall", "-shared", "-fPIC", f"-I{include}", "-o", partial]
    done = subprocess.run([*argv, str(SOURCE)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        os.unlink(partial)
        detail = " ".join(done.stderr.strip().splitlines()[:3])
        hint = ""
        if "valgrind/" in detail:
            hint = " (valgrind's headers missing: apt-get install valgrind)"
        return None, f"cannot build {SOURCE.name}{hint}: {detail}"
    os.replace(partial, target)
    return directory, ""


@dataclass
class Profile:
    """One callgrind output file: the first event's (Ir: instructions) totals."""

    total: int = 0
    by_object: dict[str, int] = field(default_factory=dict)  # self cost per ELF object
    self_cost: dict[str, int] = field(default_factory=dict)  # per function name
    # Per function name: the cost of its calls to other functions (a call to itself, which
    # callgrind's output holds only for recursion beyond --separate-recs, is already counted).
    callees: dict[str, int] = field(default_factory=dict)
    # (caller, callee) -> the inclusive cost of those calls.
    edges: dict[tuple[str, str], int] = field(default_factory=dict)
    # Per ELF object: the functions that ran an instruction of their own (the code footprint:
    # issue 49 item 3, "distinct functions and modules a review touches").
    touched: dict[str, set[str]] = field(default_factory=dict)

    def inclusive(self, function: str) -> int:
        """Everything `function` ran, itself and its callees (0 if it never ran)."""
        return self.self_cost.get(function, 0) + self.callees.get(function, 0)

    def functions(self) -> Iterable[str]:
        return self.self_cost.keys() | self.callees.keys()


def _name(table: dict[str, str], value: str) -> str:
    """A compressed name: `(id) name` defines it, `(id)` uses it, anything else is plain."""
    value = value.strip()
    if value.startswith("("):
        end = value.find(")")
        if end > 0:
            key, rest = value[1:end], value[end + 1 :].strip()
            if rest:
                table[key] = rest
                return rest
            return table.get(key, f"({key})")
    return value


def parse(lines: Iterable[str]) -> Profile:
    """The profile in callgrind's output format (the first event column only)."""
    profile = Profile()
    objects: dict[str, str] = {}
    functions: dict[str, str] = {}
    positions = 1
    ob = fn = "???"
    in_call = False  # the next cost line is a call's inclusive cost
    call_target = ""
    summary = None
    for raw in lines:
        line = raw.rstrip("\n")
        if not line or line.startswith("#"):
            continue
        first = line[0]
        if first.isdigit() or first in "+-*":
            parts = line.split()
            cost = int(parts[positions]) if len(parts) > positions else 0
            if in_call:
                in_call = False
                if call_target != fn:
                    profile.callees[fn] = profile.callees.get(fn, 0) + cost
                    edge = (fn, call_target)
                    profile.edges[edge] = profile.edges.get(edge, 0) + cost
                continue
            profile.self_cost[fn] = profile.self_cost.get(fn, 0) + cost
            if cost:
                profile.touched.setdefault(ob, set()).add(fn)
            profile.by_object[ob] = profile.by_object.get(ob, 0) + cost
            profile.total += cost
            continue
        key, _, value = line.partition("=")
        if key == "ob":
            ob = _name(objects, value)
        elif key == "cob":
            _name(objects, value)
        elif key == "fn":
            fn = _name(functions, value)
        elif key == "cfn":
            call_target = _name(functions, value)
        elif key == "calls":
            in_call = True
        elif line.startswith("positions:"):
            positions = len(line.split(":", 1)[1].split())
        elif line.startswith(("summary:", "totals:")):
            summary = int(line.split(":", 1)[1].split()[0] or 0)
    if summary is not None and summary != profile.total:
        raise ValueError(f"the cost lines add up to {profile.total}, the file says {summary}")
    return profile


def read(path: Path) -> Profile:
    with path.open() as lines:
        return parse(lines)


# ELF objects by what they are, for "the share still in interpreted Python, orjson, aiohttp,
# TLS" (issue 40 item 5): the first (substring of the object's file name, group) that matches.
OBJECT_GROUPS = (
    ("libpython", "CPython (interpreter, objects, runtime)"),
    ("/bin/python", "CPython (interpreter, objects, runtime)"),
    ("__mypyc", "compiled webhook (mypyc)"),
    ("/webhook/", "compiled webhook (mypyc)"),
    ("orjson", "orjson"),
    ("_http_parser", "aiohttp C (HTTP parser, writer)"),
    ("_http_writer", "aiohttp C (HTTP parser, writer)"),
    ("aiohttp", "aiohttp C (HTTP parser, writer)"),
    ("multidict", "multidict, yarl, propcache, frozenlist"),
    ("yarl", "multidict, yarl, propcache, frozenlist"),
    ("propcache", "multidict, yarl, propcache, frozenlist"),
    ("frozenlist", "multidict, yarl, propcache, frozenlist"),
    ("uvloop", "uvloop + libuv (event loop)"),
    ("_asyncio", "asyncio C (_asyncio)"),
    ("_ssl", "TLS (_ssl, libssl, libcrypto)"),
    ("libssl", "TLS (_ssl, libssl, libcrypto)"),
    ("libcrypto", "TLS (_ssl, libssl, libcrypto)"),
    ("_json", "json (stdlib C)"),
    ("gwb_marks", "benchmark markers"),
    ("libc.so", "libc"),
    ("libc-", "libc"),
    ("libm.so", "libc"),
    ("ld-linux", "libc"),
    ("vgpreload", "valgrind's preload (malloc replacement)"),
    ("lib-dynload", "CPython's other C modules (binascii, ...)"),
)


def object_group(name: str) -> str:
    """The group of an ELF object (its file name as callgrind writes it)."""
    for needle, group in OBJECT_GROUPS:
        if needle in name:
            return group
    return "other objects"


def grouped(by_object: dict[str, int]) -> dict[str, int]:
    """Self cost by OBJECT_GROUPS group, largest first."""
    groups: dict[str, int] = {}
    for name, cost in by_object.items():
        group = object_group(name)
        groups[group] = groups.get(group, 0) + cost
    return dict(sorted(groups.items(), key=lambda item: -item[1]))


@functools.lru_cache(maxsize=64)
def symbol_sizes(path: str) -> dict[str, int]:
    """Function name -> its code size in bytes, from the ELF object's symbol table (`nm -S`:
    the full table, else the dynamic one of a stripped object); {} when neither can be read."""
    nm = shutil.which("nm")
    if nm is None or not os.path.isfile(path):
        return {}
    sizes: dict[str, int] = {}
    for table in ((), ("-D",)):
        done = subprocess.run(
            [nm, "-S", "--defined-only", *table, path],
            capture_output=True,
            text=True,
            check=False,
        )
        for line in done.stdout.splitlines():
            parts = line.split()
            # address size type name: only code (t/T, w/W for weak functions).
            if len(parts) == 4 and parts[2] in ("t", "T", "w", "W"):
                sizes[parts[3]] = max(sizes.get(parts[3], 0), int(parts[1], 16))
        if sizes:
            break
    return sizes


def footprint(profile: Profile) -> dict[str, dict[str, int]]:
    """Per OBJECT_GROUPS group: the distinct functions that ran (`functions`), how many of them
    the objects' symbol tables size (`sized`), and those functions' code bytes (`bytes`): the
    code a run touched, what the L1 and L2 instruction caches have to hold."""
    groups: dict[str, dict[str, int]] = {}
    for obj, names in profile.touched.items():
        sizes = symbol_sizes(obj)
        found = [sizes[n] for n in names if n in sizes]
        group = groups.setdefault(object_group(obj), {"functions": 0, "sized": 0, "bytes": 0})
        group["functions"] += len(names)
        group["sized"] += len(found)
        group["bytes"] += sum(found)
    return dict(sorted(groups.items(), key=lambda item: -item[1]["bytes"]))
