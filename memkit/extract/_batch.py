"""A batching window in front of ``FactWriter``: a user's turns that arrive close together are written at once.

With a model extractor that is one extraction call (and one reconciliation) for the batch instead of one or
two per turn; the first turn of a user's batch opens a window of ``window_s``, and ``max_turns`` closes it
early. ``add`` returns at once; ``flush`` writes what is pending and waits; leaving the ``async with``
flushes. A batch that fails reaches ``on_error`` and the log, never vanishes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import TracebackType
from typing import Self

import anyio
import anyio.abc

from memkit.backend import Scope
from memkit.extract._records import FactEvent, ObservedTurn
from memkit.extract._writer import FactWriter

__all__ = ["FactBatcher"]

log = logging.getLogger("memkit")


class _Batch:
    def __init__(self) -> None:
        self.turns: list[ObservedTurn] = []
        self.wake = anyio.Event()
        self.done = anyio.Event()


class FactBatcher:
    """Collects each user's turns for ``window_s`` (or ``max_turns``), then hands them to ``writer.write_many``."""

    def __init__(
        self,
        writer: FactWriter,
        *,
        window_s: float = 2.0,
        max_turns: int = 8,
        on_events: Callable[[list[FactEvent]], None] | None = None,
        on_error: Callable[[Exception, list[ObservedTurn]], None] | None = None,
    ) -> None:
        if not (window_s >= 0 and max_turns >= 1):
            raise ValueError("FactBatcher needs window_s >= 0 and max_turns >= 1")
        self.writer = writer
        self.window_s = window_s
        self.max_turns = max_turns
        self.on_events = on_events
        self.on_error = on_error
        self._open: dict[Scope, _Batch] = {}
        self._running: set[_Batch] = set()
        self._group: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> Self:
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> bool | None:
        try:
            if kind is None:
                await self.flush()
        finally:
            group, self._group = self._group, None
            if group is not None:
                if kind is not None:
                    group.cancel_scope.cancel()
                await group.__aexit__(kind, error, trace)
        return None

    async def add(self, turn: ObservedTurn) -> None:
        """Queue a turn for its user's current batch (opening one if none is open); returns at once."""
        if self._group is None:
            raise RuntimeError("use FactBatcher in 'async with' before adding turns")
        scope = Scope(user_id=turn.user_id, agent_id=turn.agent_id)
        batch = self._open.get(scope)
        if batch is None:
            batch = self._open[scope] = _Batch()
            self._running.add(batch)
            self._group.start_soon(self._write, scope, batch)
        batch.turns.append(turn)
        if len(batch.turns) >= self.max_turns:
            batch.wake.set()
        await anyio.lowlevel.checkpoint()

    async def flush(self) -> None:
        """Write every pending batch now and wait until all of them (and those already writing) are done."""
        batches = list(self._running)
        for batch in batches:
            batch.wake.set()
        for batch in batches:
            await batch.done.wait()

    async def _write(self, scope: Scope, batch: _Batch) -> None:
        try:
            with anyio.move_on_after(self.window_s):
                await batch.wake.wait()
            if self._open.get(scope) is batch:
                del self._open[scope]  # turns from now on open the next batch
            try:
                events = await self.writer.write_many(batch.turns)
            except Exception as exc:  # reported, never lost: the caller decides what a failed batch means
                log.exception("memkit: facts: writing a batch of %d turns failed", len(batch.turns))
                if self.on_error is not None:
                    self.on_error(exc, batch.turns)
                return
            if self.on_events is not None:
                self.on_events(events)
        finally:
            self._running.discard(batch)
            batch.done.set()
