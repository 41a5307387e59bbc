"""The conformance suite on real servers started by the test harness (tests/servers.py)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from memkit import open_backend
from memkit.backend import Backend
from memkit.testing import BackendConformance, KeyValueConformance
from tests.conftest import with_option


class TestPostgresBackend(BackendConformance):
    @pytest.fixture
    async def backend(self, postgres_url: str) -> AsyncIterator[Backend]:
        schema = f"t_{uuid.uuid4().hex[:12]}"  # a fresh schema per test keeps tests independent
        async with open_backend(with_option(postgres_url, "schema", schema)) as backend:
            yield backend


class TestPostgresHalfvec(BackendConformance):
    @pytest.fixture
    async def backend(self, postgres_url: str) -> AsyncIterator[Backend]:
        url = with_option(with_option(postgres_url, "schema", f"t_{uuid.uuid4().hex[:12]}"), "vector", "halfvec")
        async with open_backend(url) as backend:
            yield backend


class TestRedisStackBackend(BackendConformance):
    @pytest.fixture
    async def backend(self, redis_url: str) -> AsyncIterator[Backend]:
        async with open_backend(redis_url) as backend:
            await backend._client.flushdb()  # type: ignore[attr-defined]
            yield backend


class TestPlainRedisKeyValue(KeyValueConformance):
    @pytest.fixture
    async def backend(self, redis_plain_url: str) -> AsyncIterator[Backend]:
        async with open_backend(redis_plain_url) as backend:
            await backend._client.flushdb()  # type: ignore[attr-defined]
            yield backend

    async def test_records_need_the_search_module(self, backend: Backend) -> None:
        from memkit import CapabilityError
        from memkit.testing import make_record

        assert not backend.capabilities.vector_search and not backend.capabilities.text_search
        with pytest.raises(CapabilityError, match="Redis 8 or Redis Stack"):
            await backend.upsert("c", [make_record("r", seed=1)])


class TestRedisFlatIndex(BackendConformance):
    @pytest.fixture
    async def backend(self, redis_url: str) -> AsyncIterator[Backend]:
        async with open_backend(with_option(redis_url, "index", "flat")) as backend:
            await backend._client.flushdb()  # type: ignore[attr-defined]
            yield backend


class TestPostgresWithoutIndex(BackendConformance):
    @pytest.fixture
    async def backend(self, postgres_url: str) -> AsyncIterator[Backend]:
        url = with_option(with_option(postgres_url, "schema", f"t_{uuid.uuid4().hex[:12]}"), "index", "none")
        async with open_backend(url) as backend:
            yield backend
