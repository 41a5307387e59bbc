"""pinecone:// against the loopback double: faults retried within bounds, request limits, capabilities.

The official SDK talks to the double unchanged; faults are the double's (``fail_next``, ``drop_next``).
The SDK's retry budget is per host and process-wide, so it is refilled before each test here.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

pytest.importorskip("pinecone", reason="the pinecone extra is not installed: pip install 'memkit-sdk[pinecone]'")

from pinecone._internal import http_client

from memkit import Memkit, open_backend
from memkit.backend import Backend, Query, Record, Scope
from memkit.embedders import HashingEmbedder
from memkit.errors import (
    BackendRefusedError,
    BackendUnavailableError,
    CapabilityError,
    ConfigurationError,
    ContentError,
    DimensionMismatchError,
    NotOpenError,
)
from memkit.testing import make_record
from memkit.testing.pinecone_double import PineconeDouble

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def double() -> Iterator[PineconeDouble]:
    with PineconeDouble(dimension=8) as served:
        yield served


@pytest.fixture
async def backend(double: PineconeDouble) -> AsyncIterator[Backend]:
    http_client.get_budget_registry()._reset()  # faults earlier in the run must not have spent it
    async with open_backend(double.storage_url(namespace=f"t{uuid.uuid4().hex[:12]}")) as opened:
        yield opened


async def test_a_429_storm_within_the_bounds_is_retried_honouring_retry_after(
    backend: Backend, double: PineconeDouble
) -> None:
    await backend.upsert("c", [make_record("r", seed=1)])
    double.fail_next(2, status=429, retry_after=0.3)
    before, started = double.requests, time.perf_counter()
    [got] = await backend.get("c", ["r"])
    assert got.id == "r" and double.requests - before == 3
    assert time.perf_counter() - started >= 0.6  # each retry waited at least what Retry-After said


async def test_a_429_storm_past_the_bounds_is_backend_unavailable(backend: Backend, double: PineconeDouble) -> None:
    double.fail_next(50, status=429, retry_after=0.01)
    before = double.requests
    with pytest.raises(BackendUnavailableError, match=r"RateLimitError.*429"):
        await backend.query("c", Query(scope=Scope(user_id="alice"), vector=make_record("q", seed=2).vector, k=3))
    assert double.requests - before == 4  # the first attempt and 3 retries, no more
    double.clear_faults()


async def test_5xx_then_success(backend: Backend, double: PineconeDouble) -> None:
    double.fail_next(3, status=503)
    await backend.upsert("c", [make_record("r", seed=1)])
    assert [r.id for r in await backend.get("c", ["r"])] == ["r"]


async def test_a_dropped_connection_is_retried_then_unavailable(backend: Backend, double: PineconeDouble) -> None:
    await backend.upsert("c", [make_record("r", seed=1)])
    double.drop_next(1)
    assert [r.id for r in await backend.get("c", ["r"])] == ["r"]
    double.drop_next(10)
    before = double.requests
    with pytest.raises(BackendUnavailableError):
        await backend.get("c", ["r"])
    assert double.requests - before == 4
    double.clear_faults()


async def test_a_wrong_api_key_is_refused_at_once(double: PineconeDouble) -> None:
    before = double.requests
    url = double.storage_url().replace(double.api_key, "wrong-key")
    with pytest.raises(BackendRefusedError, match="401"):
        async with open_backend(url):
            pass
    assert double.requests - before == 1


async def test_nothing_listening_is_backend_unavailable() -> None:
    with PineconeDouble() as gone:
        url = gone.storage_url()
    with pytest.raises(BackendUnavailableError):
        async with open_backend(url):
            pass


async def test_large_upserts_are_split_within_the_request_limits(backend: Backend, double: PineconeDouble) -> None:
    """The double refuses more than 1,000 vectors or 2 MB a request, as Pinecone does."""
    records = [Record(**{**_fields(make_record(f"m{i:05d}", seed=i)), "body": b"x" * 3_000}) for i in range(2_400)]
    await backend.upsert("c", records)
    assert await backend.count("c", Scope(user_id="alice")) == 2_400
    got = await backend.get("c", [r.id for r in records[::7]])
    assert [r.id for r in got] == [r.id for r in records[::7]]


async def test_a_record_past_the_metadata_limit_is_refused_before_anything_is_written(backend: Backend) -> None:
    fits = make_record("fits", seed=1)
    too_big = Record(**{**_fields(make_record("big", seed=2)), "body": b"y" * 41_000})
    with pytest.raises(ContentError, match="40 KB"):
        await backend.upsert("c", [fits, too_big])
    assert await backend.get("c", ["fits", "big"]) == []


async def test_dimensions_are_the_indexs(backend: Backend) -> None:
    with pytest.raises(DimensionMismatchError, match="holds 8"):
        await backend.ensure_collection("c", 384)
    await backend.ensure_collection("c", 8)


async def test_records_without_vectors_score_zero_similarity(backend: Backend) -> None:
    await backend.upsert("c", [make_record("novec", text="no vector"), make_record("v", seed=3)])
    [got] = await backend.get("c", ["novec"])
    assert got.vector is None and got.text == "no vector"
    hits = await backend.query("c", Query(scope=Scope(user_id="alice"), vector=make_record("q", seed=3).vector, k=5,
                                          now=time.time()))  # fmt: skip
    by_id = {h.record.id: h.scores.similarity for h in hits}
    assert by_id["novec"] == 0.0 and by_id["v"] == pytest.approx(1.0, abs=1e-5)


async def test_other_data_in_the_index_is_never_touched(backend: Backend, double: PineconeDouble) -> None:
    """Vectors memkit did not write (another app's, in another namespace or without memkit's keys) stay."""
    with double._lock:
        double.namespaces.setdefault("other-app", {})["x"] = (make_record("x", seed=1).vector, {"genre": "jazz"})
    await backend.upsert("c", [make_record("r", seed=1)])
    assert await backend.delete_expired("c", time.time() + 10**9) == 0
    assert "x" in double.namespaces["other-app"]


async def test_the_key_value_face_is_refused_with_what_to_do(backend: Backend) -> None:
    assert not backend.capabilities.kv and not backend.capabilities.atomic_replace
    with pytest.raises(CapabilityError, match=r"key-value-capable URL.*layer_urls"):
        await backend.kv_get("ns", "k")


async def test_the_client_refuses_layers_that_need_a_key_value_face(double: PineconeDouble) -> None:
    async with Memkit(double.storage_url(), embedder=HashingEmbedder(8)) as mem:
        with pytest.raises(ConfigurationError, match=r"key-value face.*give the layer a URL that does.*layer_urls"):
            await mem.long_term.store("needs a key-value face", user_id="u")
        with pytest.raises(ConfigurationError, match="short_term layer needs kv"):
            mem.short_term.session("s", user_id="u")


def _fields(record: Record) -> dict[str, object]:
    return {name: getattr(record, name) for name in record.__struct_fields__}


async def test_a_query_without_a_vector_scores_the_whole_scope(backend: Backend) -> None:
    """Pinecone searches only by vector: without one the scope is read by metadata filter and ranked here."""
    from memkit.backend import Weights

    await backend.upsert("c", [make_record(f"i{n}", seed=n, importance=n / 10) for n in range(10)])
    await backend.upsert("c", [make_record("bob", "bob", seed=1, importance=1.0)])
    only = Weights(similarity=0.0, lexical=0.0, recency=0.0, importance=1.0)
    hits = await backend.query("c", Query(scope=Scope(user_id="alice"), text="words", weights=only, k=3,
                                          now=time.time()))  # fmt: skip
    assert [h.record.id for h in hits] == ["i9", "i8", "i7"] and all(h.scores.lexical == 0.0 for h in hits)


async def test_a_closed_backend_says_not_open(double: PineconeDouble) -> None:
    async with open_backend(double.storage_url(namespace=f"t{uuid.uuid4().hex[:12]}")) as closed:
        await closed.upsert("c", [make_record("r", seed=1)])
    for call in (closed.get("c", ["r"]), closed.upsert("c", [make_record("s", seed=2)])):
        with pytest.raises(NotOpenError, match="not open"):
            await call
