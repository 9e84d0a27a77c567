"""Fixtures of the source tests: a fake API server per test and an empty snapshot store."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakekube import FakeKube
from webhook.sources.store import PolicyStore


@pytest.fixture
async def kube() -> AsyncIterator[FakeKube]:
    async with FakeKube() as server:
        yield server


@pytest.fixture
def store() -> PolicyStore:
    return PolicyStore()
