"""The backend contract every storage adapter implements: two faces, declared separately.

The record face (``RecordStore``) stores ``Record``s in named collections. Each
record has an id, a scope, an opaque body (the layer's encoded struct), optional
text and vector, the two numbers the scoring kernel needs (importance,
timestamp), an optional expiry, filterable fields (scalars, or tuples of tags
matched any-of) and access counters kept beside it. Scope, expiry and filters
are applied inside the store, never after.

The key-value face (``KeyValueStore``) keeps small blobs per namespace with
expiry, compare-and-set, and ordered listing by prefix: thread state, caches,
checkpoints and working memory live there.

One clock: every expiry, of records and of keys alike, is compared with the
caller's ``now`` (Unix seconds; ``None`` means this process's clock), never a
server's, so a test moves time by passing ``now`` instead of sleeping.

Every memory layer is written once, in the core, over this contract; adapters
declare what they can do in ``Capabilities`` (the client refuses at open a layer
pointed at a backend that cannot serve it) and raise ``CapabilityError`` for
the rest.
"""

from __future__ import annotations

import functools
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeAlias

import msgspec

from memkit._concurrency import gather_bounded
from memkit._encodable import encodable
from memkit._repr import short_repr
from memkit._url import StorageURL
from memkit.errors import ScopeError, ValidationError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "Backend",
    "Capabilities",
    "FieldValue",
    "Fields",
    "FilterValue",
    "Hit",
    "KVPage",
    "KeyValueStore",
    "Page",
    "Query",
    "Record",
    "RecordStore",
    "Scope",
    "Scores",
    "StorageURL",
    "Vector",
    "Weights",
    "check_filters",
    "check_key",
    "require_scope",
    "scope_matches",
]

Vector: TypeAlias = "npt.NDArray[np.float32]"
_REPLACES_AT_ONCE = 16
FieldValue = str | int | float | bool
Fields = dict[str, FieldValue | tuple[str, ...]]
"""A record's filterable fields: a scalar, or a tuple of tags (a record matches a tag filter when any of
its tags is among the wanted values)."""
FilterValue = FieldValue | list[FieldValue] | tuple[FieldValue, ...]
"""A scalar means equality; a list or tuple means "any of"."""


class Scope(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """Who a record belongs to. ``None`` in a query means "any"."""

    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None

    def is_empty(self) -> bool:
        return self.user_id is None and self.agent_id is None and self.session_id is None


def scope_matches(record_scope: Scope, wanted: Scope) -> bool:
    """True when every id set in ``wanted`` equals the record's."""
    if record_scope == wanted:  # the common case, compared in C
        return True
    user, agent, session = wanted.user_id, wanted.agent_id, wanted.session_id
    return (
        (user is None or user == record_scope.user_id)
        and (agent is None or agent == record_scope.agent_id)
        and (session is None or session == record_scope.session_id)
    )


class Capabilities(msgspec.Struct, frozen=True, kw_only=True):
    """What a backend can do; the client checks each layer's needs against these at open."""

    records: bool = True
    """The record face works (plain Redis, without the search module: False)."""
    kv: bool = True
    """The key-value face works (Pinecone, Weaviate: False)."""
    vector_search: bool = False
    text_search: bool = False
    filtered_scan: bool = True
    """``scan`` and ``count`` by fields without a vector."""
    atomic_replace: bool = True
    """``replace`` and ``kv_replace`` are true compare-and-set across clients."""
    ttl: bool = False
    persistent: bool = False
    """Data outlives the process."""
    cheap_scans: bool = False
    """A filtered scan is answered from an index in this process's memory, at about the cost of a read by id
    (memory://): a layer need not write extra records to spare its reads a scan."""
    concurrent_requests: bool = False
    """Operations wait on a server that serves several at once (a connection pool): independent reads issued
    side by side overlap their waits. An in-process store (memory://, SQLite's one connection) serves one at a
    time and waits for nothing; a layer reads from it one call after another (a task per call only added
    turns of the event loop, each behind every other ready task)."""


class Record(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One stored item. ``gc=False``: embedded stores hold one per memory, and the cycle collector walked them
    all at every full collection; a record holds strings, numbers, an array and a dict of those, no cycle."""

    id: str
    scope: Scope
    body: bytes
    text: str | None = None
    vector: Any = None
    """``None`` or a 1-d float32 array, already validated."""
    importance: float = 0.0
    timestamp: float = 0.0
    """Unix seconds the recency signal is measured from; ``scan`` orders by it."""
    expires_at: float | None = None
    fields: Fields = msgspec.field(default_factory=dict)
    access_count: int = 0
    """Kept beside the record by ``touch``; ignored by ``upsert`` and ``replace`` (they keep it)."""
    last_accessed: float | None = None
    """Unix seconds of the latest ``touch``, beside the record like ``access_count``."""

    def is_expired(self, now: float) -> bool:
        return self.expires_at is not None and self.expires_at <= now


class Weights(msgspec.Struct, frozen=True, kw_only=True):
    """Weights of the hybrid score: final = sum(weight * signal), each signal in 0..1."""

    similarity: float = 0.5
    lexical: float = 0.5
    recency: float = 0.05
    importance: float = 0.1

    def __post_init__(self) -> None:
        # A memkit ValidationError (a ValueError: msgspec turns it into its own ValidationError when
        # decoding). A str or a huge int once raised TypeError / OverflowError here.
        for name in ("similarity", "lexical", "recency", "importance"):
            value = getattr(self, name)
            if not (_finite(value) and value >= 0):
                raise ValidationError(f"weight {name} must be a finite number >= 0, got {short_repr(value)}")


def _finite(value: object) -> bool:
    """An int or float, not a bool, that is finite as a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _is_field_value(value: object) -> bool:
    """What a filter can compare with a stored field, on every backend: a bool, an integer that fits in 64
    bits, a finite float, text without NUL that is valid Unicode."""
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return -(2**63) < value < 2**63
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return "\x00" not in value and encodable(value)
    return False


def check_filters(filters: object, what: str = "filters") -> None:
    """The contract's rule for filters, checked before any backend sees them: a mapping of field name (text
    without NUL) to a field value or a list/tuple of field values (any of them). A dict or a nested list is
    refused (it once raised TypeError on the embedded backends and matched nothing on the servers)."""
    if not isinstance(filters, Mapping):
        raise ValidationError(f"{what} must be a mapping of field -> value, got {type(filters).__name__}")
    for name, wanted in filters.items():
        if not isinstance(name, str) or "\x00" in name or not encodable(name):
            raise ValidationError(f"{what}: field name {short_repr(name)} is not text without NUL")
        values = wanted if isinstance(wanted, list | tuple) else (wanted,)
        for value in values:
            if not _is_field_value(value):
                raise ValidationError(
                    f"{what}: {short_repr(name)} wants {short_repr(value)}; a filter value is a string, a number or "
                    "a boolean (or a list of them, meaning any of them)"
                )


def require_scope(scope: Scope, all_scopes: bool) -> None:
    """The contract's guard: an empty scope reads or writes across every user, so it needs the opt-in."""
    if scope.is_empty() and not all_scopes:
        raise ScopeError("an empty scope reaches every user's records; pass all_scopes=True to mean it")


def check_key(namespace: str, key: str) -> None:
    """The key-value face's one rule for names, on every backend: valid Unicode strings without NUL (Postgres
    text cannot hold NUL, and SQLite refused lone surrogates that memory:// kept). Layers build keys from
    user ids injectively (``memkit.layers._keys``)."""
    for what, value in (("namespace", namespace), ("key", key)):
        if not isinstance(value, str):
            raise ValidationError(f"key-value {what} must be a string, got {type(value).__name__}")
        if "\x00" in value:
            raise ValidationError(f"key-value {what} {value!r} contains a NUL character")
        try:
            value.encode()
        except UnicodeEncodeError:
            raise ValidationError(f"key-value {what} {value!r} is not valid Unicode (a lone surrogate)") from None


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

    def __post_init__(self) -> None:
        require_scope(self.scope, self.all_scopes)
        check_filters(self.filters)
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 0:
            raise ValidationError(f"Query.k must be an integer >= 0, got {short_repr(self.k)}")
        if not isinstance(self.weights, Weights):
            raise ValidationError(f"Query.weights must be a Weights, got {type(self.weights).__name__}")
        if self.text is not None and not isinstance(self.text, str):
            raise ValidationError(f"Query.text must be a string or None, got {type(self.text).__name__}")
        if not (_finite(self.now) and _finite(self.min_importance)):
            raise ValidationError(f"Query.now and min_importance must be finite numbers, got {short_repr(self.now)}, "
                                  f"{short_repr(self.min_importance)}")  # fmt: skip
        if not (_finite(self.half_life_s) and self.half_life_s > 0):
            raise ValidationError(f"Query.half_life_s must be a finite number > 0, got {short_repr(self.half_life_s)}")
        if (
            isinstance(self.min_score, bool)
            or not isinstance(self.min_score, int | float)
            or self.min_score != self.min_score
        ):
            raise ValidationError(f"Query.min_score must be a number (not NaN), got {short_repr(self.min_score)}")


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
    """Opaque; pass it back for the next page. Keyset, never an offset: a record present for the whole
    scan is visited exactly once, whatever is inserted or deleted meanwhile."""


class KVPage(msgspec.Struct, frozen=True, kw_only=True):
    items: list[tuple[str, bytes]]
    """(key, value) pairs in ascending key order (by code point)."""
    next_cursor: str | None = None


class _Lifecycle(ABC):
    """Connection lifecycle shared by both faces: ``async with backend: ...``."""

    capabilities: Capabilities = Capabilities()
    owner: str | None = None
    """The client that opens and closes this backend (``Memkit('sqlite:///a.db')``), named when it is closed."""

    def __init__(self, url: StorageURL) -> None:
        self.url = url

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    @abstractmethod
    async def open(self) -> None:
        """Connect, then ``setup()`` (idempotent)."""

    async def setup(self) -> None:
        """Create or upgrade what the backend needs (schemas, tables); idempotent, safe to run concurrently."""
        return None

    @abstractmethod
    async def aclose(self) -> None:
        """Release connections; idempotent."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.url)!r})"


class RecordStore(_Lifecycle):
    """The record face: what Pinecone or Weaviate implement."""

    @abstractmethod
    async def ensure_collection(self, name: str, dim: int | None) -> None:
        """Create the collection if missing; fails if it exists with another dimension."""

    @abstractmethod
    async def upsert(self, collection: str, records: Sequence[Record]) -> None:
        """Insert or replace records, all or none. Access counters of replaced records are kept."""

    @abstractmethod
    async def replace(self, collection: str, record: Record, expected_body: bytes | None) -> bool:
        """Compare-and-set: write ``record`` only if the stored record with its id has body ``expected_body``
        (``None``: only if no record has that id). True when written, and also when the stored body already
        equals ``record.body`` (a retried call that had succeeded); False, writing nothing, otherwise.
        Writers that could race with an identical body must make bodies unique (a nonce)."""

    async def replace_many(self, collection: str, pairs: Sequence[tuple[Record, bytes | None]]) -> list[bool]:
        """``replace`` for each (record, expected body), each on its own (not all or none), ids distinct:
        whether each was written. This default runs a few ``replace`` calls at a time (a server overlaps the
        round trips); an embedded backend overrides it with one pass under one lock."""
        from memkit._concurrency import gather_bounded  # the contract module stays free of the helpers

        calls = [functools.partial(self.replace, collection, record, expected) for record, expected in pairs]
        return await gather_bounded(calls, _REPLACES_AT_ONCE)

    @abstractmethod
    async def get(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> list[Record]:
        """The records with these ids (missing ones omitted); only those in ``scope`` when given."""

    @abstractmethod
    async def delete(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> int:
        """Delete by id (only within ``scope`` when given), counters included; returns how many existed."""

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
        newest_first: bool = False,
        all_scopes: bool = False,
    ) -> Page:
        """Records in ``scope`` ordered by (timestamp, id), oldest first unless ``newest_first``; expired ones
        skipped when ``now`` is given. An empty scope needs ``all_scopes=True``."""

    @abstractmethod
    async def count(
        self,
        collection: str,
        scope: Scope,
        *,
        filters: Mapping[str, FilterValue] | None = None,
        now: float | None = None,
        all_scopes: bool = False,
    ) -> int:
        """How many records ``scan`` would visit with the same arguments."""

    @abstractmethod
    async def delete_expired(self, collection: str, now: float) -> int: ...

    async def nearest(
        self,
        collection: str,
        scope: Scope,
        vectors: Sequence[Vector],
        *,
        k: int = 1,
        min_similarity: float = -1.0,
        now: float | None = None,
    ) -> list[list[tuple[str, float]]]:
        """For each vector, up to ``k`` (id, cosine similarity) of the most similar live records in ``scope``
        with similarity >= ``min_similarity``, best first: the near-duplicate check of a whole batch.

        This default asks ``query`` once per vector; a backend overrides it with one pass per batch."""
        require_scope(scope, False)
        only = Weights(similarity=1.0, lexical=0.0, recency=0.0, importance=0.0)
        found = []
        for vector in vectors:
            ask = Query(scope=scope, vector=vector, k=k, now=time.time() if now is None else now, weights=only,
                        min_score=min_similarity)  # fmt: skip
            hits = await self.query(collection, ask)
            found.append([(h.record.id, h.scores.similarity) for h in hits if h.scores.similarity >= min_similarity])
        return found

    async def nearest_many(
        self,
        collection: str,
        requests: Sequence[tuple[Scope, Sequence[Vector]]],
        *,
        k: int = 1,
        min_similarity: float = -1.0,
        now: float | None = None,
    ) -> list[list[list[tuple[str, float]]]]:
        """``nearest`` for each (scope, vectors) of a batch that spans scopes, one answer per request in order.

        This default asks ``nearest`` per scope, a few at a time on a backend that serves concurrent requests;
        an embedded backend overrides it with one pass over every scope's rows."""
        for scope, _ in requests:
            require_scope(scope, False)
        limit = 8 if self.capabilities.concurrent_requests else 1
        return await gather_bounded(
            [functools.partial(self.nearest, collection, scope, vectors, k=k, min_similarity=min_similarity,
                               now=now) for scope, vectors in requests],
            limit=limit,
        )  # fmt: skip

    @abstractmethod
    async def touch(self, collection: str, counts: Mapping[str, int], at: float) -> None:
        """Add ``counts[id]`` to each record's ``access_count`` and set ``last_accessed`` to ``at`` (if later),
        atomically per record, re-indexing nothing; ids that no longer exist are ignored."""


class KeyValueStore(_Lifecycle):
    """The key-value face: what plain Redis implements. Expiry is judged by the caller's ``now``."""

    @abstractmethod
    async def kv_get(self, namespace: str, key: str, *, now: float | None = None) -> bytes | None: ...

    @abstractmethod
    async def kv_set(
        self, namespace: str, key: str, value: bytes, ttl_s: float | None = None, *, now: float | None = None
    ) -> None: ...

    @abstractmethod
    async def kv_delete(self, namespace: str, key: str, *, now: float | None = None) -> bool:
        """Delete a key; True when a live (unexpired) value was there."""

    @abstractmethod
    async def kv_replace(
        self,
        namespace: str,
        key: str,
        value: bytes,
        expected: bytes | None,
        ttl_s: float | None = None,
        *,
        now: float | None = None,
    ) -> bool:
        """Compare-and-set: set ``value`` only if the live value equals ``expected`` (``None``: the key is absent
        or expired). True when written, and also when the live value already equals ``value`` (a retried call
        that had succeeded); False, writing nothing, otherwise."""

    @abstractmethod
    async def kv_scan(
        self, namespace: str, *, prefix: str = "", limit: int = 100, cursor: str | None = None, now: float | None = None
    ) -> KVPage:
        """Live keys starting with ``prefix``, in ascending order, ``limit`` at a time."""

    @abstractmethod
    async def kv_delete_prefix(self, namespace: str, prefix: str = "") -> int:
        """Delete every key of ``namespace`` starting with ``prefix``; returns how many were deleted."""


class Backend(RecordStore, KeyValueStore):
    """Both faces: memory, sqlite, Redis (Stack) and Postgres. ``capabilities`` says which work."""
