"""``memkit demo``: long-term memory surviving a process.

A first process stores a user's preferences and facts in a SQLite file, then a second, new process opens
the same file and recalls them, printing each hit's scores. Each step runs as
``python -m memkit.cli._demo STEP URL``, so it is no subcommand of ``memkit`` (and not in its help).
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
DEMO_MEMORIES: tuple[tuple[str, str, float], ...] = (
    ("preference", "I prefer window seats on flights, never the aisle.", 0.7),
    ("preference", "Please keep answers short; I read them on my phone.", 0.8),
    ("fact", "I am allergic to peanuts.", 0.95),
    ("fact", "My daughter Lina starts school in Lisbon in September.", 0.6),
    ("fact", "I work as a data engineer at a logistics company.", 0.5),
    ("decision", "We chose Postgres over MongoDB for the billing service.", 0.6),
    ("preference", "I drink my coffee black, no sugar.", 0.4),
)
DEMO_QUERIES = (
    "Book me a flight to Porto; any seating wishes?",
    "Which snacks should I avoid ordering for Ada?",
    "What database did the team pick for billing?",
)


async def _demo_store(url: str) -> None:
    from memkit._client import Memkit

    async with Memkit(url, embedder="local") as mem:
        await mem.long_term.forget_all(user_id=DEMO_USER)
        for kind, content, importance in DEMO_MEMORIES:
            result = await mem.long_term.store(content, user_id=DEMO_USER, kind=kind, importance=importance)
            print(f"  {result.status:<8} [{kind}] {content}")


async def _demo_recall(url: str) -> None:
    from memkit._client import Memkit

    async with Memkit(url, embedder="local") as mem:
        await mem.embedder.embed(["warm up"])  # load the model before timing recalls
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


def _run_step(step: str, url: str) -> int:
    """Each step in a new Python process, so nothing but the file carries the memories over."""
    return subprocess.call([sys.executable, "-m", "memkit.cli._demo", step, url])


def demo(args: argparse.Namespace) -> int:
    url = f"sqlite:///{args.db}"
    print(f"memkit demo: long-term memory in {args.db} (embedded SQLite, local MiniLM embedder, no network)\n")
    print(f"[process 1] storing {len(DEMO_MEMORIES)} memories for user {DEMO_USER!r}:")
    if _run_step("store", url) != 0:
        return 1
    print("\n[process 2] a new process recalls them from the same file:")
    return _run_step("recall", url)


def _step(argv: list[str]) -> int:
    step, url = argv
    print(f"  (pid {os.getpid()})")
    anyio.run(_demo_store if step == "store" else _demo_recall, url)
    return 0


if __name__ == "__main__":
    sys.exit(_step(sys.argv[1:]))
