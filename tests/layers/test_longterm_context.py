"""Near-duplicates are judged by what a memory says, not by its indexed context: two facts stated in reply to one
question share that context, and must stay two memories (in one batch or stored one after the other)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from memkit import Memkit, NewMemory

pytestmark = pytest.mark.anyio

QUESTION = ("So tell me a bit about yourself: where do you live these days, what do you do for a living, and "
            "what do you like to do on weekends when you are not working?")  # fmt: skip


@pytest.fixture
async def mem(embedded_url: str) -> AsyncIterator[Memkit]:
    async with Memkit(embedded_url, embedder="hashing") as client:
        yield client


async def test_facts_sharing_a_context_stay_apart(mem: Memkit) -> None:
    lt = mem.long_term
    first = await lt.store("The user lives in Porto", user_id="u", context=QUESTION)
    second = await lt.store("The user works as a nurse", user_id="u", context=QUESTION)
    assert (first.status, second.status) == ("stored", "stored")
    pair = [NewMemory(content="The user hikes on weekends", context=QUESTION),
            NewMemory(content="The user plays the cello", context=QUESTION)]  # fmt: skip
    batch = await lt.store_many(pair, user_id="u")
    assert [r.status for r in batch] == ["stored", "stored"]
    assert len((await lt.list(user_id="u")).memories) == 4


async def test_the_same_words_still_merge(mem: Memkit) -> None:
    lt = mem.long_term
    await lt.store("The user lives in Porto with two cats and a dog", user_id="u", context="Where do you live?")
    again = await lt.store("The user lives in Porto with two cats and a dog.", user_id="u", context="And pets?")
    assert again.status == "duplicate"
    near = await lt.store(
        "The user lives in Porto with two cats and a dog now", user_id="u", context="Where do you live?"
    )
    assert near.status == "merged" and near.memory is not None
    assert near.memory.content == "The user lives in Porto with two cats and a dog now"
