"""Which id a new memory is written under, and what an exact duplicate changes in the memory it repeats.

A deduplicated memory's id is a digest of its scope and text (``memory_id``), but a memory keeps its id when
its text changes (``update``, a merge). So the id of a text can be held by a memory that now says something
else: writing the text there would overwrite that memory. Such a text takes its next id (``attempt`` 1, 2...),
which every process derives alike, so two processes storing it at once still write one record: whoever comes
second finds the first one's memory of this text at that id, and it is the duplicate.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec

from memkit._time import now_epoch
from memkit.backend import Backend, Record, Scope
from memkit.errors import ConflictError
from memkit.layers.longterm._codec import decode, dedupe_key, is_superseded, memory_id, refresh, to_record
from memkit.layers.longterm._records import Memory, StoreResult

__all__ = ["claim_ids", "create_one", "held_ids", "refresh_or_store"]

_ID_ATTEMPTS = 64
"""Ids tried for one text: each taken means a memory first stored with this text now says something else."""
Found = list[list[tuple[str, float]]]


def held_ids(records: list[Record], memories: list[Memory], scope: Scope, now: float) -> frozenset[str]:
    """Ids of ``memories`` (read as ``records``) held by an unexpired memory of ``scope`` with another text,
    history included: those memories must not be overwritten."""
    wanted = {memory.id: dedupe_key(memory.content) for memory in memories}
    return frozenset(
        record.id
        for record in records
        if record.scope == scope and not record.is_expired(now) and text_key(record) != wanted.get(record.id)
    )


def text_key(record: Record) -> str:
    key = record.fields.get("dedupe")
    return key if isinstance(key, str) else dedupe_key(decode(record).content)


def _may_overwrite(holder: Record, memory: Memory, now: float) -> bool:
    """An expired memory is gone; a superseded one with this text becomes current again (the README's rule)."""
    return holder.is_expired(now) or (is_superseded(holder) and text_key(holder) == dedupe_key(memory.content))


def _is_current_copy(holder: Record, memory: Memory) -> bool:
    """``holder`` is the current memory of ``memory``'s text in its scope: a duplicate, never a second copy."""
    return holder.scope == memory.scope and not is_superseded(holder) and text_key(holder) == dedupe_key(memory.content)


async def claim_ids(
    backend: Backend, collection: str, memories: list[Memory], looked: tuple[dict[str, Memory], Found],
    held: frozenset[str],
) -> tuple[list[Memory], dict[str, Memory], Found]:  # fmt: skip
    """``memories`` (one scope's), each new one whose id is ``held`` moved on to its text's first id that is free
    or may be overwritten; a current memory of the text found at one of them is that text's stored memory.
    ``looked``: the stored memories by text and the neighbours of the others (``_pending`` order), both
    returned updated."""
    stored, near = looked
    pending = [at for at, memory in enumerate(memories) if dedupe_key(memory.content) not in stored]
    waiting = [at for at in pending if memories[at].id in held]
    if not waiting:
        return memories, stored, near
    scope, claimed, stored = memories[0].scope, list(memories), dict(stored)
    for attempt in range(1, _ID_ATTEMPTS):
        ids = {at: memory_id(scope, claimed[at].content, attempt) for at in waiting}
        holders = {r.id: r for r in await backend.get(collection, sorted(set(ids.values())), scope)}
        now, still = now_epoch(), []
        for at in waiting:
            holder = holders.get(ids[at])
            if holder is None or _may_overwrite(holder, claimed[at], now):
                claimed[at] = msgspec.structs.replace(claimed[at], id=ids[at])
            elif _is_current_copy(holder, claimed[at]):
                stored[dedupe_key(claimed[at].content)] = decode(holder)
            else:
                still.append(at)
        waiting = still
        if not waiting:
            near_of = dict(zip(pending, near, strict=True))
            return claimed, stored, [near_of[at] for at in pending if dedupe_key(memories[at].content) not in stored]
    raise ConflictError(f"no free id for this text after {_ID_ATTEMPTS} tries; nothing was written")


def _next_id(memory: Memory) -> str:
    for attempt in range(_ID_ATTEMPTS - 1):
        if memory_id(memory.scope, memory.content, attempt) == memory.id:
            return memory_id(memory.scope, memory.content, attempt + 1)
    raise ConflictError(f"no free id for this text after {_ID_ATTEMPTS} tries; nothing was written")


async def create_one(backend: Backend, collection: str, memory: Memory, vector: object) -> StoreResult:
    """A single new memory is created only if absent: another process may have stored the same text this
    instant (a duplicate, refreshed by this one), or changed the text of the memory holding its id (the text
    takes its next id)."""
    for _ in range(_ID_ATTEMPTS):
        record = to_record(memory, vector)
        if await backend.replace(collection, record, expected_body=None):
            return StoreResult(status="stored", memory=memory)
        found = await backend.get(collection, [record.id])
        existing = found[0] if found else None
        if existing is None or _may_overwrite(existing, memory, now_epoch()):  # gone, or history of this text
            await backend.upsert(collection, [record])
            return StoreResult(status="stored", memory=memory)
        if _is_current_copy(existing, memory):
            stored = await _refresh_stored(backend, collection, existing.id, [memory])
            if stored is not None:
                return StoreResult(status="duplicate", memory=stored)
            continue  # forgotten since: create it after all
        memory = msgspec.structs.replace(memory, id=_next_id(memory))
    raise ConflictError(f"no free id for this text after {_ID_ATTEMPTS} tries; nothing was written")


async def _refresh_stored(backend: Backend, collection: str, target: str, newer: list[Memory]) -> Memory | None:
    """Fold exact duplicates' importance, metadata and expiry into the stored memory ``target`` (``refresh``),
    written only when that changes it. The memory as stored after; None when it is gone."""
    from memkit.layers._cas import update_record

    async def fold(record: Record) -> tuple[Record, Memory]:
        stored = refreshed = decode(record)
        for memory in newer:
            refreshed = refresh(refreshed, memory)
        return (record if refreshed is stored else to_record(refreshed, record.vector, record)), refreshed

    return await update_record(backend, collection, target, newer[0].scope, fold)


async def refresh_or_store(
    backend: Backend, collection: str, target: str, same: Sequence[tuple[int, Memory]], *,
    results: list[StoreResult | None], reembed: Callable[[list[str]], Awaitable[Any]],
) -> None:  # fmt: skip
    """Exact duplicates of the stored memory ``target``: refresh it, or, when it was forgotten meanwhile, store
    them after all (one memory, as a merge into a forgotten memory does)."""
    from memkit.layers.longterm._codec import index_text

    newer = [memory for _, memory in same]
    stored = await _refresh_stored(backend, collection, target, newer)
    if stored is None:
        memory = functools.reduce(refresh, newer[1:], newer[0])
        [vector] = await reembed([index_text(memory)])
        result = await create_one(backend, collection, memory, vector)
        stored = result.memory
        results[same[0][0]] = result
        same = same[1:]
    for at, _ in same:
        results[at] = StoreResult(status="duplicate", memory=stored)
