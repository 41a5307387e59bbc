"""User-facing records: scopes, memories and recall hits.

Records are frozen msgspec Structs: cheap to build, encoded by encoders made
once, and evolvable (new fields get defaults, so old stored data still decodes).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, Final

import msgspec

__all__ = ["KINDS", "Memory", "MemoryKind", "RecallHit", "Scope", "new_id", "utcnow"]

MemoryKind = str
"""One of ``KINDS`` or any custom string."""

KINDS: Final = ("fact", "preference", "decision", "knowledge", "task")


def utcnow() -> datetime:
    return datetime.now(UTC)


def new_id() -> str:
    return uuid.uuid4().hex


class Scope(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Who a record belongs to. ``None`` in a query means "any"."""

    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None

    def is_empty(self) -> bool:
        return self.user_id is None and self.agent_id is None and self.session_id is None


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
