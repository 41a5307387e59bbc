"""Layer conformance for the key-value layers (short-term, working memory, tool cache, checkpoints): a backend with only
a key-value face (plain Redis, say) proves they work on it. Provide an async ``backend`` fixture yielding an
open, empty backend."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from memkit.backend import Backend
from memkit.layers.checkpoints import AgentState, CheckpointConfig, Checkpoints
from memkit.layers.shortterm import ShortTermConfig, ShortTermMemory
from memkit.layers.toolcache import ToolCache
from memkit.layers.working import WorkingMemory

__all__ = ["KeyValueLayersConformance"]


async def _short_term(backend: Backend) -> ShortTermMemory:
    layer = ShortTermMemory(backend, ShortTermConfig(max_tokens=300, keep_last=2, tokenizer="estimate"))
    await layer.setup()
    return layer


class KeyValueLayersConformance:
    pytestmark = pytest.mark.anyio

    async def test_a_session_folds_keeps_its_facts_and_stays_its_users(self, backend: Backend) -> None:
        layer = await _short_term(backend)
        session = layer.session("s", user_id="ada")
        await session.add({"role": "system", "content": "Be brief."})
        for i in range(30):
            await session.add({"role": "user", "content": f"Note {i}: the locker code is {1000 + i}."})
        await session.wait_idle()
        messages = await session.to_messages()
        text = "\n".join(m["content"] for m in messages)
        assert await session.summary() and "1029" in text and len(await session.history()) < 31
        assert messages[0] == {"role": "system", "content": "Be brief."}
        assert await layer.session("s", user_id="bob").history() == []
        again = (await _short_term(backend)).session("s", user_id="ada")  # another client, same storage
        assert await again.to_messages() == messages

    async def test_working_memory_sets_updates_expires_and_clears_one_task(self, backend: Backend) -> None:
        working = WorkingMemory(backend)
        task, other = working.task("t", user_id="ada"), working.task("t", user_id="bob")
        await task.set("goal", "Lisbon", importance=0.9)
        await task.set("lease", "w1", ttl_s=0.2)
        await other.set("goal", "Rome")
        await anyio.sleep(0.3)

        async def append(n: int) -> None:
            await task.update("seen", lambda seen: [*(seen or []), n])

        async with anyio.create_task_group() as group:
            for n in range(10):
                group.start_soon(append, n)
        assert sorted(await task.get("seen")) == list(range(10))
        assert await task.get("lease") is None and await task.get("goal") == "Lisbon"
        assert await task.clear() >= 2 and await task.items() == [] and await other.get("goal") == "Rome"

    async def test_the_tool_cache_runs_a_call_once_and_forgets_on_demand(self, backend: Backend) -> None:
        cache, runs = ToolCache(backend), []

        async def tool() -> dict[str, Any]:
            runs.append(1)
            await anyio.sleep(0.02)
            return {"celsius": 4.5}

        async with anyio.create_task_group() as group:
            for _ in range(20):
                group.start_soon(cache.call, "weather", {"city": "Oslo"}, tool)
        assert await cache.call("weather", {"city": "Oslo"}, tool) == {"celsius": 4.5} and len(runs) == 1
        assert await cache.invalidate("weather") == 1
        await cache.call("weather", {"city": "Oslo"}, tool)
        assert len(runs) == 2

    async def test_checkpoints_save_atomically_resume_and_prune(self, backend: Backend) -> None:
        layer = await _short_term(backend)
        checkpoints = Checkpoints(backend, CheckpointConfig(keep_last=5))
        session = layer.session("agent", user_id="ada")
        task = WorkingMemory(backend).task("agent", user_id="ada")
        ids = []
        for turn in range(8):
            await session.add({"role": "user", "content": f"turn {turn}"})
            await task.set("turn", turn)
            state = await checkpoints.capture(session=session, task=task, state={"turn": turn}, turn=turn)
            ids.append(await checkpoints.save("thread", state, user_id="ada"))
        listed = await checkpoints.list("thread", user_id="ada")
        assert [c.id for c in listed] == ids[::-1][:5] and listed[0].parent_id == ids[-2]
        await session.add({"role": "user", "content": "lost in the crash"})
        saved = await checkpoints.load("thread", type=AgentState, user_id="ada")
        await checkpoints.resume(saved, session=session, task=task)
        assert (await session.history())[-1].content == "turn 7" and await task.get("turn") == 7
        assert await checkpoints.load("thread", default=None, user_id="bob") is None
        assert await checkpoints.delete("thread", user_id="ada") == 5
