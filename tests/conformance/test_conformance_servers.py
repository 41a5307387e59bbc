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


class TestPostgresCandidateLists(BackendConformance):
    """Every query through candidate lists and their exactness bound, as scopes past 5,000 rows are
    served, not by scoring the whole scope."""

    @pytest.fixture
    async def backend(self, postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Backend]:
        from memkit_backends.postgres import _backend

        monkeypatch.setattr(_backend, "_EXACT_SCOPE", 0)
        async with open_backend(fresh_postgres_url(postgres_url)) as backend:
            yield backend


class TestPostgresHalfvec(BackendConformance):
    approximate_search = True  # an ANN graph over half-precision vectors

    @pytest.fixture
    async def backend(self, postgres_url: str) -> AsyncIterator[Backend]:
        async with open_backend(fresh_postgres_url(postgres_url, vector="halfvec", index="hnsw")) as backend:
            yield backend


class TestPostgresHnsw(BackendConformance):
    approximate_search = True  # an ANN graph

    @pytest.fixture
    async def backend(self, postgres_url: str) -> AsyncIterator[Backend]:
        async with open_backend(fresh_postgres_url(postgres_url, index="hnsw")) as backend:
            yield backend


class TestRedisStackBackend(BackendConformance):
    # RediSearch's text scores are not reproducible row by row, so neither is the hybrid top k: 2.10
    # (redis-stack 7.4) drops a matching term from the score of a few documents when a text union is
    # intersected with a filter (5 of 300 in the large-scope test), and scores them fully alone (INKEYS).
    approximate_search = True

    @pytest.fixture
    async def backend(self, redis_url: str) -> AsyncIterator[Backend]:
        async with open_backend(fresh_redis_url(redis_url)) as backend:  # index=flat by default
            yield backend


class TestRedisHnsw(BackendConformance):
    approximate_search = True  # an ANN graph, and the text-score quirk above

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
