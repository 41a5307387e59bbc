"""Storing memories in batches: one embedding call, dedupe for the whole batch, one backend write.

Exact duplicates are found by id: a deduplicated memory's id is a digest of its scope and normalised
text (``memory_id``), so one ``get`` per batch finds those already stored, and two processes storing
the same sentence at once write one record. Memories whose text changed by a merge keep their id;
the ``dedupe`` field (its current text's key) finds those, one ``scan`` per scope. Near-duplicates
(cosine >= ``merge_threshold`` in the same scope) are merged into the stored memory, or, within the
batch, into the earlier item. A superseded memory is history: it is never a merge target, and the same text
stored again takes its place as a current memory.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from memkit._concurrency import both, gather_bounded
from memkit._time import new_id, now_epoch, utcnow
from memkit._validation import (
    check_content,
    check_importance,
    check_kind,
    check_metadata,
    check_moment,
    check_text,
    require_scope,
)
from memkit.backend import Backend, Record, Scope
from memkit.errors import ValidationError
from memkit.layers.longterm._claims import claim_ids, create_one, held_ids, refresh_or_store, text_key
from memkit.layers.longterm._codec import (
    decode,
    dedupe_key,
    expiry,
    index_text,
    is_superseded,
    memory_id,
    merge,
    refresh,
    to_record,
)
from memkit.layers.longterm._records import LongTermConfig, Memory, MemoryKind, StoreResult

__all__ = ["Group", "NewMemory", "plan_memories", "store_batch"]


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
    # An item's own id, even an empty (invalid) one, is never replaced by the call's.
    pairs = ((new.user_id, default.user_id), (new.agent_id, default.agent_id), (new.session_id, default.session_id))
    scope = require_scope(*(fallback if own is None else own for own, fallback in pairs))
    content = check_content(new.content, config.max_content_chars)
    context = None if new.context is None else check_content(new.context, config.max_content_chars, "context")
    importance = check_importance(new.importance)
    kind = check_kind(new.kind)
    source = None if new.source is None else check_text(new.source, "source")
    metadata = check_metadata(new.metadata)
    if importance < config.min_importance:
        reason = f"importance {importance} is below the configured minimum {config.min_importance}"
        return StoreResult(status="rejected", memory=None, reason=reason)
    created = now if new.created_at is None else check_moment(new.created_at, "created_at")
    expires_at = expiry(created, new.ttl)
    return Memory(
        id=memory_id(scope, content), scope=scope, kind=kind, content=content, importance=importance,
        source=source, created_at=created, updated_at=created, expires_at=expires_at,
        metadata=metadata, context=context,
    )  # fmt: skip


Embed = Callable[[list[str]], Awaitable[Any]]
_KEY_PAGES = 8
"""Pages of a dedupe-key scan read at most for one batch (each key has a record per scope it was stored in)."""
_PLANS_AT_ONCE = 8
"""Scopes of a batch planned at once (each holds a pooled connection on Postgres, whose pool is 10 by default)."""


class _Plan(msgspec.Struct):
    """What one scope's part of a batch does: its results so far, its new memories, its merges, and the exact
    duplicates whose importance, metadata or expiry refresh a memory (by id: a stored or a new one)."""

    results: list[StoreResult | None]
    fresh: dict[str, tuple[int, Memory, Any]]
    merges: dict[str, list[tuple[int, Memory]]]
    refreshes: dict[str, list[tuple[int, Memory]]]


Group = tuple[list[Memory], list[Any]]


async def store_batch(
    backend: Backend, config: LongTermConfig, groups: list[Group], reembed: Embed, exclude: frozenset[str] = frozenset()
) -> list[list[StoreResult]]:
    """Store groups of memories, one group per scope (the caller holds every group's write lock), with their
    vectors, deduplicated; one write for all new memories. Results per group, in order. ``exclude``: ids
    never merged into (the memory a ``supersede`` replaces, which may be worded almost the same)."""
    collection = config.collection
    if not config.dedupe:  # every memory is new: an id of its own (its text's could be another memory's)
        groups = [
            ([msgspec.structs.replace(m, id=new_id()) for m in memories], vectors) for memories, vectors in groups
        ]
        records = [to_record(m, v) for memories, vectors in groups for m, v in zip(memories, vectors, strict=True)]
        await backend.upsert(collection, records)
        return [[StoreResult(status="stored", memory=m) for m in memories] for memories, _ in groups]
    # On a server, scopes are looked up side by side (at 100k rows on Postgres, 100 scopes one after another
    # were most of a batch), a few at a time (8 plans of 3 requests each queued for a pool of 10: store_many
    # 20% slower), and a store()'s lookups all at once; in process one after another. The near-duplicate
    # check is one call for the whole batch: an embedded store splits its scopes over the cores.
    on_server = backend.capabilities.concurrent_requests
    limit = _PLANS_AT_ONCE if on_server else 1
    looked, found, held = await _look_up(backend, config, groups, limit, at_once=on_server and len(groups) == 1)
    for g, ((memories, vectors), taken) in enumerate(zip(groups, held, strict=True)):
        claimed, looked[g], found[g] = await claim_ids(backend, collection, memories, (looked[g], found[g]), taken)
        groups[g] = (claimed, vectors)
    plans = await gather_bounded(
        [functools.partial(_plan_group, backend, config, memories, vectors, stored=stored, found=near,
                           exclude=exclude, reembed=reembed)
         for (memories, vectors), stored, near in zip(groups, looked, found, strict=True)],
        limit=limit,
    )  # fmt: skip
    await _write_fresh(backend, collection, plans)
    for plan in plans:
        for target, newer in plan.merges.items():
            if target not in plan.fresh:
                await _merge_stored(backend, config, target, newer, plan.results, reembed=reembed)
        for target, same in plan.refreshes.items():
            if target not in plan.fresh:
                await refresh_or_store(backend, collection, target, same, results=plan.results, reembed=reembed)
    return [[r if r is not None else StoreResult(status="stored", memory=None) for r in p.results] for p in plans]


Found = list[list[tuple[str, float]]]


Existing = tuple[dict[str, Memory], frozenset[str]]


async def _look_up(
    backend: Backend, config: LongTermConfig, groups: list[Group], limit: int, *, at_once: bool
) -> tuple[list[dict[str, Memory]], list[Found], list[frozenset[str]]]:
    """Per group: its scope's stored memories with the same texts and the group's ids held by other texts
    (``_existing``), and the stored neighbours of the rest (``_pending``). ``at_once``: both lookups of a
    single group side by side (a store() on a server: one wait, not three)."""
    if at_once:
        [(memories, vectors)] = groups
        scope = memories[0].scope
        (stored, held), near = await both(
            functools.partial(_existing, backend, config.collection, memories, overlap=True),
            functools.partial(_nearest, backend, config, [(scope, vectors)]),
        )
        return [stored], [[near[0][i] for i in _pending(memories, stored)]], [held]
    looked: list[Existing] = await gather_bounded(
        [functools.partial(_existing, backend, config.collection, memories, overlap=False) for memories, _ in groups],
        limit=limit,
    )
    asks = [(memories[0].scope, [vectors[i] for i in _pending(memories, stored)])
            for (memories, vectors), (stored, _) in zip(groups, looked, strict=True)]  # fmt: skip
    return [stored for stored, _ in looked], await _nearest(backend, config, asks), [held for _, held in looked]


def _pending(memories: list[Memory], stored: dict[str, Memory]) -> list[int]:
    """Positions of the memories whose text their scope does not hold already (``_existing``)."""
    return [at for at, memory in enumerate(memories) if dedupe_key(memory.content) not in stored]


async def _plan_group(
    backend: Backend, config: LongTermConfig, memories: list[Memory], vectors: list[Any], *,
    stored: dict[str, Memory], found: list[list[tuple[str, float]]], exclude: frozenset[str], reembed: Embed,
) -> _Plan:  # fmt: skip
    """Sort one scope's memories into duplicates, merges (into stored memories or earlier items) and new ones,
    given the stored memories with the same texts and the stored neighbours of the others (``_pending``)."""
    plan = _Plan(results=[None] * len(memories), fresh={}, merges=defaultdict(list), refreshes=defaultdict(list))
    for at, memory in enumerate(memories):
        duplicate = stored.get(dedupe_key(memory.content))
        if duplicate is not None:
            _duplicate(plan, at, memory, duplicate)
    pending = _pending(memories, stored)
    near = await _stored_neighbours(backend, config, [memories[i] for i in pending], found, exclude=exclude,
                                    reembed=reembed)  # fmt: skip
    close = await _close_earlier(memories, vectors, pending, config.merge_threshold, reembed)
    any_close: npt.NDArray[np.bool_] = np.any(close, axis=1)
    kept = np.zeros(len(pending), bool)  # which positions of ``pending`` were kept as new memories
    for j, at in enumerate(pending):
        memory = memories[at]
        if memory.id in plan.fresh:  # the same text earlier in this batch: folded in by _write_fresh
            plan.refreshes[memory.id].append((at, memory))
            continue
        earlier = np.flatnonzero(close[j, :j] & kept[:j]) if any_close[j] else _NONE_EARLIER
        verdict = near[j]
        if earlier.size:
            plan.merges[memories[pending[int(earlier[0])]].id].append((at, memory))
        elif isinstance(verdict, Memory):  # the same text, stored by another client since _existing looked
            _duplicate(plan, at, memory, verdict)
        elif isinstance(verdict, str):
            plan.merges[verdict].append((at, memory))
        else:
            plan.fresh[memory.id] = (at, memory, vectors[at])
            kept[j] = True
    return plan


_NONE_EARLIER = np.zeros(0, np.int64)


def _duplicate(plan: _Plan, at: int, memory: Memory, stored: Memory) -> None:
    """``memory`` repeats ``stored``: the result is the stored memory, refreshed if ``memory`` changes it."""
    plan.results[at] = StoreResult(status="duplicate", memory=stored)
    if refresh(stored, memory) is not stored:
        plan.refreshes[stored.id].append((at, memory))


async def _close_earlier(
    memories: list[Memory], vectors: list[Any], pending: list[int], threshold: float, reembed: Embed
) -> npt.NDArray[np.bool_]:
    """Which earlier pending memories each pending memory is at least ``threshold`` similar to (row: the later
    one, by its place in ``pending``; lower triangle only): by their contents alone where a context was
    indexed. A memory none is close to (most) then costs no numpy call, and a single memory (a store()) no
    product at all: numpy's calls per memory were a twentieth of a batch and a tenth of a store()'s plan."""
    if len(pending) < 2:
        return np.zeros((len(pending), len(pending)), bool)
    if any(memories[i].context is not None for i in pending):  # contents alone decide (see _shown_similarity)
        batch = np.asarray(await reembed([memories[i].content for i in pending]), dtype=np.float32)
        batch /= np.maximum(np.linalg.norm(batch, axis=1, keepdims=True), 1e-12)
    else:
        batch = np.stack([vectors[i] for i in pending])
    close: npt.NDArray[np.bool_] = np.tril(batch @ batch.T >= threshold, -1)
    return close


async def _existing(backend: Backend, collection: str, memories: list[Memory], *, overlap: bool) -> Existing:
    """Stored memories of this scope with the same text as any of ``memories``, by dedupe key: read by id, then
    scanned by key for those not found (a memory merged into keeps its id); and the ids of ``memories`` held by
    memories of other texts (``held_ids``). ``overlap``: both reads at once,
    with the nearest memories beside them (a store() on a server: under a recall load each of three waits
    queued behind the readers' work; its p99 3.2 -> 2.4x its p99 alone on Redis, and 2.5 -> 1.6 ms alone)."""
    scope, now = memories[0].scope, now_epoch()
    keys = sorted({dedupe_key(m.content) for m in memories})

    async def by_id() -> list[Record]:
        return await backend.get(collection, list(dict.fromkeys(m.id for m in memories)), scope)

    async def by_key(wanted: list[str]) -> list[Record]:
        """Pages until each key's memory of this very scope is found: a user's scan also holds the same texts
        stored for their sessions and agents, which filled a first page and hid the user's own."""
        records: list[Record] = []
        cursor: str | None = None
        for _ in range(_KEY_PAGES):
            page = await backend.scan(collection, scope, filters={"dedupe": tuple(wanted)}, cursor=cursor,
                                      limit=max(2 * len(wanted), 16), now=now)  # fmt: skip
            records += page.records
            cursor = page.next_cursor
            own = {text_key(r) for r in records if r.scope == scope and not is_superseded(r)}
            if cursor is None or own.issuperset(wanted):
                break
        return records

    scanned: list[Record] | None = None
    if overlap:
        read, scanned = await both(by_id, functools.partial(by_key, keys))
    else:
        read = await by_id()
    found: dict[str, Memory] = {}
    for record in read:
        if record.scope == scope and not record.is_expired(now) and not is_superseded(record):
            memory = decode(record)
            found[dedupe_key(memory.content)] = memory
    if scanned is None:
        missing = [key for key in keys if key not in found]
        scanned = await by_key(missing) if missing else []
    for record in scanned:
        if record.scope == scope and not is_superseded(record):
            memory = decode(record)
            found.setdefault(dedupe_key(memory.content), memory)
    return found, held_ids(read, memories, scope, now)


async def _nearest(
    backend: Backend, config: LongTermConfig, requests: list[tuple[Scope, list[Any]]]
) -> list[list[list[tuple[str, float]]]]:
    """Per (scope, vectors): the ids (and similarities) of the scope's stored memories near each vector, over the
    merge threshold."""
    if not any(len(vectors) for _, vectors in requests):
        return [[] for _ in requests]
    return await backend.nearest_many(config.collection, requests, k=3, min_similarity=config.merge_threshold,
                                      now=now_epoch())  # fmt: skip


async def _stored_neighbours(
    backend: Backend, config: LongTermConfig, memories: list[Memory], found: list[Any], *, exclude: frozenset[str],
    reembed: Embed,
) -> list[str | Memory | None]:  # fmt: skip
    """Per memory (all of one scope): the stored memory it should merge into (its id), the stored memory itself
    when it holds the same text (an exact duplicate stored by another client meanwhile), or None. One
    ``nearest`` call for the batch; the few candidates found are read to check their exact scope."""
    if not memories:
        return []
    scope = memories[0].scope
    ids = sorted({record_id for row in found for record_id, _ in row})
    records = {r.id: r for r in await backend.get(config.collection, ids, scope)} if ids else {}
    candidates: list[list[tuple[str, Memory]]] = []
    for memory, row in zip(memories, found, strict=True):
        usable = []
        for record_id, _ in row:
            record = records.get(record_id)
            if record is None or record.scope != memory.scope:  # a narrower scope's memory is not this one's
                continue
            if record_id in exclude or is_superseded(record):  # history is not merged into
                continue
            usable.append((record_id, decode(record)))
        candidates.append(usable)
    shown = await _shown_similarity(memories, candidates, reembed)
    verdicts: list[str | Memory | None] = []
    for at, (memory, usable) in enumerate(zip(memories, candidates, strict=True)):
        verdict: str | Memory | None = None
        for record_id, stored in usable:
            if dedupe_key(stored.content) == dedupe_key(memory.content):
                verdict = stored
                break
            if shown.get((at, record_id), 1.0) >= config.merge_threshold:
                verdict = record_id
                break
        verdicts.append(verdict)
    return verdicts


async def _shown_similarity(
    memories: list[Memory], candidates: list[list[tuple[str, Memory]]], reembed: Embed
) -> dict[tuple[int, str], float]:
    """Cosine of the contents alone, for each pair where either side has an indexed context: two facts said in
    reply to one question share their context, which must not make them near-duplicates of each other."""
    pairs = [(at, record_id, stored) for at, usable in enumerate(candidates) for record_id, stored in usable
             if memories[at].context is not None or stored.context is not None]  # fmt: skip
    if not pairs:
        return {}
    texts = list(dict.fromkeys([t for at, _, stored in pairs for t in (memories[at].content, stored.content)]))
    matrix = np.asarray(await reembed(texts), dtype=np.float32)
    matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    row = {text: i for i, text in enumerate(texts)}
    return {(at, record_id): float(matrix[row[memories[at].content]] @ matrix[row[stored.content]])
            for at, record_id, stored in pairs}  # fmt: skip


async def _write_fresh(backend: Backend, collection: str, plans: list[_Plan]) -> None:
    """One write for every new memory of the batch, with the items merged into it or repeating it folded in. A
    single one is created only if absent (``create_one``): another process may have written its id meanwhile."""
    made: list[tuple[_Plan, Memory, Any]] = []
    for plan in plans:
        for memory_id_, (at, memory, vector) in plan.fresh.items():
            folded = memory
            for later_at, later in plan.merges.get(memory_id_, []):
                folded = merge(folded, later)
                plan.results[later_at] = StoreResult(status="merged", memory=folded)
            for _, later in plan.refreshes.get(memory_id_, []):
                folded = refresh(folded, later)
            made.append((plan, folded, vector))
            plan.results[at] = StoreResult(status="stored", memory=folded)
    if len(made) == 1 and not made[0][0].merges.get(made[0][1].id):
        [(plan, memory, vector)] = made
        result = await create_one(backend, collection, memory, vector)
        plan.results[plan.fresh[memory.id][0]] = result
    elif made:
        await backend.upsert(collection, [to_record(memory, vector) for _, memory, vector in made])
    for plan, memory, _ in made:  # the batch's repeats of a new memory: duplicates of what was written
        written = plan.results[plan.fresh[memory.id][0]]
        for later_at, _ in plan.refreshes.get(memory.id, []):
            plan.results[later_at] = StoreResult(status="duplicate", memory=written.memory if written else None)


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
