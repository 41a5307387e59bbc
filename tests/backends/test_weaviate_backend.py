"""weaviate:// against the loopback double: faults retried within bounds, per-object batch errors, request
limits, capabilities, records without vectors, other data left alone, exactness of the hybrid top k.

The official client talks to the double unchanged; faults are the double's (``fail_next``, ``drop_next``,
``grpc_down``)."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator

import anyio
import numpy as np
import pytest

pytest.importorskip("weaviate", reason="the weaviate extra is not installed: pip install 'memkit-sdk[weaviate]'")

from memkit import Memkit, open_backend
from memkit.backend import Backend, Query, Record, Scope, Weights
from memkit.embedders import HashingEmbedder
from memkit.errors import (
    BackendError,
    BackendRefusedError,
    BackendUnavailableError,
    CapabilityError,
    ConfigurationError,
    DimensionMismatchError,
    NotOpenError,
)
from memkit.testing import make_record
from memkit.testing.weaviate_double import WeaviateDouble

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def double() -> Iterator[WeaviateDouble]:
    with WeaviateDouble(api_key="test-key") as served:
        yield served


def fresh(double: WeaviateDouble, **options: str) -> str:
    return double.storage_url(prefix=f"T{uuid.uuid4().hex[:12]}", **options)


@pytest.fixture
async def backend(double: WeaviateDouble) -> AsyncIterator[Backend]:
    double.clear_faults()
    double.grpc_up()
    async with open_backend(fresh(double)) as opened:
        yield opened
    double.clear_faults()


def _with(record: Record, **changes: object) -> Record:
    return Record(**{**{n: getattr(record, n) for n in record.__struct_fields__}, **changes})


async def test_a_429_storm_within_the_bounds_is_retried(backend: Backend, double: WeaviateDouble) -> None:
    await backend.upsert("c", [make_record("r", seed=1)])
    double.fail_next(2, status=429)  # gRPC RESOURCE_EXHAUSTED, which the client does not retry itself
    before = double.requests
    [got] = await backend.get("c", ["r"])
    assert got.id == "r" and double.requests - before == 3


async def test_a_429_storm_past_the_bounds_is_backend_unavailable(backend: Backend, double: WeaviateDouble) -> None:
    await backend.upsert("c", [make_record("r", seed=1)])
    double.fail_next(50, status=429)
    before, started = double.requests, time.perf_counter()
    with pytest.raises(BackendUnavailableError, match=r"RESOURCE_EXHAUSTED after 4 retries"):
        await backend.query("c", Query(scope=Scope(user_id="alice"), vector=make_record("q", seed=2).vector, k=3))
    assert double.requests - before == 5  # the first attempt and 4 retries, no more
    assert time.perf_counter() - started < 5


async def test_503_on_the_schema_is_retried(backend: Backend, double: WeaviateDouble) -> None:
    double.fail_next(2, status=503)  # REST: collections.exists twice, then the retried attempt goes through
    before = double.requests
    await backend.ensure_collection("fresh", 8)
    assert double.requests - before == 4
    await backend.upsert("fresh", [make_record("r", seed=1)])
    assert [r.id for r in await backend.get("fresh", ["r"])] == ["r"]


async def test_a_dropped_rest_connection_is_retried(backend: Backend, double: WeaviateDouble) -> None:
    double.drop_next(1)
    before = double.requests
    await backend.ensure_collection("dropped", 8)  # does it exist (dropped; again: no), create it
    assert double.requests - before == 3
    assert await backend.count("dropped", Scope(user_id="alice")) == 0


async def test_a_dropped_grpc_connection_is_retried_then_unavailable(backend: Backend, double: WeaviateDouble) -> None:
    await backend.upsert("c", [make_record("r", seed=1, expires_at=1.0)])

    async def back_soon() -> None:
        await anyio.sleep(0.2)
        double.grpc_up()

    double.grpc_down()  # connections dropped, new ones refused
    async with anyio.create_task_group() as group:
        group.start_soon(back_soon)
        assert await backend.delete_expired("c", time.time()) == 1  # BatchDelete: retried by memkit alone
    double.grpc_down()
    started = time.perf_counter()
    with pytest.raises(BackendUnavailableError, match="after 4 retries"):
        await backend.delete_expired("c", time.time())
    assert time.perf_counter() - started < 5
    double.grpc_up()


async def test_a_wrong_api_key_is_refused_at_once(double: WeaviateDouble) -> None:
    before = double.requests
    with pytest.raises(BackendRefusedError, match="401"):
        async with open_backend(fresh(double).replace("test-key", "wrong-key")):
            pass
    assert double.requests - before == 1


async def test_nothing_listening_is_backend_unavailable() -> None:
    with WeaviateDouble() as gone:
        url = gone.storage_url(retries="1")
    with pytest.raises(BackendUnavailableError):
        async with open_backend(url):
            pass


async def test_a_refused_object_is_an_error_naming_it(backend: Backend, double: WeaviateDouble) -> None:
    from memkit_backends.weaviate._layout import object_uuid

    double.refuse(object_uuid("odd"), "invalid text property 'doc': injected")
    with pytest.raises(BackendError, match=r"refused 1 of 2 objects.*record 'odd': invalid text property"):
        await backend.upsert("c", [make_record("fine", seed=2), make_record("odd", seed=3)])
    assert [r.id for r in await backend.get("c", ["fine", "odd"])] == ["fine"]  # a batch is no transaction


async def test_a_batch_refused_whole_names_its_records(backend: Backend) -> None:
    """Weaviate's own check: a vector of another length than the collection's fails its object."""
    await backend.ensure_collection("open", None)  # dimension not given: Weaviate's check is the last one
    await backend.upsert("open", [make_record("first", seed=1)])
    backend._dims = {}  # type: ignore[attr-defined]  # as a second client would: the dimension unknown
    await backend.ensure_collection("open", None)
    backend._dims = {name: None for name in backend._dims}  # type: ignore[attr-defined]
    odd = Record(id="odd", scope=Scope(user_id="alice"), body=b"x", vector=np.ones(9, np.float32))
    with pytest.raises(BackendError, match=r"refused all 1 objects of a batch \(records 'odd'\).*length 9"):
        await backend.upsert("open", [odd])
    assert await backend.get("open", ["odd"]) == []


async def test_large_upserts_are_split_within_the_request_limits(double: WeaviateDouble) -> None:
    """200 objects a batch by default; the double refuses gRPC messages over 10 MB, as Weaviate."""
    records = [_with(make_record(f"m{i:04d}", seed=i), body=b"x" * 30_000) for i in range(900)]
    async with open_backend(fresh(double, batch="1000")) as backend:
        await backend.upsert("c", records)  # 1,000 a batch by count, cut by bytes well before 10 MB
        assert await backend.count("c", Scope(user_id="alice")) == 900
        got = await backend.get("c", [r.id for r in records[::7]])
        assert [r.id for r in got] == [r.id for r in records[::7]]


async def test_dimensions_are_checked_before_writing(backend: Backend) -> None:
    await backend.ensure_collection("c", 8)
    with pytest.raises(DimensionMismatchError, match="holds 8"):
        await backend.ensure_collection("c", 384)
    with pytest.raises(DimensionMismatchError):
        await backend.upsert("c", [Record(id="x", scope=Scope(user_id="a"), body=b"", vector=np.ones(3, np.float32))])


async def test_records_without_vectors_score_zero_similarity(backend: Backend) -> None:
    await backend.upsert("c", [make_record("novec", text="no vector", importance=1.0), make_record("v", seed=3)])
    [got] = await backend.get("c", ["novec"])
    assert got.vector is None and got.text == "no vector"
    hits = await backend.query("c", Query(scope=Scope(user_id="alice"), vector=make_record("q", seed=3).vector, k=5,
                                          now=time.time()))  # fmt: skip
    by_id = {h.record.id: h.scores.similarity for h in hits}
    assert by_id["novec"] == 0.0 and by_id["v"] == pytest.approx(1.0, abs=1e-5)


async def test_other_collections_are_never_touched(backend: Backend, double: WeaviateDouble) -> None:
    with double.store.lock:
        double.store.create({"class": "OtherApp", "properties": [{"name": "v", "dataType": ["int"]}]})
    await backend.upsert("c", [make_record("r", seed=1, expires_at=1.0)])
    assert await backend.delete_expired("c", time.time()) == 1
    assert double.store.find("OtherApp") is not None
    with double.store.lock:
        del double.store.collections["OtherApp"]


async def test_a_collection_memkit_did_not_create_is_refused(double: WeaviateDouble) -> None:
    prefix = f"T{uuid.uuid4().hex[:12]}"
    with double.store.lock:
        double.store.create({"class": f"{prefix}_c", "description": "someone else's"})
    async with open_backend(double.storage_url(prefix=prefix)) as backend:
        with pytest.raises(ConfigurationError, match="did not create"):
            await backend.upsert("c", [make_record("r", seed=1)])


async def test_the_key_value_face_is_refused_with_what_to_do(backend: Backend) -> None:
    assert not backend.capabilities.kv and not backend.capabilities.atomic_replace
    assert backend.capabilities.text_search and backend.capabilities.vector_search
    with pytest.raises(CapabilityError, match=r"key-value-capable URL.*layer_urls"):
        await backend.kv_get("ns", "k")


async def test_the_client_refuses_layers_that_need_a_key_value_face(double: WeaviateDouble) -> None:
    async with Memkit(fresh(double), embedder=HashingEmbedder(8)) as mem:
        with pytest.raises(ConfigurationError, match="short_term layer needs kv"):
            mem.short_term.session("s", user_id="u")


async def test_the_api_key_never_shows(backend: Backend) -> None:
    assert "test-key" not in repr(backend) and "test-key" not in str(backend.url)


async def test_hybrid_top_k_is_exact_against_the_whole_scope(backend: Backend) -> None:
    """overlap@10 = 1.000: the deepened candidate lists give the top 10 found by scoring every row in scope,
    for recency- and importance-heavy weights too (rows neither list returned must come in)."""
    rng = np.random.default_rng(11)
    words = [f"w{i}" for i in range(30)]
    now = time.time()
    records = [Record(id=f"r{i:04d}", scope=Scope(user_id="alice" if i % 5 else "bob"), body=b"",
                      text=" ".join(rng.choice(words, 3)), vector=rng.standard_normal(8).astype(np.float32),
                      importance=float(rng.random()), timestamp=now - float(rng.random()) * 60 * 86400)
               for i in range(1000)]  # fmt: skip
    await backend.upsert("big", records)
    shares = []
    for i, weights in enumerate([Weights(), Weights(similarity=0.2, lexical=0.1, recency=0.4, importance=0.3),
                                 Weights(similarity=0.0, lexical=1.0, recency=0.0, importance=0.2)] * 3):  # fmt: skip
        ask = Query(scope=Scope(user_id="alice"), vector=rng.standard_normal(8).astype(np.float32),
                    text=f"w{i} w{i + 1} w{i}", weights=weights, now=now, k=10)  # fmt: skip
        top = [h.record.id for h in await backend.query("big", ask)]
        whole = await backend.query("big", Query(**{**{n: getattr(ask, n) for n in ask.__struct_fields__}, "k": 900}))
        assert len(whole) == 800
        shares.append(len(set(top) & {h.record.id for h in whole[:10]}) / 10)
    assert min(shares) == 1.0, shares


async def test_a_503_on_grpc_is_retried_by_the_client_itself(backend: Backend, double: WeaviateDouble) -> None:
    """gRPC UNAVAILABLE on a search: the client retries it (after 1 s), memkit does not add a second layer."""
    await backend.upsert("c", [make_record("r", seed=1)])
    double.fail_next(1, status=503)
    before = double.requests
    assert [r.id for r in await backend.get("c", ["r"])] == ["r"]
    assert double.requests - before == 2


# -- the double itself, through the official client ---------------------------------------------------------
@pytest.fixture
async def client(double: WeaviateDouble) -> AsyncIterator[object]:
    import weaviate
    from weaviate.classes.init import Auth

    connected = weaviate.use_async_with_custom(
        http_host="127.0.0.1", http_port=double.http_port, http_secure=False, grpc_host="127.0.0.1",
        grpc_port=double.grpc_port, grpc_secure=False, auth_credentials=Auth.api_key("test-key"),
        skip_init_checks=True,
    )  # fmt: skip
    await connected.connect()
    yield connected
    await connected.close()


async def test_the_double_keeps_tenants_apart(client: object) -> None:
    from weaviate.classes.config import Configure, DataType, Property
    from weaviate.classes.tenants import Tenant

    name = f"Mt{uuid.uuid4().hex[:10]}"
    collection = await client.collections.create(  # type: ignore[attr-defined]
        name, properties=[Property(name="word", data_type=DataType.TEXT)],
        multi_tenancy_config=Configure.multi_tenancy(enabled=True),
    )  # fmt: skip
    await collection.tenants.create([Tenant(name="ann"), Tenant(name="bob")])
    assert set(await collection.tenants.get()) == {"ann", "bob"}  # TenantsGet over gRPC
    await collection.with_tenant("ann").data.insert_many([{"word": "apple pie"}])
    await collection.with_tenant("bob").data.insert_many([{"word": "apple tart"}, {"word": "pear"}])
    ann = await collection.with_tenant("ann").query.bm25(query="apple", limit=10)
    bob = await collection.with_tenant("bob").query.fetch_objects(limit=10)
    assert [o.properties["word"] for o in ann.objects] == ["apple pie"] and len(bob.objects) == 2
    with pytest.raises(Exception, match="multi-tenancy enabled, but request was without tenant"):
        await collection.query.fetch_objects(limit=10)


async def test_the_doubles_bm25_is_weaviates_formula(client: object) -> None:
    """idf = ln(1 + (N - n + 0.5) / (n + 0.5)) times the query's repeats; tf / (tf + k1 (1 - b + b len / avg))."""
    import math

    from weaviate.classes.config import DataType, Property, Tokenization
    from weaviate.classes.query import Filter, MetadataQuery

    name = f"Bm{uuid.uuid4().hex[:10]}"
    collection = await client.collections.create(  # type: ignore[attr-defined]
        name, properties=[Property(name="t", data_type=DataType.TEXT, tokenization=Tokenization.WHITESPACE),
                          Property(name="g", data_type=DataType.INT)],
    )  # fmt: skip
    docs = ["a b", "a a c", "c d e f", "b"]
    await collection.data.insert_many([{"t": text, "g": i % 2} for i, text in enumerate(docs)])
    found = await collection.query.bm25(query="a a b", limit=10, return_metadata=MetadataQuery(score=True))
    got = {o.properties["t"]: o.metadata.score for o in found.objects}
    lengths, avg = [len(d.split()) for d in docs], sum(len(d.split()) for d in docs) / len(docs)

    def weight(term: str, doc: int) -> float:
        n = sum(term in d.split() for d in docs)
        tf = docs[doc].split().count(term)
        return math.log(1 + (4 - n + 0.5) / (n + 0.5)) * tf / (tf + 1.2 * (1 - 0.75 + 0.75 * lengths[doc] / avg))

    want = {docs[i]: 2 * weight("a", i) + weight("b", i) for i in range(4) if weight("a", i) + weight("b", i) > 0}
    assert got.keys() == want.keys() and all(abs(got[k] - want[k]) < 1e-5 for k in want), (got, want)
    odd = await collection.query.bm25(query="a a b", limit=10, filters=Filter.by_property("g").equal(1),
                                      return_metadata=MetadataQuery(score=True))  # fmt: skip
    filtered = {o.properties["t"]: o.metadata.score for o in odd.objects}  # a filter keeps the statistics
    assert filtered == pytest.approx({k: v for k, v in got.items() if docs.index(k) % 2 == 1})


async def test_clients_creating_one_collection_at_once_all_succeed(double: WeaviateDouble) -> None:
    url = fresh(double)
    async with open_backend(url) as first, open_backend(url) as second, open_backend(url) as third:
        async with anyio.create_task_group() as group:
            for backend in (first, second, third):
                group.start_soon(backend.ensure_collection, "shared", 8)
        await first.upsert("shared", [make_record("r", seed=1)])
        assert [r.id for r in await third.get("shared", ["r"])] == ["r"]
        with pytest.raises(DimensionMismatchError):
            await second.ensure_collection("shared", 16)


async def test_a_closed_backend_says_not_open(double: WeaviateDouble) -> None:
    async with open_backend(fresh(double)) as closed:
        await closed.upsert("c", [make_record("r", seed=1)])
    for call in (closed.get("c", ["r"]), closed.upsert("c", [make_record("s", seed=2)])):
        with pytest.raises(NotOpenError, match="not open"):
            await call
