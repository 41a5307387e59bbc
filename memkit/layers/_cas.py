"""Compare-and-set loops shared by the layers: read, change, write back only if nothing moved meanwhile.

Both loops retry when another writer (in this or any process) won the race, and raise
``ConflictError`` when they keep losing. The contract makes a repeated compare-and-set idempotent (a
retry whose first attempt succeeded reports success), so a new value must be unique to its writer
when two writers could compute the same one from the same state (a counter): ``change`` adds a nonce.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import TypeVar

import anyio

from memkit.backend import KeyValueStore, Record, RecordStore, Scope
from memkit.errors import ConflictError

__all__ = ["ATTEMPTS", "KeyedLocks", "backoff", "merge_record", "update_kv", "update_record"]

T = TypeVar("T")
ATTEMPTS = 20


def backoff(attempt: int) -> Awaitable[None]:
    """The pause after losing a compare-and-set: random and growing (0.5 ms, 1 ms, ... up to ~0.13 s), so
    that writers which keep colliding spread out instead of all retrying in step (twenty saves to one
    checkpoint thread at once ran out of attempts with no pause)."""
    return anyio.sleep(random.uniform(0, 0.0005 * 2 ** min(attempt, 8)))


async def update_kv(
    store: KeyValueStore,
    namespace: str,
    key: str,
    change: Callable[[bytes | None], tuple[bytes, T]],
    *,
    ttl_s: float | None = None,
    now: float | None = None,
    ttl_of: Callable[[bytes | None], float | None] | None = None,
) -> T:
    """Apply ``change(current value or None) -> (new value, result)`` atomically; returns ``result``. The new
    value expires after ``ttl_s``, or after ``ttl_of(current value or None)`` when given."""
    for attempt in range(ATTEMPTS):
        current = await store.kv_get(namespace, key, now=now)
        value, result = change(current)
        ttl = ttl_s if ttl_of is None else ttl_of(current)
        if await store.kv_replace(namespace, key, value, expected=current, ttl_s=ttl, now=now):
            return result
        await backoff(attempt)
    raise ConflictError(f"key {key!r} in {namespace!r} kept changing under concurrent writers; nothing was changed")


async def update_record(
    store: RecordStore,
    collection: str,
    record_id: str,
    scope: Scope,
    change: Callable[[Record], Awaitable[tuple[Record, T]]],
) -> T | None:
    """Apply ``change(stored record) -> (new record, result)`` with compare-and-replace; None when the record
    does not exist (in ``scope``)."""
    for attempt in range(ATTEMPTS):
        found = await store.get(collection, [record_id], scope)
        if not found:
            return None
        record, result = await change(found[0])
        if await store.replace(collection, record, expected_body=found[0].body):
            return result
        await backoff(attempt)
    raise ConflictError(f"record {record_id!r} kept changing under concurrent writers; nothing was changed")


async def merge_record(
    store: RecordStore,
    collection: str,
    record_id: str,
    scope: Scope,
    *,
    build: Callable[[Record | None], Record | None],
    known: Sequence[Record] | None = None,
) -> Record | None:
    """Create or change one record atomically: ``build(stored record, or None when there is none)`` gives the
    record to write, or None when nothing needs to change. A first writer creates (compare-and-set against
    "absent"), the others merge into what it wrote. ``known``: the ``get`` result, when the caller has it.
    Returns what is stored afterwards."""
    found = known
    for attempt in range(ATTEMPTS):
        if found is None:
            found = await store.get(collection, [record_id], scope)
        current = found[0] if found else None
        record = build(current)
        if record is None:
            return current
        if await store.replace(collection, record, expected_body=None if current is None else current.body):
            return record
        found = None
        await backoff(attempt)
    raise ConflictError(f"record {record_id!r} kept changing under concurrent writers; nothing was changed")


class KeyedLocks:
    """A lock per key, in this process, held while a batch reads and writes those keys.

    Compare-and-set alone settles every race, but tasks of one process merging into one record collide
    at every attempt (sixteen tasks writing one graph node ran some of them out of attempts on Redis);
    taken in sorted order, these locks let them queue instead, and only other processes still race."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[anyio.Lock, int]] = {}

    @asynccontextmanager
    async def holding(self, keys: Iterable[str]) -> AsyncIterator[None]:
        ordered = sorted(set(keys))  # one order for every holder: no two batches wait on each other
        for key in ordered:
            lock, users = self._locks.get(key) or (anyio.Lock(fast_acquire=True), 0)
            self._locks[key] = (lock, users + 1)
        acquired: list[anyio.Lock] = []
        try:
            for key in ordered:
                lock = self._locks[key][0]
                await lock.acquire()
                acquired.append(lock)
            yield
        finally:
            for lock in reversed(acquired):
                lock.release()
            for key in ordered:
                lock, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)
