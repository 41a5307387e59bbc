"""Access statistics written in the background, so recall answers without waiting on a write.

Counts are added beside the records (``Backend.touch``: one batched, atomic increment per collection
that re-indexes nothing), never by rewriting a memory, so they take no write lock and never slow a
``store()``.
"""

from __future__ import annotations

import logging
from collections import Counter

import anyio

from memkit._time import now_epoch
from memkit.backend import RecordStore

__all__ = ["AccessTracker"]

log = logging.getLogger("memkit")


class AccessTracker:
    """Collects "these memories were recalled" and writes the counts in batches after ``delay_s``."""

    def __init__(self, delay_s: float = 0.5) -> None:
        self._delay_s = delay_s
        self._pending: dict[tuple[int, str], tuple[RecordStore, Counter[str]]] = {}
        self._wake = anyio.Event()

    @property
    def pending(self) -> int:
        return sum(len(counts) for _, counts in self._pending.values())

    def touch(self, store: RecordStore, collection: str, ids: list[str]) -> None:
        _, counts = self._pending.setdefault((id(store), collection), (store, Counter()))
        counts.update(ids)
        self._wake.set()

    async def run(self) -> None:
        """Flush loop, run as ``Memkit``'s background task until cancelled."""
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            await anyio.sleep(self._delay_s)
            await self.flush()

    async def flush(self) -> None:
        pending, self._pending = self._pending, {}
        at = now_epoch()
        for (_, collection), (store, counts) in pending.items():
            try:
                await store.touch(collection, dict(counts), at)
            except Exception:  # statistics must never break the agent
                log.exception("memkit: could not record access statistics for %d memories", len(counts))

    def drop(self) -> int:
        """Forget what is pending (when closing ran out of time); returns how many memories it was for."""
        dropped, self._pending = self.pending, {}
        return dropped
