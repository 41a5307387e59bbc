"""Writers first on the event loop: a store under a back-to-back recall load waits for one recall, not all."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from memkit import Memkit
from memkit.embedders import HashingEmbedder
from memkit.layers.longterm._locks import WritersFirst

pytestmark = pytest.mark.anyio

READERS = 4
STORES = 30


async def stores_under_recalls(embedder: Any, log: list[str]) -> None:
    """STORES stores one after another while READERS tasks recall back to back, as agents answering at once;
    ``log`` gets "R" after each recall, "S" before and "W" after each store."""
    async with Memkit("memory://", embedder=embedder) as mem:
        lt = mem.long_term
        for i in range(40):
            await lt.store(f"note {i} about the garden shed and its blue door", user_id=f"u{i % 4}")
        done = anyio.Event()

        async def reader(n: int) -> None:
            while not done.is_set():
                await lt.recall("blue door", user_id=f"u{n}", k=5)
                log.append("R")
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as group:
            for n in range(READERS):
                group.start_soon(reader, n)
            await anyio.sleep(0.01)  # the readers are running
            for i in range(STORES):
                log.append("S")
                await lt.store(f"fresh fact number {i} about the attic", user_id="writer")
                log.append("W")
            done.set()


async def test_a_store_waits_for_at_most_one_recall_and_recalls_still_advance() -> None:
    log: list[str] = []
    await stores_under_recalls("hashing", log)
    events = [event for event in log if event in "RW"]
    stores = [at for at, event in enumerate(events) if event == "W"]
    between = [events[a + 1 : b].count("R") for a, b in itertools.pairwise(stores)]
    assert max(between) <= 1, between  # with every ready recall going first, each store waited for 4
    assert sum(between) >= (STORES - 1) // 2, between  # the readers were not starved


async def test_while_a_write_is_under_way_recalls_rank_one_at_a_time() -> None:
    """On a server a store's round trips queued behind every reader's search; one search at a time now."""
    turns = WritersFirst()
    running, most = 0, 0
    write_done = anyio.Event()

    async def rank() -> None:
        nonlocal running, most
        async with turns.ranking():
            running += 1
            most = max(most, running)
            await anyio.sleep(0.01)  # a search on the server
            running -= 1

    async def write() -> None:
        async with turns.writing():
            await write_done.wait()

    async with anyio.create_task_group() as group:
        group.start_soon(write)
        await anyio.sleep(0.005)  # the write has taken its turn and is under way
        for _ in range(3):
            group.start_soon(rank)
        await anyio.sleep(0.045)
        assert most == 1 and turns.active == 1
        write_done.set()
    most = 0
    async with anyio.create_task_group() as group:  # no write: they rank side by side
        for _ in range(3):
            group.start_soon(rank)
    assert most == 3 and turns.active == 0


class CountingEmbedder(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__(64)
        self.events: list[str] = []

    async def embed(self, texts: Sequence[str]) -> Any:
        self.events.append("E")
        return await super().embed(texts)


async def test_recalls_held_back_by_a_waiting_store_do_no_work_before_it() -> None:
    """A recall let in at its start embedded its query and read its time words before yielding at its
    ranking; with 4 readers that was 4 embeddings (a sixth of a recall each) ahead of every store."""
    embedder = CountingEmbedder()
    await stores_under_recalls(embedder, embedder.events)
    runs = "".join(event for event in embedder.events if event in "ESW").split("S")[1:]  # from each store's start
    between = [run.split("W")[0].count("E") - 1 for run in runs]  # until it returned, less its own embedding
    assert max(between) <= 1, between
