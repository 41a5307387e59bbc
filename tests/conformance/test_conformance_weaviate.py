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

from memkit import Memkit, Turn, open_backend
from memkit._split import SplitBackend
from memkit.backend import Backend, FilterValue
from memkit.errors import ConfigurationError
from memkit.layers._embedding import META_NAMESPACE
from memkit.layers._turns import THREAD_NAMESPACE
from memkit.testing import BackendConformance, EpisodicConformance, LongTermConformance
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


class TestLayersOnWeaviateWithKeysElsewhere(LongTermConformance, EpisodicConformance):
    """The record layers on Weaviate, their keys in memory:// (what ``Memkit`` builds for a layer given a
    records-only URL)."""

    @pytest.fixture
    async def backend(self, double: WeaviateDouble) -> AsyncIterator[Backend]:
        async with open_backend(fresh(double.storage_url())) as records, open_backend("memory://") as keys:
            yield SplitBackend(records=records, keys=keys)


@pytest.mark.anyio
async def test_a_layer_on_weaviate_keeps_its_keys_under_the_main_url(double: WeaviateDouble) -> None:
    """Used as users will: long-term memory on Weaviate by layer_urls, recall and forget through the client,
    and the keys (embedder record, thread state) in the main store."""
    url = fresh(double.storage_url())
    async with Memkit("memory://", embedder="hashing", layer_urls={"long_term": url}) as mem:
        lt = mem.long_term
        assert isinstance(lt.backend, SplitBackend) and lt.backend.capabilities.kv
        stored = await lt.store("Ada is allergic to peanuts.", user_id="ada", kind="fact")
        await lt.add_turns([Turn(speaker="Ada", text="I moved to Porto last spring.")], user_id="ada", thread="t1")
        await lt.store("Bob likes peanuts.", user_id="bob")
        hits = await lt.recall("peanuts allergy", user_id="ada")
        assert hits and hits[0].memory.content == "Ada is allergic to peanuts."
        assert all(hit.memory.scope.user_id == "ada" for hit in hits)
        meta = await mem.backend.kv_scan(META_NAMESPACE)  # the collection's embedder, recorded in memory://
        assert lt.config.collection in [key for key, _ in meta.items]
        assert (await mem.backend.kv_scan(THREAD_NAMESPACE)).items  # the thread's state too
        assert stored.memory is not None and await lt.forget(stored.memory.id, user_id="ada")
        assert [h.memory.content for h in await lt.recall("peanuts", user_id="ada")] != [stored.memory.content]


@pytest.mark.anyio
async def test_a_records_only_main_url_still_refuses_a_layer_that_needs_keys(double: WeaviateDouble) -> None:
    async with Memkit(fresh(double.storage_url()), embedder="hashing") as mem:
        with pytest.raises(ConfigurationError, match="long_term layer needs"):
            await mem.long_term.store("x", user_id="ada")


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
