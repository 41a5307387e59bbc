"""``pinecone://INDEX``: records as vectors with metadata in one Pinecone index, a namespace per collection.

Layout: ``_layout``; filters: ``_filters``; request limits: ``_io``; search: ``_search``; errors and
retries: ``_errors``; URL options: ``_connect``.

Why one namespace per collection, not per user: a memkit id is unique in its collection whatever its
scope, and ``get`` / ``delete`` by id come without a scope, so a namespace per user would have to ask every
namespace for an id, and a record moved to another scope would leave its old copy behind; queries across
users (``all_scopes``, an agent id alone) would fan out over every namespace. The scope is instead a
metadata filter Pinecone applies inside its search (filters are data, never strings: ``_filters``).

What Pinecone cannot do, declared in ``CAPABILITIES`` so the client refuses layers that need it:

- no key-value face (``kv=False``): the ``kv_*`` methods raise ``CapabilityError``;
- no conditional write (``atomic_replace=False``): ``replace`` and ``touch`` read, compare and write under
  a lock of this backend object, so they are compare-and-set within one process but not across clients,
  and an upsert keeps the access counters it read just before (a concurrent touch elsewhere can be lost);
- no ordered listing by metadata (``filtered_scan=False``): ``scan`` works, by Pinecone's fetch by metadata
  from the cursor's timestamp on, but reads the rest of the scope for every page, too slow for layers that
  scan routinely; ``count`` is one dry-run update;
- no BM25 (``text_search=False``): a query's text is not scored (``_search``).

Pinecone's writes become visible to reads a moment later (its freshness is eventual); the loopback test
double (``memkit.testing.pinecone_double``) shows them at once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, Final

import anyio
import numpy as np
from pinecone.models.vectors.vector import Vector as StoredVector

from memkit.backend import (
    Capabilities,
    FilterValue,
    Hit,
    Page,
    Query,
    Record,
    Scope,
    StorageURL,
    Vector,
    require_scope,
    scope_matches,
)
from memkit.errors import ConfigurationError, DimensionMismatchError, NotOpenError, ValidationError
from memkit_backends._server.records_only import RecordsOnlyBackend
from memkit_backends.pinecone import _scan
from memkit_backends.pinecone._connect import open_index, settings_of
from memkit_backends.pinecone._errors import operation
from memkit_backends.pinecone._filters import expired_filter, query_filter
from memkit_backends.pinecone._io import IndexIO
from memkit_backends.pinecone._layout import (
    decode_record,
    encode_metadata,
    namespace_of,
    placeholder_vector,
    record_id_of,
    vector_id,
)
from memkit_backends.pinecone._search import PineconeSearch

__all__ = ["CAPABILITIES", "PineconeBackend"]

CAPABILITIES: Final = Capabilities(records=True, kv=False, vector_search=True, text_search=False,
                                   filtered_scan=False, atomic_replace=False, ttl=False, persistent=True,
                                   concurrent_requests=True)  # fmt: skip


def _stored_ids(ids: Sequence[str]) -> dict[str, str]:
    """Vector id -> record id for the ids that can exist (an id with NUL or a lone surrogate cannot)."""
    found = {}
    for record_id in ids:
        try:
            found[vector_id(record_id)] = record_id
        except ValidationError:
            continue
    return found


class PineconeBackend(RecordsOnlyBackend):
    capabilities = CAPABILITIES

    def __init__(self, url: StorageURL) -> None:
        super().__init__(url)
        self._settings = settings_of(url)
        self._index: IndexIO | None = None
        self._dim: int | None = None
        self._lock = anyio.Lock()
        """Held by every read-compare-write (replace, touch, the counters an upsert keeps)."""

    # -- lifecycle ------------------------------------------------------------------------------
    @operation
    async def open(self) -> None:
        if self._index is not None:
            return
        index = await open_index(self._settings)
        try:
            stats = await index.describe_index_stats()
            if stats.metric not in (None, "cosine"):
                raise ConfigurationError(f"{self.url}: the index scores by {stats.metric}; memkit's similarity is "
                                         "cosine: create the index with metric='cosine'")  # fmt: skip
            if not stats.dimension:
                raise ConfigurationError(f"{self.url}: the index has no dense vectors; memkit needs a dense index")
        except BaseException:
            with anyio.CancelScope(shield=True):
                await index.close()
            raise
        self._index, self._dim = IndexIO(index, self._settings.concurrency), int(stats.dimension)

    async def aclose(self) -> None:
        index, self._index = self._index, None
        if index is not None:
            await index.index.close()

    @property
    def _io(self) -> IndexIO:
        if self._index is None:
            raise NotOpenError.closed(
                self.owner, f"{self.url} is not open (never opened, or closed): use 'async with open_backend(...)'"
            )
        return self._index

    def _namespace(self, collection: str) -> str:
        return namespace_of(self._settings.prefix, collection)

    def _check_dim(self, dim: int, what: str) -> None:
        if dim != self._dim:
            raise DimensionMismatchError(f"{what} has {dim} dimensions; the Pinecone index holds {self._dim}")

    # -- writes ---------------------------------------------------------------------------------
    @operation
    async def ensure_collection(self, name: str, dim: int | None) -> None:
        self._namespace(name)  # a namespace is made by its first write; this checks the name
        if dim is not None:
            self._check_dim(dim, f"collection {name!r}")

    def _item(self, record: Record, stored: StoredVector | None) -> dict[str, Any]:
        counters = stored.metadata if stored is not None else None
        vector = placeholder_vector(self._dim or 1) if record.vector is None else record.vector.tolist()
        return {"id": vector_id(record.id), "values": vector, "metadata": encode_metadata(record, counters)}

    def _check_records(self, records: Sequence[Record]) -> dict[str, Record]:
        """Everything a write could refuse, before anything is written; the last of an id wins."""
        latest: dict[str, Record] = {}
        for record in records:
            if record.vector is not None:
                self._check_dim(int(np.asarray(record.vector).shape[0]), f"record {record.id[:60]!r}'s vector")
            latest[vector_id(record.id)] = record
        for record in latest.values():
            encode_metadata(record)
        return latest

    async def _write(self, collection: str, records: Mapping[str, Record]) -> None:
        """Upsert ``records`` (by vector id), each keeping the access counters stored under its id."""
        namespace = self._namespace(collection)
        stored = await self._io.fetch(namespace, list(records))
        items = [self._item(record, stored.get(vid)) for vid, record in records.items()]
        await self._io.upsert(namespace, items)

    @operation
    async def upsert(self, collection: str, records: Sequence[Record]) -> None:
        if not records:
            return
        latest = self._check_records(records)
        async with self._lock:
            await self._write(collection, latest)

    @operation
    async def replace(self, collection: str, record: Record, expected_body: bytes | None) -> bool:
        latest = self._check_records([record])
        async with self._lock:
            current = await self._get(collection, [record.id])
            stored = current[0].body if current else None
            if stored != expected_body:
                return stored == record.body  # True: a retried call whose first attempt had written
            await self._write(collection, latest)
        return True

    @operation
    async def touch(self, collection: str, counts: Mapping[str, int], at: float) -> None:
        """Per record, one partial update of its counters (``_n``, ``_la``) alone, so a touch never rewrites
        what another client wrote to the record meanwhile."""
        if not counts:
            return
        namespace, wanted = self._namespace(collection), _stored_ids(list(counts))
        async with self._lock:
            stored = await self._io.fetch(namespace, list(wanted))
            patches = {}
            for vid, vector in stored.items():
                metadata = vector.metadata or {}
                if record_id_of(metadata) != wanted.get(vid):
                    continue
                last = metadata.get("_la")
                patch = {"_n": int(metadata.get("_n", 0)) + int(counts[wanted[vid]]),
                         "_la": float(at) if last is None else max(float(last), float(at))}  # fmt: skip
                patches[vid] = patch
            await self._io.update_metadata(namespace, patches)

    @operation
    async def delete(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> int:
        namespace = self._namespace(collection)
        async with self._lock:
            found = await self._get(collection, ids, scope)
            if found:
                await self._io.delete(namespace, [vector_id(r.id) for r in found])
        return len(found)

    @operation
    async def delete_expired(self, collection: str, now: float) -> int:
        """Counted, then deleted by filter on the server (no record is read)."""
        namespace, where = self._namespace(collection), expired_filter(now)
        expired = await self._io.count(namespace, where)
        if expired:
            await self._io.delete_matching(namespace, where)
        return expired

    # -- reads ----------------------------------------------------------------------------------
    @operation
    async def get(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> list[Record]:
        return await self._get(collection, ids, scope)

    async def _get(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> list[Record]:
        wanted = _stored_ids(ids)
        stored = await self._io.fetch(self._namespace(collection), list(wanted))
        by_id = {}
        for vid, vector in stored.items():
            if vector.metadata is not None and record_id_of(vector.metadata) == wanted.get(vid):
                record = decode_record(vector.metadata, list(vector.values))
                by_id[record.id] = record
        records = [by_id[i] for i in dict.fromkeys(ids) if i in by_id]
        return records if scope is None else [r for r in records if scope_matches(r.scope, scope)]

    @operation
    async def query(self, collection: str, query: Query) -> list[Hit]:
        if query.vector is not None:
            self._check_dim(int(np.asarray(query.vector).shape[0]), "the query vector")
        ranked = await PineconeSearch(self._io, self._namespace(collection), query).run()
        records = {r.id: r for r in await self._get(collection, [record_id for record_id, _ in ranked])}
        return [Hit(record=records[i], scores=scores) for i, scores in ranked if i in records]

    @operation
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
        """The contract's default (a similarity-only query per vector), the queries ``concurrency`` at a time
        rather than one after another: a batch's round trips overlap."""
        one = super().nearest
        jobs = [partial(one, collection, scope, [vector], k=k, min_similarity=min_similarity, now=now)
                for vector in vectors]  # fmt: skip
        return [row for [row] in await self._io.gather(jobs)]

    @operation
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
        require_scope(scope, all_scopes)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValidationError(f"limit must be an integer >= 1, got {limit!r}")
        after = None if cursor is None else _scan.decode_cursor(cursor)
        start = None if after is None else ("$lte" if newest_first else "$gte", after[0])
        where = query_filter(scope, filters, now=now, timestamp_from=start)
        rows: list[StoredVector] = []
        async for page in self._io.matching(self._namespace(collection), where):
            rows += [v for v in page.values() if record_id_of(v.metadata) is not None]
        return _scan.page_of(rows, after, limit=limit, newest_first=newest_first)

    @operation
    async def count(
        self,
        collection: str,
        scope: Scope,
        *,
        filters: Mapping[str, FilterValue] | None = None,
        now: float | None = None,
        all_scopes: bool = False,
    ) -> int:
        require_scope(scope, all_scopes)
        if now is not None and not math.isfinite(now):
            raise ValidationError(f"now must be a finite number, got {now!r}")
        return await self._io.count(self._namespace(collection), query_filter(scope, filters, now=now))
