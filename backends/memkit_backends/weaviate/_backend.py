"""``weaviate://host:8080``: records as objects in Weaviate collections, one per memkit collection.

Layout: ``_layout``; filters: ``_filters``; request limits: ``_io``; hybrid search: ``_search``; scans:
``_scan``; errors and retries: ``_errors``; URL options: ``_options``; client and schema: ``_connect``.

Isolation by filtered properties, not by multi-tenancy. Weaviate's tenants (one shard per tenant) would
keep each user's objects apart physically, and give each user BM25 statistics of their own. They do not
fit memkit's contract: an id is unique in its collection whatever its scope, and ``get`` / ``delete`` by
id come without a scope, so with a tenant per user they would have to ask every tenant (a request per
user, per call); a record rewritten under another scope would leave its old copy in the old tenant
unless every tenant were searched first; scopes without a user (an agent or a session alone) and
``all_scopes`` queries search across users, which Weaviate cannot do across tenants at all; and every new
user would first need a tenant created (a schema change, serialised in Weaviate's cluster). The scope is
instead three filterable properties holding digests of the scope ids, ANDed into every read inside
Weaviate (``_filters``); a scope is served exactly by the flat index's filtered scan (``_search``). The
price: BM25 statistics (document frequencies, mean length) are the collection's, shared by all users, as
on Redis; text scores are divided by the best one in the query's scope, so a user's ranking depends on
other users' text only through those statistics. Nothing of this was measured against a live Weaviate.

What Weaviate cannot do, declared in ``CAPABILITIES`` so the client refuses layers that need it:

- no key-value face (``kv=False``): the ``kv_*`` methods raise ``CapabilityError``;
- no conditional write (``atomic_replace=False``): ``replace`` and ``touch`` read, compare and write under a
  lock of this backend object, so they are compare-and-set within one process but not across clients,
  and an upsert keeps the access counters it read just before (a concurrent touch elsewhere can be lost).

Writes are visible to the next read on one node unless the server indexes vectors asynchronously
(``ASYNC_INDEXING``: its vector search then lags behind the writes for a moment); a batch is not a
transaction: every object it refuses raises ``BackendError`` naming the record, but the others it held
were written (memkit checks dimensions and contents before sending, so a refusal is the server's).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, Final

import anyio
import numpy as np

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
from memkit_backends.weaviate import _scan
from memkit_backends.weaviate._connect import collection_schema, open_client, stored_dim
from memkit_backends.weaviate._errors import operation
from memkit_backends.weaviate._filters import And, Where, expired_where, ids_where, query_where
from memkit_backends.weaviate._io import MAX_IDS, QUERY_MAX, CollectionIO, chunks, gather
from memkit_backends.weaviate._layout import class_name, decode_record, encode_properties, object_uuid, record_id_of
from memkit_backends.weaviate._options import settings_of
from memkit_backends.weaviate._search import WeaviateSearch

__all__ = ["CAPABILITIES", "WeaviateBackend"]

CAPABILITIES: Final = Capabilities(records=True, kv=False, vector_search=True, text_search=True,
                                   filtered_scan=True, atomic_replace=False, ttl=False, persistent=True,
                                   concurrent_requests=True)  # fmt: skip
_COUNTERS: Final = ("v", "rid", "n", "la")


def _stored_ids(ids: Sequence[str]) -> dict[str, str]:
    """Object UUID -> record id for the ids that can exist (an id with NUL or a lone surrogate cannot)."""
    found = {}
    for record_id in ids:
        try:
            found[object_uuid(record_id)] = record_id
        except ValidationError:
            continue
    return found


class WeaviateBackend(RecordsOnlyBackend):
    capabilities = CAPABILITIES

    def __init__(self, url: StorageURL) -> None:
        super().__init__(url)
        self._settings = settings_of(url)
        self.retries = self._settings.retries
        self._client: Any = None
        self._dims: dict[str, int | None] = {}
        """Collections known to exist (Weaviate name -> dimension, None when not yet known)."""
        self._lock = anyio.Lock()
        """Held by every read-compare-write (replace, touch, the counters an upsert keeps)."""

    # -- lifecycle ------------------------------------------------------------------------------
    @operation
    async def open(self) -> None:
        if self._client is None:
            self._client = await open_client(self._settings)

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    def _io(self, name: str) -> CollectionIO:
        if self._client is None:
            raise NotOpenError.closed(
                self.owner, f"{self.url} is not open (never opened, or closed): use 'async with open_backend(...)'"
            )
        handle = self._client.collections.use(name)
        return CollectionIO(handle, batch=self._settings.batch, concurrency=self._settings.concurrency)

    def _name(self, collection: str) -> str:
        return class_name(self._settings.prefix, collection)

    async def _exists(self, name: str) -> bool:
        """Whether the Weaviate collection exists (a positive answer is remembered with its dimension)."""
        if name in self._dims:
            return True
        if self._client is None:
            raise NotOpenError.closed(
                self.owner, f"{self.url} is not open (never opened, or closed): use 'async with open_backend(...)'"
            )
        if not await self._client.collections.exists(name):
            return False
        config = await self._client.collections.use(name).config.get(simple=True)
        ours, dim = stored_dim(config.description)
        if not ours:
            raise ConfigurationError(f"{self.url}: collection {name!r} exists but memkit did not create it; "
                                     "choose another ?prefix=")  # fmt: skip
        self._dims[name] = dim
        return True

    def _check_dim(self, name: str, dim: int, what: str) -> None:
        held = self._dims.get(name)
        if held is not None and dim != held:
            raise DimensionMismatchError(f"{what} has {dim} dimensions; the collection holds {held}")

    # -- writes ---------------------------------------------------------------------------------
    @operation
    async def ensure_collection(self, name: str, dim: int | None) -> None:
        weaviate_name = self._name(name)
        if not await self._exists(weaviate_name):
            try:
                await self._client.collections.create_from_dict(
                    collection_schema(weaviate_name, name, dim, self._settings.index)
                )
                self._dims[weaviate_name] = dim
                return
            except Exception:
                if not await self._exists(weaviate_name):  # else another client made it meanwhile: check it
                    raise
        if dim is not None:
            self._check_dim(weaviate_name, dim, f"collection {name!r}")
            self._dims[weaviate_name] = dim

    def _check_records(self, name: str, records: Sequence[Record]) -> dict[str, Record]:
        """Everything a write could refuse, before anything is written; the last of an id wins."""
        latest: dict[str, Record] = {}
        for record in records:
            if record.vector is not None:
                self._check_dim(name, int(np.asarray(record.vector).shape[0]), f"record {record.id[:60]!r}'s vector")
            latest[object_uuid(record.id)] = record
        for record in latest.values():
            encode_properties(record)
        dims = {int(np.asarray(r.vector).shape[0]) for r in latest.values() if r.vector is not None}
        if len(dims) > 1:
            raise DimensionMismatchError(f"records of one write have vectors of {sorted(dims)} dimensions")
        return latest

    async def _write(self, collection: str, records: Mapping[str, Record]) -> None:
        """Upsert ``records`` (by UUID), each keeping the access counters stored under its UUID."""
        name = self._name(collection)
        if not await self._exists(name):
            dims = [int(np.asarray(r.vector).shape[0]) for r in records.values() if r.vector is not None]
            await self.ensure_collection(collection, dims[0] if dims else None)
        io = self._io(name)
        stored = {uid: obj.properties for uid, obj in await self._by_uuids(io, list(records), _COUNTERS)}
        items = []
        for uid, record in records.items():
            counters = stored.get(uid) if record_id_of(stored.get(uid)) == record.id else None
            vector = None if record.vector is None else np.asarray(record.vector, np.float32).tolist()
            items.append((uid, encode_properties(record, counters), vector))
        await io.insert(items)
        if self._dims.get(name) is None:
            dims = [len(v) for _, _, v in items if v is not None]
            self._dims[name] = dims[0] if dims else None

    async def _by_uuids(self, io: CollectionIO, uuids: Sequence[str], properties: Sequence[str]
                        ) -> list[tuple[str, Any]]:  # fmt: skip
        """(UUID, object) of the stored objects with these UUIDs, with ``properties`` only."""
        jobs = [partial(io.fetch, ids_where(part), limit=len(part), properties=properties)
                for part in chunks(uuids, MAX_IDS)]  # fmt: skip
        return [(str(obj.uuid), obj) for part in await io.gather(jobs) for obj in part]

    @operation
    async def upsert(self, collection: str, records: Sequence[Record]) -> None:
        if not records:
            return
        latest = self._check_records(self._name(collection), records)
        async with self._lock:
            await self._write(collection, latest)

    @operation
    async def replace(self, collection: str, record: Record, expected_body: bytes | None) -> bool:
        latest = self._check_records(self._name(collection), [record])
        async with self._lock:
            current = await self._get(collection, [record.id])
            stored = current[0].body if current else None
            if stored != expected_body:
                return stored == record.body  # True: a retried call whose first attempt had written
            await self._write(collection, latest)
        return True

    @operation
    async def touch(self, collection: str, counts: Mapping[str, int], at: float) -> None:
        """Per object, one partial update of its counters (``n``, ``la``) alone (REST PATCH)."""
        name = self._name(collection)
        if not counts or not await self._exists(name):
            return
        io, wanted = self._io(name), _stored_ids(list(counts))
        async with self._lock:
            jobs = []
            for uid, obj in await self._by_uuids(io, list(wanted), _COUNTERS):
                props = obj.properties
                if record_id_of(props) != wanted.get(uid):
                    continue
                last = props.get("la")
                patch = {"n": int(props.get("n") or 0) + int(counts[props["rid"]]),
                         "la": float(at) if last is None else max(float(last), float(at))}  # fmt: skip
                jobs.append(partial(io.patch, uid, patch))
            if jobs:
                await io.gather(jobs)

    @operation
    async def delete(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> int:
        name = self._name(collection)
        if not ids or not await self._exists(name):
            return 0
        async with self._lock:
            found = await self._get(collection, ids, scope)
            if found:
                await self._io(name).delete_matching(ids_where([object_uuid(r.id) for r in found]))
        return len(found)

    @operation
    async def delete_expired(self, collection: str, now: float) -> int:
        """Deleted by filter on the server (no record is read)."""
        name = self._name(collection)
        if not await self._exists(name):
            return 0
        return await self._io(name).delete_matching(expired_where(now))

    # -- reads ----------------------------------------------------------------------------------
    @operation
    async def get(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> list[Record]:
        return await self._get(collection, ids, scope)

    async def _get(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> list[Record]:
        name = self._name(collection)
        wanted = _stored_ids(ids)
        if not wanted or not await self._exists(name):
            return []
        where: Where | None = None if scope is None else query_where(scope)
        by_id = {}
        for obj in await self._io(name).by_uuids(list(wanted), where):
            if record_id_of(obj.properties) == wanted.get(str(obj.uuid)):
                record = decode_record(obj.properties, _vector_of(obj.vector))
                by_id[record.id] = record
        records = [by_id[i] for i in dict.fromkeys(ids) if i in by_id]
        return records if scope is None else [r for r in records if scope_matches(r.scope, scope)]

    @operation
    async def query(self, collection: str, query: Query) -> list[Hit]:
        name = self._name(collection)
        if not await self._exists(name):
            return []
        if query.vector is not None:
            self._check_dim(name, int(np.asarray(query.vector).shape[0]), "the query vector")
        ranked = await WeaviateSearch(self._io(name), query).run()
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
        """The contract's default (a similarity-only query per vector), ``concurrency`` queries at a time."""
        one = super().nearest
        jobs = [partial(one, collection, scope, [vector], k=k, min_similarity=min_similarity, now=now)
                for vector in vectors]  # fmt: skip
        if not jobs:
            return []
        return [row for [row] in await gather(jobs, self._settings.concurrency)]

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
        limit = min(limit, QUERY_MAX - 1)  # a page is read as one list of limit + 1 objects at most
        after = None if cursor is None else _scan.decode_cursor(cursor)
        name = self._name(collection)
        where = query_where(scope, filters, now=now)
        if not await self._exists(name):
            return Page(records=[])
        io = self._io(name)

        async def fetch(condition: Where, most: int, sort: tuple[str, bool] | None) -> list[_scan.Row]:
            found = await io.fetch(condition, limit=most, vector=True, sort=sort)
            return [(float(o.properties["ts"]), str(o.properties["rid"]), o) for o in found
                    if record_id_of(o.properties) is not None]  # fmt: skip

        rows, more = await _scan.next_rows(fetch, where, after, limit=limit, newest_first=newest_first)
        records = [decode_record(obj.properties, _vector_of(obj.vector)) for _, _, obj in rows]
        return _scan.page_of(records, more)

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
        where: And = query_where(scope, filters, now=now)
        name = self._name(collection)
        if not await self._exists(name):
            return 0
        return await self._io(name).count(where)


def _vector_of(vectors: Any) -> list[float] | None:
    """The unnamed vector of an object as the client returns it (``{"default": [...]}``)."""
    if not vectors:
        return None
    if isinstance(vectors, dict):
        value = vectors.get("default", next(iter(vectors.values())))
        return list(value) if value is not None else None
    return list(vectors)
