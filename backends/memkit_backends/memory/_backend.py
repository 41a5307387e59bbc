from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final, TypeVar

import anyio
import anyio.to_thread

from memkit.backend import (
    Backend,
    Capabilities,
    FilterValue,
    Hit,
    KVPage,
    Page,
    Query,
    Record,
    Scope,
    StorageURL,
    Vector,
    check_key,
    require_scope,
)
from memkit.errors import NotOpenError
from memkit_backends._embedded.columnar import ColumnarCollection
from memkit_backends._embedded.kv import ExpiringDict
from memkit_backends._embedded.nearest import nearest, nearest_many
from memkit_backends._embedded.offload import OFFLOAD_MIN_ROWS, offloaded
from memkit_backends._embedded.options import DTYPE_OPTION, storage_dtype

__all__ = ["OFFLOAD_MIN_ROWS", "InProcessCollections", "MemoryBackend"]

T = TypeVar("T")

BIG_WRITE = 256
OPTIONS: Final = (DTYPE_OPTION,)


class InProcessCollections:
    """Columnar collections, each guarded by an async lock; big scans run off the event loop."""

    def __init__(self, url: StorageURL) -> None:
        self.dtype = storage_dtype(url)
        self.collections: dict[str, ColumnarCollection] = {}
        self._locks: dict[str, anyio.Lock] = {}

    def collection(self, name: str) -> ColumnarCollection:
        found = self.collections.get(name)
        if found is None:
            found = self.collections[name] = ColumnarCollection(None, self.dtype, exact_vectors=False)
        return found

    def ensure(self, name: str, dim: int | None) -> None:
        found = self.collection(name)
        if dim is not None:
            ColumnarCollection.require_dim(name, found.dim, dim)
            found.set_dim(dim)

    async def run(
        self, name: str, action: Callable[[ColumnarCollection], T], *, scans: bool = False, scope: Scope | None = None
    ) -> T:
        """``action`` on the collection (created if missing), under its lock: read-compare-write inside
        one action is atomic for every task of this process, the only ones that see ``memory://``. A scan
        of one ``scope`` reads that scope's rows only: its size, not the collection's, decides the thread."""
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = anyio.Lock(fast_acquire=True)
        async with lock:
            found = self.collection(name)
            if offloaded(found, scans=scans, scope=scope):
                return await anyio.to_thread.run_sync(action, found)
            return action(found)

    async def read(
        self,
        name: str,
        action: Callable[[ColumnarCollection], T],
        missing: T,
        *,
        scans: bool = False,
        scope: Scope | None = None,
    ) -> T:
        """Like ``run``, but a collection that does not exist answers ``missing`` and is not created."""
        if name not in self.collections:
            return missing
        return await self.run(name, action, scans=scans, scope=scope)


class MemoryBackend(Backend):
    capabilities = Capabilities(vector_search=True, text_search=True, ttl=True, persistent=False, cheap_scans=True)

    def __init__(self, url: StorageURL) -> None:
        super().__init__(url)
        url.check_options(OPTIONS)
        self._store = InProcessCollections(url)
        self._kv = ExpiringDict()
        self._open = False

    async def open(self) -> None:
        await self.setup()
        self._open = True

    async def aclose(self) -> None:
        self._open = False  # the data stays (a reopen finds it); calls until then are refused

    def _require_open(self) -> None:
        """Refuse a call before open() or after aclose(): a layer kept past ``Memkit.aclose()`` kept writing here
        while sqlite:// refused, so one program behaved two ways. One attribute check per call."""
        if not self._open:
            raise NotOpenError.closed(
                self.owner,
                f"the {self.url.scheme}:// backend is not open (never opened, or closed); use "
                "'async with Memkit(...) as mem:' (or 'async with backend:')",
            )

    async def ensure_collection(self, name: str, dim: int | None) -> None:
        self._require_open()
        self._store.ensure(name, dim)

    async def upsert(self, collection: str, records: Sequence[Record]) -> None:
        self._require_open()
        await self._store.run(collection, lambda c: c.upsert(records), scans=len(records) >= BIG_WRITE)

    async def replace(self, collection: str, record: Record, expected_body: bytes | None) -> bool:
        self._require_open()
        return await self._store.run(collection, lambda c: c.replace(record, expected_body))

    async def replace_many(self, collection: str, pairs: Sequence[tuple[Record, bytes | None]]) -> list[bool]:
        self._require_open()
        return await self._store.run(collection, lambda c: c.replace_many(pairs))

    async def get(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> list[Record]:
        self._require_open()
        return await self._store.read(collection, lambda c: c.get(ids, scope), [])

    async def delete(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> int:
        self._require_open()
        return len(await self._store.read(collection, lambda c: c.delete(ids, scope), []))

    async def query(self, collection: str, query: Query) -> list[Hit]:
        self._require_open()
        return await self._store.read(collection, lambda c: c.query(query), [], scans=True, scope=query.scope)

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
        self._require_open()
        require_scope(scope, all_scopes)
        return await self._store.read(
            collection,
            lambda c: c.scan(scope, filters, limit, cursor, now, newest_first=newest_first),
            Page(records=[]),
            scans=not filters,  # with filters the inverted index gives the rows: no scan
            scope=scope,
        )

    async def count(
        self,
        collection: str,
        scope: Scope,
        *,
        filters: Mapping[str, FilterValue] | None = None,
        now: float | None = None,
        all_scopes: bool = False,
    ) -> int:
        self._require_open()
        require_scope(scope, all_scopes)
        return await self._store.read(
            collection, lambda c: c.count(scope, filters, now), 0, scans=not filters, scope=scope
        )

    async def delete_expired(self, collection: str, now: float) -> int:
        self._require_open()
        return len(await self._store.read(collection, lambda c: c.delete(c.expired_ids(now)), [], scans=True))

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
        self._require_open()
        require_scope(scope, False)
        empty: list[list[tuple[str, float]]] = [[] for _ in vectors]
        return await self._store.read(
            collection,
            lambda c: nearest(c, scope, vectors, k=k, min_similarity=min_similarity, now=now),
            empty,
            scans=len(vectors) >= BIG_WRITE,  # one masked pass and a small product: cheaper than a thread hop
        )

    async def nearest_many(
        self,
        collection: str,
        requests: Sequence[tuple[Scope, Sequence[Vector]]],
        *,
        k: int = 1,
        min_similarity: float = -1.0,
        now: float | None = None,
    ) -> list[list[list[tuple[str, float]]]]:
        self._require_open()
        for scope, _ in requests:
            require_scope(scope, False)
        if not requests:
            return []
        empty: list[list[list[tuple[str, float]]]] = [[[] for _ in vectors] for _, vectors in requests]
        return await self._store.read(
            collection,
            lambda c: nearest_many(c, requests, k=k, min_similarity=min_similarity, now=now),
            empty,
            # Several scopes: a thread once the collection is large (100 users' rows at 100k took ~30 ms, which
            # would stall the loop); one scope keeps nearest's rule.
            scans=len(requests) > 1 or sum(len(vectors) for _, vectors in requests) >= BIG_WRITE,
        )

    async def touch(self, collection: str, counts: Mapping[str, int], at: float) -> None:
        self._require_open()
        await self._store.read(collection, lambda c: c.touch(counts, at), None)

    # -- key-value ------------------------------------------------------------------------------
    async def kv_get(self, namespace: str, key: str, *, now: float | None = None) -> bytes | None:
        self._require_open()
        check_key(namespace, key)
        return self._kv.get(namespace, key, now)

    async def kv_set(
        self, namespace: str, key: str, value: bytes, ttl_s: float | None = None, *, now: float | None = None
    ) -> None:
        self._require_open()
        check_key(namespace, key)
        self._kv.set(namespace, key, value, ttl_s, now)

    async def kv_delete(self, namespace: str, key: str, *, now: float | None = None) -> bool:
        self._require_open()
        check_key(namespace, key)
        return self._kv.delete(namespace, key, now)

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
        self._require_open()
        check_key(namespace, key)
        return self._kv.replace(namespace, key, value, expected, ttl_s, now=now)

    async def kv_scan(
        self, namespace: str, *, prefix: str = "", limit: int = 100, cursor: str | None = None, now: float | None = None
    ) -> KVPage:
        self._require_open()
        check_key(namespace, prefix)
        return self._kv.scan(namespace, prefix, limit, cursor, time.time() if now is None else now)

    async def kv_delete_prefix(self, namespace: str, prefix: str = "") -> int:
        self._require_open()
        check_key(namespace, prefix)
        return self._kv.delete_prefix(namespace, prefix)
