"""postgresql://: a query over a small scope counts and scores it in one statement, and an empty scope costs
one statement; the answers are those of the candidate lists."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import msgspec
import numpy as np
import pytest
from memkit_backends.postgres import PostgresBackend, _backend

from memkit.backend import Query, Record, Scope, StorageURL
from tests.backends.test_postgres_nearest import CountingPool
from tests.conftest import fresh_postgres_url

pytestmark = pytest.mark.anyio

COLLECTION = "queried"
DIM = 8
NOW = 1_000_000.0
WORDS = ["apple", "pear", "plum", "fig", "kiwi", "lime"]


def _records(rng: np.random.Generator) -> list[Record]:
    records = []
    for i in range(40):
        vector = rng.standard_normal(DIM).astype(np.float32)
        text = " ".join(rng.choice(WORDS, 3))
        records.append(Record(id=f"r{i:02d}", scope=Scope(user_id="alice" if i % 4 else "bob"), body=b"x",
                              text=text, vector=vector / np.linalg.norm(vector), importance=float(rng.random()),
                              timestamp=NOW - 100 * i, expires_at=NOW - 1 if i == 5 else None))  # fmt: skip
    return records


@pytest.fixture
async def backend(postgres_url: str) -> AsyncIterator[PostgresBackend]:
    url = fresh_postgres_url(postgres_url, pool_max="1", pool_min="1")
    async with PostgresBackend(StorageURL(url)) as backend:
        yield backend


def _query(user: str, rng: np.random.Generator) -> Query:
    vector = rng.standard_normal(DIM).astype(np.float32)
    return Query(scope=Scope(user_id=user), vector=vector / np.linalg.norm(vector), text="pear fig fig", k=5, now=NOW)


async def test_a_small_scope_is_one_statement_and_an_empty_one_sends_no_more(
    backend: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    await backend.upsert(COLLECTION, _records(np.random.default_rng(1)))
    rng = np.random.default_rng(2)
    await backend.query(COLLECTION, _query("alice", rng))  # the collection's dimension, now cached
    counting = CountingPool(backend.pool)
    monkeypatch.setattr(backend, "_pool", counting)
    hits = await backend.query(COLLECTION, _query("alice", rng))
    assert len(hits) == 5
    sent = await counting.sent()
    assert len(sent) == 2 and sent[0].startswith("WITH gate")  # the scope counted and scored; its 5 records
    assert await backend.query(COLLECTION, _query("nobody", rng)) == []
    assert len(await counting.sent()) == 1
    filtered = msgspec.structs.replace(_query("nobody", rng), filters={"kind": "fact"}, min_importance=0.1)
    assert await backend.query(COLLECTION, filtered) == []  # no best text score read for nothing to rank
    assert len(await counting.sent()) == 1


@pytest.mark.parametrize("exact_scope", [28, 29])
async def test_a_scope_past_the_bound_answers_as_a_whole_scope(
    backend: PostgresBackend, monkeypatch: pytest.MonkeyPatch, exact_scope: int
) -> None:
    """Alice has 29 live rows (and one expired): with a bound of 29 the gate lets the statement score her
    scope; with 28 it returns her count alone, and the candidate lists answer. Either way the same hits."""
    await backend.upsert(COLLECTION, _records(np.random.default_rng(1)))
    queries = [_query("alice", np.random.default_rng(seed)) for seed in range(5)]
    whole = [[(h.record.id, h.scores.final) for h in await backend.query(COLLECTION, q)] for q in queries]
    monkeypatch.setattr(_backend, "_EXACT_SCOPE", exact_scope)
    counting = CountingPool(backend.pool)
    monkeypatch.setattr(backend, "_pool", counting)
    gated = [[(h.record.id, h.scores.final) for h in await backend.query(COLLECTION, q)] for q in queries]
    per_query = len(await counting.sent()) / len(queries)
    assert per_query == 2 if exact_scope == 29 else per_query > 2
    assert all(len(hits) == 5 for hits in whole)
    assert [[i for i, _ in hits] for hits in gated] == [[i for i, _ in hits] for hits in whole]
    for hits, others in zip(gated, whole, strict=True):
        assert [s for _, s in hits] == pytest.approx([s for _, s in others], abs=1e-6)


async def test_a_connection_goes_back_to_the_pool_without_a_reset_query(
    backend: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """asyncpg's default release sends ``... RESET ALL``: a round trip per operation for state memkit never
    leaves. A transaction left open is still rolled back (asyncpg's own reset, before the pool's hook)."""
    await backend.upsert(COLLECTION, _records(np.random.default_rng(1)))
    sent: list[str] = []
    execute = asyncpg.Connection.execute

    async def logged(self: asyncpg.Connection, query: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(query)
        return await execute(self, query, *args, **kwargs)

    monkeypatch.setattr(asyncpg.Connection, "execute", logged)
    await backend.query(COLLECTION, _query("alice", np.random.default_rng(2)))
    await backend.get(COLLECTION, ["r01"])
    assert not [query for query in sent if "RESET ALL" in query]
    async with backend.pool.acquire() as conn:
        await conn.execute("BEGIN")
        await conn.execute("SET LOCAL statement_timeout = 1234")
    async with backend.pool.acquire() as conn:
        assert await conn.fetchval("SHOW statement_timeout") != "1234ms"
        assert not conn.is_in_transaction()
