"""The memory-aware agent's two calls: ``context()`` before a model call, ``observe()`` after a turn.

    python -m benchmarks.context --json out/context.json [--plot out/context.png] [--url memory://] [--embedder local]

A store of 10,000 memories of 100 users (generated first-person facts, 100 each, embedded by the packaged
local model unless ``--embedder`` says otherwise), then:

- ``context_p50_ms`` / ``context_p95_ms``: 200 ``context()`` calls, each a new question of a random user
  (so the query embedding is part of it), all four sections read.
- ``observe_return_p50_us``: 1,000 ``observe()`` calls (a user message and the assistant's answer), how
  long each takes to return (the queue's writer runs behind, with the offline extractor).
- ``observe_to_recallable_p50_ms``: 100 turns each stating a new fact, from ``observe()`` until ``recall``
  of that user finds it (``flush`` for the user, then the recall).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import anyio
import numpy as np
from tqdm import tqdm

from ._report import Panel, bar_panels, print_table, write_json

USERS, PER_USER = 100, 100
CONTEXTS, OBSERVES, RECALLABLE = 200, 1_000, 100
_THINGS = ["jazz", "sushi", "hiking", "chess", "Python", "tea", "cycling", "opera", "pottery", "tennis"]
_PLACES = ["Lyon", "Porto", "Oslo", "Kyoto", "Austin", "Turin", "Gdansk", "Cusco", "Perth", "Quito"]
_PEOPLE = ["Bea", "Tom", "Ana", "Raj", "Lea", "Sam", "Ivo", "Mei", "Ola", "Kit"]


def memories_of(user: int) -> list[str]:
    rng = np.random.default_rng(user)
    facts = []
    for i in range(PER_USER):
        thing, place, person = (str(rng.choice(xs)) for xs in (_THINGS, _PLACES, _PEOPLE))
        facts.append([f"I really enjoy {thing} on weekends ({i}).", f"My friend {person} lives in {place} ({i}).",
                      f"I once visited {place} for {thing} ({i}).", f"{person} gave me a book about {thing} ({i})."]
                     [i % 4])  # fmt: skip
    return facts


async def fill(mem: Any, users: int, progress: tqdm) -> None:  # type: ignore[type-arg]
    for user in range(users):
        await mem.long_term.store_many(memories_of(user), user_id=f"u{user}")
        progress.update(1)


async def bench_context(mem: Any, users: int, calls: int, progress: tqdm) -> dict[str, float]:  # type: ignore[type-arg]
    rng = np.random.default_rng(5)
    timings = []
    for i in range(calls):
        user = f"u{rng.integers(users)}"
        query = f"Plan a weekend trip for me with {rng.choice(_PEOPLE)} around {rng.choice(_THINGS)}, idea {i}"
        started = time.perf_counter()
        await mem.context(user_id=user, session_id=f"s-{user}", query=query, budget_tokens=800)
        timings.append(time.perf_counter() - started)
        progress.update(1)
    return {"context_p50_ms": float(np.percentile(timings, 50)) * 1000,
            "context_p95_ms": float(np.percentile(timings, 95)) * 1000}  # fmt: skip


async def bench_observe(mem: Any, users: int, calls: int, progress: tqdm) -> dict[str, float]:  # type: ignore[type-arg]
    returns = []
    for i in range(calls):
        turn = [{"role": "user", "content": f"I started learning {_THINGS[i % 10]} with {_PEOPLE[i % 7]} ({i})."},
                {"role": "assistant", "content": "That sounds fun!"}]  # fmt: skip
        started = time.perf_counter()
        await mem.observe(user_id=f"u{i % users}", session_id=f"obs-{i % users}", messages=turn)
        returns.append(time.perf_counter() - started)
    await mem.flush()
    progress.update(1)
    recallable = []
    for i in range(min(RECALLABLE, users)):
        user, place = f"u{i}", f"Zanzibar{i}"
        started = time.perf_counter()
        await mem.observe(user_id=user, messages=[{"role": "user", "content": f"I moved to {place} last week."}])
        await mem.flush(user)
        hits = await mem.long_term.recall(f"Where does the user live? {place}", user_id=user, k=3)
        recallable.append(time.perf_counter() - started)
        assert any(place in h.memory.content for h in hits), f"the observed fact of {user} was not recalled"
    progress.update(1)
    return {"observe_return_p50_us": float(np.percentile(returns, 50)) * 1e6,
            "observe_return_p95_us": float(np.percentile(returns, 95)) * 1e6,
            "observe_to_recallable_p50_ms": float(np.percentile(recallable, 50)) * 1000}  # fmt: skip


async def amain(args: argparse.Namespace) -> None:
    from memkit import Memkit

    async with Memkit(args.url, embedder=args.embedder) as mem:
        with tqdm(total=args.users + args.contexts + 2, desc="context benchmark", unit="step") as progress:
            await fill(mem, args.users, progress)
            row = {"url": args.url, "embedder": args.embedder, "users": args.users,
                   **await bench_context(mem, args.users, args.contexts, progress)}  # fmt: skip
            row |= await bench_observe(mem, args.users, args.observes, progress)
    print_table([row], list(row))
    write_json(args.json_path, row)
    if args.plot:
        panels = []
        for unit, what in (("ms", "context() and the time until observed turns are recalled"),
                           ("us", "observe() returning to the agent")):  # fmt: skip
            figures = {key.removesuffix(f"_{unit}"): value for key, value in row.items() if key.endswith(f"_{unit}")}
            panels.append(Panel(what, unit, list(figures), {"measured": list(figures.values())}))
        bar_panels(args.plot, f"context() and observe() on {args.url} ({args.users} users)", panels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", dest="json_path", help="write the figures as JSON here")
    parser.add_argument("--url", default="memory://")
    parser.add_argument("--embedder", default="local", choices=["local", "hashing"])
    parser.add_argument("--users", type=int, default=USERS, help=f"users of {PER_USER} memories each")
    parser.add_argument("--contexts", type=int, default=CONTEXTS)
    parser.add_argument("--observes", type=int, default=OBSERVES)
    parser.add_argument("--plot", help="draw the figures as a PNG here (needs matplotlib)")
    anyio.run(amain, parser.parse_args())


if __name__ == "__main__":
    main()
