"""Which id a new memory is written under, and what an exact duplicate changes in the memory it repeats.

A deduplicated memory's id is a digest of its scope and text (``memory_id``), but a memory keeps its id when
its text changes (``update``, a merge). So the id of a text can be held by a memory that now says something
else: writing the text there would overwrite that memory. Such a text takes its next id (``attempt`` 1, 2...),
which every process derives alike, so two processes storing it at once still write one record.
"""

from __future__ import annotations

import msgspec

from memkit._time import now_epoch
from memkit.backend import Backend, Record, Scope
from memkit.errors import ConflictError
from memkit.layers.longterm._codec import decode, dedupe_key, is_superseded, memory_id, refresh, to_record
from memkit.layers.longterm._records import Memory, StoreResult

__all__ = ["claim_ids", "create_one", "held_ids", "refresh_stored"]

_ID_ATTEMPTS = 16
"""Ids tried for one text: each taken means a memory first stored with this text now says something else."""


def held_ids(records: list[Record], memories: list[Memory], scope: Scope, now: float) -> frozenset[str]:
    """Ids of ``memories`` (read as ``records``) held by an unexpired memory of ``scope`` with another text,
    history included: those memories must not be overwritten."""
    wanted = {memory.id: dedupe_key(memory.content) for memory in memories}
    return frozenset(
        record.id
        for record in records
        if record.scope == scope and not record.is_expired(now) and _text_key(record) != wanted.get(record.id)
    )


def _text_key(record: Record) -> str:
    key = record.fields.get("dedupe")
    return key if isinstance(key, str) else dedupe_key(decode(record).content)


def _may_overwrite(holder: Record, memory: Memory, now: float) -> bool:
    """An expired memory is gone; a superseded one with this text becomes current again (the README's rule)."""
    return holder.is_expired(now) or (is_superseded(holder) and _text_key(holder) == dedupe_key(memory.content))


async def claim_ids(backend: Backend, collection: str, memories: list[Memory], held: frozenset[str]) -> list[Memory]:
    """``memories`` (one scope's), each whose id is ``held`` moved on to its text's first id that is free or
    may be overwritten. A memory of the same text found there (one the dedupe scan missed) is passed over:
    a second copy, never an overwrite."""
    if not held:
        return memories
    scope, claimed = memories[0].scope, list(memories)
    waiting = [at for at, memory in enumerate(memories) if memory.id in held]
    for attempt in range(1, _ID_ATTEMPTS):
        ids = {at: memory_id(scope, claimed[at].content, attempt) for at in waiting}
        holders = {r.id: r for r in await backend.get(collection, sorted(set(ids.values())), scope)}
        now, still = now_epoch(), []
        for at in waiting:
            holder = holders.get(ids[at])
            if holder is None or _may_overwrite(holder, claimed[at], now):
                claimed[at] = msgspec.structs.replace(claimed[at], id=ids[at])
            else:
                still.append(at)
        if not still:
            return claimed
        waiting = still
    raise ConflictError(f"no free id for this text after {_ID_ATTEMPTS} tries; nothing was written")


def _next_id(memory: Memory) -> str:
    for attempt in range(_ID_ATTEMPTS - 1):
        if memory_id(memory.scope, memory.content, attempt) == memory.id:
            return memory_id(memory.scope, memory.content, attempt + 1)
    raise ConflictError(f"no free id for this text after {_ID_ATTEMPTS} tries; nothing was written")


async def create_one(
    backend: Backend, collection: str, memory: Memory, vector: object, *, at: int, results: list[StoreResult | None]
) -> None:
    """A single new memory is created only if absent: another process may have stored the same text this
    instant (a duplicate), or changed the text of the memory holding its id (the text takes its next id)."""
    for _ in range(_ID_ATTEMPTS):
        record = to_record(memory, vector)
        if await backend.replace(collection, record, expected_body=None):
            results[at] = StoreResult(status="stored", memory=memory)
            return
        found = await backend.get(collection, [record.id])
        existing = found[0] if found else None
        if existing is None or _may_overwrite(existing, memory, now_epoch()):  # gone, or history of this text
            await backend.upsert(collection, [record])
            results[at] = StoreResult(status="stored", memory=memory)
            return
        if _text_key(existing) == dedupe_key(memory.content) and not is_superseded(existing):
            stored = await refresh_stored(backend, collection, existing.id, [memory])
            results[at] = StoreResult(status="duplicate", memory=stored or decode(existing))
            return
        memory = msgspec.structs.replace(memory, id=_next_id(memory))
    raise ConflictError(f"no free id for this text after {_ID_ATTEMPTS} tries; nothing was written")


async def refresh_stored(backend: Backend, collection: str, target: str, newer: list[Memory]) -> Memory | None:
    """Fold exact duplicates' importance, metadata and expiry into the stored memory ``target`` (``refresh``),
    written only when that changes it. The memory as stored after; None when it is gone."""
    from memkit.layers._cas import update_record

    async def fold(record: Record) -> tuple[Record, Memory]:
        stored = refreshed = decode(record)
        for memory in newer:
            refreshed = refresh(refreshed, memory)
        return (record if refreshed is stored else to_record(refreshed, record.vector, record)), refreshed

    return await update_record(backend, collection, target, newer[0].scope, fold)
