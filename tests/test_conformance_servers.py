"""The conformance suite on real servers started by the test harness (tests/servers.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from memkit import open_backend
from memkit.backend import Backend
from memkit.testing import BackendConformance, KeyValueConformance
from tests.conftest import fresh_postgres_url, fresh_redis_url


class TestPostgresBackend(BackendConformance):
    @pytest.fixture
    async def backend(self, postgres_url: str) -> AsyncIterator[Backend]:
        async with open_backend(fresh_postgres_url(postgres_url)) as backend:  # index=none by default
            yield backend


class TestPostgresHalfvec(BackendConformance):
    @pytest.fixture
    async def backend(self, postgres_url: str) -> AsyncIterator[Backend]:
        async with open_backend(fresh_postgres_url(postgres_url, vector="halfvec", index="hnsw")) as backend:
            yield backend


class TestPostgresHnsw(BackendConformance):
    @pytest.fixture
    async def backend(self, postgres_url: str) -> AsyncIterator[Backend]:
        async with open_backend(fresh_postgres_url(postgres_url, index="hnsw")) as backend:
            yield backend


class TestRedisStackBackend(BackendConformance):
    @pytest.fixture
    async def backend(self, redis_url: str) -> AsyncIterator[Backend]:
        async with open_backend(fresh_redis_url(redis_url)) as backend:  # index=flat by default
            yield backend


class TestRedisHnsw(BackendConformance):
    @pytest.fixture
    async def backend(self, redis_url: str) -> AsyncIterator[Backend]:
        async with open_backend(fresh_redis_url(redis_url, index="hnsw")) as backend:
            yield backend


class TestPlainRedisKeyValue(KeyValueConformance):
    @pytest.fixture
    async def backend(self, redis_plain_url: str) -> AsyncIterator[Backend]:
        async with open_backend(fresh_redis_url(redis_plain_url)) as backend:
            yield backend

    async def test_records_need_the_search_module(self, backend: Backend) -> None:
        from memkit import CapabilityError
        from memkit.testing import make_record

        assert not backend.capabilities.vector_search and not backend.capabilities.text_search
        with pytest.raises(CapabilityError, match="Redis 8 or Redis Stack"):
            await backend.upsert("c", [make_record("r", seed=1)])
