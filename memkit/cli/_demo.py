"""``memkit demo``: the memory-aware agent across two processes.

Process 1 holds a short conversation with a user: each finished turn goes to ``mem.observe()``, whose
background writer decides what is worth remembering (printed: added, ignored as filler, ...), and the
process exits. Process 2, a new one, opens the same SQLite file: ``mem.context()`` for a new question
shows what it remembers, each recall's scores are printed, and a correction ("actually, I moved to Berlin")
supersedes the old fact. Each step runs as ``python -m memkit.cli._demo STEP URL``, so it is no subcommand
of ``memkit`` (and not in its help).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import anyio

__all__ = ["demo"]

DEMO_USER = "ada"
SESSION_1 = (
    "Hi! I prefer window seats on flights, never the aisle.",
    "Please keep answers short; I read them on my phone.",
    "I am allergic to peanuts.",
    "I live in Lisbon and I work as a data engineer at a logistics company.",
    "We chose Postgres over MongoDB for the billing service.",
    "ok thanks",
)
DEMO_QUERIES = (
    "Book me a flight to Porto; any seating wishes?",
    "Which snacks should I avoid ordering for Ada?",
    "What database did the team pick for billing?",
)
CORRECTION = "Actually, I moved to Berlin last month."


async def _demo_observe(url: str) -> None:
    from memkit._client import Memkit
    from memkit._observe import ObserveConfig

    def show(event: object) -> None:
        memory = getattr(event, "memory", None)
        what = memory.content if memory is not None else getattr(event, "text", None) or "-"
        print(f"    {getattr(event, 'action', '?'):<9} {what}  ({getattr(event, 'reason', '')})")

    async with Memkit(url, embedder="local", config=False, observe=ObserveConfig(on_event=show)) as mem:
        await mem.long_term.forget_all(user_id=DEMO_USER)
        await mem.graph.forget_all(user_id=DEMO_USER)
        for text in SESSION_1:
            print(f'  user: "{text}"')
            turn = [{"role": "user", "content": text}, {"role": "assistant", "content": "Noted."}]
            await mem.observe(user_id=DEMO_USER, session_id="session-1", messages=turn)
            await mem.flush(DEMO_USER)  # only to print each turn's decisions under it


async def _demo_context(url: str) -> None:
    from memkit._client import Memkit

    async with Memkit(url, embedder="local", config=False) as mem:
        await mem.embedder.embed(["warm up"])  # load the model before timing
        for query in DEMO_QUERIES:
            started = time.perf_counter()
            hits = await mem.long_term.recall(query, user_id=DEMO_USER, k=3)
            elapsed_ms = (time.perf_counter() - started) * 1000
            print(f'\n  query: "{query}"  ({elapsed_ms:.1f} ms, query embedding included)')
            print("    score   sim    lex    rec    imp   memory")
            for hit in hits:
                print(
                    f"    {hit.score:.3f}  {hit.similarity:.3f}  {hit.lexical:.3f}  {hit.recency:.3f}"
                    f"  {hit.importance:.2f}  {hit.memory.content}"
                )
        print(f'\n  user: "{CORRECTION}"')
        await mem.observe(user_id=DEMO_USER, session_id="session-2", messages=[{"role": "user", "content": CORRECTION}])
        ctx = await mem.context(user_id=DEMO_USER, query="Where should my next trip start from?", wait_for_writes=True)
        print(f"\n  context() for the next model call ({ctx.tokens} tokens):\n")
        print("\n".join(f"    {line}" for line in ctx.text.splitlines()))


def _run_step(step: str, url: str) -> int:
    """Each step in a new Python process, so nothing but the file carries the memories over. A step killed
    by a signal exits as a shell reports it (128 + the signal)."""
    code = subprocess.call([sys.executable, "-m", "memkit.cli._demo", step, url])
    return 128 - code if code < 0 else code


def demo(args: argparse.Namespace) -> int:
    url = f"sqlite:///{args.db}"
    print(f"memkit demo: an agent's memory in {args.db} (embedded SQLite, local MiniLM embedder, no network)\n")
    print(f"[process 1] a conversation with user {DEMO_USER!r}, each turn observed:")
    code = _run_step("observe", url)
    if code != 0:
        return code
    print("\n[process 2] a new process remembers, from the same file:")
    return _run_step("context", url)


def _step(argv: list[str]) -> int:
    """One step of the demo; an error is told as the other commands tell theirs (one line and what to do)."""
    from memkit.cli._output import ExitCode, classify

    step, url = argv
    print(f"  (pid {os.getpid()})")
    try:
        anyio.run(_demo_observe if step == "observe" else _demo_context, url)
    except KeyboardInterrupt:
        print("memkit demo: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except Exception as exc:
        code, message, hint = classify(exc)
        print(f"memkit demo: error: {message}", file=sys.stderr)
        if code == ExitCode.UNREACHABLE:
            hint = "choose a file in a folder you can write to: memkit demo --db PATH"
        if hint:
            print(f"  {hint}", file=sys.stderr)
        return int(code)
    return 0


if __name__ == "__main__":
    sys.exit(_step(sys.argv[1:]))
