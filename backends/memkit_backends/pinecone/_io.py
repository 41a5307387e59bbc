"""The data-plane calls memkit makes, each split into requests within Pinecone's limits.

Limits (Pinecone's documented data-plane limits): an upsert carries at most 1,000 vectors and 2 MB; a
fetch names its ids in the URL, so at most 100 ids and a few KB of them per request; a delete by id at
most 1,000 ids; a fetch by metadata returns pages of at most 10,000 (1,000 asked here: each vector comes
with up to 40 KB of metadata). Independent requests of one call run ``concurrency`` at a time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any, Final, TypeVar
from urllib.parse import quote

import anyio
import anyio.abc
import msgspec
from pinecone.async_client.async_index import AsyncIndex
from pinecone.models.vectors.vector import Vector

from memkit_backends.pinecone._filters import Filter

__all__ = ["MAX_UPSERT_BYTES", "MAX_UPSERT_VECTORS", "IndexIO", "batches_by_size", "fetch_batches"]

MAX_UPSERT_VECTORS: Final = 1_000
MAX_UPSERT_BYTES: Final = 1_900_000
"""2 MB per upsert request, less room for the request's own framing and float formatting."""
MAX_FETCH_IDS: Final = 100
MAX_FETCH_URL: Final = 6_000
"""Characters of ids in one fetch URL: well under the 8 KB many HTTP front ends accept."""
MAX_DELETE_IDS: Final = 1_000
PAGE: Final = 1_000
_size = msgspec.json.Encoder()
T = TypeVar("T")


def batches_by_size(items: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Upsert items in order, cut before a batch would pass 1,000 vectors or the byte budget."""
    batches: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    used = 0
    for item in items:
        size = len(_size.encode(item)) + 1
        if current and (len(current) >= MAX_UPSERT_VECTORS or used + size > MAX_UPSERT_BYTES):
            batches.append(current)
            current, used = [], 0
        current.append(item)
        used += size
    if current:
        batches.append(current)
    return batches


def fetch_batches(ids: Sequence[str]) -> list[list[str]]:
    """Ids in order, cut so each fetch URL stays short (ids are percent-encoded once more in the URL)."""
    batches: list[list[str]] = []
    current: list[str] = []
    used = 0
    for vector_id in ids:
        size = len(quote(vector_id, safe="")) + 5  # "&ids="
        if current and (len(current) >= MAX_FETCH_IDS or used + size > MAX_FETCH_URL):
            batches.append(current)
            current, used = [], 0
        current.append(vector_id)
        used += size
    if current:
        batches.append(current)
    return batches


class IndexIO:
    """One index's data plane, as memkit uses it."""

    def __init__(self, index: AsyncIndex, concurrency: int) -> None:
        self.index = index
        self._concurrency = concurrency

    async def gather(self, jobs: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
        """Run ``jobs`` at most ``concurrency`` at a time; their results in order. The first failure cancels
        the rest and is raised as itself (not in an ExceptionGroup), for the caller's error mapping."""
        if len(jobs) == 1:
            return [await jobs[0]()]
        results: list[Any] = [None] * len(jobs)
        failures: list[BaseException] = []
        limit = anyio.Semaphore(self._concurrency)

        async def run(at: int, group: anyio.abc.TaskGroup) -> None:
            async with limit:
                try:
                    results[at] = await jobs[at]()
                except Exception as exc:
                    failures.append(exc)
                    group.cancel_scope.cancel()

        async with anyio.create_task_group() as group:
            for at in range(len(jobs)):
                group.start_soon(run, at, group)
        if failures:
            raise failures[0]
        return results

    async def fetch(self, namespace: str, ids: Sequence[str]) -> dict[str, Vector]:
        """Stored vectors by id, values and metadata; missing ids absent."""
        if not ids:
            return {}
        jobs = [partial(self.index.fetch, ids=batch, namespace=namespace) for batch in fetch_batches(ids)]
        found: dict[str, Vector] = {}
        for response in await self.gather(jobs):
            found.update(response.vectors)
        return found

    async def upsert(self, namespace: str, items: Sequence[dict[str, Any]]) -> None:
        batches = batches_by_size(items)
        await self.gather([partial(self.index.upsert, vectors=batch, namespace=namespace) for batch in batches])

    async def update_metadata(self, namespace: str, patches: Mapping[str, dict[str, Any]]) -> None:
        """Partial metadata updates, one request per vector (Pinecone updates one id at a time)."""
        await self.gather([partial(self.index.update, id=vid, set_metadata=patch, namespace=namespace)
                           for vid, patch in patches.items()])  # fmt: skip

    async def delete(self, namespace: str, ids: Sequence[str]) -> None:
        chunks = [ids[at : at + MAX_DELETE_IDS] for at in range(0, len(ids), MAX_DELETE_IDS)]
        await self.gather([partial(self.index.delete, ids=list(chunk), namespace=namespace) for chunk in chunks])

    async def delete_matching(self, namespace: str, where: Filter) -> None:
        await self.index.delete(filter=where, namespace=namespace)

    async def matching(self, namespace: str, where: Filter) -> AsyncIterator[Mapping[str, Vector]]:
        """Every stored vector the filter admits, a page at a time, in no set order."""
        token: str | None = None
        while True:
            page = await self.index.fetch_by_metadata(filter=where, namespace=namespace, limit=PAGE,
                                                      pagination_token=token)  # fmt: skip
            yield page.vectors
            token = page.pagination.next if page.pagination is not None else None
            if not token:
                return

    async def count(self, namespace: str, where: Filter) -> int:
        """How many vectors the filter admits: a dry-run update reports that without writing (its patch,
        ``_v = 1``, is what every record holds anyway), else the matches are paged through and counted."""
        response = await self.index.update(filter=where, set_metadata={"_v": 1}, namespace=namespace, dry_run=True)
        if response.matched_records is not None:
            return int(response.matched_records)
        total = 0
        async for page in self.matching(namespace, where):
            total += len(page)
        return total

    async def query(self, namespace: str, vector: list[float], depth: int, where: Filter) -> list[Any]:
        """The ``depth`` most similar vectors the filter admits, best first, with metadata (no values)."""
        response = await self.index.query(top_k=depth, vector=vector, namespace=namespace, filter=where,
                                          include_metadata=True)  # fmt: skip
        return list(response.matches)
