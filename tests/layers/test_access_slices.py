"""Access statistics are flushed a slice at a time; a flush cancelled half way adds no count twice."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import anyio
import pytest

from memkit.layers.longterm._access import AccessTracker

pytestmark = pytest.mark.anyio


class CountingStore:
    """Stands in for a record store's ``touch``; the second call waits until released (the first is written)."""

    def __init__(self) -> None:
        self.written: Counter[str] = Counter()
        self.calls = 0
        self.release = anyio.Event()
        self.second_call = anyio.Event()

    async def touch(self, collection: str, counts: Mapping[str, int], at: float) -> None:
        self.calls += 1
        if self.calls == 2:
            self.second_call.set()
            await self.release.wait()
        self.written.update(counts)


async def test_a_flush_cancelled_between_slices_counts_each_recall_once() -> None:
    tracker, store = AccessTracker(), CountingStore()
    ids = [f"m{i}" for i in range(200)]  # four slices
    tracker.touch(store, "memories", ids)  # type: ignore[arg-type]
    with anyio.fail_after(5), anyio.CancelScope() as scope:  # one call for all (the old flush): no second call
        async with anyio.create_task_group() as group:
            group.start_soon(tracker.flush)
            await store.second_call.wait()
            scope.cancel()  # as Memkit's close cancels its flusher
    assert tracker.pending == 200 - 64  # the first slice was written and forgotten
    store.release.set()
    await tracker.flush()
    assert store.written == Counter(ids) and tracker.pending == 0


async def test_a_large_flush_is_written_in_slices_of_64() -> None:
    tracker, store = AccessTracker(), CountingStore()
    store.release.set()
    tracker.touch(store, "memories", [f"m{i}" for i in range(130)])  # type: ignore[arg-type]
    await tracker.flush()
    assert store.calls == 3 and sum(store.written.values()) == 130
