"""The backend conformance suite and the isolation property test on pinecone://.

Against the loopback test double of Pinecone's data plane (``memkit.testing.pinecone_double``) always, with
the official SDK talking to it unchanged; against the real service too when MEMKIT_TEST_PINECONE_API_KEY
is set (with MEMKIT_TEST_PINECONE_INDEX, default ``memkit-test``: a dense index of dimension 8, cosine),
each test in a namespace of its own. The real service is approximate (an ANN index) and eventually
consistent, so its class holds the top k to 95% overlap; none of this ran against it here.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memkit import open_backend
from memkit.backend import Backend, FilterValue
from memkit.testing import BackendConformance
from memkit.testing.pinecone_double import PineconeDouble
from tests.conformance.test_isolation import check_isolation, memories, queries

pytest.importorskip("pinecone", reason="the pinecone extra is not installed: pip install 'memkit-sdk[pinecone]'")

LIVE_KEY = os.environ.get("MEMKIT_TEST_PINECONE_API_KEY")
LIVE_INDEX = os.environ.get("MEMKIT_TEST_PINECONE_INDEX", "memkit-test")
live = pytest.mark.skipif(not LIVE_KEY, reason="no live Pinecone: set MEMKIT_TEST_PINECONE_API_KEY (and _INDEX)")


@pytest.fixture(scope="module")
def double() -> Iterator[PineconeDouble]:
    with PineconeDouble(dimension=8) as served:
        yield served


def fresh(double: PineconeDouble) -> str:
    """The double's URL with a namespace prefix no other test uses: an empty backend."""
    return double.storage_url(namespace=f"t{uuid.uuid4().hex[:12]}")


class TestPineconeDouble(BackendConformance):
    @pytest.fixture
    async def backend(self, double: PineconeDouble) -> AsyncIterator[Backend]:
        async with open_backend(fresh(double)) as backend:
            yield backend


@live
class TestPineconeLive(BackendConformance):
    approximate_search = True

    @pytest.fixture
    async def backend(self) -> AsyncIterator[Backend]:
        url = f"pinecone://{LIVE_INDEX}?api_key={LIVE_KEY}&namespace=t{uuid.uuid4().hex[:12]}"
        async with open_backend(url) as backend:
            yield backend


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(memories=memories, queries=queries, data=st.data())
def test_no_cross_user_results_on_the_double(
    double: PineconeDouble,
    memories: list[tuple[str, str, int]],
    queries: list[tuple[str, str, dict[str, FilterValue]]],
    data: st.DataObject,
) -> None:
    """Hostile ids, queries and filters never return another user's record (test_isolation's property)."""
    import anyio

    async def run() -> None:
        async with open_backend(fresh(double)) as backend:
            await check_isolation(backend, f"iso{time.time_ns()}", memories, queries)

    anyio.run(run)
