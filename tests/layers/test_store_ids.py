"""A text whose id is held by a memory that now says something else (an update, a merge) is stored under its
next id, never over that memory; an exact duplicate refreshes the importance, metadata and expiry of the
memory it repeats. On every backend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest

from memkit import LongTermConfig, Memkit, NewMemory
from memkit.embedders import HashingEmbedder
from memkit.layers.longterm import LongTermMemory, Memory, _claims, _writes
from memkit.layers.longterm._claims import create_one
from memkit.layers.longterm._codec import memory_id

pytestmark = pytest.mark.anyio

DOOR, WIFI = "Door code is 4411", "The wifi password is hunter2"


@pytest.fixture
async def mem(store_url: str) -> AsyncIterator[Memkit]:
    async with Memkit(store_url, embedder=HashingEmbedder(64)) as client:
        yield client


@pytest.fixture
async def other(store_url: str) -> AsyncIterator[Memkit]:
    """A second client of the same store: another process, as far as the first one knows."""
    if store_url == "memory://":
        pytest.skip("two clients share a store on the backends that persist")
    async with Memkit(store_url, embedder=HashingEmbedder(64)) as client:
        yield client


async def _contents(mem: Memkit, user: str = "ada") -> list[str]:
    return sorted(m.content for m in (await mem.long_term.list(user_id=user, limit=100)).memories)


async def _moved(lt: LongTermMemory) -> Memory:
    """DOOR stored, then updated to WIFI: DOOR's id now holds another text. DOOR's memory as first stored."""
    first = await lt.store(DOOR, user_id="ada")
    assert first.memory is not None
    await lt.update(first.memory.id, user_id="ada", content=WIFI)
    return first.memory


async def test_store_of_a_text_whose_id_an_update_kept(mem: Memkit) -> None:
    lt = mem.long_term
    first = await _moved(lt)
    again = await lt.store(DOOR, user_id="ada")
    assert again.status == "stored" and again.memory is not None and again.memory.content == DOOR
    assert again.memory.id == memory_id(again.memory.scope, DOOR, 1) != first.id
    assert await _contents(mem) == sorted([DOOR, WIFI])
    assert (await lt.store(DOOR, user_id="ada")).status == "duplicate"  # found at its new id
    assert await _contents(mem) == sorted([DOOR, WIFI])


async def test_store_many_never_overwrites_the_memory_holding_the_id(mem: Memkit) -> None:
    lt = mem.long_term
    first = await _moved(lt)
    results = await lt.store_many([DOOR, "Something else entirely", DOOR], user_id="ada")
    assert [r.status for r in results] == ["stored", "stored", "duplicate"]
    assert await _contents(mem) == sorted([DOOR, WIFI, "Something else entirely"])
    kept = await lt.get(first.id, user_id="ada")
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
        await _moved(a.long_term)
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
    held = await _moved(lt)
    planned = held  # the plan made before the update: DOOR at its first id
    [vector] = await lt._embed([DOOR])
    result = await create_one(lt.backend, lt.config.collection, planned, vector)
    assert result.status == "stored" and result.memory is not None
    assert result.memory.id == memory_id(planned.scope, DOOR, 1)
    assert await _contents(mem) == sorted([DOOR, WIFI])


async def test_a_batch_repeating_a_text_never_overwrites_what_another_client_wrote_meanwhile(
    mem: Memkit, other: Memkit, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    """[A, A] is one new memory: created only if absent, like a store() (an upsert overwrote the memory another
    client stored, then updated, between this batch's reads and its write)."""
    lt = mem.long_term
    write_fresh = _writes._write_fresh

    async def other_client_first(*args: object) -> None:
        monkeypatch.setattr(_writes, "_write_fresh", write_fresh)
        await _moved(other.long_term)
        await write_fresh(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(_writes, "_write_fresh", other_client_first)
    results = await lt.store_many([DOOR, DOOR], user_id="ada")
    assert [r.status for r in results] == ["stored", "duplicate"]
    assert await _contents(mem) == sorted([DOOR, WIFI])


async def test_a_moved_text_claimed_by_another_client_meanwhile_is_its_duplicate(
    mem: Memkit, other: Memkit, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    lt = mem.long_term
    await _moved(lt)
    claim = _writes.claim_ids

    async def other_client_first(*args: Any) -> Any:
        monkeypatch.setattr(_writes, "claim_ids", claim)
        assert (await other.long_term.store(DOOR, user_id="ada")).status == "stored"  # at the next id
        return await claim(*args)

    monkeypatch.setattr(_writes, "claim_ids", other_client_first)
    assert (await lt.store(DOOR, user_id="ada")).status == "duplicate"
    assert await _contents(mem) == sorted([DOOR, WIFI])


async def test_copies_in_sessions_do_not_hide_the_users_own(mem: Memkit) -> None:
    """The dedupe scan of a user's scope also holds the user's sessions' copies of the text: they filled its
    page, the user's own was missed, and every store wrote one more copy."""
    lt = mem.long_term
    for session in ("s1", "s2", "s3"):
        await lt.store(DOOR, user_id="ada", session_id=session)
    await _moved(lt)
    statuses = [(await lt.store(DOOR, user_id="ada")).status for _ in range(4)]
    assert statuses == ["stored", "duplicate", "duplicate", "duplicate"]
    own = [m for m in (await lt.list(user_id="ada", limit=100)).memories if m.scope.session_id is None]
    assert sorted(m.content for m in own) == sorted([DOOR, WIFI])


async def test_a_text_moved_many_times_is_still_found(mem: Memkit) -> None:
    lt = mem.long_term
    for day in range(17):
        stored = await lt.store("Mood: happy", user_id="ada")
        assert stored.status == "stored" and stored.memory is not None
        await lt.update(stored.memory.id, user_id="ada", content=f"Mood on day {day}: {'gloomy ' * (day + 1)}")
    assert (await lt.store("Mood: happy", user_id="ada")).status == "stored"
    assert [r.status for r in await lt.store_many(["Mood: happy", "Unrelated fact"], user_id="ada")] == [
        "duplicate", "stored"]  # fmt: skip


async def test_a_duplicate_of_a_memory_forgotten_meanwhile_is_stored(
    mem: Memkit, other: Memkit, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    lt = mem.long_term
    first = await lt.store(DOOR, user_id="ada", ttl=3600)
    assert first.memory is not None
    refresh_stored = _claims._refresh_stored

    async def forgotten_first(*args: Any) -> Any:
        await other.long_term.forget(args[2], user_id="ada")
        return await refresh_stored(*args)

    monkeypatch.setattr(_claims, "_refresh_stored", forgotten_first)
    again = await lt.store(DOOR, user_id="ada", importance=0.9)
    assert again.status == "stored" and again.memory is not None and again.memory.importance == 0.9
    [kept] = (await lt.list(user_id="ada")).memories
    assert kept.content == DOOR and kept.expires_at is None


async def test_without_dedupe_every_memory_is_new(store_url: str) -> None:
    async with Memkit(store_url, embedder=HashingEmbedder(64), long_term=LongTermConfig(dedupe=False)) as mem:
        await _moved(mem.long_term)
        await mem.long_term.store(DOOR, user_id="ada")
        await mem.long_term.store(DOOR, user_id="ada")
        assert await _contents(mem) == sorted([DOOR, DOOR, WIFI])


async def test_an_exact_duplicate_without_ttl_keeps_the_memory(mem: Memkit) -> None:
    lt = mem.long_term
    await lt.store(DOOR, user_id="ada", ttl=timedelta(seconds=30))
    again = await lt.store(DOOR, user_id="ada")
    assert again.status == "duplicate" and again.memory is not None and again.memory.expires_at is None
    [kept] = (await lt.list(user_id="ada")).memories
    assert kept.expires_at is None


async def test_an_exact_duplicate_never_shortens_a_memorys_life(mem: Memkit) -> None:
    lt = mem.long_term
    month = await lt.store(DOOR, user_id="ada", ttl=timedelta(days=30))
    assert month.memory is not None and month.memory.expires_at is not None
    assert (await lt.store(DOOR, user_id="ada", ttl=60)).status == "duplicate"
    backfilled = datetime.now(UTC) - timedelta(days=2)  # already expired as stored
    assert (await lt.store(DOOR, user_id="ada", ttl=timedelta(days=1), created_at=backfilled)).status == "duplicate"
    [kept] = (await lt.list(user_id="ada")).memories
    assert kept.expires_at == month.memory.expires_at
    forever = await lt.store(WIFI, user_id="ada")
    assert forever.memory is not None
    assert (await lt.store(WIFI, user_id="ada", ttl=60)).memory.expires_at is None  # type: ignore[union-attr]


async def test_metadata_that_only_looks_equal_is_refreshed(mem: Memkit) -> None:
    lt = mem.long_term
    await lt.store(DOOR, user_id="ada", metadata={"verified": 1})
    await lt.store(DOOR, user_id="ada", metadata={"verified": True})
    assert [m.content for m in (await lt.list(user_id="ada", metadata={"verified": True})).memories] == [DOOR]


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
