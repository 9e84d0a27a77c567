"""The resolver: budget, single flight, bounded concurrency, caches by tag, digest and failure.
Its registry is a scripted client (the HTTP side has its own tests); time is a fake clock
where a TTL matters, and real (short) waits only where the budget itself is under test."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from webhook.core.base.versions import CudaVersion
from webhook.core.config.registry import RegistryLookups
from webhook.core.images.facts import ImageQuery
from webhook.core.placement.cuda import Requirement
from webhook.registry.client import Known
from webhook.registry.reference import ImageRef, ReferenceError, parse_reference
from webhook.registry.resolver import MAX_LOOKUPS_PER_REVIEW, ImageResolver
from webhook.registry.results import (
    FOUND,
    INVALID,
    NO_CUDA,
    NOT_FOUND,
    REFUSED,
    TIMEOUT,
    LookupResult,
)

DIGEST = "sha256:" + "b" * 64
FOUND_12_4 = LookupResult(
    FOUND, Requirement(CudaVersion(12, 4), "image config CUDA_VERSION=12.4.1"), digest=DIGEST
)


class ScriptedClient:
    """Answers `answer(image, arch)` after `gate` opens; counts lookups and their overlap."""

    def __init__(self, answer: Callable[[str, str], LookupResult]) -> None:
        self.answer = answer
        self.gate = asyncio.Event()
        self.gate.set()
        self.calls: list[tuple[str, str]] = []
        self.running = 0
        self.most_running = 0
        self.known_seen: list[LookupResult | None] = []

    def precheck(self, image: str) -> tuple[ImageRef | None, LookupResult | None]:
        try:
            ref = parse_reference(image)
        except ReferenceError as exc:
            return None, LookupResult(INVALID, detail=str(exc))
        if ref.registry == "169.254.169.254":
            return None, LookupResult(REFUSED, detail="169.254.169.254 is not a public address")
        return ref, None

    async def lookup(self, image: str, arch: str, known: Known | None = None) -> LookupResult:
        self.calls.append((image, arch))
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await self.gate.wait()
            if known is not None:
                self.known_seen.append(known(DIGEST))
            return self.answer(image, arch)
        finally:
            self.running -= 1

    async def close(self) -> None:
        return None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def resolver(client: ScriptedClient, clock: Clock | None = None, **settings: Any) -> ImageResolver:
    return ImageResolver(
        client,
        RegistryLookups(**settings),
        clock=clock or Clock(),
    )


Q = ImageQuery("nvcr.io/nvidia/pytorch:24.05-py3")


async def test_forty_pods_of_one_image_make_one_lookup() -> None:
    client = ScriptedClient(lambda image, arch: FOUND_12_4)
    client.gate.clear()
    images = resolver(client)
    pending = [asyncio.create_task(images.resolve([Q])) for _ in range(40)]
    await asyncio.sleep(0)
    client.gate.set()
    results = await asyncio.gather(*pending)
    assert client.calls == [(Q.image, "amd64")]
    assert all(r.facts == {Q: FOUND_12_4.requirement} and not r.warnings for r in results)


async def test_answers_are_cached_for_the_tag_ttl() -> None:
    client = ScriptedClient(lambda image, arch: FOUND_12_4)
    clock = Clock()
    images = resolver(client, clock, tag_ttl_seconds=60)
    await images.resolve([Q])
    clock.now += 59
    await images.resolve([Q])
    assert len(client.calls) == 1
    clock.now += 2
    await images.resolve([Q])
    assert len(client.calls) == 2


async def test_a_digest_answer_serves_the_same_image_pinned_by_digest_for_the_digest_ttl() -> None:
    client = ScriptedClient(lambda image, arch: FOUND_12_4)
    clock = Clock()
    images = resolver(client, clock, tag_ttl_seconds=60)
    await images.resolve([Q])
    pinned = ImageQuery(f"nvcr.io/nvidia/pytorch@{DIGEST}")
    clock.now += 10_000
    found = await images.resolve([pinned])
    assert found.facts == {pinned: FOUND_12_4.requirement}
    assert len(client.calls) == 1
    # Every cache expires (SPEC §12): a digest's answer after digestTtlSeconds (24 h).
    clock.now += 86_400
    await images.resolve([pinned])
    assert len(client.calls) == 2


async def test_a_moved_tag_lookup_is_told_the_digests_it_knows() -> None:
    client = ScriptedClient(lambda image, arch: FOUND_12_4)
    clock = Clock()
    images = resolver(client, clock, tag_ttl_seconds=60)
    await images.resolve([Q])
    clock.now += 61
    await images.resolve([Q])
    # The second lookup could stop after the manifest: its digest is known.
    assert client.known_seen == [None, FOUND_12_4]


async def test_failures_are_cached_for_the_negative_ttl() -> None:
    client = ScriptedClient(
        lambda image, arch: LookupResult(NOT_FOUND, detail="manifest not found")
    )
    clock = Clock()
    images = resolver(client, clock, negative_ttl_seconds=300)
    first = await images.resolve([Q])
    clock.now += 299
    second = await images.resolve([Q])
    assert (
        first.warnings
        == second.warnings
        == ["CUDA lookup of nvcr.io/nvidia/pytorch:24.05-py3: manifest not found"]
    )
    assert len(client.calls) == 1
    clock.now += 2
    await images.resolve([Q])
    assert len(client.calls) == 2


async def test_the_architecture_is_part_of_the_key() -> None:
    client = ScriptedClient(lambda image, arch: FOUND_12_4)
    images = resolver(client)
    arm = ImageQuery(Q.image, "arm64")
    found = await images.resolve([Q, arm])
    assert sorted(client.calls) == [(Q.image, "amd64"), (Q.image, "arm64")]
    assert set(found.facts) == {Q, arm}


async def test_a_refusal_is_one_warning_at_once() -> None:
    client = ScriptedClient(lambda image, arch: FOUND_12_4)
    images = resolver(client)
    found = await asyncio.wait_for(
        images.resolve([ImageQuery("169.254.169.254/latest/meta-data:1")]), timeout=0.05
    )
    assert found.warnings == [
        "CUDA lookup of 169.254.169.254/latest/meta-data:1: 169.254.169.254 is not a public address"
    ]
    assert client.calls == [] and images.in_flight == 0


async def test_concurrent_lookups_are_bounded() -> None:
    client = ScriptedClient(lambda image, arch: FOUND_12_4)
    client.gate.clear()
    images = resolver(client, max_concurrent=2)
    queries = [ImageQuery(f"ghcr.io/team/app{i}:1") for i in range(6)]
    task = asyncio.create_task(images.resolve(queries, budget=5))
    for _ in range(5):
        await asyncio.sleep(0)
    assert client.running == 2
    client.gate.set()
    found = await task
    assert len(found.facts) == 6 and client.most_running == 2


async def test_too_many_pending_lookups_are_answered_busy() -> None:
    client = ScriptedClient(lambda image, arch: FOUND_12_4)
    client.gate.clear()
    images = resolver(client, max_pending=2)
    queries = [ImageQuery(f"ghcr.io/team/app{i}:1") for i in range(3)]
    task = asyncio.create_task(images.resolve(queries, budget=5))
    await asyncio.sleep(0)
    client.gate.set()
    found = await task
    assert len(found.facts) == 2
    assert found.warnings == [
        "CUDA lookup of ghcr.io/team/app2:1: too many registry lookups in progress; not asked"
    ]


async def test_a_slow_registry_costs_one_budget_then_later_pods_do_not_wait() -> None:
    client = ScriptedClient(
        lambda image, arch: LookupResult(TIMEOUT, detail="the registry did not answer within 10 s")
    )
    client.gate.clear()
    images = resolver(client, budget_seconds=0.2, negative_ttl_seconds=600)
    loop = asyncio.get_running_loop()
    started = loop.time()
    first = await images.resolve([Q])
    waited = loop.time() - started
    assert 0.2 <= waited < 1.0
    assert first.warnings == [
        "CUDA lookup of nvcr.io/nvidia/pytorch:24.05-py3: no answer within 0.2 s; later pods get "
        "the answer when it comes"
    ]
    started = loop.time()
    second = await images.resolve([Q])
    assert loop.time() - started < 0.05
    assert second.warnings == [
        "CUDA lookup of nvcr.io/nvidia/pytorch:24.05-py3: its registry is slow; later pods get the "
        "answer when it comes"
    ]
    client.gate.set()  # the lookup ends (its own timeout, here)
    while images.in_flight:
        await asyncio.sleep(0.005)
    third = await images.resolve([Q])
    assert third.warnings == [
        "CUDA lookup of nvcr.io/nvidia/pytorch:24.05-py3: the registry did not answer within 10 s "
        "(not asked again for 600 s)"
    ]
    assert len(client.calls) == 1


async def test_a_late_answer_serves_the_next_pod() -> None:
    client = ScriptedClient(lambda image, arch: FOUND_12_4)
    client.gate.clear()
    images = resolver(client, budget_seconds=0.05)
    first = await images.resolve([Q])
    assert first.facts == {}
    client.gate.set()
    while images.in_flight:
        await asyncio.sleep(0.005)
    second = await images.resolve([Q])
    assert second.facts == {Q: FOUND_12_4.requirement} and second.warnings == []


async def test_the_cache_is_bounded_and_listed_newest_first() -> None:
    client = ScriptedClient(lambda image, arch: LookupResult(FOUND, FOUND_12_4.requirement, "x"))
    images = resolver(client, max_cache_entries=2)
    for i in range(3):
        await images.resolve([ImageQuery(f"ghcr.io/team/app{i}:1")])
    rows = images.entries()
    assert [r["image"] for r in rows] == ["ghcr.io/team/app2:1", "ghcr.io/team/app1:1"]
    assert rows[0]["cuda"] == "12.4" and rows[0]["result"] == "found"
    assert rows[0]["ageSeconds"] == 0.0 and rows[0]["expiresInSeconds"] == 3600.0
    assert (rows[0]["runtime"], rows[0]["version"]) == ("CUDA", "12.4")


async def test_the_cache_listing_names_every_vendors_runtime_the_same_way() -> None:
    """A ROCm image's answer (its config's ROCM_VERSION) is listed with its runtime and version
    in the same fields as a CUDA image's."""
    rocm = LookupResult(
        NO_CUDA, detail="its config sets no CUDA_VERSION", env=(("ROCM_VERSION", "6.4.1"),)
    )
    plain = LookupResult(NO_CUDA, detail="its config sets no CUDA_VERSION")
    answers = {"ghcr.io/team/rocm:1": rocm, "ghcr.io/team/cpu:1": plain}
    images = resolver(ScriptedClient(lambda image, arch: answers[image]))
    await images.resolve([ImageQuery("ghcr.io/team/rocm:1", runtime="rocm")])
    await images.resolve([ImageQuery("ghcr.io/team/cpu:1")])
    rows = {r["image"]: (r["result"], r["runtime"], r["version"]) for r in images.entries()}
    assert rows == {
        "ghcr.io/team/rocm:1": ("no-cuda", "ROCm", "6.4"),
        "ghcr.io/team/cpu:1": ("no-cuda", None, None),
    }


async def test_an_invalid_reference_is_a_warning() -> None:
    images = resolver(ScriptedClient(lambda image, arch: FOUND_12_4))
    found = await images.resolve([ImageQuery("Team/App:1")])
    assert found.warnings == ["CUDA lookup of Team/App:1: 'App' is not a valid repository name"]


@pytest.mark.parametrize("budget", [0.0001])
async def test_close_cancels_lookups_in_flight(budget: float) -> None:
    client = ScriptedClient(lambda image, arch: FOUND_12_4)
    client.gate.clear()
    images = resolver(client)
    await images.resolve([Q], budget=budget)
    assert images.in_flight == 1
    await images.close()
    assert images.in_flight == 0


# Values from a pod are user input (issue 29): one pod, or one registry that never answers,
# cannot take every pending slot from the other tenants.


async def test_one_pod_cannot_take_every_pending_slot() -> None:
    client = ScriptedClient(lambda image, arch: FOUND_12_4)
    client.gate.clear()  # a registry that never answers
    images = resolver(client, max_concurrent=256)
    hostile = [ImageQuery(f"ghcr.io/evil/app{i}:1") for i in range(300)]
    first = await images.resolve(hostile, budget=0.01)
    assert len(client.calls) == MAX_LOOKUPS_PER_REVIEW
    assert first.warnings[-1] == (
        "CUDA lookup of ghcr.io/evil/app16:1: too many images to look up for one object; "
        "284 not asked"
    )
    other = await images.resolve([Q], budget=0.01)
    assert client.calls[-1] == (Q.image, "amd64")
    assert not any("too many registry lookups in progress" in w for w in other.warnings)
    await images.close()


async def test_a_registry_that_never_answers_cannot_take_every_pending_slot() -> None:
    client = ScriptedClient(lambda image, arch: FOUND_12_4)
    client.gate.clear()
    images = resolver(client, max_pending=100, max_concurrent=256)
    for pod in range(10):  # many pods, each under the per-review cap
        queries = [ImageQuery(f"ghcr.io/evil/app{pod}-{i}:1") for i in range(8)]
        await images.resolve(queries, budget=0.01)
    assert images.in_flight == 25  # a quarter of maxPending for one registry
    other = await images.resolve([Q], budget=0.01)
    assert images.in_flight == 26 and client.calls[-1] == (Q.image, "amd64")
    assert other.warnings == [
        "CUDA lookup of nvcr.io/nvidia/pytorch:24.05-py3: no answer within 0.01 s; "
        "later pods get the answer when it comes"
    ]
    busy = await images.resolve([ImageQuery("ghcr.io/evil/more:1")], budget=0.01)
    assert busy.warnings == [
        "CUDA lookup of ghcr.io/evil/more:1: too many lookups in progress at its registry; "
        "not asked"
    ]
    await images.close()


async def test_an_architecture_that_is_no_architecture_name_is_not_looked_up() -> None:
    client = ScriptedClient(lambda image, arch: FOUND_12_4)
    images = resolver(client)
    found = await images.resolve([ImageQuery(Q.image, "x" * 65536), ImageQuery(Q.image, "arm64")])
    assert client.calls == [(Q.image, "arm64")]
    assert found.warnings == []
    assert {row["arch"] for row in images.entries()} == {"arm64"}


async def test_a_vendor_config_without_its_version_variable_is_a_reason_as_for_cuda() -> None:
    """The metrics' reason for a ROCm image whose config names no ROCM_VERSION is the one a
    CUDA image whose config names no CUDA_VERSION gets (no-cuda), not "not-known"."""
    plain = LookupResult(NO_CUDA, detail="its config sets no CUDA_VERSION")
    images = resolver(ScriptedClient(lambda image, arch: plain))
    found = await images.resolve([ImageQuery("ghcr.io/team/rocm:1", runtime="rocm")])
    assert found.failed == {"ghcr.io/team/rocm:1": "no-cuda"}
    assert found.warnings == ["ROCm lookup of ghcr.io/team/rocm:1: its config sets no ROCM_VERSION"]
    found = await images.resolve([ImageQuery("ghcr.io/team/cuda:1")])
    assert found.failed == {"ghcr.io/team/cuda:1": "no-cuda"}
