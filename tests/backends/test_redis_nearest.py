"""The Redis ``nearest``: the default's answer (one ``query`` per vector), in one round trip per batch."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from memkit import open_backend
from memkit.backend import Backend, Record, RecordStore, Scope
from memkit.errors import DimensionMismatchError
from tests.conftest import fresh_redis_url

pytestmark = pytest.mark.anyio

DIM = 16
ALICE = Scope(user_id="alice")


def unit(rng: np.random.Generator, near: Any = None, noise: float = 0.0) -> Any:
    vector = rng.standard_normal(DIM).astype(np.float32) if near is None else near + noise * rng.standard_normal(DIM)
    return (vector / np.linalg.norm(vector)).astype(np.float32)


def record(record_id: str, vector: Any, *, user: str = "alice", expires_at: float | None = None,
           importance: float = 0.5) -> Record:  # fmt: skip
    return Record(id=record_id, scope=Scope(user_id=user), body=b"x", vector=vector, importance=importance,
                  timestamp=time.time(), expires_at=expires_at)  # fmt: skip


@pytest.fixture(params=["flat", "hnsw"])
async def backend(redis_url: str, request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    async with open_backend(fresh_redis_url(redis_url, index=request.param)) as opened:
        yield opened


def round_trips(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Commands per round trip from now on: a pipeline's execute is one, a lone command another."""
    client = backend._client  # type: ignore[attr-defined]
    trips: list[int] = []
    pipeline, execute_command = client.pipeline, client.execute_command

    def counted_pipeline(*args: Any, **kwargs: Any) -> Any:
        pipe = pipeline(*args, **kwargs)
        execute = pipe.execute

        async def counted_execute(*args: Any, **kwargs: Any) -> Any:
            trips.append(len(pipe.command_stack))
            return await execute(*args, **kwargs)

        pipe.execute = counted_execute
        return pipe

    async def counted_command(*args: Any, **kwargs: Any) -> Any:
        trips.append(1)
        return await execute_command(*args, **kwargs)

    monkeypatch.setattr(client, "pipeline", counted_pipeline)
    monkeypatch.setattr(client, "execute_command", counted_command)
    return trips


async def crowded_store(backend: Backend, now: float) -> dict[str, Any]:
    """A scope with the cases a short KNN list gets wrong: exact duplicates (ties broken by id), expired
    and negative-importance rows nearest to a query, rows without vectors, another user's twins."""
    rng = np.random.default_rng(7)
    hot, crowd, negative = unit(rng), unit(rng), unit(rng)
    records = [record(f"r{i:03d}", unit(rng)) for i in range(300)]
    records += [record(f"dup{i}", hot) for i in rng.permutation(10)]
    records += [record(f"old{i}", unit(rng, crowd, 0.01), expires_at=now - 1) for i in range(40)]
    records += [record(f"soon{i}", unit(rng, crowd, 0.05), expires_at=now + 3600) for i in range(3)]
    records += [record(f"neg{i}", unit(rng, negative, 0.01), importance=-0.5) for i in range(12)]
    records += [record(f"novec{i}", None) for i in range(5)]
    records += [record(f"bob{i}", v, user="bob") for i, v in enumerate((hot, crowd, negative))]
    for start in range(0, len(records), 100):
        await backend.upsert("c", records[start : start + 100])
    stored = records[5].vector
    return {"hot": hot, "crowd": crowd, "negative": negative, "stored": stored,
            "near": unit(rng, stored, 0.02), "random": unit(rng)}  # fmt: skip


async def test_answers_as_the_default_does(backend: Backend) -> None:
    now = time.time()
    queries = list((await crowded_store(backend, now)).values())
    for k in (1, 3, 12):
        for min_similarity in (-1.0, 0.5, 0.99):
            ours = await backend.nearest("c", ALICE, queries, k=k, min_similarity=min_similarity, now=now)
            default = await RecordStore.nearest(backend, "c", ALICE, queries, k=k, min_similarity=min_similarity,
                                                now=now)  # fmt: skip
            assert ours == default, (k, min_similarity)
    hot = await backend.nearest("c", ALICE, [queries[0]], k=3, now=now)
    assert [i for i, _ in hot[0]] == ["dup0", "dup1", "dup2"]  # ties by id, past the first short list


async def test_a_batch_is_one_round_trip(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    await backend.upsert("c", [record(f"r{i}", unit(rng)) for i in range(500)])
    await backend.nearest("c", ALICE, [unit(rng)])  # the collection's dimension is read once, then cached
    trips = round_trips(backend, monkeypatch)
    found = await backend.nearest("c", ALICE, [unit(rng) for _ in range(50)], k=3)
    assert len(found) == 50 and all(len(row) == 3 for row in found)
    hnsw = backend._hnsw  # type: ignore[attr-defined]
    # HNSW picks its policy by the scope's size (``BRUTE_FORCE``): a count first, once per batch.
    assert trips == ([1, 50] if hnsw else [50])


async def test_lists_crowded_by_expired_rows_are_deepened_alone(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = time.time()
    queries = await crowded_store(backend, now)
    trips = round_trips(backend, monkeypatch)
    found = await backend.nearest("c", ALICE, [queries["random"], queries["crowd"]], k=2, now=now)
    similarities = [s for _, s in found[1]]
    assert len(found[1]) == 2 and similarities == sorted(similarities, reverse=True)
    assert all(i.startswith("soon") for i, _ in found[1])  # 40 expired rows nearer, none returned
    count = trips[:1] if backend._hnsw else []  # type: ignore[attr-defined]
    assert trips == [*count, 2, 1, 1]  # depth 6, then 24 and 96 for the crowded vector alone


async def test_edge_cases(backend: Backend) -> None:
    rng = np.random.default_rng(5)
    vector = unit(rng)
    assert await backend.nearest("missing", ALICE, [vector, vector]) == [[], []]
    await backend.upsert("c", [record("a", vector), record("b", None)])
    assert await backend.nearest("c", ALICE, [vector], k=0) == [[]]
    assert await backend.nearest("c", ALICE, []) == []
    with pytest.raises(DimensionMismatchError):
        await backend.nearest("c", ALICE, [vector, np.ones(DIM + 1, np.float32)])
    (row,) = await backend.nearest("c", ALICE, [vector], k=5)
    assert [i for i, _ in row] == ["a"] and abs(row[0][1] - 1.0) < 1e-5  # a row without a vector is no match


async def test_a_collection_without_vectors_answers_as_the_default(backend: Backend) -> None:
    await backend.upsert("c", [record("a", None), record("b", None)])
    vector = unit(np.random.default_rng(1))
    default = await RecordStore.nearest(backend, "c", ALICE, [vector], k=3)
    assert await backend.nearest("c", ALICE, [vector], k=3) == default
