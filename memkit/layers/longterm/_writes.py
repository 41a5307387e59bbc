"""Storing memories in batches: one embedding call, dedupe for the whole batch, one backend write.

Exact duplicates are found by id: a deduplicated memory's id is a digest of its scope and normalised
text (``memory_id``), so one ``get`` per batch finds those already stored, and two processes storing
the same sentence at once write one record. Memories whose text changed by a merge keep their id;
the ``dedupe`` field (its current text's key) finds those, one ``scan`` per scope. Near-duplicates
(cosine >= ``merge_threshold`` in the same scope) are merged into the stored memory, or, within the
batch, into the earlier item.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import msgspec
import numpy as np

from memkit._time import now_epoch, utcnow
from memkit._validation import check_content, check_importance, check_metadata, check_text, require_scope
from memkit.backend import Backend, Query, Record, Scope, Weights
from memkit.errors import ValidationError
from memkit.layers.longterm._codec import decode, dedupe_key, expiry, index_text, memory_id, merge, to_record
from memkit.layers.longterm._records import LongTermConfig, Memory, MemoryKind, StoreResult

__all__ = ["NewMemory", "plan_memories", "store_batch"]

_SIMILARITY_ONLY = Weights(similarity=1.0, lexical=0.0, recency=0.0, importance=0.0)


class NewMemory(msgspec.Struct, frozen=True, kw_only=True):
    """One memory for ``store_many``; scope ids left unset take the call's."""

    content: str
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    kind: MemoryKind = "fact"
    importance: float = 0.5
    source: str | None = None
    metadata: dict[str, Any] | None = None
    ttl: timedelta | float | None = None
    created_at: datetime | None = None
    context: str | None = None


def plan_memories(
    items: Sequence[NewMemory | str], default_scope: Scope, config: LongTermConfig
) -> list[Memory | StoreResult]:
    """Each item validated and built into a Memory, or a "rejected" result; raises on bad input, having
    written nothing."""
    planned: list[Memory | StoreResult] = []
    now = utcnow()
    for at, item in enumerate(items):
        new = NewMemory(content=item) if isinstance(item, str) else item
        if not isinstance(new, NewMemory):
            raise ValidationError(f"item {at} must be a string or a NewMemory, got {type(item).__name__}")
        planned.append(_plan_one(new, default_scope, config, now))
    return planned


def _plan_one(new: NewMemory, default: Scope, config: LongTermConfig, now: datetime) -> Memory | StoreResult:
    scope = require_scope(new.user_id or default.user_id, new.agent_id or default.agent_id,
                          new.session_id or default.session_id)  # fmt: skip
    content = check_content(new.content, config.max_content_chars)
    context = None if new.context is None else check_content(new.context, config.max_content_chars, "context")
    importance = check_importance(new.importance)
    kind = check_text(new.kind, "kind")
    source = None if new.source is None else check_text(new.source, "source")
    metadata = check_metadata(new.metadata)
    if importance < config.min_importance:
        reason = f"importance {importance} is below the configured minimum {config.min_importance}"
        return StoreResult(status="rejected", memory=None, reason=reason)
    created = now if new.created_at is None else new.created_at
    if not isinstance(created, datetime) or created.tzinfo is None:
        raise ValidationError(f"created_at must be an aware datetime, got {created!r}")
    return Memory(
        id=memory_id(scope, content), scope=scope, kind=kind, content=content, importance=importance,
        source=source, created_at=created, updated_at=created, expires_at=expiry(created, new.ttl),
        metadata=metadata, context=context,
    )  # fmt: skip


Embed = Callable[[list[str]], Awaitable[Any]]


async def store_batch(
    backend: Backend, config: LongTermConfig, memories: list[Memory], vectors: Any, reembed: Embed
) -> list[StoreResult]:
    """Store memories of ONE scope (the caller holds its write lock) with their vectors, deduplicated."""
    collection = config.collection
    results: list[StoreResult | None] = [None] * len(memories)
    if not config.dedupe:
        await backend.upsert(collection, [to_record(m, v) for m, v in zip(memories, vectors, strict=True)])
        return [StoreResult(status="stored", memory=m) for m in memories]
    stored = await _existing(backend, collection, memories)
    merges: dict[str, list[tuple[int, Memory]]] = defaultdict(list)
    fresh: dict[str, tuple[int, Memory, Any]] = {}
    for at, (memory, vector) in enumerate(zip(memories, vectors, strict=True)):
        key = dedupe_key(memory.content)
        if key in stored:
            results[at] = StoreResult(status="duplicate", memory=stored[key])
            continue
        if memory.id in fresh:  # the same text earlier in this batch
            results[at] = StoreResult(status="duplicate", memory=fresh[memory.id][1])
            continue
        target = await _near_duplicate(backend, config, memory, vector, fresh)
        if isinstance(target, Memory):  # the same text, stored by another client since _existing looked
            results[at] = StoreResult(status="duplicate", memory=target)
        elif target is None:
            fresh[memory.id] = (at, memory, vector)
        else:
            merges[target].append((at, memory))
    await _write_fresh(backend, collection, fresh, merges, results)
    for target, newer in merges.items():
        if target not in fresh:
            await _merge_stored(backend, config, target, newer, results, reembed=reembed)
    return [r if r is not None else StoreResult(status="stored", memory=None) for r in results]


async def _existing(backend: Backend, collection: str, memories: list[Memory]) -> dict[str, Memory]:
    """Stored memories of this scope with the same text as any of ``memories``, by dedupe key."""
    scope, now = memories[0].scope, now_epoch()
    found: dict[str, Memory] = {}
    for record in await backend.get(collection, list(dict.fromkeys(m.id for m in memories)), scope):
        if record.scope == scope and not record.is_expired(now):
            memory = decode(record)
            found[dedupe_key(memory.content)] = memory
    keys = sorted({dedupe_key(m.content) for m in memories} - found.keys())
    if keys:
        page = await backend.scan(collection, scope, filters={"dedupe": tuple(keys)}, limit=2 * len(keys), now=now)
        for record in page.records:
            if record.scope == scope:
                memory = decode(record)
                found.setdefault(dedupe_key(memory.content), memory)
    return found


async def _near_duplicate(
    backend: Backend, config: LongTermConfig, memory: Memory, vector: Any, fresh: dict[str, tuple[int, Memory, Any]]
) -> str | Memory | None:
    """The id of the memory ``memory`` should merge into: an earlier item of the batch, else a stored one; or
    the stored memory itself when it holds the same text (an exact duplicate that raced the first look)."""
    for other_id, (_, other, other_vector) in fresh.items():
        if other.scope == memory.scope and float(np.dot(vector, other_vector)) >= config.merge_threshold:
            return other_id
    query = Query(scope=memory.scope, vector=vector, k=3, now=now_epoch(), min_score=config.merge_threshold,
                  weights=_SIMILARITY_ONLY)  # fmt: skip
    for hit in await backend.query(config.collection, query):
        if hit.record.scope == memory.scope and hit.scores.similarity >= config.merge_threshold:
            if hit.record.fields.get("dedupe") == dedupe_key(memory.content):
                return decode(hit.record)
            return hit.record.id
    return None


async def _write_fresh(
    backend: Backend,
    collection: str,
    fresh: dict[str, tuple[int, Memory, Any]],
    merges: dict[str, list[tuple[int, Memory]]],
    results: list[StoreResult | None],
) -> None:
    """One write for every new memory; batch items merged into another new one are folded in first."""
    records = []
    for memory_id_, (at, memory, vector) in fresh.items():
        folded = memory
        for later_at, later in merges.get(memory_id_, []):
            folded = merge(folded, later)
            results[later_at] = StoreResult(status="merged", memory=folded)
        records.append(to_record(folded, vector))
        results[at] = StoreResult(status="stored", memory=folded)
    if len(records) == 1 and not merges.get(records[0].id):
        # A single new memory is created only if absent: another process may have stored it this instant.
        if not await backend.replace(collection, records[0], expected_body=None):
            found = await backend.get(collection, [records[0].id])
            existing = found[0] if found else None
            if existing is None or existing.is_expired(now_epoch()):  # an expired leftover: take its place
                await backend.upsert(collection, records)
            else:
                results[fresh[records[0].id][0]] = StoreResult(status="duplicate", memory=decode(existing))
        return
    if records:
        await backend.upsert(collection, records)


async def _merge_stored(
    backend: Backend,
    config: LongTermConfig,
    target: str,
    newer: list[tuple[int, Memory]],
    results: list[StoreResult | None],
    *,
    reembed: Embed,
) -> None:
    from memkit.layers._cas import update_record

    async def fold(record: Record) -> tuple[Record, Memory]:
        merged = decode(record)
        for _, memory in newer:
            merged = merge(merged, memory)
        [vector] = await reembed([index_text(merged)])
        return to_record(merged, vector, record), merged

    merged = await update_record(backend, config.collection, target, newer[0][1].scope, fold)
    for at, memory in newer:
        if merged is None:  # forgotten meanwhile: store the newer memory after all
            await backend.upsert(config.collection, [to_record(memory, (await reembed([index_text(memory)]))[0])])
            results[at] = StoreResult(status="stored", memory=memory)
        else:
            results[at] = StoreResult(status="merged", memory=merged)
