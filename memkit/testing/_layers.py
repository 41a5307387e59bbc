"""Layer conformance: the long-term layer's behaviours on a backend, so an adapter proves the layers work on
it, not only the contract. Provide an async ``backend`` fixture yielding an open, empty backend."""

from __future__ import annotations

from datetime import timedelta

import anyio
import pytest

from memkit._time import utcnow
from memkit.backend import Backend
from memkit.embedders import HashingEmbedder
from memkit.errors import NotFoundError, ScopeError
from memkit.layers._turns import Turn
from memkit.layers.longterm import LongTermMemory, NewMemory

__all__ = ["LongTermConformance"]


async def _layer(backend: Backend) -> LongTermMemory:
    layer = LongTermMemory(backend, HashingEmbedder(64))
    await layer.setup()
    return layer


class LongTermConformance:
    pytestmark = pytest.mark.anyio

    async def test_store_recall_and_isolation(self, backend: Backend) -> None:
        lt = await _layer(backend)
        await lt.store("Ada prefers window seats", user_id="ada", kind="preference", importance=0.7)
        await lt.store("Ada's bank PIN hint is the cat's name", user_id="ada")
        await lt.store("Bob likes hiking", user_id="bob")
        hits = await lt.recall("window seats", user_id="ada")
        assert hits[0].memory.content == "Ada prefers window seats" and hits[0].lexical == pytest.approx(1.0)
        assert all(h.memory.scope.user_id == "bob" for h in await lt.recall("bank PIN cat", user_id="bob", k=10))
        with pytest.raises(ScopeError):
            await lt.recall("anything")
        hits = await lt.recall("hiking", all_scopes=True, k=10)
        assert {h.memory.scope.user_id for h in hits} == {"ada", "bob"}

    async def test_an_agent_id_alone_reads_across_users_only_when_asked(self, backend: Backend) -> None:
        """An agent id without a user matches what every user stored with that agent: reads and deletes by it
        need ``all_scopes=True``, stores do not (the agent's own memories)."""
        lt = await _layer(backend)
        ada = await lt.store("Ada's flight is on Friday", user_id="ada", agent_id="bot")
        await lt.store("Bob's flight is on Monday", user_id="bob", agent_id="bot")
        own = await lt.store("Flights can be rebooked for free", agent_id="bot")
        assert ada.memory is not None and own.memory is not None
        ada_id = ada.memory.id
        refused = [lt.recall("flight", agent_id="bot"), lt.list(agent_id="bot"), lt.get(ada_id, agent_id="bot"),
                   lt.forget(ada_id, agent_id="bot"), lt.forget_all(agent_id="bot"),
                   lt.update(ada_id, agent_id="bot", importance=0.9), lt.forget_all(all_scopes=True)]  # fmt: skip
        for call in refused:
            with pytest.raises(ScopeError):
                await call
        assert (await lt.get(ada_id, user_id="ada", agent_id="bot")).importance == 0.5  # nothing changed
        hits = await lt.recall("flight", agent_id="bot", all_scopes=True, k=10)
        assert {h.memory.scope.user_id for h in hits} == {"ada", "bob", None}
        assert (await lt.get(ada_id, agent_id="bot", all_scopes=True)).content == "Ada's flight is on Friday"
        assert len((await lt.list(agent_id="bot", all_scopes=True)).memories) == 3
        assert await lt.forget_all(agent_id="bot", all_scopes=True) == 3

    async def test_duplicates_and_merges(self, backend: Backend) -> None:
        lt = await _layer(backend)
        first = await lt.store("I live in Berlin.", user_id="u", importance=0.4)
        again = await lt.store("  i live in BERLIN ", user_id="u")
        assert first.memory is not None and again.status == "duplicate" and again.memory is not None
        assert again.memory.id == first.memory.id
        merged = await lt.store("I live in Berlin now", user_id="u", importance=0.9, metadata={"src": "chat"})
        assert merged.status == "merged" and merged.memory is not None and merged.memory.id == first.memory.id
        assert merged.memory.content == "I live in Berlin now" and merged.memory.importance == 0.9
        assert len((await lt.list(user_id="u")).memories) == 1
        assert (await lt.store("I live in Berlin.", user_id="v")).status == "stored"

    async def test_store_many(self, backend: Backend) -> None:
        lt = await _layer(backend)
        await lt.store("the office is on the third floor", user_id="u")
        results = await lt.store_many(
            ["the office is on the third floor", "lunch is at noon", "Lunch is at noon!",
             NewMemory(content="standup at nine", user_id="w", kind="task"), "lunch is at noon now"],
            user_id="u",
        )  # fmt: skip
        assert [r.status for r in results] == ["duplicate", "stored", "duplicate", "stored", "merged"]
        assert results[4].memory is not None and results[4].memory.content == "lunch is at noon now"
        assert sorted(m.content for m in (await lt.list(user_id="u")).memories) == [
            "lunch is at noon now", "the office is on the third floor"]  # fmt: skip
        assert [m.kind for m in (await lt.list(user_id="w")).memories] == ["task"]

    async def test_filters_update_forget(self, backend: Backend) -> None:
        lt = await _layer(backend)
        for i in range(6):
            await lt.store(f"entry {i} word{i}", user_id="u", kind="preference" if i % 3 == 0 else "fact",
                           metadata={"topic": f"t{i % 2}"})  # fmt: skip
        assert len((await lt.list(user_id="u", kinds=["preference"])).memories) == 2
        assert len((await lt.list(user_id="u", metadata={"topic": "t0"})).memories) == 3
        assert {h.memory.kind for h in await lt.recall("entry", user_id="u", kinds=["preference"], k=10)} == {
            "preference"}  # fmt: skip
        target = (await lt.recall("word4", user_id="u", k=1))[0].memory
        updated = await lt.update(target.id, user_id="u", content="entry four moved", importance=0.8)
        assert updated.content == "entry four moved"
        assert await lt.forget(target.id, user_id="u") is True
        with pytest.raises(NotFoundError):
            await lt.get(target.id, user_id="u")
        await lt.store("keep me", user_id="w")
        assert await lt.forget_all(user_id="u") == 5
        assert (await lt.list(user_id="u")).memories == []
        assert len((await lt.list(user_id="w")).memories) == 1

    async def test_expired_memories_are_never_recalled(self, backend: Backend) -> None:
        lt = await _layer(backend)
        past = utcnow() - timedelta(minutes=5)
        await lt.store("temporary door code 4411", user_id="u", created_at=past, ttl=timedelta(minutes=1))
        await lt.store("permanent door address", user_id="u")
        assert [h.memory.content for h in await lt.recall("door code", user_id="u", k=10)] == [
            "permanent door address"]  # fmt: skip
        assert await lt.sweep_expired() == 1

    async def test_forgotten_turn_text_never_comes_back(self, backend: Backend) -> None:
        lt = await _layer(backend)
        said = [Turn(speaker="Jo", text="my locker code is 9137"), Turn(speaker="Sam", text="noted")]
        turns = await lt.add_turns(said, user_id="jo", thread="t")
        await lt.forget_all(user_id="jo")
        await lt.add_turns([Turn(speaker="Jo", text="what was it again?")], user_id="jo", thread="t")
        for hit in await lt.recall("locker code 9137", user_id="jo", k=10):
            assert "9137" not in hit.memory.content and "9137" not in (hit.memory.context or "")
        [again] = (await lt.list(user_id="jo")).memories
        assert again.metadata["position"] == 0 and again.context is None and turns[0].id != again.id

    async def test_concurrent_stores_of_one_sentence_keep_one(self, backend: Backend) -> None:
        lt, other = await _layer(backend), await _layer(backend)  # two clients, as two processes would be
        statuses: list[str] = []

        async def store(layer: LongTermMemory) -> None:
            statuses.append((await layer.store("the wifi password is on the fridge", user_id="u")).status)

        async with anyio.create_task_group() as group:
            for layer in (lt, other) * 3:
                group.start_soon(store, layer)
        assert len((await lt.list(user_id="u")).memories) == 1
        assert sorted(statuses) == ["duplicate"] * 5 + ["stored"]
