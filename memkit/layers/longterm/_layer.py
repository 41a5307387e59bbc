"""Long-term memory: facts, preferences, decisions and knowledge, recalled by a hybrid score."""

from __future__ import annotations

import builtins
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

import anyio
import msgspec

from memkit._time import epoch, new_id, now_epoch, utcnow
from memkit._validation import check_content, check_importance, check_metadata, require_scope
from memkit.backend import Backend, FilterValue, Query, Record, Scope, Weights
from memkit.embedders import Embedder, as_unit_vectors
from memkit.errors import BackendError, NotFoundError, ValidationError
from memkit.layers._turns import (
    ThreadState,
    Turn,
    contexts,
    thread_state_key,
    turn_content,
)
from memkit.layers.longterm._access import AccessTracker
from memkit.layers.longterm._codec import (
    decode,
    dedupe_key,
    encode_memory,
    expiry,
    index_text,
    record_fields,
    to_hit,
    turn_memories,
)
from memkit.layers.longterm._codec import filters as build_filters
from memkit.layers.longterm._codec import merge as merge_memories
from memkit.layers.longterm._ranking import neighbour_rerank, rrf_rerank
from memkit.layers.longterm._records import LongTermConfig, Memory, MemoryKind, MemoryPage, RecallHit, StoreResult

__all__ = ["LongTermMemory"]

_REPLACE_ATTEMPTS = 20
_encode_state = msgspec.json.Encoder().encode
_decode_state = msgspec.json.Decoder(ThreadState).decode


class LongTermMemory:
    """Per-user (or per-agent) long-term memory over any backend.

    Every call needs ``user_id`` or ``agent_id``; searching all scopes needs ``all_scopes=True``.
    """

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
        # Serialises read-modify-write (merge, update, access counts) within this process.
        self._write_lock = anyio.Lock()

    @property
    def _collection(self) -> str:
        return self.config.collection

    # -- writes ---------------------------------------------------------------------------------
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
        content = check_content(content, self.config.max_content_chars)
        if context is not None:
            context = check_content(context, self.config.max_content_chars, "context")
        importance = check_importance(importance)
        meta = check_metadata(metadata)
        if not isinstance(kind, str) or not kind:
            raise ValidationError(f"kind must be a non-empty string, got {kind!r}")
        if importance < self.config.min_importance:
            reason = f"importance {importance} is below the configured minimum {self.config.min_importance}"
            return StoreResult(status="rejected", memory=None, reason=reason)
        now = created_at or utcnow()
        memory = Memory(
            id=new_id(), scope=scope, kind=kind, content=content, importance=importance, source=source,
            created_at=now, updated_at=now, expires_at=expiry(now, ttl), metadata=meta, context=context,
        )  # fmt: skip
        vector = await self._embed_one(index_text(memory))
        async with self._write_lock:
            existing = await self._find_duplicate(memory, vector) if self.config.dedupe else None
            if existing is None:
                await self.backend.upsert(self._collection, [self._to_record(memory, vector)])
                return StoreResult(status="stored", memory=memory)
            found, status = existing
            if status == "duplicate":
                return StoreResult(status=status, memory=found)

            async def merge_into(current: Memory) -> tuple[Memory, Any]:
                merged = merge_memories(current, memory)
                return merged, await self._embed_one(index_text(merged))

            merged = await self._modify(found.id, found.scope, merge_into)
            if merged is None:  # forgotten meanwhile: store the new memory after all
                await self.backend.upsert(self._collection, [self._to_record(memory, vector)])
                return StoreResult(status="stored", memory=memory)
            return StoreResult(status="merged", memory=merged)

    async def _find_duplicate(
        self, memory: Memory, vector: Any
    ) -> tuple[Memory, Literal["merged", "duplicate"]] | None:
        exact = await self.backend.scan(
            self._collection, memory.scope, filters={"dedupe": dedupe_key(memory.content)}, limit=1, now=now_epoch()
        )
        for record in exact.records:
            if record.scope == memory.scope:
                return decode(record), "duplicate"
        query = Query(
            scope=memory.scope, vector=vector, k=3, now=now_epoch(), min_score=self.config.merge_threshold,
            weights=Weights(similarity=1.0, lexical=0.0, recency=0.0, importance=0.0),
        )  # fmt: skip
        for hit in await self.backend.query(self._collection, query):
            if hit.record.scope == memory.scope and hit.scores.similarity >= self.config.merge_threshold:
                return decode(hit.record), "merged"
        return None

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

        Turns are numbered within ``thread`` (default: the session id, else "main"), continuing
        where the last call (in any process) stopped. They are not deduplicated: "Thanks!" said
        twice was said twice. One embedding batch and one write for all of them.
        """
        scope = require_scope(user_id, agent_id, session_id)
        importance = check_importance(importance)
        thread = thread or session_id or "main"
        contents = [check_content(turn_content(t), self.config.max_content_chars, "turn") for t in turns]
        metadata = [check_metadata(t.metadata) for t in turns]
        if not turns:
            return []
        namespace, key = thread_state_key(self._collection, scope, thread)
        async with self._write_lock:
            first, context = await self._reserve_positions(namespace, key, contents)
            memories = turn_memories(
                turns, contents, metadata, context, scope=scope, thread=thread, first=first, importance=importance
            )
            vectors = as_unit_vectors(await self.embedder.embed([index_text(m) for m in memories]))
            records = [self._to_record(m, v) for m, v in zip(memories, vectors, strict=True)]
            await self.backend.upsert(self._collection, records)
            return memories

    async def _reserve_positions(
        self, namespace: str, key: str, contents: builtins.list[str]
    ) -> tuple[int, builtins.list[str | None]]:
        """Claim the next positions of a thread with compare-and-set, so two processes appending to
        one thread never number two turns alike; returns the first position and each turn's context."""
        for _ in range(_REPLACE_ATTEMPTS):
            raw = await self.backend.kv_get(namespace, key)
            state = _decode_state(raw) if raw else ThreadState()
            first = state.next_position
            context = contexts(state, contents, self.config.context_turns)
            state.next_position = first + len(contents)
            if await self.backend.kv_replace(namespace, key, _encode_state(state), expected=raw):
                return first, context
        raise BackendError(f"thread state {key!r} kept changing under concurrent writers; gave up")

    async def update(
        self,
        memory_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        content: str | None = None,
        importance: float | None = None,
        kind: MemoryKind | None = None,
        metadata: dict[str, Any] | None = None,
        ttl: timedelta | float | None = None,
    ) -> Memory:
        """Change fields of one memory; content changes are re-embedded."""
        scope = require_scope(user_id, agent_id, None)
        changes: dict[str, Any] = {}
        if content is not None:
            changes["content"] = check_content(content, self.config.max_content_chars)
        if importance is not None:
            changes["importance"] = check_importance(importance)
        if kind is not None:
            changes["kind"] = kind
        if metadata is not None:
            changes["metadata"] = check_metadata(metadata)
        now = utcnow()
        if ttl is not None:
            changes["expires_at"] = expiry(now, ttl)

        async def change(current: Memory) -> tuple[Memory, Any]:
            updated = msgspec.structs.replace(current, updated_at=now, **changes)
            return updated, await self._embed_one(index_text(updated)) if "content" in changes else None

        async with self._write_lock:
            await self.get(memory_id, user_id=scope.user_id, agent_id=scope.agent_id)  # NotFoundError if absent
            updated = await self._modify(memory_id, scope, change)
            if updated is None:
                raise NotFoundError(f"memory {memory_id!r} was forgotten while being updated")
            return updated

    async def _modify(
        self, memory_id: str, scope: Scope, change: Callable[[Memory], Awaitable[tuple[Memory, Any]]]
    ) -> Memory | None:
        """Read, change and compare-and-replace one memory, retrying when another writer (in this or
        any process) changed it in between; None if it no longer exists. A vector of None keeps the
        stored one."""
        for _ in range(_REPLACE_ATTEMPTS):
            records = await self.backend.get(self._collection, [memory_id], scope)
            if not records:
                return None
            record = records[0]
            updated, vector = await change(decode(record))
            candidate = self._to_record(updated, record.vector if vector is None else vector)
            if await self.backend.replace(self._collection, candidate, expected_body=record.body):
                return updated
        raise BackendError(f"memory {memory_id!r} kept changing under concurrent writers; gave up")

    async def forget(self, memory_id: str, *, user_id: str | None = None, agent_id: str | None = None) -> bool:
        scope = require_scope(user_id, agent_id, None)
        async with self._write_lock:
            return await self.backend.delete(self._collection, [memory_id], scope) > 0

    async def forget_all(self, *, user_id: str | None = None, agent_id: str | None = None) -> int:
        """Delete every memory of a user (or agent); returns how many."""
        scope = require_scope(user_id, agent_id, None)
        total = 0
        async with self._write_lock:
            while True:
                page = await self.backend.scan(self._collection, scope, limit=1000)
                if not page.records:
                    return total
                total += await self.backend.delete(self._collection, [r.id for r in page.records], scope)

    async def sweep_expired(self) -> int:
        """Delete expired memories now (recall never returns them, swept or not)."""
        async with self._write_lock:
            return await self.backend.delete_expired(self._collection, now_epoch())

    # -- reads ----------------------------------------------------------------------------------
    async def get(self, memory_id: str, *, user_id: str | None = None, agent_id: str | None = None) -> Memory:
        scope = require_scope(user_id, agent_id, None)
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
        all_scopes: bool = False,
    ) -> MemoryPage:
        """Memories in a scope, ordered by id; pass ``next_cursor`` back for the next page."""
        scope = require_scope(user_id, agent_id, session_id, all_scopes=all_scopes)
        if limit < 1:
            raise ValidationError("limit must be >= 1")
        wanted = build_filters(kinds, metadata)
        page = await self.backend.scan(
            self._collection, scope, filters=wanted, limit=limit, cursor=cursor, now=now_epoch()
        )
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
    ) -> builtins.list[RecallHit]:
        """The ``k`` (default 5) memories that best match ``query``, best first, with per-signal scores."""
        scope = require_scope(user_id, agent_id, session_id, all_scopes=all_scopes)
        query_text = check_content(query, self.config.max_content_chars, "query")
        k = self.config.default_k if k is None else k
        if not 1 <= k <= self.config.max_k:
            raise ValidationError(f"k must be in 1..{self.config.max_k}, got {k}")
        threshold = self.config.min_score if min_score is None else min_score
        backend_query = Query(
            scope=scope, all_scopes=all_scopes, vector=await self._embed_one(query_text), text=query_text,
            filters=build_filters(kinds, metadata), k=k, weights=weights or self.config.weights,
            now=now_epoch() if as_of is None else epoch(as_of), half_life_s=self.config.half_life_days * 86400.0,
            min_importance=check_importance(min_importance),
            min_score=-math.inf if threshold is None else threshold,
        )  # fmt: skip
        if self.config.fusion == "rrf":
            ranked = await rrf_rerank(self.backend, self._collection, backend_query, k)
        elif self.config.neighbour_weight > 0:
            ranked = await neighbour_rerank(self.backend, self._collection, backend_query, k,
                                            self.config.neighbour_weight)  # fmt: skip
        else:
            ranked = [(hit, 0.0) for hit in await self.backend.query(self._collection, backend_query)]
        hits = [to_hit(hit, boost) for hit, boost in ranked]
        if self._access is not None and self.config.track_access and hits:
            self._access.touch(self, [hit.memory.id for hit in hits], scope)
        return hits

    # -- access statistics (applied in the background by AccessTracker) ------------------------
    async def apply_access(self, counts: Mapping[str, int], scope: Scope, at: datetime) -> None:
        async with self._write_lock:
            for memory_id, count in counts.items():

                async def touch(current: Memory, count: int = count) -> tuple[Memory, Any]:
                    touched = msgspec.structs.replace(
                        current, access_count=current.access_count + count, last_accessed_at=at
                    )
                    return touched, None

                await self._modify(memory_id, scope, touch)

    # -- helpers ----------------------------------------------------------------------------------
    async def _embed_one(self, text: str) -> Any:
        return as_unit_vectors(await self.embedder.embed([text]))[0]

    def _to_record(self, memory: Memory, vector: Any) -> Record:
        return Record(
            id=memory.id,
            scope=memory.scope,
            body=encode_memory(memory),
            text=index_text(memory),
            vector=vector,
            importance=memory.importance,
            timestamp=epoch(memory.updated_at),
            expires_at=None if memory.expires_at is None else epoch(memory.expires_at),
            fields=record_fields(memory),
        )
