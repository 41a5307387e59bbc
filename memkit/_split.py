"""A layer's records on one backend and its keys on another: layers on records-only stores.

Pinecone and Weaviate hold records but no key-value face, and the record layers keep a few keys beside
their records (the embedder a collection was written with, conversation threads' state). ``Memkit`` gives
such a layer a ``SplitBackend``: the record face of the layer's own URL, the key-value face of the main
URL. Both backends belong to the client, which opens and closes them; this object only routes calls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memkit.backend import Backend, Capabilities, Hit, KVPage, Page, Query, Record, Scope

__all__ = ["SplitBackend"]


class SplitBackend(Backend):
    """Records from ``records``, keys from ``keys``; capabilities read from both when asked (a backend may
    settle its own at open). Record-face arguments pass through unchanged (``*args``: the contract's
    signatures, defaults included, are the underlying backend's)."""

    def __init__(self, records: Backend, keys: Backend) -> None:
        super().__init__(records.url)
        self.records, self.keys = records, keys

    @property
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        r, k = self.records.capabilities, self.keys.capabilities
        return Capabilities(records=r.records, kv=k.kv, vector_search=r.vector_search, text_search=r.text_search,
                            filtered_scan=r.filtered_scan, atomic_replace=r.atomic_replace and k.atomic_replace,
                            ttl=k.ttl, persistent=r.persistent and k.persistent, cheap_scans=r.cheap_scans,
                            concurrent_requests=r.concurrent_requests)  # fmt: skip

    def __repr__(self) -> str:
        return f"SplitBackend(records={self.records!r}, keys={self.keys!r})"

    # -- lifecycle: the client opens and closes both backends ---------------------------------------
    async def open(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    # -- the record face ------------------------------------------------------------------------------
    async def ensure_collection(self, name: str, dim: int | None) -> None:
        await self.records.ensure_collection(name, dim)

    async def upsert(self, collection: str, records: Sequence[Record]) -> None:
        await self.records.upsert(collection, records)

    async def replace(self, collection: str, record: Record, expected_body: bytes | None) -> bool:
        return await self.records.replace(collection, record, expected_body)

    async def replace_many(self, collection: str, pairs: Sequence[tuple[Record, bytes | None]]) -> list[bool]:
        return await self.records.replace_many(collection, pairs)

    async def get(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> list[Record]:
        return await self.records.get(collection, ids, scope)

    async def delete(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> int:
        return await self.records.delete(collection, ids, scope)

    async def query(self, collection: str, query: Query) -> list[Hit]:
        return await self.records.query(collection, query)

    async def scan(self, collection: str, scope: Scope, **options: Any) -> Page:
        return await self.records.scan(collection, scope, **options)

    async def count(self, collection: str, scope: Scope, **options: Any) -> int:
        return await self.records.count(collection, scope, **options)

    async def delete_expired(self, collection: str, now: float) -> int:
        return await self.records.delete_expired(collection, now)

    async def nearest(self, collection: str, scope: Scope, vectors: Sequence[Any], **options: Any) -> Any:
        return await self.records.nearest(collection, scope, vectors, **options)

    async def nearest_many(self, collection: str, requests: Sequence[tuple[Scope, Sequence[Any]]],
                           **options: Any) -> Any:  # fmt: skip
        # The records' own (an embedded store checks a batch's scopes in one pass), not the default's per scope.
        return await self.records.nearest_many(collection, requests, **options)

    async def touch(self, collection: str, counts: Mapping[str, int], at: float) -> None:
        await self.records.touch(collection, counts, at)

    # -- the key-value face -----------------------------------------------------------------------------
    async def kv_get(self, namespace: str, key: str, *, now: float | None = None) -> bytes | None:
        return await self.keys.kv_get(namespace, key, now=now)

    async def kv_set(
        self, namespace: str, key: str, value: bytes, ttl_s: float | None = None, *, now: float | None = None
    ) -> None:
        await self.keys.kv_set(namespace, key, value, ttl_s, now=now)

    async def kv_delete(self, namespace: str, key: str, *, now: float | None = None) -> bool:
        return await self.keys.kv_delete(namespace, key, now=now)

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
        return await self.keys.kv_replace(namespace, key, value, expected, ttl_s, now=now)

    async def kv_scan(
        self, namespace: str, *, prefix: str = "", limit: int = 100, cursor: str | None = None, now: float | None = None
    ) -> KVPage:
        return await self.keys.kv_scan(namespace, prefix=prefix, limit=limit, cursor=cursor, now=now)

    async def kv_delete_prefix(self, namespace: str, prefix: str = "") -> int:
        return await self.keys.kv_delete_prefix(namespace, prefix)
