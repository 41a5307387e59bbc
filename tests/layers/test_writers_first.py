"""Writers first on the event loop: a store under a back-to-back recall load waits for one recall, not all."""

from __future__ import annotations

import itertools

import anyio
import anyio.lowlevel
import pytest

from memkit import Memkit

pytestmark = pytest.mark.anyio

READERS = 4
STORES = 30


async def test_a_store_waits_for_at_most_one_recall_and_recalls_still_advance() -> None:
    events: list[str] = []
    async with Memkit("memory://", embedder="hashing") as mem:
        lt = mem.long_term
        for i in range(40):
            await lt.store(f"note {i} about the garden shed and its blue door", user_id=f"u{i % 4}")
        done = anyio.Event()

        async def reader(n: int) -> None:
            while not done.is_set():
                await lt.recall("blue door", user_id=f"u{n}", k=5)
                events.append("R")
                await anyio.lowlevel.checkpoint()  # back to back, as agents answering at once

        async with anyio.create_task_group() as group:
            for n in range(READERS):
                group.start_soon(reader, n)
            await anyio.sleep(0.01)  # the readers are running
            for i in range(STORES):
                await lt.store(f"fresh fact number {i} about the attic", user_id="writer")
                events.append("W")
            done.set()
    stores = [at for at, event in enumerate(events) if event == "W"]
    between = [events[a + 1 : b].count("R") for a, b in itertools.pairwise(stores)]
    assert max(between) <= 1, between  # with every ready recall going first, each store waited for 4
    assert sum(between) >= (STORES - 1) // 2, between  # the readers were not starved
