"""Lookups as admission can afford them (SPEC §4 step 6): never longer than a budget, one lookup
per image however many pods ask at once (single-flight), a bounded number at a time, answers
cached by tag (TTL: tags move) and by digest, failures cached too (negative TTL).

What a pod names is user input: a query for an architecture that is no architecture name
(images.facts.KNOWN_ARCHS) is never looked up, one review starts at most MAX_LOOKUPS_PER_REVIEW
lookups, and one registry holds at most a quarter of `maxPending` (or 16; so a registry that never
answers, or a pod naming hundreds of its images, leaves the other tenants' lookups going).

So a registry that never answers costs one budget per image per negative TTL, not one per pod:
the first pod waits the budget; a lookup still running after one budget is marked slow, and
later pods do not wait for it; when it ends (answer or its own timeout) its result is cached
and serves the next pods. An answer that arrives after the budget is cached the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from webhook.core.access.sources import ACCESS_LOOKUP, is_open_name
from webhook.core.config.registry import RegistryLookups
from webhook.core.images.facts import KNOWN_ARCHS, ImageQuery, Requirement
from webhook.core.placement.vendors import Vendor, shipped_vendors, vendor_named, version_key
from webhook.registry.client import Known
from webhook.registry.reference import ImageRef
from webhook.registry.results import BUSY, FOUND, NO_CUDA, TIMEOUT, LookupResult, warning

log = logging.getLogger(__name__)

# Lookups one review may start (images x architectures): a pod's GPU containers whose CUDA
# nothing else tells, on at most images.facts.MAX_ARCHS architectures.
MAX_LOOKUPS_PER_REVIEW = 16

# (canonical reference, architecture)
Key = tuple[str, str]
Observer = Callable[[str, float], None]  # (result status, seconds) per lookup done


class Client(Protocol):
    def precheck(self, image: str) -> tuple[ImageRef | None, LookupResult | None]: ...

    async def lookup(self, image: str, arch: str, known: Known | None = None) -> LookupResult: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Entry:
    image: str  # as first asked for
    arch: str
    result: LookupResult
    stored: float  # clock() when stored
    expires: float | None  # None: kept until the cache is full


@dataclass
class Resolution:
    """What one review learnt: requirements for evaluate(images=...), warnings to show."""

    facts: dict[ImageQuery, Requirement] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # Why an image's CUDA is still unknown (the first failure of its architectures): a
    # LookupResult status, or SLOW (no answer within the budget).
    failed: dict[str, str] = field(default_factory=dict)
    # image -> the linux architectures its index lists (read on the way to its config), for
    # evaluate(image_platforms=...): the image-architecture runtime fix (SPEC §14).
    platforms: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # image -> the other vendors' variables its config sets, for evaluate(image_env=...): the
    # driver-release gate's image config (SPEC §13); only images whose config names a version.
    env: dict[str, dict[str, str]] = field(default_factory=dict)


# Resolution.failed: the lookup is running and did not answer within the budget.
SLOW = "slow"


def _runtime(query: ImageQuery) -> str:
    """What a warning about the query's lookup names: CUDA, or the vendor's runtime (ROCm), or
    the image config GPU access control reads."""
    if query.runtime == ACCESS_LOOKUP:
        return "Image config"
    vendor: Vendor | None = vendor_named(query.runtime) if query.runtime else None
    return vendor.runtime if vendor is not None else "CUDA"


class ImageResolver:
    def __init__(
        self,
        client: Client,
        settings: RegistryLookups,
        *,
        clock: Callable[[], float] = time.monotonic,
        observe: Observer | None = None,
    ) -> None:
        self.client = client
        self.settings = settings
        self.clock = clock
        self.observe = observe
        self._cache: OrderedDict[Key, Entry] = OrderedDict()
        self._inflight: dict[Key, asyncio.Task[LookupResult]] = {}
        self._slow: set[Key] = set()
        self._per_registry: Counter[str] = Counter()
        self._limit = asyncio.Semaphore(settings.max_concurrent)
        # For /metrics: queries answered from the cache, and not (a lookup started or joined,
        # or none possible: busy, slow); queries left without an answer at the budget (or not
        # waited for: their registry is slow); lookups that answered after the budget.
        self.cache_hits = 0
        self.cache_misses = 0
        self.over_budget = 0
        self.late_answers = 0

    @property
    def size(self) -> int:
        return len(self._cache)

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    def _cached(self, key: Key) -> Entry | None:
        entry = self._cache.get(key)
        if entry is None:
            return None
        if entry.expires is not None and self.clock() >= entry.expires:
            del self._cache[key]
            return None
        self._cache.move_to_end(key)
        return entry

    def _store(self, key: Key, image: str, result: LookupResult, digest_ref: bool) -> None:
        now = self.clock()
        if not result.cacheable_long:
            ttl: float | None = self.settings.negative_ttl_seconds
        else:
            ttl = self.settings.digest_ttl_seconds if digest_ref else self.settings.tag_ttl_seconds
        self._cache[key] = Entry(image, key[1], result, now, None if ttl is None else now + ttl)
        self._cache.move_to_end(key)
        while len(self._cache) > self.settings.max_cache_entries:
            self._cache.popitem(last=False)

    @property
    def _registry_limit(self) -> int:
        """Pending lookups one registry may hold: a quarter of maxPending (all of a small one)."""
        pending = self.settings.max_pending
        return max(pending // 4, min(pending, MAX_LOOKUPS_PER_REVIEW))

    async def _run(self, key: Key, query: ImageQuery, ref: ImageRef) -> LookupResult:
        try:
            async with self._limit:
                started = self.clock()
                try:
                    known = self._known(ref, key[1])
                    result = await self.client.lookup(query.image, query.arch, known)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the client never raises; a bug must not spread
                    log.exception("image lookup of %s failed", query.image)
                    result = LookupResult("invalid", detail=f"internal error: {exc}"[:120])
                elapsed = self.clock() - started
            self._store(key, query.image, result, bool(ref.digest))
            if result.digest and result.cacheable_long and not ref.digest:
                # The same image pinned by digest (what `docker pull` prints) hits too.
                alias = ref.with_digest(result.digest).canonical()
                self._store((alias, key[1]), query.image, result, True)
            if self.observe is not None:
                self.observe(result.status, elapsed)
            log.info(
                "image lookup",
                extra={
                    "fields": {
                        "image": query.image,
                        "arch": query.arch,
                        "result": result.status,
                        "cuda": str(result.requirement.version) if result.requirement else None,
                        "detail": result.detail,
                        "durationMs": round(elapsed * 1000, 1),
                    }
                },
            )
            return result
        finally:
            self._inflight.pop(key, None)
            if key in self._slow:
                self._slow.discard(key)
                self.late_answers += 1
            self._per_registry[ref.registry] -= 1
            if self._per_registry[ref.registry] <= 0:
                del self._per_registry[ref.registry]

    def _known(self, ref: ImageRef, arch: str) -> Callable[[str], LookupResult | None]:
        def known(digest: str) -> LookupResult | None:
            entry = self._cached((ref.with_digest(digest).canonical(), arch))
            return entry.result if entry is not None and entry.result.cacheable_long else None

        return known

    async def resolve(
        self, queries: Iterable[ImageQuery], budget: float | None = None
    ) -> Resolution:
        """Answers for `queries` within `budget` seconds (default: the config's)."""
        budget = self.settings.budget_seconds if budget is None else budget
        out = Resolution()
        waiting: dict[ImageQuery, tuple[Key, asyncio.Task[LookupResult]]] = {}
        started = 0
        skipped: list[str] = []
        for query in dict.fromkeys(queries):
            if query.arch not in KNOWN_ARCHS:
                continue  # no architecture name (the core leaves these out already)
            runtime = _runtime(query)
            ref, refused = self.client.precheck(query.image)
            if ref is None:
                assert refused is not None
                out.warnings.append(warning(query.image, refused.detail, runtime=runtime))
                out.failed.setdefault(query.image, refused.status)
                continue
            key = (ref.canonical(), query.arch)
            entry = self._cached(key)
            if entry is not None:
                self.cache_hits += 1
                self._apply(out, query, entry.result, cached=True)
                continue
            self.cache_misses += 1
            task = self._inflight.get(key)
            if task is None:
                if started >= MAX_LOOKUPS_PER_REVIEW:
                    skipped.append(query.image)
                    out.failed.setdefault(query.image, BUSY)
                    continue
                if len(self._inflight) >= self.settings.max_pending:
                    self._count(BUSY)
                    out.failed.setdefault(query.image, BUSY)
                    out.warnings.append(
                        warning(
                            query.image,
                            "too many registry lookups in progress; not asked",
                            runtime=runtime,
                        )
                    )
                    continue
                if self._per_registry[ref.registry] >= self._registry_limit:
                    self._count(BUSY)
                    out.failed.setdefault(query.image, BUSY)
                    out.warnings.append(
                        warning(
                            query.image,
                            "too many lookups in progress at its registry; not asked",
                            runtime=runtime,
                        )
                    )
                    continue
                started += 1
                self._per_registry[ref.registry] += 1
                task = asyncio.create_task(self._run(key, query, ref))
                self._inflight[key] = task
            elif key in self._slow:
                self.over_budget += 1
                out.failed.setdefault(query.image, SLOW)
                out.warnings.append(
                    warning(
                        query.image,
                        "its registry is slow; later pods get the answer when it comes",
                        runtime=runtime,
                    )
                )
                continue
            waiting[query] = (key, task)
        if waiting:
            tasks = {task for _, task in waiting.values()}
            await asyncio.wait(tasks, timeout=budget)
            for query, (key, task) in waiting.items():
                if task.done() and not task.cancelled():
                    self._apply(out, query, task.result(), cached=False)
                else:
                    self._slow.add(key)
                    self.over_budget += 1
                    out.failed.setdefault(query.image, SLOW)
                    out.warnings.append(
                        warning(
                            query.image,
                            f"no answer within {budget:g} s; "
                            "later pods get the answer when it comes",
                            runtime=_runtime(query),
                        )
                    )
        if skipped:
            self._count(BUSY)
            out.warnings.append(
                warning(
                    skipped[0],
                    f"too many images to look up for one object; {len(skipped)} not asked",
                )
            )
        # A pod allowed on several architectures asks once per architecture: the same failure
        # (401, unreachable, ...) is said once.
        out.warnings = list(dict.fromkeys(out.warnings))
        return out

    def _count(self, status: str) -> None:
        if self.observe is not None:
            self.observe(status, 0.0)

    def _apply(
        self, out: Resolution, query: ImageQuery, result: LookupResult, cached: bool
    ) -> None:
        if result.platforms:
            out.platforms[query.image] = result.platforms
        if query.runtime == ACCESS_LOOKUP:
            # GPU access control's own lookup (core/evaluation/unseen.py first_entry): the
            # config's kept variables, its open names among them, whatever it says of versions.
            if result.cacheable_long:
                out.env.setdefault(query.image, dict(result.env))
                return
            out.failed.setdefault(query.image, result.status)
            out.warnings.append(warning(query.image, result.detail, runtime=_runtime(query)))
            return
        vendor = vendor_named(query.runtime) if query.runtime else None
        if (
            vendor is not None
            and result.cacheable_long
            and any(is_open_name(n) for n, _ in result.env)
        ):
            # Device variables GPU access control voids or denies (core/access/sources.py): kept
            # for it whatever the config says of the version (a config without one is said below).
            out.env[query.image] = dict(result.env)
        if vendor is not None and result.cacheable_long:
            env = dict(result.env)
            if any(env.get(name) for name in vendor.env_version):
                out.env[query.image] = env
                return
            # Counted as a CUDA config without CUDA_VERSION is (gpu_webhook_cuda_unknown_total).
            out.failed.setdefault(query.image, NO_CUDA)
            detail = f"its config sets no {' or '.join(vendor.env_version) or 'version'}"
            out.warnings.append(warning(query.image, detail, runtime=vendor.runtime))
            return
        if vendor is None and result.status == FOUND and result.requirement is not None:
            out.facts[query] = result.requirement
            return
        out.failed.setdefault(query.image, result.status)
        detail = result.detail
        if cached and result.status == TIMEOUT:
            detail += f" (not asked again for {self.settings.negative_ttl_seconds:g} s)"
        out.warnings.append(warning(query.image, detail, runtime=_runtime(query)))

    def entries(self) -> list[dict[str, Any]]:
        """The cache for /images: image → CUDA, source, age; newest first."""
        now = self.clock()
        rows: list[dict[str, Any]] = []
        for (reference, arch), entry in reversed(self._cache.items()):
            if entry.expires is not None and now >= entry.expires:
                continue
            result = entry.result
            row: dict[str, Any] = {
                "image": reference,
                "arch": arch,
                "result": result.status,
                **_answered_runtime(result),
                "cuda": str(result.requirement.version) if result.requirement else None,
                "source": result.detail,
                "digest": result.digest or None,
                "ageSeconds": round(now - entry.stored, 1),
                "expiresInSeconds": None
                if entry.expires is None
                else round(entry.expires - now, 1),
            }
            rows.append(row)
        return rows

    def to_json(self) -> Mapping[str, Any]:
        return {
            "enabled": True,
            "budgetSeconds": self.settings.budget_seconds,
            "cached": len(self._cache),
            "inFlight": len(self._inflight),
            "images": self.entries(),
        }

    async def close(self) -> None:
        for task in list(self._inflight.values()):
            task.cancel()
        for task in list(self._inflight.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.client.close()


def _answered_runtime(result: LookupResult) -> dict[str, str | None]:
    """The runtime an answer names, the same fields for every vendor (/images): CUDA from the
    config's CUDA variables, ROCm from ROCM_VERSION (SPEC §13), as the gate shows versions."""
    if result.requirement is not None:
        return {"runtime": "CUDA", "version": str(result.requirement.version)}
    env = dict(result.env)
    for vendor in shipped_vendors():
        value = next((env[name] for name in vendor.env_version if env.get(name)), None)
        if value is not None:
            return {"runtime": vendor.runtime, "version": vendor.shown(version_key(value))}
    return {"runtime": None, "version": None}
