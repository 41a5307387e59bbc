from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import anyio
import anyio.to_thread

from memkit.backend import Backend, Capabilities, FilterValue, Hit, Page, Query, Record, Scope, StorageURL
from memkit_backends._embedded.columnar import ColumnarCollection
from memkit_backends._embedded.kv import ExpiringDict
from memkit_backends._embedded.options import storage_dtype

__all__ = ["OFFLOAD_MIN_ROWS", "InProcessCollections", "MemoryBackend"]

T = TypeVar("T")

OFFLOAD_MIN_ROWS = 20_000
"""Collections this large are scored in a worker thread so the event loop never stalls."""


class InProcessCollections:
    """Columnar collections, each guarded by an async lock; big scans run off the event loop."""

    def __init__(self, url: StorageURL) -> None:
        self.dtype = storage_dtype(url)
        self.collections: dict[str, ColumnarCollection] = {}
        self._locks: dict[str, anyio.Lock] = {}

    def collection(self, name: str) -> ColumnarCollection:
        found = self.collections.get(name)
        if found is None:
            found = self.collections[name] = ColumnarCollection(None, self.dtype)
        return found

    def ensure(self, name: str, dim: int | None) -> None:
        found = self.collection(name)
        if dim is not None:
            ColumnarCollection.require_dim(name, found.dim, dim)
            found.set_dim(dim)

    async def run(self, name: str, action: Callable[[ColumnarCollection], T]) -> T:
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = anyio.Lock()
        async with lock:
            found = self.collection(name)
            if len(found) >= OFFLOAD_MIN_ROWS:
                return await anyio.to_thread.run_sync(action, found)
            return action(found)


class MemoryBackend(Backend):
    capabilities = Capabilities(vector_search=True, text_search=True, ttl=True, transactions=True, persistent=False)

    def __init__(self, url: StorageURL) -> None:
        super().__init__(url)
        self._store = InProcessCollections(url)
        self._kv = ExpiringDict()

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def ensure_collection(self, name: str, dim: int | None) -> None:
        self._store.ensure(name, dim)

    async def upsert(self, collection: str, records: Sequence[Record]) -> None:
        await self._store.run(collection, lambda c: c.upsert(records))

    async def replace(self, collection: str, record: Record, expected_body: bytes) -> bool:
        return await self._store.run(collection, lambda c: c.replace(record, expected_body))

    async def get(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> list[Record]:
        return await self._store.run(collection, lambda c: c.get(ids, scope))

    async def delete(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> int:
        return len(await self._store.run(collection, lambda c: c.delete(ids, scope)))

    async def query(self, collection: str, query: Query) -> list[Hit]:
        return await self._store.run(collection, lambda c: c.query(query))

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
        return await self._store.run(collection, lambda c: c.scan(scope, filters, limit, cursor, now))

    async def delete_expired(self, collection: str, now: float) -> int:
        return len(await self._store.run(collection, lambda c: c.delete(c.expired_ids(now))))

    async def kv_get(self, namespace: str, key: str) -> bytes | None:
        return self._kv.get(namespace, key)

    async def kv_set(self, namespace: str, key: str, value: bytes, ttl_s: float | None = None) -> None:
        self._kv.set(namespace, key, value, ttl_s)

    async def kv_delete(self, namespace: str, key: str) -> bool:
        return self._kv.delete(namespace, key)

    async def kv_replace(
        self, namespace: str, key: str, value: bytes, expected: bytes | None, ttl_s: float | None = None
    ) -> bool:
        return self._kv.replace(namespace, key, value, expected, ttl_s)
