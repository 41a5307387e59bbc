"""The long-term layer's records: memories and recall hits.

Records are frozen msgspec Structs: cheap to build, encoded by encoders made
once, and evolvable (new fields get defaults, so old stored data still decodes).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Literal

import msgspec

from memkit._time import utcnow
from memkit.backend import Scope, Weights

__all__ = ["KINDS", "LongTermConfig", "Memory", "MemoryKind", "MemoryPage", "RecallHit", "StoreResult"]

MemoryKind = str
"""One of ``KINDS`` or any custom string."""

KINDS: Final = ("fact", "preference", "decision", "knowledge", "task")


class Memory(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One long-term memory: a fact, preference, decision or piece of knowledge."""

    id: str
    scope: Scope
    kind: MemoryKind
    content: str
    importance: float = 0.5
    source: str | None = None
    created_at: datetime = msgspec.field(default_factory=utcnow)
    updated_at: datetime = msgspec.field(default_factory=utcnow)
    last_accessed_at: datetime | None = None
    access_count: int = 0
    expires_at: datetime | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    context: str | None = None
    """Neighbouring text (e.g. the previous conversation turn) indexed for recall, not shown as content."""


class RecallHit(msgspec.Struct, frozen=True, kw_only=True):
    """A recalled memory with the per-signal scores that explain its rank."""

    memory: Memory
    score: float
    similarity: float
    lexical: float
    recency: float
    importance: float
    neighbour: float = 0.0
    """Boost from the best neighbouring conversation turn (0 for memories that are not turns)."""


class LongTermConfig(msgspec.Struct, frozen=True, kw_only=True):
    collection: str = "long_term"
    min_importance: float = 0.0
    """The importance gate: memories below it are not stored (the caller gets status "rejected")."""
    max_content_chars: int = 8_000
    dedupe: bool = True
    merge_threshold: float = 0.92
    """Cosine similarity at or above which a new memory updates an existing one in the same scope."""
    default_k: int = 5
    max_k: int = 200
    min_score: float | None = None
    """Relevance threshold: hits scoring below it are dropped."""
    weights: Weights = msgspec.field(default_factory=Weights)
    """Defaults chosen on the LoCoMo dev split; see the README's "Retrieval quality"."""
    half_life_days: float = 30.0
    track_access: bool = True
    fusion: Literal["blend", "rrf"] = "blend"
    """How similarity and lexical scores combine: weighted blend (measured best) or rank fusion."""
    neighbour_weight: float = 0.5
    """Share of the best neighbouring turn's score a conversation turn gets (0 turns this off)."""
    context_turns: int = 1
    """How many previous turns ``add_turns`` indexes with each turn as its context."""


class StoreResult(msgspec.Struct, frozen=True, kw_only=True):
    status: Literal["stored", "merged", "duplicate", "rejected"]
    memory: Memory | None
    reason: str | None = None


class MemoryPage(msgspec.Struct, frozen=True, kw_only=True):
    memories: list[Memory]
    next_cursor: str | None
