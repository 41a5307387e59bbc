"""The backend conformance suite and the isolation property test on weaviate://.

Against the loopback test double of Weaviate (``memkit.testing.weaviate_double``) always, with the official
client talking to it unchanged over REST and gRPC; against a real Weaviate too when MEMKIT_TEST_WEAVIATE_URL
is set (e.g. ``weaviate://localhost:8080?grpc_port=50051``), each test under a collection prefix of its own.
None of this ran against a real Weaviate here.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("weaviate", reason="the weaviate extra is not installed: pip install 'memkit-sdk[weaviate]'")

from memkit import open_backend
from memkit.backend import Backend, FilterValue
from memkit.testing import BackendConformance
from memkit.testing.weaviate_double import WeaviateDouble
from tests.conformance.test_isolation import check_isolation, memories, queries

LIVE_URL = os.environ.get("MEMKIT_TEST_WEAVIATE_URL")
live = pytest.mark.skipif(not LIVE_URL, reason="no live Weaviate: set MEMKIT_TEST_WEAVIATE_URL=weaviate://host:8080")


@pytest.fixture(scope="module")
def double() -> Iterator[WeaviateDouble]:
    with WeaviateDouble() as served:
        yield served


def fresh(url: str) -> str:
    """``url`` with a collection prefix no other test uses: an empty backend."""
    return f"{url}{'&' if '?' in url else '?'}prefix=T{uuid.uuid4().hex[:12]}"


class TestWeaviateDouble(BackendConformance):
    @pytest.fixture
    async def backend(self, double: WeaviateDouble) -> AsyncIterator[Backend]:
        async with open_backend(fresh(double.storage_url())) as backend:
            yield backend


@live
class TestWeaviateLive(BackendConformance):
    @pytest.fixture
    async def backend(self) -> AsyncIterator[Backend]:
        assert LIVE_URL is not None
        async with open_backend(fresh(LIVE_URL)) as backend:
            yield backend


def _isolation(url: str, memories: list[tuple[str, str, int]],
               queries: list[tuple[str, str, dict[str, FilterValue]]]) -> None:  # fmt: skip
    import anyio

    async def run() -> None:
        async with open_backend(fresh(url)) as backend:
            await check_isolation(backend, f"iso{time.time_ns()}", memories, queries)

    anyio.run(run)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(memories=memories, queries=queries, data=st.data())
def test_no_cross_user_results_on_the_double(
    double: WeaviateDouble,
    memories: list[tuple[str, str, int]],
    queries: list[tuple[str, str, dict[str, FilterValue]]],
    data: st.DataObject,
) -> None:
    """Hostile ids, queries and filters never return another user's record (test_isolation's property)."""
    _isolation(double.storage_url(), memories, queries)


@live
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(memories=memories, queries=queries, data=st.data())
def test_no_cross_user_results_live(
    memories: list[tuple[str, str, int]], queries: list[tuple[str, str, dict[str, FilterValue]]], data: st.DataObject
) -> None:
    assert LIVE_URL is not None
    _isolation(LIVE_URL, memories, queries)
