"""``redis://`` / ``rediss://``: records as hashes indexed by RediSearch; key-value with expiry.

Needs Redis 8 or Redis Stack (the search module) for records; on a plain Redis the key-value face
works and record calls raise ``CapabilityError``. URL options: ``connect_timeout`` (seconds, 5: also
bounds ``open()``), ``retries`` (6: how often an operation is retried, with exponential backoff,
after a lost connection), ``index=flat|hnsw`` (default ``flat``: exact brute-force KNN over the rows
passing the scope filter, no graph to maintain on insert, ingest ~5x faster; ``hnsw`` for scopes far
larger than a scan serves).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Final

import anyio
import msgspec
import redis.asyncio as aioredis
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError, WatchError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from memkit.backend import Backend, Capabilities, FilterValue, Hit, Page, Query, Record, Scope, StorageURL
from memkit.errors import (
    BackendError,
    BackendUnavailableError,
    CapabilityError,
    DimensionMismatchError,
    InvalidURLError,
)
from memkit_backends._server.retry import retrying
from memkit_backends.redis import _bulk as bulk
from memkit_backends.redis._codec import (
    decode_record,
    encode_record,
    same_indexed_fields,
    scope_from_hash,
    scope_numbers,
)
from memkit_backends.redis._keys import SCOPE_FIELDS, body_prefix_of, collection_prefix, index_name, query_clauses
from memkit_backends.redis._search import HybridSearch, parse_rows

__all__ = ["RedisBackend"]

_NO_SEARCH = "this Redis has no search module; records need Redis 8 or Redis Stack (key-value works without it)"


_SCOPE_NUMBER_SCHEMA: Final = tuple(x for _, field, _ in SCOPE_FIELDS for x in (field, "NUMERIC"))


async def _scan_keys(client: aioredis.Redis, pattern: str) -> AsyncIterator[list[bytes | str]]:
    cursor = 0
    while True:
        cursor, keys = await client.scan(cursor, match=pattern, count=1000)
        if keys:
            yield keys
        if cursor == 0:
            return


def _pairs(reply: Any) -> dict[Any, Any]:
    """A RESP2 flat list or an already-parsed dict, as a dict with bytes keys."""
    if isinstance(reply, dict):
        return {k.encode() if isinstance(k, str) else k: v for k, v in reply.items()}
    return dict(zip(reply[::2], reply[1::2], strict=False))


def _as_bytes(value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


class RedisBackend(Backend):
    capabilities = Capabilities(vector_search=True, text_search=True, ttl=True, transactions=False, persistent=True)

    def __init__(self, url: StorageURL) -> None:
        super().__init__(url)
        self._timeout = float(url.options.get("connect_timeout", "5"))
        self.retries = int(url.options.get("retries", "6"))
        self.backoff_s = 0.05
        self.transient_errors: tuple[type[BaseException], ...] = (RedisConnectionError, RedisTimeoutError)
        raw = url.raw.split("?", 1)[0]
        self._client: aioredis.Redis = aioredis.Redis.from_url(
            raw, socket_connect_timeout=self._timeout, socket_timeout=max(self._timeout, 30.0),
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 1),
            retry_on_error=[RedisConnectionError, RedisTimeoutError], protocol=2,
        )  # fmt: skip
        self._dims: dict[str, int | None] = {}
        self._scope_numbers: set[str] = set()
        """Collections whose index has the numeric scope fields (created by this version or upgraded)."""
        self._has_search = False
        self._index = url.options.get("index", "flat").upper()
        if self._index not in {"HNSW", "FLAT"}:
            raise InvalidURLError(f"index={self._index.lower()!r}: use hnsw or flat")

    async def open(self) -> None:
        try:
            with anyio.fail_after(self._timeout):
                await self._client.ping()
                modules = await self._raw("MODULE", "LIST")
        except (RedisError, TimeoutError) as exc:
            await self._client.aclose()
            raise BackendUnavailableError(f"cannot reach Redis at {self.url} within {self._timeout} s: {exc}") from exc
        names = {_as_bytes(_pairs(m).get(b"name", b"")).lower() for m in modules}
        self._has_search = b"search" in names or b"ft" in names
        if not self._has_search:
            self.capabilities = Capabilities(ttl=True, persistent=True)

    async def close(self) -> None:
        await self._client.aclose()

    def _require_search(self) -> None:
        if not self._has_search:
            raise CapabilityError(_NO_SEARCH)

    async def _raw(self, *args: Any) -> Any:
        return await self._client.execute_command(*args)  # type: ignore[no-untyped-call]

    async def _call(self, *args: Any) -> Any:
        try:
            return await self._raw(*args)
        except (RedisConnectionError, RedisTimeoutError) as exc:
            raise BackendUnavailableError(f"Redis at {self.url} unreachable: {exc}") from exc
        except ResponseError as exc:
            raise BackendError(f"Redis refused {args[0]}: {exc}") from exc

    # -- collections ----------------------------------------------------------------------------
    async def _dim(self, collection: str) -> tuple[bool, int | None]:
        if collection in self._dims:
            return True, self._dims[collection]
        try:
            info = await self._raw("FT.INFO", index_name(collection))
        except ResponseError:
            return False, None
        dim = None
        names = set()
        for attribute in _pairs(info).get(b"attributes", []):
            pairs = _pairs(attribute)
            names.add(_as_bytes(pairs.get(b"attribute", b"")))
            if _as_bytes(pairs.get(b"type", b"")) == b"VECTOR":
                dim = int(pairs.get(b"dim", 0)) or None
        if b"un" in names:
            self._scope_numbers.add(collection)
        self._dims[collection] = dim
        return True, dim

    @retrying
    async def ensure_collection(self, name: str, dim: int | None) -> None:
        self._require_search()
        exists, have = await self._dim(name)
        if exists and name not in self._scope_numbers:
            await self._add_scope_numbers(name)
        if exists and (dim is None or have == dim):
            return
        if have is not None and dim is not None and have != dim:
            raise DimensionMismatchError(f"collection {name!r} holds {have}-dimensional vectors, not {dim}")
        schema: list[Any] = [
            "rid", "TEXT", "NOINDEX", "SORTABLE", "u", "TAG", "a", "TAG", "s", "TAG", "flt", "TAG",
            "tokens", "TEXT", "NOSTEM",
            # SORTABLE: returned from the index, not read from each hash (-0.5 ms per 300-row list at 100k)
            "imp", "NUMERIC", "SORTABLE", "ts", "NUMERIC", "SORTABLE", "exp", "NUMERIC", "SORTABLE",
            *_SCOPE_NUMBER_SCHEMA,
        ]  # fmt: skip
        vector = ["emb", "VECTOR", self._index, "6", "TYPE", "FLOAT32", "DIM", str(dim), "DISTANCE_METRIC", "COSINE"]
        if dim is not None:
            schema += vector
        try:
            if exists:  # created before its dimension was known: add the vector field now
                await self._call("FT.ALTER", index_name(name), "SCHEMA", "ADD", *vector)
            else:
                await self._call("FT.CREATE", index_name(name), "ON", "HASH", "PREFIX", "1",
                                 collection_prefix(name), "STOPWORDS", "0", "SCHEMA", *schema)  # fmt: skip
                self._scope_numbers.add(name)
        except BackendError as exc:
            # Another client created or altered the index first: take what is there and check it.
            if "already exists" not in str(exc) and "Duplicate field" not in str(exc):
                raise
            self._dims.pop(name, None)
            _, have = await self._dim(name)
            if dim is not None and have is not None and have != dim:
                raise DimensionMismatchError(
                    f"collection {name!r} holds {have}-dimensional vectors, not {dim}"
                ) from exc
            if dim is not None and have is None:
                raise
            dim = have
        await self._await_scan(name)
        self._dims[name] = dim

    async def _add_scope_numbers(self, name: str) -> None:
        """Upgrade an index made before the numeric scope fields: add them, then write them into every
        record (SCAN over the collection's keys), so text queries find old records too."""
        try:
            await self._call("FT.ALTER", index_name(name), "SCHEMA", "ADD", *_SCOPE_NUMBER_SCHEMA)
        except BackendError as exc:
            if "Duplicate field" not in str(exc):  # another client upgraded it first
                raise
        await self._await_scan(name)
        async for keys in _scan_keys(self._client, collection_prefix(name) + "*"):
            async with self._client.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.hmget(key, ["scope", "uid", "aid", "sid"])
                raws = await pipe.execute(raise_on_error=False)
            async with self._client.pipeline(transaction=False) as pipe:
                for key, fields in zip(keys, raws, strict=True):
                    if isinstance(fields, ResponseError):
                        continue  # not a hash: not a record
                    scope_json, uid, aid, sid = fields
                    raw = {b"scope": scope_json} if scope_json else {b"uid": uid, b"aid": aid, b"sid": sid}
                    numbers: dict[str, int] = scope_numbers(scope_from_hash({k: v for k, v in raw.items() if v}))
                    pipe.hset(key, mapping=numbers)  # type: ignore[arg-type]  # dict is invariant
                await pipe.execute()
        self._scope_numbers.add(name)

    async def _await_scan(self, name: str) -> None:
        """Wait until a new or altered index has scanned the keyspace for records it should hold.

        RediSearch scans every key in the background after FT.CREATE / FT.ALTER, and indexes again each
        matching key it meets, even one written (and indexed) after the index was created. Records written
        during the scan were indexed twice: with HNSW on a server holding 100k other keys that doubled
        ingest work and kept queries at ~50 ms (measured) until the scan ended.
        """
        delay = 0.002
        while int(_pairs(await self._raw("FT.INFO", index_name(name))).get(b"indexing", 0) or 0):
            await anyio.sleep(delay)
            delay = min(delay * 2, 0.1)

    # -- writes -----------------------------------------------------------------------------------
    @retrying
    async def upsert(self, collection: str, records: Sequence[Record]) -> None:
        self._require_search()
        if not records:
            return
        dims = {int(r.vector.shape[0]) for r in records if r.vector is not None}
        if len(dims) > 1:
            raise DimensionMismatchError(f"records in one batch have vectors of dimensions {sorted(dims)}")
        _, have = await self._dim(collection)
        if dims and have is not None and have not in dims:
            raise DimensionMismatchError(f"collection {collection!r} holds {have}-dimensional vectors")
        await self.ensure_collection(collection, next(iter(dims), None))
        prefix, body_prefix = collection_prefix(collection), body_prefix_of(collection)
        commands = [bulk.command("MSET", *(x for r in records for x in (body_prefix + r.id, r.body)))]
        for record in records:
            key = prefix + record.id
            if record.vector is None:
                commands.append(bulk.command("DEL", key))  # a replaced record must not keep an old vector
            commands.append(bulk.hset(key, encode_record(record)))
        try:
            await bulk.transaction(self._client, commands)
        except (RedisConnectionError, RedisTimeoutError) as exc:
            raise BackendUnavailableError(f"Redis at {self.url} unreachable: {exc}") from exc

    @retrying
    async def replace(self, collection: str, record: Record, expected_body: bytes) -> bool:
        self._require_search()
        _, have = await self._dim(collection)
        if record.vector is not None and have is not None and int(record.vector.shape[0]) != have:
            raise DimensionMismatchError(f"collection {collection!r} holds {have}-dimensional vectors")
        key, body_key = collection_prefix(collection) + record.id, body_prefix_of(collection) + record.id
        async with self._client.pipeline(transaction=True) as pipe:
            try:
                await pipe.watch(key, body_key)  # WATCH/MULTI: EXEC fails if anyone touched them meanwhile
                raw: dict[bytes, bytes] = await pipe.hgetall(key)  # type: ignore[assignment]  # bytes replies
                body: bytes | None = await pipe.get(body_key)  # type: ignore[assignment]
                current = decode_record(raw, body) if raw else None
                if current is None or current.body != expected_body:
                    await pipe.unwatch()  # type: ignore[no-untyped-call]
                    return False
                pipe.multi()  # type: ignore[no-untyped-call]
                if not same_indexed_fields(current, record):  # a body-only change leaves the index alone
                    pipe.delete(key)
                    pipe.hset(key, mapping=encode_record(record))  # type: ignore[arg-type]  # dict is invariant
                pipe.set(body_key, record.body)
                await pipe.execute()
            except WatchError:
                return False
        return True

    @retrying
    async def delete(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> int:
        if not self._has_search:
            raise CapabilityError(_NO_SEARCH)
        found = await self.get(collection, ids, scope)
        if not found:
            return 0
        return await self._delete_records(collection, [r.id for r in found])

    @retrying
    async def delete_expired(self, collection: str, now: float) -> int:
        self._require_search()
        total = 0
        while True:
            ids = await self._search_ids(collection, f"@exp:[-inf {now!r}]", 1000)
            if not ids:
                return total
            total += await self._delete_records(collection, ids)

    async def _delete_records(self, collection: str, ids: Sequence[str]) -> int:
        """Hashes and bodies together, in one transaction; returns how many records there were."""
        prefix, body_prefix = collection_prefix(collection), body_prefix_of(collection)
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.delete(*(prefix + i for i in ids))
            pipe.delete(*(body_prefix + i for i in ids))
            deleted, _ = await pipe.execute()
        return int(deleted)

    # -- reads ----------------------------------------------------------------------------------
    @retrying
    async def get(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> list[Record]:
        self._require_search()
        if not ids:
            return []
        prefix, body_prefix = collection_prefix(collection), body_prefix_of(collection)
        async with self._client.pipeline(transaction=False) as pipe:
            for record_id in ids:
                pipe.hgetall(prefix + record_id)
                pipe.get(body_prefix + record_id)
            replies = await pipe.execute()
        records = [decode_record(raw, body) for raw, body in zip(replies[::2], replies[1::2], strict=True) if raw]
        if scope is not None:
            from memkit.backend import scope_matches

            records = [r for r in records if scope_matches(r.scope, scope)]
        return records

    async def _search_ids(self, collection: str, query: str, limit: int, offset: int = 0) -> list[str]:
        try:
            reply = await self._call("FT.SEARCH", index_name(collection), query, "NOCONTENT", "SORTBY", "rid", "ASC",
                                     "LIMIT", str(offset), str(limit), "DIALECT", "2")  # fmt: skip
        except BackendError as exc:
            if "no such index" in str(exc).lower() or "unknown index" in str(exc).lower():
                return []
            raise
        return [rid for rid, _, _ in parse_rows(reply, len(collection_prefix(collection)), with_scores=False,
                                                with_fields=False)]  # fmt: skip

    @retrying
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
        self._require_search()
        offset = int(cursor) if cursor else 0
        query = " ".join(query_clauses(scope, filters, now)) or "*"
        ids = await self._search_ids(collection, query, limit, offset)
        records = await self.get(collection, ids)
        return Page(records=records, next_cursor=str(offset + limit) if len(ids) == limit else None)

    @retrying
    async def query(self, collection: str, query: Query) -> list[Hit]:
        self._require_search()
        exists, dim = await self._dim(collection)
        if not exists:
            return []
        if query.vector is not None and dim is not None and int(query.vector.shape[0]) != dim:
            raise DimensionMismatchError(f"query vector has {query.vector.shape[0]} dimensions; collection has {dim}")
        if dim is None:
            query = msgspec.structs.replace(query, vector=None)
        search = HybridSearch(self._client, index_name(collection), collection_prefix(collection),
                              hnsw=self._index == "HNSW", scope_numbers=collection in self._scope_numbers)  # fmt: skip
        try:
            ranked = await search.run(query)
        except BackendError as exc:
            if "no such index" in str(exc).lower() or "unknown index" in str(exc).lower():
                return []  # another client dropped the collection meanwhile
            raise
        # Scope checked again on the records: text searches match the scope by a digest (``text_clauses``).
        records = {r.id: r for r in await self.get(collection, [i for i, _ in ranked], query.scope)}
        return [Hit(record=records[i], scores=scores) for i, scores in ranked if i in records]

    # -- key-value ------------------------------------------------------------------------------
    @staticmethod
    def _kv_key(namespace: str, key: str) -> bytes:
        return b"memkit:kv:" + namespace.encode() + b"\x00" + key.encode()

    @retrying
    async def kv_get(self, namespace: str, key: str) -> bytes | None:
        value = await self._call("GET", self._kv_key(namespace, key))
        return None if value is None else bytes(value)

    @retrying
    async def kv_set(self, namespace: str, key: str, value: bytes, ttl_s: float | None = None) -> None:
        args: list[Any] = ["SET", self._kv_key(namespace, key), bytes(value)]
        if ttl_s is not None:
            args += ["PX", str(max(1, int(ttl_s * 1000)))]
        await self._call(*args)

    @retrying
    async def kv_delete(self, namespace: str, key: str) -> bool:
        return bool(await self._call("DEL", self._kv_key(namespace, key)))

    @retrying
    async def kv_replace(
        self, namespace: str, key: str, value: bytes, expected: bytes | None, ttl_s: float | None = None
    ) -> bool:
        name = self._kv_key(namespace, key)
        async with self._client.pipeline(transaction=True) as pipe:
            try:
                await pipe.watch(name)  # EXEC fails if anyone wrote the key meanwhile
                current = await pipe.get(name)
                if (None if current is None else _as_bytes(current)) != expected:
                    await pipe.unwatch()  # type: ignore[no-untyped-call]
                    return False
                pipe.multi()  # type: ignore[no-untyped-call]
                if ttl_s is None:
                    pipe.set(name, bytes(value))
                else:
                    pipe.set(name, bytes(value), px=max(1, int(ttl_s * 1000)))
                await pipe.execute()
            except WatchError:
                return False
        return True
