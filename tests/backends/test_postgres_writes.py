"""postgresql://: expiry at its instant, and touches that re-index nothing."""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator

import numpy as np
import pytest
from memkit_backends.postgres import PostgresBackend

from memkit.backend import Record, Scope, StorageURL
from memkit.testing import make_record
from tests.conftest import fresh_postgres_url

pytestmark = pytest.mark.anyio

COLLECTION = "writes"


@pytest.fixture
async def backend(postgres_url: str) -> AsyncIterator[PostgresBackend]:
    backend = PostgresBackend(StorageURL(fresh_postgres_url(postgres_url, pool_max="1", pool_min="1")))
    async with backend:
        await backend.ensure_collection(COLLECTION, 8)
        yield backend


async def test_a_key_expires_at_its_expiry(backend: PostgresBackend) -> None:
    """Live while expires_at > now of the reader: at the instant itself the key is gone."""
    now = 1_000_000.0
    await backend.kv_set("ns", "k", b"v", ttl_s=5, now=now)
    assert await backend.kv_get("ns", "k", now=now + 4.999) == b"v"
    assert await backend.kv_get("ns", "k", now=now + 5) is None
    assert [k for k, _ in (await backend.kv_scan("ns", now=now + 5)).items] == []
    assert await backend.kv_replace("ns", "k", b"w", expected=b"v", now=now + 5) is False
    assert await backend.kv_replace("ns", "k", b"w", expected=None, now=now + 5) is True


async def test_a_touch_after_a_bulk_load_updates_no_record_row(postgres_url: str) -> None:
    """Where an HNSW graph is kept, a touch rewriting a record's row would give the graph a new entry (and
    every other index one); counts go to the counters table, so the records' table sees no update at all."""
    rng = np.random.default_rng(0)
    url = fresh_postgres_url(postgres_url, pool_max="1", pool_min="1", index="hnsw")
    async with PostgresBackend(StorageURL(url)) as backend:
        await backend.ensure_collection(COLLECTION, 384)
        vectors = rng.standard_normal((300, 384)).astype(np.float32)
        records = [Record(id=f"r{i:03d}", scope=Scope(user_id="alice"), body=b"x" * 64, text=f"note number {i}",
                          vector=v / np.linalg.norm(v), importance=0.5, timestamp=time.time(),
                          fields={"kind": "fact"})
                   for i, v in enumerate(vectors)]  # fmt: skip
        await backend.upsert(COLLECTION, records)  # COPY: full pages
        touched = {r.id: 1 for r in records[::7]}
        for _ in range(3):
            await backend.touch(COLLECTION, touched, time.time())
        async with backend.pool.acquire() as conn:
            await conn.execute("SELECT pg_stat_force_next_flush()")
            row = await conn.fetchrow(
                "SELECT n_tup_upd, n_tup_ins FROM pg_stat_user_tables WHERE relid = $1::regclass",
                backend._records(COLLECTION),
            )
        assert (row["n_tup_upd"], row["n_tup_ins"]) == (0, len(records)), dict(row)
        assert [r.access_count for r in await backend.get(COLLECTION, ["r000", "r001"])] == [3, 0]


async def test_string_filters_match_alike_with_and_without_a_scope(backend: PostgresBackend) -> None:
    """Within a scope a string filter is one ``?|`` test a row; with no scope it stays containments (which
    the GIN index serves). Both find scalars and tags, and neither mistakes a number or a bool for a string."""
    fields = [{"k": "a"}, {"k": ("a", "b")}, {"k": "b"}, {"k": 1}, {"k": True}, {"k": "1"}, {"other": "a"}]
    await backend.upsert(COLLECTION, [make_record(f"r{i}", fields=f) for i, f in enumerate(fields)])
    for wanted, expected in ((("a",), {"r0", "r1"}), (("a", "b"), {"r0", "r1", "r2"}), (("1",), {"r5"}),
                             ((1,), {"r3"}), ((True,), {"r4"}), (("zz", 1), {"r3"})):  # fmt: skip
        scoped = await backend.scan(COLLECTION, Scope(user_id="alice"), filters={"k": wanted}, limit=20)
        everywhere = await backend.scan(COLLECTION, Scope(), filters={"k": wanted}, limit=20, all_scopes=True)
        assert {r.id for r in scoped.records} == {r.id for r in everywhere.records} == expected, wanted


async def test_a_bulk_write_lays_each_scope_s_rows_side_by_side(backend: PostgresBackend) -> None:
    """A COPY-sized batch of users writing in turns is stored scope by scope (in heap order), not in id order:
    a near-duplicate check or a dedupe scan of one user reads its rows' pages, and in id order (a digest)
    each user's rows had been spread one to a page (at 100k, store() took 8.1 ms, 3.8 ms after)."""
    users = [f"user{u}" for u in range(8)]
    records = [make_record(f"{(i * 7919) % 1000:04d}", users[i % len(users)]) for i in range(200)]  # ids out of order
    await backend.upsert(COLLECTION, records)
    async with backend.pool.acquire() as conn:
        heap_order = [row["user_id"] for row in await conn.fetch(
            f"SELECT user_id FROM {backend._records(COLLECTION)} ORDER BY ctid")]  # fmt: skip
    runs = 1 + sum(a != b for a, b in itertools.pairwise(heap_order))
    assert sorted(heap_order) == sorted(str(r.scope.user_id) for r in records)
    assert runs == len(users), heap_order[:20]
