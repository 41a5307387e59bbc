"""The backend contract every storage adapter implements.

A backend stores ``Record``s in named collections. Each record has an id, a
scope, an opaque body (the layer's encoded struct), optional text and vector,
the two numbers the scoring kernel needs (importance, timestamp), an optional
expiry and a few filterable fields. Scope, expiry and filters are applied
inside the store, never after. Every memory layer is written once, in the
core, over this contract; adapters declare what they can do in
``Capabilities`` and raise ``CapabilityError`` for the rest.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeAlias

import msgspec

from memkit._url import StorageURL

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "Backend",
    "Capabilities",
    "FieldValue",
    "FilterValue",
    "Hit",
    "Page",
    "Query",
    "Record",
    "Scope",
    "Scores",
    "StorageURL",
    "Vector",
    "Weights",
    "scope_matches",
]

Vector: TypeAlias = "npt.NDArray[np.float32]"
FieldValue = str | int | float | bool
FilterValue = FieldValue | list[FieldValue] | tuple[FieldValue, ...]
"""A scalar means equality; a list or tuple means "any of"."""


class Scope(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Who a record belongs to. ``None`` in a query means "any"."""

    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None

    def is_empty(self) -> bool:
        return self.user_id is None and self.agent_id is None and self.session_id is None


def scope_matches(record_scope: Scope, wanted: Scope) -> bool:
    """True when every id set in ``wanted`` equals the record's."""
    return all(
        want is None or want == have
        for want, have in (
            (wanted.user_id, record_scope.user_id),
            (wanted.agent_id, record_scope.agent_id),
            (wanted.session_id, record_scope.session_id),
        )
    )


class Capabilities(msgspec.Struct, frozen=True, kw_only=True):
    vector_search: bool = False
    text_search: bool = False
    ttl: bool = False
    transactions: bool = False
    persistent: bool = False


class Record(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    scope: Scope
    body: bytes
    text: str | None = None
    vector: Any = None
    """``None`` or a 1-d float32 array, already validated."""
    importance: float = 0.0
    timestamp: float = 0.0
    """Unix seconds the recency signal is measured from."""
    expires_at: float | None = None
    fields: dict[str, FieldValue] = msgspec.field(default_factory=dict)

    def is_expired(self, now: float) -> bool:
        return self.expires_at is not None and self.expires_at <= now


class Weights(msgspec.Struct, frozen=True, kw_only=True):
    """Weights of the hybrid score: final = sum(weight * signal), each signal in 0..1."""

    similarity: float = 0.5
    lexical: float = 0.5
    recency: float = 0.05
    importance: float = 0.1

    def __post_init__(self) -> None:
        for name in ("similarity", "lexical", "recency", "importance"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise msgspec.ValidationError(f"weight {name} must be finite and >= 0, got {value}")


class Query(msgspec.Struct, frozen=True, kw_only=True):
    scope: Scope
    """Applied in the store always: every id set here must match."""
    all_scopes: bool = False
    """The caller opted in to a scope with no user or agent id; it never widens ``scope``."""
    vector: Any = None
    text: str | None = None
    filters: Mapping[str, FilterValue] = msgspec.field(default_factory=dict)
    k: int = 5
    weights: Weights = msgspec.field(default_factory=Weights)
    now: float = 0.0
    half_life_s: float = 30 * 86400.0
    min_importance: float = 0.0
    min_score: float = -math.inf


class Scores(msgspec.Struct, frozen=True, kw_only=True):
    final: float
    similarity: float
    lexical: float
    recency: float
    importance: float


class Hit(msgspec.Struct, frozen=True, kw_only=True):
    record: Record
    scores: Scores


class Page(msgspec.Struct, frozen=True, kw_only=True):
    records: list[Record]
    next_cursor: str | None = None


class Backend(ABC):
    """Abstract storage backend. Use as ``async with backend: ...``."""

    capabilities: Capabilities = Capabilities()

    def __init__(self, url: StorageURL) -> None:
        self.url = url

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    @abstractmethod
    async def open(self) -> None:
        """Connect and create what is missing (idempotent)."""

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def ensure_collection(self, name: str, dim: int | None) -> None:
        """Create the collection if missing; fails if it exists with another dimension."""

    @abstractmethod
    async def upsert(self, collection: str, records: Sequence[Record]) -> None:
        """Insert or replace records, all or none."""

    @abstractmethod
    async def replace(self, collection: str, record: Record, expected_body: bytes) -> bool:
        """Atomically write ``record`` over the stored record with its id, but only if that record's body
        still equals ``expected_body``; False (nothing written) if it changed or is gone. This is how the
        layers merge and update without losing a concurrent writer's change, in any process."""

    @abstractmethod
    async def get(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> list[Record]:
        """The records with these ids (missing ones omitted); only those in ``scope`` when given."""

    @abstractmethod
    async def delete(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> int:
        """Delete by id (only within ``scope`` when given); returns how many existed."""

    @abstractmethod
    async def query(self, collection: str, query: Query) -> list[Hit]:
        """Top-k records by the hybrid score, scope / expiry / filters applied in the store."""

    @abstractmethod
    async def scan(
        self,
        collection: str,
        scope: Scope,
        *,
        filters: Mapping[str, FilterValue] | None = None,
        limit: int = 100,
        cursor: str | None = None,
        now: float | None = None,
    ) -> Page:
        """Records in ``scope`` (empty scope: all) ordered by id; expired ones skipped when ``now`` is given."""

    @abstractmethod
    async def delete_expired(self, collection: str, now: float) -> int: ...

    @abstractmethod
    async def kv_get(self, namespace: str, key: str) -> bytes | None: ...

    @abstractmethod
    async def kv_set(self, namespace: str, key: str, value: bytes, ttl_s: float | None = None) -> None: ...

    @abstractmethod
    async def kv_delete(self, namespace: str, key: str) -> bool: ...

    @abstractmethod
    async def kv_replace(
        self, namespace: str, key: str, value: bytes, expected: bytes | None, ttl_s: float | None = None
    ) -> bool:
        """Atomically set ``value`` only if the current value equals ``expected`` (None: the key is absent
        or expired); False, writing nothing, otherwise."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.url)!r})"
