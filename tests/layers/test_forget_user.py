"""``Memkit.forget_user``: one user erased from every layer, on every backend; another user with a name that
starts the same way ("ada" / "adam") keeps everything."""

from __future__ import annotations

import pytest

from memkit import Episode, Memkit, ScopeError

pytestmark = pytest.mark.anyio


async def _remember_everything(mem: Memkit, user: str) -> None:
    await mem.long_term.store(f"{user} likes tea", user_id=user)
    await mem.long_term.store(f"{user} works with the agent", user_id=user, agent_id="planner", session_id="s1")
    await mem.episodic.record(Episode(trigger=f"book a trip for {user}", outcome="success"), user_id=user)
    await mem.graph.upsert_edge(user, "lives_in", "Lisbon", user_id=user)
    await mem.graph.upsert_edge(user, "works_at", "Acme", user_id=user, agent_id="planner")  # another owner's graph
    await mem.working.task("trip", user_id=user).set("city", "Porto")
    await mem.working.task("trip", user_id=user, agent_id="planner").set("days", 3)
    await mem.checkpoints.save("chat", {"turn": 1}, user_id=user)
    session = mem.short_term.session("chat", user_id=user)
    await session.add({"role": "user", "content": f"hi, I am {user}"})


async def _held(mem: Memkit, user: str) -> dict[str, int]:
    return {
        "memories": len((await mem.long_term.list(user_id=user)).memories),
        "episodes": len((await mem.episodic.list(user_id=user)).episodes),
        "graph": len((await mem.graph.related(user, user_id=user)).edges) if await mem.graph.resolve(
            user, user_id=user) else 0,
        "agent_graph": len(await mem.graph.edges(user, user_id=user, agent_id="planner")),
        "working": len(await mem.working.task("trip", user_id=user).items())
        + len(await mem.working.task("trip", user_id=user, agent_id="planner").items()),
        "checkpoints": len(await mem.checkpoints.list("chat", user_id=user)),
        "session": len(await mem.short_term.session("chat", user_id=user).to_messages()),
    }  # fmt: skip


async def test_forget_user_erases_every_layer_and_nobody_else(store_url: str) -> None:
    async with Memkit(store_url, embedder="hashing", config=False) as mem:
        for user in ("ada", "adam"):
            await _remember_everything(mem, user)
        everything = {"memories": 2, "episodes": 1, "graph": 1, "agent_graph": 1, "working": 2, "checkpoints": 1,
                      "session": 1}  # fmt: skip
        assert await _held(mem, "ada") == everything
        gone = await mem.forget_user("ada")
        assert (gone.memories, gone.episodes, gone.graph_items, gone.working_items, gone.sessions) == (2, 1, 6, 2, 1)
        assert gone.checkpoint_keys >= 2  # the thread's checkpoint and its index
        assert await _held(mem, "ada") == dict.fromkeys(everything, 0)
        assert await _held(mem, "adam") == everything
        again = await mem.forget_user("ada")  # nothing left: every count 0
        assert (again.memories, again.working_items, again.checkpoint_keys, again.sessions) == (0, 0, 0, 0)


async def test_forget_user_needs_a_user_id() -> None:
    async with Memkit("memory://", embedder="hashing", config=False) as mem:
        for bad in ("", None, 5):
            with pytest.raises(ScopeError, match="user_id"):
                await mem.forget_user(bad)  # type: ignore[arg-type]
