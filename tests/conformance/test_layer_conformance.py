"""The long-term layer's behaviours on every backend that stores records (memkit.testing.LongTermConformance)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from memkit import open_backend
from memkit.backend import Backend
from memkit.testing import KeyValueLayersConformance, LongTermConformance


class TestLongTermOnEveryBackend(LongTermConformance):
    @pytest.fixture
    async def backend(self, store_url: str) -> AsyncIterator[Backend]:
        async with open_backend(store_url) as backend:
            yield backend


class TestKeyValueLayersOnEveryBackend(KeyValueLayersConformance):
    @pytest.fixture
    async def backend(self, kv_url: str) -> AsyncIterator[Backend]:
        async with open_backend(kv_url) as backend:
            yield backend
