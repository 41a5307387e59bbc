"""The per-scope write locks of long-term memory, in this process.

Read-modify-write (dedupe, merge, update) is serialised per scope within this process; other processes are
kept apart by the store's compare-and-set. The layer says which scopes a call writes; this says how their
locks are taken (in one order, yielding once per call) and dropped once nobody holds or waits for them, and
lets writes go before recalls about to rank (``WritersFirst``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel

from memkit.backend import Scope

__all__ = ["ScopeLocks", "WritersFirst"]


class WritersFirst:
    """Writes before recalls, on the event loop and on the store; recalls still advance.

    A store yields once, then on memory:// runs to its end; every recall ready to run went before it, so
    under 4 recalls back to back it waited for 4 rankings (p99 5.3x its p99 alone). On a server each of its
    round trips queued behind the readers' searches (Redis 7-10x). So, at a recall's ranking:
    - while a write waits for its turn on the loop, one recall goes ahead of it and the others yield again;
    - while a write is under way, one recall ranks at a time (the others wait for it, not for the write).
    """

    def __init__(self) -> None:
        self.waiting = 0  # writes at their yield
        self.active = 0  # writes from their turn to their end
        self._passed = 0  # rankings begun since a write last took its turn
        self._ranking = 0  # rankings under way
        self._changed: anyio.Event | None = None

    @asynccontextmanager
    async def writing(self) -> AsyncIterator[None]:
        await self.begin_write()
        try:
            yield
        finally:
            self.end_write()

    async def begin_write(self) -> None:
        """A write's turn (its one yield); ``end_write`` must follow, whether this returns or raises."""
        self.active += 1
        try:
            self.waiting += 1
            try:
                await anyio.lowlevel.checkpoint()
            finally:
                self.waiting -= 1
                self._passed = 0
        except BaseException:  # cancelled at its yield: it never had its turn
            self.end_write()
            raise

    def end_write(self) -> None:
        self.active -= 1
        self._notify()

    async def admitted(self) -> None:
        """A recall's one yield at its start, repeated while a write waits and a recall already went ahead of
        it: a recall let in here embedded its query and read its time words (a sixth of a recall on
        memory://) before the write's turn, though it then yielded at its ranking."""
        await anyio.lowlevel.checkpoint()
        while self.waiting and self._passed:
            await anyio.lowlevel.checkpoint()

    @asynccontextmanager
    async def ranking(self) -> AsyncIterator[None]:
        while True:
            if self.waiting and self._passed:
                await anyio.lowlevel.checkpoint()
            elif self.active and self._ranking:
                if self._changed is None:
                    self._changed = anyio.Event()
                await self._changed.wait()
            else:
                break
        self._passed += 1
        self._ranking += 1
        try:
            yield
        finally:
            self._ranking -= 1
            self._notify()

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None


class ScopeLocks:
    """A write lock per scope, kept while someone holds or waits for it; writes go before recalls."""

    def __init__(self) -> None:
        self._locks: dict[Scope, list[Any]] = {}
        """Entries: [lock, holders]."""
        self.turns = WritersFirst()

    def hold_many(self, scopes: Sequence[Scope]) -> _Holding:
        """Every scope's lock, taken in one order (sorted by the caller) so two batches never deadlock."""
        return _Holding(self, scopes)

    def hold(self, scope: Scope) -> _Holding:
        return _Holding(self, (scope,))

    def enter(self, scope: Scope) -> Any:
        """The scope's lock entry, counted as held or waited for until ``leave``."""
        entry = self._locks.setdefault(scope, [anyio.Lock(fast_acquire=True), 0])
        entry[1] += 1
        return entry

    def leave(self, scope: Scope, entry: Any) -> None:
        entry[1] -= 1
        if entry[1] == 0:
            del self._locks[scope]


class _Holding:
    """``async with`` the turn and the scopes' locks. A class, not generator context managers in an exit
    stack: those were a sixth of a store() on memory:// (~50 us). Uncontended a lock does not yield: each
    public call yields once, at its start (the turn), so other tasks run between calls and a store under a
    recall load waits for one turn of the loop, not one per backend operation (on memory://, where operations
    never wait for I/O, a store yielded 5 times and waited for every reader each time)."""

    __slots__ = ("_acquired", "_entered", "_locks", "_scopes")

    def __init__(self, locks: ScopeLocks, scopes: Sequence[Scope]) -> None:
        self._locks, self._scopes = locks, scopes
        self._entered: list[tuple[Scope, Any]] = []
        self._acquired = 0

    async def __aenter__(self) -> None:
        turns = self._locks.turns
        await turns.begin_write()
        try:
            for scope in self._scopes:
                entry = self._locks.enter(scope)
                self._entered.append((scope, entry))
                await entry[0].acquire()
                self._acquired += 1
        except BaseException:
            self._release()
            raise

    async def __aexit__(self, *exc: object) -> None:
        self._release()

    def _release(self) -> None:
        """Locks released in reverse order, entries left, then the turn ended (as nested ``async with``)."""
        for index in reversed(range(len(self._entered))):
            scope, entry = self._entered[index]
            if index < self._acquired:
                entry[0].release()
            self._locks.leave(scope, entry)
        self._entered.clear()
        self._acquired = 0
        self._locks.turns.end_write()
