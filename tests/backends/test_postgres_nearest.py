"""postgresql://: ``nearest`` answers a whole batch in one statement, with the default's answers exactly."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import numpy as np
import pytest
from memkit_backends.postgres import PostgresBackend, _backend
from memkit_backends.postgres._nearest import batch_sql

from memkit.backend import Record, RecordStore, Scope, StorageURL
from memkit.errors import DimensionMismatchError
from tests.conftest import fresh_postgres_url

pytestmark = pytest.mark.anyio

COLLECTION = "nearest"
DIM = 16
NOW = 1_000_000.0
ALICE = Scope(user_id="alice")


class CountingPool:
    """The backend's pool, logging every statement sent on a connection it hands out."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.statements: list[str] = []

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[Any]:
        async with self.pool.acquire() as conn:
            conn.add_query_logger(self._log)
            try:
                yield conn
            finally:  # before the pool's own reset query, sent on release
                conn.remove_query_logger(self._log)

    def _log(self, logged: Any) -> None:
        self.statements.append(logged.query)

    async def sent(self) -> list[str]:
        await anyio.sleep(0.01)  # asyncpg calls loggers with call_soon
        sent, self.statements = self.statements, []
        return sent


def _unit(rng: np.random.Generator) -> Any:
    vector = rng.standard_normal(DIM).astype(np.float32)
    return vector / np.linalg.norm(vector)


def _record(record_id: str, vector: Any, user: str = "alice", **extra: Any) -> Record:
    return Record(id=record_id, scope=Scope(user_id=user, agent_id=extra.pop("agent", None)), body=b"x",
                  vector=vector, importance=extra.pop("importance", 0.5), timestamp=NOW - 10, **extra)  # fmt: skip


def _corpus(rng: np.random.Generator) -> tuple[list[Record], list[Any]]:
    """Alice's 300 rows (past the first candidate list of 100) among Bob's, with what makes a ranking hard:
    identical vectors under several ids (ties, broken by id), rows without a vector, expired rows, a row of
    negative importance (the kernel's minimum importance is 0), rows of one agent, and Carol's 3 rows."""
    stored = [_unit(rng) for _ in range(300)]
    records = [_record(f"a{i:03d}", v, agent="planner" if i % 3 == 0 else None) for i, v in enumerate(stored)]
    records += [_record(f"dup-{name}", stored[7]) for name in ("z", "b", "é", "B")]
    records += [_record(f"b{i:03d}", _unit(rng), "bob") for i in range(200)]
    records += [_record("bob-twin", stored[7], "bob"), _record("no-vector", None),
                _record("expired", stored[11], expires_at=NOW - 1),
                _record("expires-later", stored[12], expires_at=NOW + 1),
                _record("negative", stored[13], importance=-0.25)]  # fmt: skip
    # A scope smaller than k: scored whole, a row without a vector scores 0 (above a negative similarity).
    records += [_record("c-same", stored[42], "carol"), _record("c-opposite", -stored[42], "carol"),
                _record("c-none", None, "carol")]  # fmt: skip
    probes = [stored[7], stored[11], stored[13], stored[42], -stored[42], *(_unit(rng) for _ in range(6))]
    near = stored[99] + 0.05 * _unit(rng)
    return records, [*probes, near / np.linalg.norm(near)]


@pytest.fixture(params=[("none", "vector"), ("hnsw", "vector"), ("hnsw", "halfvec"), ("none", "halfvec")],
                ids="-".join)  # fmt: skip
async def backend(postgres_url: str, request: pytest.FixtureRequest) -> AsyncIterator[PostgresBackend]:
    index, vector = request.param
    url = fresh_postgres_url(postgres_url, pool_max="1", pool_min="1", index=index, vector=vector)
    async with PostgresBackend(StorageURL(url)) as backend:
        yield backend


@pytest.mark.parametrize("whole_scope_below", [5_000, 2, 0], ids=["whole-scope", "gated-to-lists", "candidate-lists"])
async def test_nearest_answers_as_the_default_loop(
    backend: PostgresBackend, whole_scope_below: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ids, order and similarities (float32, as the kernel reports them) equal the default's, one query per
    vector, through either path of the hybrid query: the scope scored whole, or each vector's candidate list
    (chosen in the statement when a scope has more rows than ``whole_scope_below``: every scope here has 3+)."""
    monkeypatch.setattr(_backend, "_EXACT_SCOPE", whole_scope_below)
    records, probes = _corpus(np.random.default_rng(7))
    await backend.upsert(COLLECTION, records)
    planner = Scope(user_id="alice", agent_id="planner")
    for scope in (ALICE, planner, Scope(user_id="bob"), Scope(user_id="carol")):
        for k in (1, 3, 8):
            for floor in (-1.0, 0.0, 0.3, 0.99):
                args = (COLLECTION, scope, probes)
                batch = await backend.nearest(*args, k=k, min_similarity=floor, now=NOW)
                assert batch == await RecordStore.nearest(backend, *args, k=k, min_similarity=floor, now=NOW)
    top = (await backend.nearest(COLLECTION, ALICE, probes[5:6], now=NOW))[0][0][1]
    just_above = float(np.nextafter(top, 2.0))  # a float64 floor the float32 similarity falls short of
    args = (COLLECTION, ALICE, probes[5:6])
    assert await backend.nearest(*args, min_similarity=just_above, now=NOW) == [[]]
    assert await RecordStore.nearest(backend, *args, min_similarity=just_above, now=NOW) == [[]]
    carol = await backend.nearest(COLLECTION, Scope(user_id="carol"), [probes[3]], k=3, now=NOW)
    unscored = ["c-none"] if whole_scope_below >= 3 else []  # scored 0 where carol's 3 rows are scored whole
    assert [i for i, _ in carol[0]] == ["c-same", *unscored, "c-opposite"]
    twins = await backend.nearest(COLLECTION, ALICE, [probes[0]], k=6, now=NOW)  # one vector under 5 ids
    assert [i for i, _ in twins[0][:5]] == ["a007", "dup-B", "dup-b", "dup-z", "dup-é"]  # code-point order
    assert len({s for _, s in twins[0][:5]}) == 1 and twins[0][5][1] < twins[0][0][1]


async def test_a_batch_is_one_statement(backend: PostgresBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """One statement whatever the batch's size, where the default loop sends a few per vector."""
    records, probes = _corpus(np.random.default_rng(3))
    await backend.upsert(COLLECTION, records)
    await backend.nearest(COLLECTION, ALICE, probes[:1], now=NOW)  # the collection's dimension, now cached
    counting = CountingPool(backend.pool)
    monkeypatch.setattr(backend, "_pool", counting)
    for batch in (probes[:1], probes, probes * 10):
        found = await backend.nearest(COLLECTION, ALICE, batch, k=2, now=NOW)
        assert len(found) == len(batch) and all(len(hits) == 2 for hits in found)
        assert len(await counting.sent()) == 1
    await RecordStore.nearest(backend, COLLECTION, ALICE, probes, k=2, now=NOW)
    assert len(await counting.sent()) >= 2 * len(probes)


async def test_the_graph_scan_gets_the_hybrid_querys_settings(postgres_url: str) -> None:
    """The statement sets the iterative scan and ef_search itself (``set_config`` in its first CTE). Where the
    graph serves a scope of 1 row in 20 and the session says neither, a plain top 100 finds a few rows; the
    batch, its settings taking effect before the graph is first read, finds its 50 for every vector."""
    url = fresh_postgres_url(postgres_url, pool_max="1", pool_min="1", index="hnsw")
    rng = np.random.default_rng(5)
    async with PostgresBackend(StorageURL(url)) as backend:
        await backend.upsert(COLLECTION, [_record(f"r{i}", _unit(rng), f"u{i % 20}") for i in range(2_000)])
        table, probes = backend._records(COLLECTION), [_unit(rng) for _ in range(3)]
        sql, params = batch_sql(table, "vector", Scope(user_id="u1"), NOW, probes, k=50, min_similarity=-1.0,
                                depth=200, whole_scope_below=0)  # fmt: skip
        async with backend.pool.acquire() as conn, conn.transaction():
            for setting in ("enable_seqscan", "enable_bitmapscan", "enable_sort", "hnsw.iterative_scan"):
                await conn.execute(f"SET LOCAL {setting} = off")  # the graph, without the iterative scan
            plain = await conn.fetch(f"SELECT id FROM {table} WHERE user_id = 'u1' ORDER BY embedding <=> $1 "
                                     "LIMIT 100", probes[0])  # fmt: skip
            assert len(plain) < 10
            plan = "\n".join(row[0] for row in await conn.fetch(f"EXPLAIN {sql}", *params))
            assert "Index Scan using" in plan and "_hnsw" in plan, plan
            rows = await conn.fetch(sql, *params)
        assert [sum(1 for row in rows if row["ord"] == i) for i in (1, 2, 3)] == [50, 50, 50]


async def test_edges_answer_as_the_default(backend: PostgresBackend) -> None:
    """A collection that does not exist, one without vectors (every row scores 0, first ids first), a vector
    of the wrong dimension, an empty batch."""
    probes = [_unit(np.random.default_rng(1))]
    for args in ((COLLECTION, ALICE, probes), (COLLECTION, ALICE, [])):
        assert await backend.nearest(*args, now=NOW) == await RecordStore.nearest(backend, *args, now=NOW)
    assert await backend.nearest(COLLECTION, ALICE, probes * 2, now=NOW) == [[], []]
    await backend.upsert(COLLECTION, [_record(f"t{i}", None) for i in (3, 1, 2)] + [_record("x", None, "bob")])
    for k, floor in ((2, -1.0), (5, 0.0), (2, 0.1)):
        args = (COLLECTION, ALICE, probes)
        batch = await backend.nearest(*args, k=k, min_similarity=floor, now=NOW)
        assert batch == await RecordStore.nearest(backend, *args, k=k, min_similarity=floor, now=NOW)
    assert (await backend.nearest(COLLECTION, ALICE, probes, k=2, now=NOW))[0] == [("t1", 0.0), ("t2", 0.0)]
    await backend.upsert(COLLECTION, [_record("v", probes[0])])
    with pytest.raises(DimensionMismatchError):
        await backend.nearest(COLLECTION, ALICE, [np.ones(DIM + 1, np.float32)], now=NOW)
    with pytest.raises(DimensionMismatchError):
        await RecordStore.nearest(backend, COLLECTION, ALICE, [np.ones(DIM + 1, np.float32)], now=NOW)
