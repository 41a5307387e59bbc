"""Long-term memory: facts, preferences, decisions and knowledge, recalled by a hybrid score."""

from __future__ import annotations

import builtins
import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import anyio.lowlevel
import msgspec

from memkit._time import epoch, now_epoch, utcnow
from memkit._validation import (
    check_content,
    check_flag,
    check_importance,
    check_int,
    check_kind,
    check_kinds,
    check_metadata,
    check_metadata_filter,
    check_moment,
    check_number,
    check_text,
    read_scope,
    require_scope,
)
from memkit.backend import Backend, FilterValue, Query, Record, Scope, Weights
from memkit.embedders import Embedder
from memkit.errors import (
    NotFoundError,
    ScopeError,
    ValidationError,
)
from memkit.layers._cas import update_record
from memkit.layers._embedding import claim_collection, embed_texts
from memkit.layers._keys import scope_key
from memkit.layers._turns import Turn, check_turn, turn_content
from memkit.layers.longterm._access import AccessTracker
from memkit.layers.longterm._codec import decode, dedupe_key, expiry, index_text, to_hit, to_record, turn_memories
from memkit.layers.longterm._codec import filters as build_filters
from memkit.layers.longterm._conversation import claim_positions, forget_thread_states, remove_turn_text
from memkit.layers.longterm._history import current_only, history, mark_superseded
from memkit.layers.longterm._locks import ScopeLocks
from memkit.layers.longterm._passages import delete_keys, keys_collection
from memkit.layers.longterm._pipeline import blend_rank
from memkit.layers.longterm._ranking import rrf_rerank
from memkit.layers.longterm._records import (
    LongTermConfig,
    Memory,
    MemoryKind,
    MemoryPage,
    RecallHit,
    StoreResult,
    SupersedeResult,
)
from memkit.layers.longterm._turn_writes import write_keys, write_turns
from memkit.layers.longterm._when import query_windows
from memkit.layers.longterm._writes import NewMemory, plan_memories, store_batch

__all__ = ["LongTermMemory"]


_MAX_LIST_LIMIT = 1_000
_MAX_TURN_CHARS = 1_000_000
"""The longest turn ``add_turns`` takes, whatever ``max_content_chars`` says: a transcript is not the caller's
to shorten, so a long turn is stored whole (and indexed as passages), never refused with its session."""
_MAX_CURSOR_CHARS = 16_384
"""Longer than any cursor a backend makes (base64 of a timestamp and an id of at most 512 characters, each
escaped as ``\\uXXXX`` at worst: ~4,100); the backend decodes and checks the rest."""


def _named_scope(user_id: str | None, agent_id: str | None, session_id: str | None, all_scopes: object) -> Scope:
    """The scope of a call that names or deletes memories: ``all_scopes`` widens an agent's, never to none."""
    return read_scope(user_id, agent_id, session_id, all_scopes=check_flag(all_scopes, "all_scopes"), empty_ok=False)


class LongTermMemory:
    """Per-user (or per-agent) long-term memory over any backend.

    Every call needs ``user_id`` or ``agent_id`` (optionally ``session_id``); searching all scopes needs
    ``all_scopes=True``, and so does reading or deleting by an agent id without a user (it would match
    every user's memories with that agent).
    """

    name = "long_term"
    needs: frozenset[str] = frozenset({"records", "kv", "vector_search", "filtered_scan"})

    def __init__(
        self,
        backend: Backend,
        embedder: Embedder,
        config: LongTermConfig | None = None,
        access: AccessTracker | None = None,
    ) -> None:
        self.backend = backend
        self.embedder = embedder
        self.config = config or LongTermConfig()
        self._access = access
        self._locks = ScopeLocks()

    @property
    def _collection(self) -> str:
        return self.config.collection

    # -- lifecycle ------------------------------------------------------------------------------------
    async def setup(self) -> None:
        """Create the collection and check it holds vectors of this embedder (never a silent mix)."""
        await claim_collection(self.backend, self.embedder, self._collection, "LongTermConfig")
        await claim_collection(self.backend, self.embedder, keys_collection(self._collection), "LongTermConfig")

    async def aclose(self) -> None:
        return None

    # -- writes -----------------------------------------------------------------------------------------
    async def store(
        self,
        content: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        kind: MemoryKind = "fact",
        importance: float = 0.5,
        source: str | None = None,
        metadata: dict[str, Any] | None = None,
        ttl: timedelta | float | None = None,
        created_at: datetime | None = None,
        context: str | None = None,
    ) -> StoreResult:
        """Store a memory, or merge it into a near-duplicate; says which in ``status``."""
        scope = require_scope(user_id, agent_id, session_id)
        item = NewMemory(content=content, kind=kind, importance=importance, source=source, metadata=metadata,
                         ttl=ttl, created_at=created_at, context=context)  # fmt: skip
        [result] = await self._store(plan_memories([item], scope, self.config))
        return result

    async def store_many(
        self,
        items: Sequence[NewMemory | str],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
    ) -> builtins.list[StoreResult]:
        """Store many memories at once: one embedding call, duplicates found for the whole batch (against the
        store and within it), one write per scope. Items may carry their own scope; the call's fills the
        rest. One result per item, in order; bad input raises before anything is written."""
        if isinstance(items, str) or not isinstance(items, Sequence):
            raise ValidationError("store_many takes a list of strings or NewMemory items")
        for name, value in (("user_id", user_id), ("agent_id", agent_id), ("session_id", session_id)):
            if value is not None:
                check_text(value, name, error=ScopeError)
        default = Scope(user_id=user_id, agent_id=agent_id, session_id=session_id)
        return await self._store(plan_memories(items, default, self.config))

    async def _store(self, planned: builtins.list[Memory | StoreResult]) -> builtins.list[StoreResult]:
        memories = [m for m in planned if isinstance(m, Memory)]
        vectors = await self._embed([index_text(m) for m in memories]) if memories else []
        by_scope: dict[Scope, builtins.list[int]] = {}
        for at, memory in enumerate(memories):
            by_scope.setdefault(memory.scope, []).append(at)
        outcome: dict[int, StoreResult] = {}
        async with self._locks.hold_many(sorted(by_scope, key=scope_key)):
            groups = [([memories[i] for i in at], [vectors[i] for i in at]) for at in by_scope.values()]
            results = await store_batch(self.backend, self.config, groups, self._embed)
        for positions, group_results in zip(by_scope.values(), results, strict=True):
            outcome.update(zip(positions, group_results, strict=True))
        stored = iter(outcome[i] for i in range(len(memories)))
        return [next(stored) if isinstance(p, Memory) else p for p in planned]

    async def add_turns(
        self,
        turns: Sequence[Turn],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        thread: str | None = None,
        importance: float = 0.5,
    ) -> builtins.list[Memory]:
        """Remember conversation turns in order, each with the turn(s) before it as indexed context.

        Turns are numbered within ``thread`` (default: the session id, else "main") of this scope,
        continuing where the last call (in any process) stopped. They are not deduplicated: "Thanks!"
        said twice was said twice. Everything is validated and embedded before a position is claimed,
        so a failed call leaves the thread as it was.
        """
        scope = require_scope(user_id, agent_id, session_id)
        importance = check_importance(importance)
        thread = check_text((session_id or "main") if thread is None else thread, "thread")
        if isinstance(turns, str) or not isinstance(turns, Sequence) or not all(isinstance(t, Turn) for t in turns):
            raise ValidationError("add_turns takes a list of Turn")
        for turn in turns:
            check_turn(turn)  # before anything is claimed
        contents = [check_content(turn_content(t), _MAX_TURN_CHARS, "turn") for t in turns]
        metadata = [check_metadata(t.metadata) for t in turns]
        if not turns:
            return []
        # Turn vectors are embedded without context first only to surface embedder errors early; the final
        # index text needs the context, which depends on the claimed position.
        async with self._locks.hold(scope):
            first, context = await claim_positions(self.backend, self._collection, scope, thread, contents,
                                                   context_turns=self.config.context_turns,
                                                   context_words=self.config.context_words)  # fmt: skip
            memories = turn_memories(turns, contents, metadata, context, scope=scope, thread=thread, first=first,
                                     importance=importance)  # fmt: skip
            await write_turns(self.backend, self.config, memories, turns, embedder=self.embedder, embed=self._embed)
            return memories

    async def update(
        self,
        memory_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        content: str | None = None,
        importance: float | None = None,
        kind: MemoryKind | None = None,
        metadata: dict[str, Any] | None = None,
        ttl: timedelta | float | None = None,
        all_scopes: bool = False,
    ) -> Memory:
        """Change fields of one memory; content changes are re-embedded."""
        scope = _named_scope(user_id, agent_id, session_id, all_scopes)
        memory_id = check_text(memory_id, "memory_id")
        changes: dict[str, Any] = {}
        if content is not None:
            changes["content"] = check_content(content, self.config.max_content_chars)
        if importance is not None:
            changes["importance"] = check_importance(importance)
        if kind is not None:
            changes["kind"] = check_kind(kind)
        if metadata is not None:
            changes["metadata"] = check_metadata(metadata)
        now = utcnow()
        if ttl is not None:
            changes["expires_at"] = expiry(now, ttl)
        vector = await self._embed([changes["content"]]) if "content" in changes else None

        async def change(current: Record) -> tuple[Record, Memory]:
            updated = msgspec.structs.replace(decode(current), updated_at=now, **changes)
            if vector is not None and updated.context is not None:  # the context is indexed too
                fresh = await self._embed([index_text(updated)])
                return to_record(updated, fresh[0], current), updated
            return to_record(updated, current.vector if vector is None else vector[0], current), updated

        async with self._locks.hold(scope):
            await self.get(memory_id, user_id=scope.user_id, agent_id=scope.agent_id, session_id=session_id,
                           all_scopes=all_scopes)  # fmt: skip
            updated = await update_record(self.backend, self._collection, memory_id, scope, change)
        if updated is None:
            raise NotFoundError(f"memory {memory_id!r} was forgotten while being updated")
        if updated.kind == "turn":  # its keys carry its text, importance, expiry and fields: written anew
            async with self._locks.hold(scope):
                await delete_keys(self.backend, self._collection, [updated])
                await write_keys(self.backend, self.config, updated, embedder=self.embedder, embed=self._embed)
        return updated

    async def supersede(
        self,
        memory_id: str,
        content: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        kind: MemoryKind | None = None,
        importance: float | None = None,
        source: str | None = None,
        metadata: dict[str, Any] | None = None,
        ttl: timedelta | float | None = None,
        created_at: datetime | None = None,
        context: str | None = None,
        all_scopes: bool = False,
    ) -> SupersedeResult:
        """Replace a memory by a newer one and keep the old one as history, marked ``superseded_by`` the new
        one: recall leaves it out unless ``include_superseded=True``, and ``history()`` walks the chain. The
        new memory is stored like ``store()`` (it may merge into another current memory, never into the old
        one); kind and importance default to the old memory's. The same text again changes nothing."""
        old = await self.get(memory_id, user_id=user_id, agent_id=agent_id, session_id=session_id,
                             all_scopes=all_scopes)  # fmt: skip
        scope = require_scope(user_id, agent_id, session_id)
        item = NewMemory(content=content, kind=old.kind if kind is None else kind, source=source,
                         importance=old.importance if importance is None else importance, metadata=metadata,
                         ttl=ttl, created_at=created_at, context=context)  # fmt: skip
        [planned] = plan_memories([item], scope, self.config)
        if not isinstance(planned, Memory):  # rejected: the old memory still holds
            return SupersedeResult(new=planned, old=old)
        if planned.scope == old.scope and dedupe_key(planned.content) == dedupe_key(old.content):
            return SupersedeResult(new=StoreResult(status="duplicate", memory=old), old=old)
        vectors = await self._embed([index_text(planned)])
        async with self._locks.hold_many(sorted({scope, old.scope}, key=scope_key)):
            # The new memory first: a failure leaves the old one current, never a pointer to nothing.
            [[result]] = await store_batch(self.backend, self.config, [([planned], vectors)], self._embed,
                                           exclude=frozenset({old.id}))  # fmt: skip
            if result.memory is None or result.memory.id == old.id:
                return SupersedeResult(new=result, old=old)
            marked = await mark_superseded(self.backend, self._collection, old.id, old.scope, result.memory.id)
        return SupersedeResult(new=result, old=old if marked is None else marked)

    async def history(
        self,
        memory_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        all_scopes: bool = False,
    ) -> builtins.list[Memory]:
        """The memory that holds now in ``memory_id``'s chain of supersessions, then every memory it replaced,
        most recently replaced first (just the memory itself when nothing was superseded)."""
        memory = await self.get(memory_id, user_id=user_id, agent_id=agent_id, session_id=session_id,
                                all_scopes=all_scopes)  # fmt: skip
        return await history(self.backend, self._collection, memory, memory.scope)

    async def forget(
        self,
        memory_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        all_scopes: bool = False,
    ) -> bool:
        """Delete one memory, and every copy of its text (a turn's text in later turns' context and in its
        thread's state)."""
        scope = _named_scope(user_id, agent_id, session_id, all_scopes)
        memory_id = check_text(memory_id, "memory_id")
        async with self._locks.hold(scope):
            found = await self.backend.get(self._collection, [memory_id], scope)
            if not found or not await self.backend.delete(self._collection, [memory_id], scope):
                return False
            memory = decode(found[0])
            if memory.kind == "turn":
                await delete_keys(self.backend, self._collection, [memory])
                await remove_turn_text(self.backend, self._collection, memory, self.config.context_turns, self._embed,
                                       context_words=self.config.context_words)  # fmt: skip
            return True

    async def forget_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        all_scopes: bool = False,
    ) -> int:
        """Delete every memory of a user (or session) and its conversation state; returns how many. An agent
        id alone deletes what every user stored with that agent, so it takes ``all_scopes=True``."""
        scope = _named_scope(user_id, agent_id, session_id, all_scopes)
        total = 0
        async with self._locks.hold(scope):
            while True:
                page = await self.backend.scan(self._collection, scope, limit=1000)
                if not page.records:
                    break
                total += await self.backend.delete(self._collection, [r.id for r in page.records], scope)
            keys = keys_collection(self._collection)
            while True:  # the turns' keys: derived, not counted
                page = await self.backend.scan(keys, scope, limit=1000)
                if not page.records or not await self.backend.delete(keys, [r.id for r in page.records], scope):
                    break
            await forget_thread_states(self.backend, self._collection, scope)
        return total

    async def sweep_expired(self) -> int:
        """Delete expired memories now (recall never returns them, swept or not)."""
        now = now_epoch()
        await self.backend.delete_expired(keys_collection(self._collection), now)
        return await self.backend.delete_expired(self._collection, now)

    # -- reads ------------------------------------------------------------------------------------------
    async def get(
        self,
        memory_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        all_scopes: bool = False,
    ) -> Memory:
        scope = _named_scope(user_id, agent_id, session_id, all_scopes)
        memory_id = check_text(memory_id, "memory_id")
        await anyio.lowlevel.checkpoint()  # see ScopeLocks._held: one yield per call
        for record in await self.backend.get(self._collection, [memory_id], scope):
            if not record.is_expired(now_epoch()):
                return decode(record)
        raise NotFoundError(f"no memory {memory_id!r} in scope {scope}")

    async def list(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        kinds: Sequence[MemoryKind] | None = None,
        metadata: Mapping[str, FilterValue] | None = None,
        limit: int = 50,
        cursor: str | None = None,
        newest_first: bool = False,
        all_scopes: bool = False,
    ) -> MemoryPage:
        """Memories in a scope by last change (``updated_at``), oldest first (or newest first); pass
        ``next_cursor`` back for the next page. The cursor visits each memory once even while others are
        stored or forgotten; one changed meanwhile moves to the end (and may be seen again)."""
        scope = read_scope(user_id, agent_id, session_id, all_scopes=check_flag(all_scopes, "all_scopes"))
        limit = check_int(limit, "limit", 1, _MAX_LIST_LIMIT)
        newest_first = check_flag(newest_first, "newest_first")
        if cursor is not None:
            cursor = check_text(cursor, "cursor", _MAX_CURSOR_CHARS)
        wanted = build_filters(check_kinds(kinds), check_metadata_filter(metadata))
        await anyio.lowlevel.checkpoint()
        page = await self.backend.scan(self._collection, scope, filters=wanted, limit=limit,
                                       cursor=cursor, now=now_epoch(), newest_first=newest_first,
                                       all_scopes=all_scopes)  # fmt: skip
        return MemoryPage(memories=[decode(r) for r in page.records], next_cursor=page.next_cursor)

    async def recall(
        self,
        query: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        k: int | None = None,
        kinds: Sequence[MemoryKind] | None = None,
        metadata: Mapping[str, FilterValue] | None = None,
        min_score: float | None = None,
        min_importance: float = 0.0,
        weights: Weights | None = None,
        as_of: datetime | None = None,
        all_scopes: bool = False,
        include_superseded: bool = False,
    ) -> builtins.list[RecallHit]:
        """The ``k`` (default 5) memories that best match ``query``, best first, with per-signal scores.
        Superseded memories (see ``supersede``) are left out unless ``include_superseded=True``."""
        scope = read_scope(user_id, agent_id, session_id, all_scopes=check_flag(all_scopes, "all_scopes"))
        query_text = check_content(query, self.config.max_content_chars, "query")
        k = check_int(self.config.default_k if k is None else k, "k", 1, self.config.max_k)
        if weights is not None and not isinstance(weights, Weights):
            raise ValidationError(f"weights must be a memkit.Weights, got {type(weights).__name__}")
        threshold = self.config.min_score if min_score is None else check_number(min_score, "min_score")
        if as_of is not None:
            check_moment(as_of, "as_of")
        wanted = build_filters(check_kinds(kinds), check_metadata_filter(metadata))
        await self._locks.turns.admitted()  # writes first: see WritersFirst
        [vector] = await self._embed([query_text])
        backend_query = Query(
            scope=scope, all_scopes=all_scopes, vector=vector, text=query_text,
            filters=wanted, k=k, weights=weights or self.config.weights,
            now=now_epoch() if as_of is None else epoch(as_of), half_life_s=self.config.half_life_days * 86400.0,
            min_importance=check_importance(min_importance),
            min_score=-math.inf if threshold is None else float(threshold),
        )  # fmt: skip
        windows = query_windows(query_text, utcnow() if as_of is None else as_of) if self.config.time_weight else []

        async def rank(query: Query, k: int) -> Any:
            return await self._rank(query, k, windows)

        superseded_too = check_flag(include_superseded, "include_superseded")
        async with self._locks.turns.ranking():  # writes first: see WritersFirst
            if superseded_too:
                ranked = await rank(backend_query, k)
            else:
                ranked = await current_only(rank, backend_query, k)
        hits = [to_hit(hit, *boosts) for hit, boosts in ranked]
        if self._access is not None and self.config.track_access and hits:
            self._access.touch(self.backend, self._collection, [hit.memory.id for hit in hits])
        return hits

    async def _rank(self, query: Query, k: int, windows: builtins.list[tuple[float, float]]) -> Any:
        if self.config.fusion == "rrf":
            return [(hit, (boost,)) for hit, boost in await rrf_rerank(self.backend, self._collection, query, k)]
        config = self.config
        return await blend_rank(self.backend, self._collection, query, k, neighbour_weight=config.neighbour_weight,
                                neighbour_before=config.neighbour_before,
                                session_weight=config.session_weight, time_weight=config.time_weight,
                                speaker_weight=config.speaker_weight, windows=windows, keys=True,
                                drop_filler=config.drop_filler, feedback_terms=config.feedback_terms)  # fmt: skip

    # -- helpers ----------------------------------------------------------------------------------------
    async def _embed(self, texts: builtins.list[str]) -> Any:
        return await embed_texts(self.embedder, texts)
