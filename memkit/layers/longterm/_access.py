"""Access statistics written in the background, so recall answers without waiting on a write.

Counts are added beside the records (``Backend.touch``: batched, atomic increments that re-index nothing),
never by rewriting a memory, so they take no write lock; they are written in slices, so a ``store()`` on
a one-connection store waits for one slice at most.
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter

import anyio

from memkit._time import now_epoch
from memkit.backend import RecordStore

__all__ = ["AccessTracker"]

log = logging.getLogger("memkit")
_SLICE = 64
"""Counts written per ``touch`` call (on SQLite a store() waits for at most one slice, ~3 ms)."""


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
                await self._write_slices(store, key[1], counts, at)
            except Exception:  # statistics must never break the agent
                log.exception("memkit: could not record access statistics for %d memories", len(counts))
            del self._writing[key]

    @staticmethod
    async def _write_slices(store: RecordStore, collection: str, counts: Counter[str], at: float) -> None:
        """``_SLICE`` counts a call, each slice forgotten once written: a flush cancelled half way (``Memkit``
        closing) leaves only the unwritten counts pending, so none is added twice. Small calls also keep a
        store's one connection (SQLite) or its one thread (Redis scripts) free for a ``store()`` in between."""
        while counts:
            part = dict(itertools.islice(counts.items(), _SLICE))
            await store.touch(collection, part, at)
            for record_id in part:
                del counts[record_id]

    def drop(self) -> int:
        """Forget what is pending (when closing ran out of time); returns how many memories it was for."""
        dropped = self.pending
        self._pending, self._writing = {}, {}
        return dropped
