"""memkit under pytest-asyncio (strict mode), the way a user tests an agent: an async fixture that opens
memkit and yields it, tests marked ``asyncio``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from memkit import ContentError, Memkit, MemkitError


@pytest_asyncio.fixture
async def mem(tmp_path: Path) -> AsyncIterator[Memkit]:
    async with Memkit(f"sqlite:///{tmp_path / 'agent.db'}", embedder="hashing") as client:
        yield client


@pytest.mark.asyncio
async def test_store_and_recall(mem: Memkit) -> None:
    await mem.long_term.store("The user's favourite colour is teal.", user_id="ada")
    hits = await mem.long_term.recall("favourite colour", user_id="ada")
    assert hits and "teal" in hits[0].memory.content


@pytest.mark.asyncio
async def test_memkit_errors_are_catchable(mem: Memkit) -> None:
    with pytest.raises(ContentError):
        await mem.long_term.store("", user_id="ada")
    try:
        await mem.long_term.recall("x" * 10_000, user_id="ada")
    except MemkitError as exc:
        assert "limit" in str(exc)
    else:  # pragma: no cover - reported by the assertion
        pytest.fail("an oversized query must raise a memkit error")


@pytest.mark.asyncio
async def test_open_and_aclose_as_framework_hooks(tmp_path: Path) -> None:
    mem = Memkit(f"sqlite:///{tmp_path / 'hooks.db'}", embedder="hashing")
    await mem.open()
    try:
        await mem.long_term.store("opened by a start-up hook", user_id="u")
    finally:
        await mem.aclose()


@pytest.mark.asyncio
async def test_an_agent_loop_with_short_term_and_working_memory(mem: Memkit) -> None:
    """The fixture closes memkit in another task, possibly while a fold runs in the background."""
    chat = mem.short_term.session("loop", user_id="ada")
    task = mem.working.task("loop-task", user_id="ada")
    for turn in range(60):
        await chat.add({"role": "user", "content": f"Step {turn}: please check price number {turn * 3}."})
        await task.set("last_step", turn)
        await chat.add({"role": "assistant", "content": f"Checked: {turn * 3} euros."})
    messages = await chat.to_messages()
    assert messages[-1]["content"] == "Checked: 177 euros."
    assert await task.get("last_step") == 59


def test_plain_asyncio_run_closes_with_a_fold_in_flight(tmp_path: Path) -> None:
    import asyncio

    from memkit import ShortTermConfig

    class SlowSummarizer:
        async def summarize(self, previous: str, messages: object, *, max_tokens: int, tokenizer: object) -> str:
            await asyncio.sleep(30)  # still running when the program leaves its async with
            return "never"

    async def agent() -> list[dict[str, object]]:
        config = ShortTermConfig(max_tokens=300, keep_last=2, summarizer=SlowSummarizer(), tokenizer="estimate")
        async with Memkit(f"sqlite:///{tmp_path / 'run.db'}", embedder="hashing", short_term=config) as mem:
            chat = mem.short_term.session("s")
            for i in range(40):
                await chat.add({"role": "user", "content": f"Message {i} with a few more words in it."})
            await asyncio.sleep(0.05)  # the fold has started
            return await chat.to_messages()

    messages = asyncio.run(asyncio.wait_for(agent(), timeout=10))
    assert messages[-1]["content"] == "Message 39 with a few more words in it."


@pytest.mark.asyncio
async def test_the_agent_loop_in_a_fixture(mem: Memkit) -> None:
    await mem.observe(user_id="ada", session_id="s1", messages=[{"role": "user", "content": "I live in Lyon."}])
    ctx = await mem.context(user_id="ada", session_id="s1", query="Where do I live?", wait_for_writes=True)
    assert "Lyon" in ctx.text and ctx.errors == {}
    with pytest.raises(MemkitError):
        await mem.observe(user_id="ada", messages=[])


def test_the_agent_loop_under_plain_asyncio(tmp_path: Path) -> None:
    import asyncio

    async def main() -> str:
        try:
            async with Memkit(f"sqlite:///{tmp_path / 'a.db'}", embedder="hashing") as client:
                await client.observe(user_id="ada", messages=[{"role": "user", "content": "I work at Acme."}])
                await client.context(user_id="ada", query="", wait_for_writes=True)  # an empty query
        except ContentError as exc:  # caught around the block, as itself
            return str(exc)
        return "no error"

    assert "query" in asyncio.run(main())

    async def written() -> list[str]:
        async with Memkit(f"sqlite:///{tmp_path / 'a.db'}", embedder="hashing") as client:
            return [m.content for m in (await client.long_term.list(user_id="ada")).memories]

    assert "The user works at Acme." in asyncio.run(written())  # the queued turn was written on the way out
