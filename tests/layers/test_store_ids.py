"""A text whose id is held by a memory that now says something else (an update, a merge) is stored under its
next id, never over that memory; an exact duplicate refreshes the importance, metadata and expiry of the
memory it repeats. On every backend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import anyio
import pytest

from memkit import Memkit, NewMemory
from memkit.embedders import HashingEmbedder
from memkit.layers.longterm._claims import create_one
from memkit.layers.longterm._codec import memory_id

pytestmark = pytest.mark.anyio

DOOR, WIFI = "Door code is 4411", "The wifi password is hunter2"


@pytest.fixture
async def mem(store_url: str) -> AsyncIterator[Memkit]:
    async with Memkit(store_url, embedder=HashingEmbedder(64)) as client:
        yield client


async def _contents(mem: Memkit, user: str = "ada") -> list[str]:
    return sorted(m.content for m in (await mem.long_term.list(user_id=user, limit=100)).memories)


async def test_store_of_a_text_whose_id_an_update_kept(mem: Memkit) -> None:
    lt = mem.long_term
    first = await lt.store(DOOR, user_id="ada")
    assert first.memory is not None
    await lt.update(first.memory.id, user_id="ada", content=WIFI)
    again = await lt.store(DOOR, user_id="ada")
    assert again.status == "stored" and again.memory is not None and again.memory.content == DOOR
    assert again.memory.id == memory_id(again.memory.scope, DOOR, 1) != first.memory.id
    assert await _contents(mem) == sorted([DOOR, WIFI])
    assert (await lt.store(DOOR, user_id="ada")).status == "duplicate"  # found at its new id
    assert await _contents(mem) == sorted([DOOR, WIFI])


async def test_store_many_never_overwrites_the_memory_holding_the_id(mem: Memkit) -> None:
    lt = mem.long_term
    first = await lt.store(DOOR, user_id="ada")
    assert first.memory is not None
    await lt.update(first.memory.id, user_id="ada", content=WIFI)
    results = await lt.store_many([DOOR, "Something else entirely", DOOR], user_id="ada")
    assert [r.status for r in results] == ["stored", "stored", "duplicate"]
    assert await _contents(mem) == sorted([DOOR, WIFI, "Something else entirely"])
    kept = await lt.get(first.memory.id, user_id="ada")
    assert kept is not None and kept.content == WIFI


async def test_a_second_update_moves_the_text_on_again(mem: Memkit) -> None:
    lt = mem.long_term
    for replacement in (WIFI, "The gate opens at nine"):
        stored = await lt.store(DOOR, user_id="ada")
        assert stored.status == "stored" and stored.memory is not None
        await lt.update(stored.memory.id, user_id="ada", content=replacement)
    third = await lt.store(DOOR, user_id="ada")
    assert third.status == "stored" and third.memory is not None
    assert third.memory.id == memory_id(third.memory.scope, DOOR, 2)
    assert await _contents(mem) == sorted([DOOR, WIFI, "The gate opens at nine"])


async def test_clients_storing_a_moved_text_at_once_keep_one(store_url: str) -> None:
    if store_url == "memory://":
        pytest.skip("two clients share a store on the backends that persist")
    embedder = HashingEmbedder(64)
    async with Memkit(store_url, embedder=embedder) as a, Memkit(store_url, embedder=embedder) as b:
        first = await a.long_term.store(DOOR, user_id="ada")
        assert first.memory is not None
        await a.long_term.update(first.memory.id, user_id="ada", content=WIFI)
        statuses: list[str] = []

        async def store(client: Memkit) -> None:
            statuses.append((await client.long_term.store(DOOR, user_id="ada")).status)

        async with anyio.create_task_group() as group:
            group.start_soon(store, a)
            group.start_soon(store, b)
        assert sorted(statuses) == ["duplicate", "stored"]
        assert await _contents(a) == sorted([DOOR, WIFI])


async def test_create_one_moves_on_when_the_id_was_taken_meanwhile(mem: Memkit) -> None:
    """The race a read cannot see: the id is held by another text only when the create-if-absent runs."""
    lt = mem.long_term
    held = await lt.store(DOOR, user_id="ada")
    assert held.memory is not None
    await lt.update(held.memory.id, user_id="ada", content=WIFI)
    planned = held.memory  # the plan made before the update: DOOR at its first id
    [vector] = await lt._embed([DOOR])
    results: list[object] = [None]
    await create_one(lt.backend, lt.config.collection, planned, vector, at=0, results=results)  # type: ignore[arg-type]
    [result] = results
    assert result.status == "stored" and result.memory.id == memory_id(planned.scope, DOOR, 1)  # type: ignore[attr-defined]
    assert await _contents(mem) == sorted([DOOR, WIFI])


async def test_an_exact_duplicate_without_ttl_keeps_the_memory(mem: Memkit) -> None:
    lt = mem.long_term
    await lt.store(DOOR, user_id="ada", ttl=timedelta(seconds=30))
    again = await lt.store(DOOR, user_id="ada")
    assert again.status == "duplicate" and again.memory is not None and again.memory.expires_at is None
    [kept] = (await lt.list(user_id="ada")).memories
    assert kept.expires_at is None


async def test_an_exact_duplicate_raises_importance_and_merges_metadata(mem: Memkit) -> None:
    lt = mem.long_term
    first = await lt.store(DOOR, user_id="ada", importance=0.2, metadata={"room": "hall"})
    again = await lt.store("door code is 4411!", user_id="ada", importance=0.9, metadata={"floor": 2})
    assert again.status == "duplicate" and again.memory is not None
    [kept] = (await lt.list(user_id="ada")).memories
    assert first.memory is not None and kept.id == first.memory.id and kept.content == DOOR  # the stored wording
    assert kept.importance == 0.9 and kept.metadata == {"room": "hall", "floor": 2}
    lower = await lt.store(DOOR, user_id="ada", importance=0.1)  # changes nothing: no write
    assert lower.memory is not None and lower.memory.updated_at == kept.updated_at and lower.memory.importance == 0.9


async def test_a_duplicate_within_a_batch_refreshes_the_new_memory(mem: Memkit) -> None:
    lt = mem.long_term
    first, again = (
        NewMemory(content=DOOR, importance=0.3, ttl=60),
        NewMemory(content=DOOR, importance=0.8, metadata={"k": "v"}),
    )
    results = await lt.store_many([first, again], user_id="ada")
    assert [r.status for r in results] == ["stored", "duplicate"]
    [kept] = (await lt.list(user_id="ada")).memories
    assert kept.importance == 0.8 and kept.metadata == {"k": "v"} and kept.expires_at is None
    assert all(r.memory is not None and r.memory.importance == 0.8 for r in results)
