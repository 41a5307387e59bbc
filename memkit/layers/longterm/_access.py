"""Access statistics applied in the background, so recall answers without waiting on a write."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

import anyio

from memkit._time import utcnow
from memkit.backend import Scope

__all__ = ["AccessTracker"]

log = logging.getLogger("memkit")


class _Touchable(Protocol):
    async def apply_access(self, counts: Mapping[str, int], scope: Scope, at: datetime) -> None: ...


class AccessTracker:
    """Collects "these memories were recalled" and writes the counts in batches after ``delay_s``."""

    def __init__(self, delay_s: float = 0.5) -> None:
        self._delay_s = delay_s
        self._pending: dict[tuple[int, Scope], tuple[_Touchable, Counter[str]]] = {}
        self._wake = anyio.Event()

    def touch(self, layer: _Touchable, ids: list[str], scope: Scope) -> None:
        _, counts = self._pending.setdefault((id(layer), scope), (layer, Counter()))
        counts.update(ids)
        self._wake.set()

    async def run(self) -> None:
        """Flush loop; runs in the client's task group until cancelled."""
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            await anyio.sleep(self._delay_s)
            await self.flush()

    async def flush(self) -> None:
        pending, self._pending = self._pending, {}
        at = utcnow()
        for (_, scope), (layer, counts) in pending.items():
            try:
                await layer.apply_access(counts, scope, at)
            except Exception:  # statistics must never break the agent
                log.exception("memkit: could not record access statistics for %d memories", len(counts))
