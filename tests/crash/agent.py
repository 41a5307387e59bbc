"""The agent loop the crash test kills: every turn calls a cached tool, adds to its session and working
memory, and checkpoints; on start it resumes from the last checkpoint.

    python tests/crash/agent.py URL EVENT_LOG TURNS      (environment: CRASH_RUN, the run's number)

Each step it has done is appended to EVENT_LOG and fsynced before it goes on: the test's ground truth.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio

from memkit import AgentState, Memkit, ShortTermConfig, ToolCacheConfig

URL, EVENTS, TURNS = sys.argv[1], sys.argv[2], int(sys.argv[3])
RUN = os.environ.get("CRASH_RUN", "0")
THREAD = "crash-thread"


def event(what: str) -> None:
    fd = os.open(EVENTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{RUN} {what}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


async def main() -> None:
    # A short lease: a run killed inside the tool holds the next run up for half a second, not thirty.
    cache = ToolCacheConfig(lease_s=0.5, poll_s=0.01)
    # A budget nothing reaches: every message stays verbatim, so the test can check each one.
    session_config = ShortTermConfig(max_tokens=1_000_000, tokenizer="estimate")
    options: dict[str, Any] = {"tool_cache": cache, "short_term": session_config}
    async with Memkit(URL, embedder="hashing", layer_urls={"long_term": "memory://"}, **options) as mem:
        session = mem.short_term.session("crash", user_id="ada")
        task = mem.working.task("crash", user_id="ada")
        saved: AgentState | None = await mem.checkpoints.load(THREAD, type=AgentState, default=None)
        if saved is None:  # a run killed before its first checkpoint may have left a partial turn
            await session.clear()
            await task.clear()
            start, total = 0, 0
        else:
            await mem.checkpoints.resume(saved, session=session, task=task)
            start, total = saved.turn + 1, saved.state["total"]
        event(f"ready {start}")
        print("ready", flush=True)
        for turn in range(start, TURNS):
            total = await one_turn(mem, session, task, turn, total)
        event("done")


async def one_turn(mem: Memkit, session: Any, task: Any, turn: int, total: int) -> int:
    """One turn; ``total`` (the sum of every answer so far) is carried only by the checkpoints: a turn
    applied twice, or one lost, shows in it."""

    async def lookup() -> dict[str, int]:
        event(f"tool {turn}")
        return {"answer": turn * 7}

    result = await mem.tool_cache.call("lookup", {"turn": turn}, lookup)
    event(f"cached {turn}")
    await session.add({"role": "user", "content": f"turn {turn}: what is {turn} times 7?"})
    await session.add({"role": "assistant", "content": f"turn {turn}: {result['answer']}"})
    await task.set("last_turn", turn)
    await task.update("turns_done", lambda done: (done or 0) + 1)  # wrong after a kill unless resume restores it
    total += result["answer"]
    state = await mem.checkpoints.capture(session=session, task=task, state={"turn": turn, "total": total}, turn=turn)
    await mem.checkpoints.save(THREAD, state)
    event(f"saved {turn}")
    return total


if __name__ == "__main__":
    anyio.run(main)
