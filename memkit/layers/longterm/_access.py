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
        self._writing: dict[tuple[int, str], tuple[RecordStore, Counter[str]]] = {}
        """Taken by a flush and not yet written: still pending if that flush is cancelled."""
        self._wake = anyio.Event()

    @property
    def pending(self) -> int:
        return sum(len(counts) for batch in (self._pending, self._writing) for _, counts in batch.values())

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
        for key, (store, counts) in self._pending.items():
            self._writing.setdefault(key, (store, Counter()))[1].update(counts)
        self._pending = {}
        at = now_epoch()
        for key, (store, counts) in list(self._writing.items()):
            try:
                await store.touch(key[1], dict(counts), at)
            except Exception:  # statistics must never break the agent
                log.exception("memkit: could not record access statistics for %d memories", len(counts))
            del self._writing[key]

    def drop(self) -> int:
        """Forget what is pending (when closing ran out of time); returns how many memories it was for."""
        dropped = self.pending
        self._pending, self._writing = {}, {}
        return dropped
