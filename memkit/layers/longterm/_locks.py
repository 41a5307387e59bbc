"""The per-scope write locks of long-term memory, in this process.

Read-modify-write (dedupe, merge, update) is serialised per scope within this process; other processes are
kept apart by the store's compare-and-set. The layer says which scopes a call writes; this says how their
locks are taken (in one order, yielding once per call) and dropped once nobody holds or waits for them, and
gives a write that waits for its turn on the event loop precedence over recalls about to rank (``reader_turn``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel

from memkit.backend import Scope

__all__ = ["ScopeLocks"]


class ScopeLocks:
    """A write lock per scope, kept while someone holds or waits for it; and the writers' turn on the loop."""

    def __init__(self) -> None:
        self._locks: dict[Scope, list[Any]] = {}
        """Entries: [lock, holders]."""
        self._writers_waiting = 0
        self._readers_since_writer = 0

    async def _writer_turn(self) -> None:
        self._writers_waiting += 1
        try:
            await anyio.lowlevel.checkpoint()
        finally:
            self._writers_waiting -= 1
            self._readers_since_writer = 0

    async def reader_turn(self) -> None:
        """A recall's yield before it ranks, with writers first: while a write waits for its turn on the event
        loop, one recall at a time goes ahead of it, the others yield again.

        A store yields once and then runs to its end on memory://; every recall ready to run went before it.
        Under 4 recalls back to back it waited for 4 rankings (p99 5.3x its p99 alone); with one deferral
        per recall, the deferred recalls then went together before the next store. Here a write waits for
        at most one ranking, and recalls still advance: one goes ahead of each write."""
        await anyio.lowlevel.checkpoint()
        while self._writers_waiting and self._readers_since_writer:
            await anyio.lowlevel.checkpoint()
        self._readers_since_writer += 1

    @asynccontextmanager
    async def hold_many(self, scopes: Sequence[Scope]) -> AsyncIterator[None]:
        """Every scope's lock, taken in one order (sorted by the caller) so two batches never deadlock."""
        await self._writer_turn()  # once per call, not once per scope
        async with AsyncExitStack() as stack:
            for scope in scopes:
                await stack.enter_async_context(self._held(scope))
            yield

    @asynccontextmanager
    async def hold(self, scope: Scope) -> AsyncIterator[None]:
        await self._writer_turn()
        async with self._held(scope):
            yield

    @asynccontextmanager
    async def _held(self, scope: Scope) -> AsyncIterator[None]:
        """The scope's write lock. Uncontended it does not yield: each public call yields once, at its start
        (``hold``, ``hold_many``, reads), so other tasks run between calls and a store under a recall load
        waits for one turn of the loop, not one per backend operation (on memory://, where operations never
        wait for I/O, a store yielded 5 times and waited for every reader each time)."""
        entry = self._locks.setdefault(scope, [anyio.Lock(fast_acquire=True), 0])
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del self._locks[scope]
