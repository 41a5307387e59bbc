"""postgresql://: a touch counts a record's reads beside it, in a table of its own: the record's row is never
rewritten (no new version of its vector and text, no index entry), and deleting it deletes its counts."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from memkit_backends.postgres import PostgresBackend

from memkit.backend import Scope, StorageURL
from memkit.testing import make_record
from tests.conftest import fresh_postgres_url

pytestmark = pytest.mark.anyio

COLLECTION = "counted"


@pytest.fixture
async def backend(postgres_url: str) -> AsyncIterator[PostgresBackend]:
    async with PostgresBackend(StorageURL(fresh_postgres_url(postgres_url))) as backend:
        yield backend


async def _row_version(backend: PostgresBackend, record_id: str) -> tuple[str, str]:
    """The row's physical place and the transaction that wrote it: both change when an UPDATE rewrites it."""
    row = await backend.pool.fetchrow(
        f"SELECT ctid::text, xmin::text FROM {backend._records(COLLECTION)} WHERE id = $1", record_id
    )
    assert row is not None
    return row[0], row[1]


async def test_a_touch_leaves_the_record_row_as_it_was(backend: PostgresBackend) -> None:
    await backend.upsert(COLLECTION, [make_record("r1", seed=1), make_record("r2", seed=2)])
    before = await _row_version(backend, "r1")
    await backend.touch(COLLECTION, {"r1": 2, "gone": 1}, 100.0)
    await backend.touch(COLLECTION, {"r1": 1, "r2": 4}, 50.0)
    assert await _row_version(backend, "r1") == before
    got = {r.id: (r.access_count, r.last_accessed) for r in await backend.get(COLLECTION, ["r1", "r2"])}
    assert got == {"r1": (3, 100.0), "r2": (4, 50.0)}
    page = await backend.scan(COLLECTION, Scope(user_id="alice"))
    assert {r.id: r.access_count for r in page.records} == {"r1": 3, "r2": 4}
    counted = f"SELECT count(*) FROM {backend._counters(COLLECTION)}"
    assert await backend.pool.fetchval(counted) == 2  # none for an id that is not stored


async def test_a_deleted_record_takes_its_counts_and_a_rewrite_keeps_them(backend: PostgresBackend) -> None:
    await backend.upsert(COLLECTION, [make_record("r1", seed=1)])
    await backend.touch(COLLECTION, {"r1": 5}, 10.0)
    await backend.upsert(COLLECTION, [make_record("r1", seed=3)])  # a rewrite of the record keeps its counts
    assert (await backend.get(COLLECTION, ["r1"]))[0].access_count == 5
    assert await backend.delete(COLLECTION, ["r1"]) == 1
    await backend.upsert(COLLECTION, [make_record("r1", seed=1)])  # stored again: counted from zero
    [again] = await backend.get(COLLECTION, ["r1"])
    assert (again.access_count, again.last_accessed) == (0, None)


async def test_a_collection_made_without_its_counters_table_gets_one(postgres_url: str) -> None:
    """A memkit from before schema 4, still running beside the upgrade, may create a collection with no
    counters table: the first process to use the collection makes it."""
    url = fresh_postgres_url(postgres_url)
    async with PostgresBackend(StorageURL(url)) as first:
        await first.upsert(COLLECTION, [make_record("r1", seed=1)])
        await first.pool.execute(f"DROP TABLE {first._counters(COLLECTION)}")
    async with PostgresBackend(StorageURL(url)) as later:
        await later.touch(COLLECTION, {"r1": 2}, 5.0)
        assert [(r.access_count, r.last_accessed) for r in await later.get(COLLECTION, ["r1"])] == [(2, 5.0)]
