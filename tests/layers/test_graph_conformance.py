"""The knowledge graph's behaviours on every backend that stores records (memkit.testing GraphConformance)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from memkit import open_backend
from memkit.backend import Backend
from memkit.testing import GraphConformance


class TestGraphOnEveryBackend(GraphConformance):
    @pytest.fixture
    async def backend(self, store_url: str) -> AsyncIterator[Backend]:
        async with open_backend(store_url) as backend:
            yield backend
