"""Superseding long-term memories on every backend: the old memory kept as history and out of recall by default,
the chain walked by ``history()``, restating a superseded fact, and what supersede refuses."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from memkit import LongTermConfig, Memkit, NotFoundError
from memkit.embedders import HashingEmbedder

pytestmark = pytest.mark.anyio


@pytest.fixture
async def mem(store_url: str) -> AsyncIterator[Memkit]:
    async with Memkit(store_url, embedder=HashingEmbedder(64)) as client:
        yield client


async def test_superseded_memory_is_history_not_recalled(mem: Memkit) -> None:
    lt = mem.long_term
    paris = (await lt.store("The user lives in Paris", user_id="u", kind="fact", importance=0.7)).memory
    await lt.store("The user likes jazz", user_id="u")
    assert paris is not None
    result = await lt.supersede(paris.id, "The user lives in Porto", user_id="u", metadata={"why": "moved"})
    new = result.new.memory
    assert result.new.status == "stored" and new is not None and new.content == "The user lives in Porto"
    assert new.kind == "fact" and new.importance == 0.7  # taken from the old memory
    assert result.old.superseded_by == new.id and result.old.superseded_at is not None

    hits = await lt.recall("where does the user live", user_id="u", k=5)
    assert [h.memory.content for h in hits if "lives" in h.memory.content] == ["The user lives in Porto"]
    every = await lt.recall("where does the user live", user_id="u", k=5, include_superseded=True)
    assert {h.memory.content for h in every} >= {"The user lives in Paris", "The user lives in Porto"}

    # The old memory is still there, marked, and both ends of the chain give the same history.
    stored = await lt.get(paris.id, user_id="u")
    assert stored.superseded_by == new.id
    for start in (paris.id, new.id):
        assert [m.content for m in await lt.history(start, user_id="u")] == [
            "The user lives in Porto",
            "The user lives in Paris",
        ]


async def test_a_chain_of_supersessions_and_moving_back(mem: Memkit) -> None:
    lt = mem.long_term
    paris = (await lt.store("The user lives in Paris", user_id="u")).memory
    assert paris is not None
    porto = (await lt.supersede(paris.id, "The user lives in Porto", user_id="u")).new.memory
    assert porto is not None
    lisbon = (await lt.supersede(porto.id, "The user lives in Lisbon", user_id="u")).new.memory
    assert lisbon is not None
    assert [m.content for m in await lt.history(paris.id, user_id="u")] == [
        "The user lives in Lisbon",
        "The user lives in Porto",
        "The user lives in Paris",
    ]
    # Moving back: the superseded record with that text becomes current again (same id), Lisbon is history.
    back = await lt.supersede(lisbon.id, "The user lives in Paris", user_id="u")
    assert back.new.status == "stored" and back.new.memory is not None and back.new.memory.id == paris.id
    assert back.new.memory.superseded_by is None
    hits = await lt.recall("The user lives in", user_id="u", k=10)
    assert [h.memory.content for h in hits] == ["The user lives in Paris"]


async def test_storing_a_superseded_text_again_makes_it_current(mem: Memkit) -> None:
    lt = mem.long_term
    tea = (await lt.store("The user drinks green tea", user_id="u")).memory
    assert tea is not None
    await lt.supersede(tea.id, "The user drinks black coffee", user_id="u")
    again = await lt.store("The user drinks green tea", user_id="u")
    assert again.status == "stored" and again.memory is not None and again.memory.superseded_by is None
    contents = {h.memory.content for h in await lt.recall("drinks", user_id="u", k=10)}
    assert contents == {"The user drinks green tea", "The user drinks black coffee"}


async def test_a_near_duplicate_never_merges_into_history(mem: Memkit) -> None:
    lt = mem.long_term
    old = (await lt.store("The user's favourite colour is a deep shade of blue", user_id="u")).memory
    assert old is not None
    # Worded almost the same: supersede still keeps two memories, the old one as history.
    result = await lt.supersede(old.id, "The user's favourite colour is a deep shade of green", user_id="u")
    assert result.new.status == "stored" and result.new.memory is not None and result.new.memory.id != old.id
    assert result.old.superseded_by == result.new.memory.id
    # A later near-duplicate of the superseded text merges into the current memory or stands alone, never into
    # history.
    later = await lt.store("The user's favourite colour is a deep shade of blue!", user_id="u")
    assert later.memory is not None and later.memory.superseded_by is None


async def test_recall_looks_past_many_superseded_memories(mem: Memkit) -> None:
    lt = mem.long_term
    current = (await lt.store("The user's desk is number 0", user_id="u")).memory
    assert current is not None
    for n in range(1, 13):
        current = (await lt.supersede(current.id, f"The user's desk is number {n}", user_id="u")).new.memory
        assert current is not None
    await lt.store("The weather was grey", user_id="u")
    hits = await lt.recall("The user's desk is number", user_id="u", k=2)
    assert [h.memory.content for h in hits] == ["The user's desk is number 12", "The weather was grey"]
    assert len(await lt.recall("desk number", user_id="u", k=20, include_superseded=True)) == 14
    assert len(await lt.history(current.id, user_id="u")) == 13


async def test_same_text_rejected_and_missing(mem: Memkit) -> None:
    lt = mem.long_term
    memory = (await lt.store("The user is vegetarian", user_id="u")).memory
    assert memory is not None
    same = await lt.supersede(memory.id, "the user is VEGETARIAN.", user_id="u")
    assert same.new.status == "duplicate" and same.old.superseded_by is None
    with pytest.raises(NotFoundError):
        await lt.supersede("no-such-id", "The user is vegan", user_id="u")
    with pytest.raises(NotFoundError):  # another user's memory is not found, let alone superseded
        await lt.supersede(memory.id, "The user is vegan", user_id="someone-else")
    assert (await lt.get(memory.id, user_id="u")).superseded_by is None


async def test_rejected_replacement_leaves_the_old_memory_current(store_url: str) -> None:
    async with Memkit(store_url, embedder="hashing", long_term=LongTermConfig(min_importance=0.3)) as mem:
        memory = (await mem.long_term.store("The user is vegetarian", user_id="u", importance=0.5)).memory
        assert memory is not None
        result = await mem.long_term.supersede(memory.id, "The user is vegan", user_id="u", importance=0.1)
        assert result.new.status == "rejected" and result.old.superseded_by is None
        assert [h.memory.content for h in await mem.long_term.recall("vegan", user_id="u")] == [
            "The user is vegetarian"
        ]
