"""Conversation turns: indexed context, numbering across calls and processes, neighbour-aware recall."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memkit import LongTermConfig, Memkit, Turn
from memkit.embedders import CachedEmbedder, HashingEmbedder

pytestmark = pytest.mark.anyio

DAY = datetime(2024, 3, 1, 12, tzinfo=UTC)
DIALOGUE = [
    ("Sam", "Hey Jo, how was your weekend?"),
    ("Jo", "Great! I finally went to the pottery class I told you about."),
    ("Sam", "Nice, what did you make there?"),
    ("Jo", "A lopsided blue teapot. My grandmother Ilse loved it anyway."),
    ("Sam", "Ha! By the way, are you still training for the half marathon?"),
    ("Jo", "Yes, the race is in Rotterdam in April."),
    ("Sam", "I switched jobs, I now work at a bakery downtown."),
    ("Jo", "That explains the croissants you brought!"),
]


def turns(start: int = 0, stop: int | None = None) -> list[Turn]:
    return [Turn(speaker=s, text=t, at=DAY + timedelta(minutes=i), metadata={"n": i})
            for i, (s, t) in enumerate(DIALOGUE[start:stop], start)]  # fmt: skip


async def test_turns_keep_context_out_of_content(store_url: str) -> None:
    async with Memkit(store_url, embedder=HashingEmbedder(64)) as mem:
        stored = await mem.long_term.add_turns(turns(), user_id="jo")
        assert stored[0].content == "Sam: Hey Jo, how was your weekend?"
        assert stored[1].content == "Jo: Great! I finally went to the pottery class I told you about."
        assert stored[0].context is None and stored[1].context == stored[0].content
        assert [m.metadata["position"] for m in stored] == list(range(len(DIALOGUE)))
        assert stored[3].source == "Jo" and stored[3].created_at == DAY + timedelta(minutes=3)
        hits = await mem.long_term.recall("what did Jo make?", user_id="jo", k=10)
        assert all("\n" not in hit.memory.content for hit in hits)


async def test_positions_continue_across_calls_and_processes(store_url: str) -> None:
    async with Memkit(store_url, embedder=HashingEmbedder(64)) as mem:
        first = await mem.long_term.add_turns(turns(0, 3), user_id="jo", thread="chat")
        second = await mem.long_term.add_turns(turns(3, 5), user_id="jo", thread="chat")
        other = await mem.long_term.add_turns(turns(0, 1), user_id="jo", thread="other")
    assert [m.metadata["position"] for m in first + second] == [0, 1, 2, 3, 4]
    assert second[0].context == first[-1].content  # context carries over between calls
    assert other[0].metadata["position"] == 0 and other[0].context is None
    if store_url.startswith("sqlite"):
        async with Memkit(store_url, embedder=HashingEmbedder(64)) as mem:
            third = await mem.long_term.add_turns(turns(5, 6), user_id="jo", thread="chat")
        assert third[0].metadata["position"] == 5 and third[0].context == second[-1].content


async def test_neighbour_turn_answers_the_question(store_url: str, local_embedder: CachedEmbedder) -> None:
    """The question matches Sam's turn; the answer is in Jo's reply after it."""
    async with Memkit(store_url, embedder=local_embedder) as mem:
        await mem.long_term.add_turns(turns(), user_id="jo")
        hits = await mem.long_term.recall("What did Jo make at the pottery class?", user_id="jo", k=3)
        contents = [hit.memory.content for hit in hits]
        assert "Jo: A lopsided blue teapot. My grandmother Ilse loved it anyway." in contents
        assert any(hit.neighbour > 0 for hit in hits)
        top = hits[0]
        assert top.speaker > 0  # the question names Jo, who said it
        assert top.score == pytest.approx(top.neighbour + top.speaker + top.session + top.time + sum(
            w * s for w, s in ((0.5, top.similarity), (0.5, top.lexical), (0.05, top.recency), (0.1, top.importance))
        ), rel=1e-4)  # fmt: skip
        # The turn after an answer carries the answer as context, so both rank high: the answer is in the top 2.
        hits = await mem.long_term.recall("Where is the race?", user_id="jo", k=2)
        assert "Jo: Yes, the race is in Rotterdam in April." in [hit.memory.content for hit in hits]


async def test_fusion_and_neighbour_options(store_url: str) -> None:
    embedder = CachedEmbedder(HashingEmbedder(64))
    for config in (LongTermConfig(fusion="rrf"), LongTermConfig(neighbour_weight=0.0)):
        async with Memkit(store_url, embedder=embedder, long_term=config) as mem:
            await mem.long_term.add_turns(turns(), user_id="jo")
            hits = await mem.long_term.recall("bakery croissants", user_id="jo", k=3)
            assert len(hits) == 3 and all(hit.neighbour == 0 for hit in hits)
            assert "bakery" in hits[0].memory.content or "croissants" in hits[0].memory.content


async def test_bad_turns_write_nothing(store_url: str) -> None:
    from memkit import ContentError

    async with Memkit(store_url, embedder=HashingEmbedder(64)) as mem:
        bad = [*turns(0, 2), Turn(speaker="Sam", text="  ")]  # a long turn is not bad: see test_long_turns
        with pytest.raises(ContentError):
            await mem.long_term.add_turns(bad, user_id="jo")
        assert (await mem.long_term.list(user_id="jo")).memories == []
        assert (await mem.long_term.add_turns(turns(0, 1), user_id="jo"))[0].metadata["position"] == 0


async def test_two_clients_appending_to_one_thread_never_share_a_position(store_url: str) -> None:
    if store_url.startswith("memory://"):
        pytest.skip("memory:// is private to one client")
    from functools import partial

    import anyio

    embedder = HashingEmbedder(64)
    async with Memkit(store_url, embedder=embedder) as a, Memkit(store_url, embedder=embedder) as b:
        async with anyio.create_task_group() as group:
            for client in (a, b):
                for i in range(5):
                    group.start_soon(partial(client.long_term.add_turns, turns(i, i + 1), user_id="jo"))
        memories = (await a.long_term.list(user_id="jo", limit=100)).memories
    positions = sorted(m.metadata["position"] for m in memories)
    assert positions == list(range(10))
