"""Superseded memories: marking one as replaced, keeping them out of recall, and walking a memory's history.

A superseded memory stays a record of its collection, marked by a field (``superseded_by``, its successor's
id), so ``get``, ``list``, ``forget``, export and every backend keep working on it unchanged. The contract's
filters are equality and any-of, so no store can leave out "records with this field" by itself: recall asks
for the top k and, only when some of them are superseded, asks again deeper (``current_only``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgspec

from memkit._time import now_epoch, utcnow
from memkit.backend import Backend, Hit, Query, Record, Scope
from memkit.layers._cas import update_record
from memkit.layers.longterm._codec import SUPERSEDED_BY, decode, is_superseded, to_record
from memkit.layers.longterm._records import Memory

__all__ = ["current_only", "history", "mark_superseded"]

Ranked = list[tuple[Hit, float]]
Rank = Callable[[Query, int], Awaitable[Ranked]]
_MAX_DEPTH = 10_000
"""How deep recall looks past superseded memories: a user would need that many superseded memories, all
ranked above the current ones, for recall to come back short."""
_MAX_HISTORY = 1_000


async def mark_superseded(
    backend: Backend, collection: str, memory_id: str, scope: Scope, successor: str
) -> Memory | None:
    """Mark one memory superseded by ``successor`` (its vector and its recency timestamp kept: history is
    still findable with ``include_superseded``); None when it is gone."""
    now = utcnow()

    async def change(current: Record) -> tuple[Record, Memory]:
        marked = msgspec.structs.replace(decode(current), superseded_by=successor, superseded_at=now)
        return to_record(marked, current.vector, current), marked

    return await update_record(backend, collection, memory_id, scope, change)


async def current_only(rank: Rank, query: Query, k: int) -> Ranked:
    """The top ``k`` that nothing superseded. One ranking when none of the top ``k`` is superseded (the usual
    case costs nothing more); else deeper, at least doubling, until ``k`` are current or the store has none
    left. Ranking deeper only appends to the order, so the result is what an in-store filter would give."""
    depth = k
    while True:
        ranked = await rank(msgspec.structs.replace(query, k=depth), depth)
        current = [item for item in ranked if not is_superseded(item[0].record)]
        if len(current) >= k or len(ranked) < depth or depth >= _MAX_DEPTH:
            return current[:k]
        depth = min(_MAX_DEPTH, 2 * depth + (k - len(current)))


async def history(backend: Backend, collection: str, memory: Memory, scope: Scope) -> list[Memory]:
    """The memory that holds now (following ``superseded_by`` from ``memory``), then every memory it replaced,
    directly or through others, most recently replaced first. Bounded, and safe against cycles."""
    seen = {memory.id}
    current = memory
    while current.superseded_by is not None and len(seen) < _MAX_HISTORY:
        found = await backend.get(collection, [current.superseded_by], scope)
        if not found or found[0].id in seen or found[0].is_expired(now_epoch()):
            break
        current = decode(found[0])
        seen.add(current.id)
    chain, frontier = [current], [current.id]
    visited = {current.id}
    while frontier and len(chain) < _MAX_HISTORY:
        page = await backend.scan(collection, scope, filters={SUPERSEDED_BY: tuple(frontier)}, limit=_MAX_HISTORY,
                                  now=now_epoch())  # fmt: skip
        older = [decode(r) for r in page.records if r.id not in visited]
        older.sort(key=lambda m: m.superseded_at or m.updated_at, reverse=True)
        visited.update(m.id for m in older)
        chain.extend(older)
        frontier = [m.id for m in older]
    return chain[:_MAX_HISTORY]
