"""The calls memkit makes on one Weaviate collection, each split into requests within Weaviate's limits.

Limits: a gRPC batch carries at most ``batch`` objects (URL option, default 200) and ``MAX_BATCH_BYTES``
of properties and vectors (Weaviate's gRPC messages are capped, 10 MB by default); one search returns at
most ``QUERY_MAX`` objects (``offset + limit``: Weaviate's ``QUERY_MAXIMUM_RESULTS``, 10,000 by default); an
id filter names at most ``MAX_IDS`` UUIDs. A batch reports errors per object: any failed object raises
``BackendError`` naming the record ids and Weaviate's messages (never a silent drop).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any, Final, TypeVar

import anyio
import anyio.abc
import msgspec

from memkit.errors import BackendError
from memkit_backends.weaviate._filters import And, Where, ids_where, to_weaviate

__all__ = ["MAX_BATCH_BYTES", "MAX_IDS", "QUERY_MAX", "CollectionIO", "batches_by_size", "chunks", "gather"]

MAX_BATCH_BYTES: Final = 8_000_000
QUERY_MAX: Final = 10_000
MAX_IDS: Final = 1_000
_size = msgspec.json.Encoder()
T = TypeVar("T")


def batches_by_size(items: Sequence[tuple[str, dict[str, Any], list[float] | None]], per_batch: int
                    ) -> list[list[tuple[str, dict[str, Any], list[float] | None]]]:  # fmt: skip
    """(uuid, properties, vector) items in order, cut before a batch would pass ``per_batch`` objects or
    ``MAX_BATCH_BYTES`` (estimated as JSON; a vector is 4 bytes a dimension on the wire, less than JSON)."""
    batches: list[list[tuple[str, dict[str, Any], list[float] | None]]] = []
    current: list[tuple[str, dict[str, Any], list[float] | None]] = []
    used = 0
    for item in items:
        size = len(_size.encode(item[1])) + 4 * len(item[2] or ()) + 64
        if current and (len(current) >= per_batch or used + size > MAX_BATCH_BYTES):
            batches.append(current)
            current, used = [], 0
        current.append(item)
        used += size
    if current:
        batches.append(current)
    return batches


def chunks(items: Sequence[T], size: int) -> list[list[T]]:
    return [list(items[at : at + size]) for at in range(0, len(items), size)]


async def gather(jobs: Sequence[Callable[[], Awaitable[T]]], concurrency: int) -> list[T]:
    """Run ``jobs`` at most ``concurrency`` at a time; results in order. The first failure cancels the rest and
    is raised as itself (not in an ExceptionGroup), for the caller's error mapping."""
    if len(jobs) == 1:
        return [await jobs[0]()]
    results: list[Any] = [None] * len(jobs)
    failures: list[BaseException] = []
    limit = anyio.Semaphore(concurrency)

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


class CollectionIO:
    """One Weaviate collection, as memkit uses it (``collection`` is the client's async collection)."""

    def __init__(self, collection: Any, *, batch: int, concurrency: int) -> None:
        self.collection = collection
        self._batch = batch
        self._concurrency = concurrency

    async def gather(self, jobs: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
        return await gather(jobs, self._concurrency)

    async def insert(self, items: Sequence[tuple[str, dict[str, Any], list[float] | None]]) -> None:
        """Write objects (replacing any with the same UUID); every failed object is an error."""
        from weaviate.classes.data import DataObject

        async def send(batch: list[tuple[str, dict[str, Any], list[float] | None]]) -> None:
            objects = [DataObject(properties=props, uuid=uid, vector=vector) for uid, props, vector in batch]
            try:
                result = await self.collection.data.insert_many(objects)
            except Exception as exc:
                if type(exc).__name__ != "WeaviateInsertManyAllFailedError":
                    raise
                named = ", ".join(repr(item[1]["rid"][:60]) for item in batch[:5])
                raise BackendError(f"Weaviate refused all {len(batch)} objects of a batch (records {named}"
                                   f"{', ...' if len(batch) > 5 else ''}): {exc}") from exc  # fmt: skip
            if result.errors:
                failed = sorted(result.errors.items())
                named = "; ".join(f"record {batch[at][1]['rid'][:60]!r}: {error.message}" for at, error in failed[:5])
                raise BackendError(f"Weaviate refused {len(failed)} of {len(batch)} objects in a batch: {named}")

        await self.gather([partial(send, batch) for batch in batches_by_size(items, self._batch)])

    async def patch(self, uuid: str, properties: Mapping[str, Any]) -> None:
        await self.collection.data.update(uuid=uuid, properties=dict(properties))

    async def delete_matching(self, where: Where) -> int:
        result = await self.collection.data.delete_many(where=to_weaviate(where))
        if result.failed:
            raise BackendError(f"Weaviate failed to delete {result.failed} of {result.matches} matching objects")
        return int(result.successful)

    async def count(self, where: Where) -> int:
        result = await self.collection.aggregate.over_all(filters=to_weaviate(where), total_count=True)
        return int(result.total_count or 0)

    async def fetch(self, where: Where, *, limit: int, properties: Sequence[str] | None = None,
                    vector: bool = False, sort: tuple[str, bool] | None = None) -> list[Any]:  # fmt: skip
        """Objects the filter admits (``properties`` None: all of them), sorted by ``sort`` (property,
        ascending) when given."""
        from weaviate.classes.query import Sort

        order = None if sort is None else Sort.by_property(sort[0], ascending=sort[1])
        response = await self.collection.query.fetch_objects(
            filters=to_weaviate(where), limit=min(limit, QUERY_MAX), include_vector=vector,
            return_properties=None if properties is None else list(properties), sort=order,
        )  # fmt: skip
        return list(response.objects)

    async def by_uuids(self, uuids: Sequence[str], where: Where | None = None, *, vector: bool = True) -> list[Any]:
        """The objects with these UUIDs (and admitted by ``where``), every property."""
        jobs = []
        for part in chunks(uuids, MAX_IDS):
            condition = ids_where(part) if where is None else And((where, ids_where(part)))
            jobs.append(partial(self.fetch, condition, limit=len(part), vector=vector))
        return [obj for found in await self.gather(jobs) for obj in found]

    async def nearest(self, vector: list[float], where: Where, depth: int, properties: Sequence[str]) -> list[Any]:
        from weaviate.classes.query import MetadataQuery

        response = await self.collection.query.near_vector(
            near_vector=vector, limit=min(depth, QUERY_MAX), filters=to_weaviate(where),
            return_metadata=MetadataQuery(distance=True), return_properties=list(properties),
        )  # fmt: skip
        return list(response.objects)

    async def text(self, words: str, where: Where, depth: int, properties: Sequence[str]) -> list[Any]:
        """Weaviate's BM25 over ``tokens``, best first, with each object's score."""
        from weaviate.classes.query import MetadataQuery

        response = await self.collection.query.bm25(
            query=words, query_properties=["tokens"], limit=min(depth, QUERY_MAX), filters=to_weaviate(where),
            return_metadata=MetadataQuery(score=True), return_properties=list(properties),
        )  # fmt: skip
        return list(response.objects)
