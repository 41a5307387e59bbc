"""The reference design's memory-aware agent, one session per process: ``python agent_demo.py SESSION URL``.

Session 1 tells the agent preferences and facts over a short conversation through ``observe``, then the
process exits (closing the client writes what is queued). Session 2, a new process, asks for
``context()`` and prints it as JSON, corrects a fact, and prints the context again. The model is a stand-in
(the loop, not the model, is what is tested); extraction is the offline one.
"""

from __future__ import annotations

import json
import sys

import anyio

from memkit import Memkit

USER = "ada"
SESSION_1 = [
    "Hi! I'm vegetarian, so no meat suggestions please.",
    "I live in Lisbon and I work at Acme as a data engineer.",
    "My sister Bea lives in Porto.",
    "I prefer window seats on flights.",
    "ok thanks",
]
CORRECTION = "Actually, I moved to Berlin last month."
QUERY = "Plan a weekend trip for me: where should I fly from, and where should we eat?"


def reply(text: str, block: str) -> str:
    """Stands in for the model: the block would go into its system prompt."""
    return "Noted!" if block else "Nice to meet you!"


async def say(mem: Memkit, session: str, text: str) -> None:
    ctx = await mem.context(user_id=USER, session_id=session, query=text)
    turn = [{"role": "user", "content": text}, {"role": "assistant", "content": reply(text, ctx.text)}]
    await mem.observe(user_id=USER, session_id=session, messages=turn)


async def main(session: str, url: str) -> None:
    async with Memkit(url, embedder="local", config=False) as mem:
        if session == "1":
            for text in SESSION_1:
                await say(mem, "s1", text)
            return  # the process ends here: what is queued is written as the client closes
        before = await mem.context(user_id=USER, session_id="s2", query=QUERY)
        await say(mem, "s2", CORRECTION)
        after = await mem.context(user_id=USER, session_id="s2", query=QUERY, wait_for_writes=True)
        print(json.dumps({"before": before.text, "after": after.text, "errors": after.errors}))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
