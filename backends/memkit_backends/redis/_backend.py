"""``redis://`` / ``rediss://``: records as hashes indexed by RediSearch; key-value with expiry.

Needs Redis 8 or Redis Stack (the search module) for records; on a plain Redis the key-value face
works and record calls raise ``CapabilityError``. URL options: see ``_connect``.

Per record, three keys: the indexed hash (``memkit:r:``), the body (``memkit:b:``, see ``_codec``) and
the access counters (``memkit:a:``, a hash ``{n, t}`` written by ``touch`` alone). The last two lie
outside the index's prefix, so neither a body-only ``replace`` nor a recall's ``touch`` re-indexes
anything. Every operation maps redis-py's errors (``_errors``) and is retried after a lost connection.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

import anyio
import msgspec
import numpy as np
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError, WatchError
from redis.exceptions import TimeoutError as RedisTimeoutError

from memkit.backend import (
    Backend,
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
from memkit.errors import (
    BackendRefusedError,
    BackendUnavailableError,
    CapabilityError,
    DimensionMismatchError,
    ValidationError,
)
from memkit_backends.redis import _bulk as bulk
from memkit_backends.redis import _scan
from memkit_backends.redis._codec import (
    COUNTER_FIELDS,
    HASH_FIELDS,
    decode_listed,
    decode_record,
    encode_record,
    same_indexed_fields,
)
from memkit_backends.redis._collections import Collections
from memkit_backends.redis._connect import make_client
from memkit_backends.redis._errors import is_missing_index, operation, redis_error
from memkit_backends.redis._keys import (
    body_prefix_of,
    collection_prefix,
    counters_prefix_of,
    index_name,
    number,
    query_clauses,
)
from memkit_backends.redis._kv import KeyValueFace, migrate_v1
from memkit_backends.redis._nearest import BatchNearest
from memkit_backends.redis._search import HybridSearch, pipeline

__all__ = ["PLAIN", "STACK", "RedisBackend"]

STACK: Final = Capabilities(records=True, kv=True, vector_search=True, text_search=True, filtered_scan=True,
                            atomic_replace=True, ttl=True, persistent=True, concurrent_requests=True)  # fmt: skip
PLAIN: Final = Capabilities(records=False, kv=True, vector_search=False, text_search=False, filtered_scan=False,
                            atomic_replace=True, ttl=True, persistent=True, concurrent_requests=True)  # fmt: skip
"""A Redis without the search module: the key-value face alone."""
_NO_SEARCH: Final = "this Redis has no search module; records need Redis 8 or Redis Stack (key-value works without it)"
# Per id: count += ARGV[i + 1], last = max(last, ARGV[1]), only for records that exist (KEYS: record,
# counters, ...). One script, so each record's pair of updates is atomic and a delete (a MULTI) is
# either wholly before or wholly after it. ``at`` is stored as the caller's string, not Lua's number
# formatting (14 digits).
# Per id: {HMGET hash HASH_FIELDS, GET body, HMGET counters}. One command for a batch where a pipeline of three
# per id made reading 100 records cost ~3 ms of client-side command handling; HMGET, not HGETALL, leaves the
# hash's indexed copies (tags, tokens) on the server. ARGV: the counter fields, the number of hash fields, the
# hash fields, the three key prefixes, then the ids: the script joins prefix and id itself, where passing
# three whole keys per id as KEYS tripled what a graph walk's reads (~1,500 keys) sent and packed. (Keys
# undeclared: fine on one server, which is what this adapter speaks to; a batch's keys span cluster slots.)
_GET: Final = """
local n = tonumber(ARGV[3])
local fields = {unpack(ARGV, 4, 3 + n)}
local hash, body, counters = ARGV[4 + n], ARGV[5 + n], ARGV[6 + n]
local out = {}
for i = 7 + n, #ARGV do
  local id = ARGV[i]
  out[#out + 1] = redis.call('HMGET', hash .. id, unpack(fields))
  out[#out + 1] = redis.call('GET', body .. id)
  out[#out + 1] = redis.call('HMGET', counters .. id, ARGV[1], ARGV[2])
end
return out
"""
_GET_ARGS: Final[list[str | int]] = [*COUNTER_FIELDS, len(HASH_FIELDS), *HASH_FIELDS]
_TOUCH: Final = """
local at = tonumber(ARGV[1])
for i = 1, #KEYS, 2 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    local counters = KEYS[i + 1]
    redis.call('HINCRBY', counters, 'n', ARGV[(i + 1) / 2 + 1])
    local last = redis.call('HGET', counters, 't')
    if not last or tonumber(last) < at then redis.call('HSET', counters, 't', ARGV[1]) end
  end
end
return 0
"""
_CREATE: Final = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('SET', KEYS[2], ARGV[1])
return 1
"""
"""Create-if-absent in one round trip (KEYS: hash, body; ARGV: body, then the hash's field-value pairs)."""


class RedisBackend(KeyValueFace, Backend):
    capabilities = STACK
    """Until ``open()`` finds out; then set on the instance (``PLAIN`` without the search module)."""

    def __init__(self, url: StorageURL) -> None:
        super().__init__(url)
        self._client, settings = make_client(url)
        self._timeout = settings.connect_timeout
        self.retries = settings.retries
        self._hnsw = settings.hnsw
        self._collections = Collections(self._client, hnsw=settings.hnsw)
        self._has_search = False
        self._touch = self._client.register_script(_TOUCH)  # EVALSHA: the script is sent once per server
        self._get_script = self._client.register_script(_GET)
        self._create = self._client.register_script(_CREATE)

    async def open(self) -> None:
        try:
            with anyio.fail_after(self._timeout):
                await self._client.ping()
                self._has_search = await self._probe_search()
            self.is_open = True  # setup() goes through the operations, which refuse a closed backend
            await self.setup()
        except Exception as exc:
            self.is_open = False
            await self._client.aclose()
            error = self._open_error(exc)
            if error is exc:
                raise
            raise error from exc
        self.capabilities = STACK if self._has_search else PLAIN

    def _open_error(self, exc: Exception) -> Exception:
        """A server that answered and refused (password, DB index) says so; one that did not answer
        within ``connect_timeout`` cannot be reached (a hung server included)."""
        mapped = redis_error(exc, self.url)
        if isinstance(mapped, BackendRefusedError):
            return mapped
        if isinstance(exc, RedisConnectionError | RedisTimeoutError | TimeoutError):
            return BackendUnavailableError(f"cannot reach Redis at {self.url} within {self._timeout} s: {exc}")
        return mapped or exc

    async def _probe_search(self) -> bool:
        """Whether the search module answers (Redis 8, Redis Stack). FT._LIST is refused by a Redis without
        it, and by an ACL that denies the FT commands, where records could not work either."""
        try:
            await self._client.execute_command("FT._LIST")  # type: ignore[no-untyped-call]
        except ResponseError:
            return False
        return True

    @operation
    async def setup(self) -> None:
        await migrate_v1(self._client)

    async def aclose(self) -> None:
        self.is_open = False
        await self._client.aclose()

    def _require_search(self) -> None:
        if not self._has_search:
            raise CapabilityError(_NO_SEARCH)

    # -- collections ----------------------------------------------------------------------------
    @operation
    async def ensure_collection(self, name: str, dim: int | None) -> None:
        self._require_search()
        await self._collections.ensure(name, dim)

    async def _ensure_for(self, collection: str, records: Sequence[Record]) -> None:
        """Check the batch's vector dimension against the collection's, and make the collection if needed."""
        dims = {int(r.vector.shape[0]) for r in records if r.vector is not None}
        if len(dims) > 1:
            raise DimensionMismatchError(f"records in one batch have vectors of dimensions {sorted(dims)}")
        _, have = await self._collections.dim(collection)
        if dims and have is not None and have not in dims:
            raise DimensionMismatchError(f"collection {collection!r} holds {have}-dimensional vectors")
        await self._collections.ensure(collection, next(iter(dims), None))

    # -- writes -----------------------------------------------------------------------------------
    @operation
    async def upsert(self, collection: str, records: Sequence[Record]) -> None:
        self._require_search()
        if not records:
            return
        await self._ensure_for(collection, records)
        prefix, body_prefix = collection_prefix(collection), body_prefix_of(collection)
        commands = [bulk.command("MSET", *(x for r in records for x in (body_prefix + r.id, r.body)))]
        for record in records:
            key = prefix + record.id
            if record.vector is None:
                commands.append(bulk.command("DEL", key))  # a replaced record must not keep an old vector
            commands.append(bulk.hset(key, encode_record(record)))
        await bulk.transaction(self._client, commands)  # counters (another key) are kept

    @operation
    async def replace(self, collection: str, record: Record, expected_body: bytes | None) -> bool:
        self._require_search()
        await self._ensure_for(collection, [record])
        key, body_key = collection_prefix(collection) + record.id, body_prefix_of(collection) + record.id
        # A new memory is created if absent (every store() of one): a script, one round trip; the general
        # case below is WATCH, two reads and MULTI/EXEC, four, each queued behind other clients' searches.
        if expected_body is None:
            pairs = [x for item in encode_record(record).items() for x in item]
            if await self._create([key, body_key], [record.body, *pairs]):
                return True  # else the record exists: the general case tells a retry from a conflict
        async with self._client.pipeline(transaction=True) as pipe:
            try:
                await pipe.watch(key, body_key)  # WATCH/MULTI: EXEC fails if anyone wrote them meanwhile
                raw: dict[bytes, bytes] = await pipe.hgetall(key)  # type: ignore[assignment]  # bytes replies
                body: bytes | None = await pipe.get(body_key)  # type: ignore[assignment]
                current = decode_record(raw, body) if raw else None
                stored = None if current is None else current.body
                # The expected body wins (the write is due, even of the same body with other fields); else
                # a body already new is a retry whose first attempt succeeded; else a conflict.
                unchanged = current is not None and stored == record.body and same_indexed_fields(current, record)
                if stored != expected_body or unchanged:
                    await pipe.unwatch()  # type: ignore[no-untyped-call]
                    return stored == record.body
                pipe.multi()  # type: ignore[no-untyped-call]
                if current is None or not same_indexed_fields(current, record):  # body-only: index untouched
                    pipe.delete(key)
                    pipe.hset(key, mapping=encode_record(record))  # type: ignore[arg-type]  # dict is invariant
                pipe.set(body_key, record.body)
                await pipe.execute()
            except WatchError:
                return False
        return True

    @operation
    async def touch(self, collection: str, counts: Mapping[str, int], at: float) -> None:
        """One script for the batch. Retried after a lost connection like every operation, so a touch whose
        reply was lost may count twice: access counts are a ranking signal, kept at least once."""
        self._require_search()
        if not counts:
            return
        prefix, counters = collection_prefix(collection), counters_prefix_of(collection)
        keys = [k for record_id in counts for k in (prefix + record_id, counters + record_id)]
        await self._touch(keys, [number(at), *(str(int(n)) for n in counts.values())])

    @operation
    async def delete(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> int:
        self._require_search()
        if scope is not None:
            ids = [r.id for r in await self._get(collection, ids, scope)]
        return await self._delete_records(collection, ids)

    @operation
    async def delete_expired(self, collection: str, now: float) -> int:
        self._require_search()
        if not (await self._collections.dim(collection))[0]:
            return 0
        total = 0
        plen = len(collection_prefix(collection))
        while True:
            (reply,) = await self._run([("FT.SEARCH", index_name(collection), f"@exp:[-inf {number(now)}]",
                                         "NOCONTENT", "LIMIT", "0", "1000", "DIALECT", "2")])  # fmt: skip
            if len(reply) <= 1:
                return total
            total += await self._delete_records(collection, [key[plen:].decode() for key in reply[1:]])

    async def _delete_records(self, collection: str, ids: Sequence[str]) -> int:
        """Hashes, bodies and counters together, in one transaction; returns how many records there were."""
        if not ids:
            return 0
        prefixes = collection_prefix(collection), body_prefix_of(collection), counters_prefix_of(collection)
        async with self._client.pipeline(transaction=True) as pipe:
            for prefix in prefixes:
                pipe.delete(*(prefix + i for i in ids))
            deleted, _, _ = await pipe.execute()
        return int(deleted)

    # -- reads ----------------------------------------------------------------------------------
    @operation
    async def get(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> list[Record]:
        self._require_search()
        return await self._get(collection, ids, scope)

    async def _get(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> list[Record]:
        """Hash, body and counters of each id in one round trip; the records in the order of ``ids``."""
        if not ids:
            return []
        prefixes = collection_prefix(collection), body_prefix_of(collection), counters_prefix_of(collection)
        replies = await self._get_script([], [*_GET_ARGS, *prefixes, *ids])
        triples = zip(replies[::3], replies[1::3], replies[2::3], strict=True)
        records = [decode_listed(values, body, counts) for values, body, counts in triples if values[0] is not None]
        return records if scope is None else [r for r in records if scope_matches(r.scope, scope)]

    async def _run(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        return await pipeline(self._client, commands)

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
        self._require_search()
        require_scope(scope, all_scopes)
        if limit < 1:
            raise ValidationError(f"limit must be at least 1, got {limit}")
        if cursor is not None:
            _scan.decode_cursor(cursor)  # a malformed cursor is refused whether or not the collection exists
        if not (await self._collections.dim(collection))[0]:
            return Page(records=[])
        where = " ".join(query_clauses(scope, filters, now)) or "*"
        records, next_cursor = await _scan.scan_page(
            self._run, lambda ids: self._get(collection, ids), index_name(collection), collection_prefix(collection),
            where, limit=limit, cursor=cursor, newest_first=newest_first,
        )  # fmt: skip
        return Page(records=records, next_cursor=next_cursor)

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
        self._require_search()
        require_scope(scope, all_scopes)
        if not (await self._collections.dim(collection))[0]:
            return 0
        where = " ".join(query_clauses(scope, filters, now)) or "*"
        return await _scan.count(self._run, index_name(collection), where)

    @operation
    async def query(self, collection: str, query: Query) -> list[Hit]:
        self._require_search()
        exists, dim = await self._collections.dim(collection)
        if not exists:
            return []
        if query.vector is not None and dim is not None and int(query.vector.shape[0]) != dim:
            raise DimensionMismatchError(f"query vector has {query.vector.shape[0]} dimensions; collection has {dim}")
        if dim is None:
            query = msgspec.structs.replace(query, vector=None)
        search = HybridSearch(self._client, index_name(collection), collection_prefix(collection), query,
                              hnsw=self._hnsw, scope_numbers=collection in self._collections.scope_numbers)  # fmt: skip
        try:
            ranked = await search.run()
        except ResponseError as exc:
            if is_missing_index(exc):
                return []  # another client dropped the collection meanwhile
            raise
        # Scope checked again on the records: text searches match the scope by a digest (``text_clauses``).
        records = {r.id: r for r in await self._get(collection, [i for i, _ in ranked], query.scope)}
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
        """The default's answer in one round trip for the whole batch (``_nearest``), not one per vector."""
        require_scope(scope, False)
        if len(vectors) == 0:
            return []
        self._require_search()
        exists, dim = await self._collections.dim(collection)
        if not exists or k < 1:
            return [[] for _ in vectors]
        if dim is None:  # no vector stored yet: the default ranks the scope without similarities
            return await super().nearest(collection, scope, vectors, k=k, min_similarity=min_similarity, now=now)
        blobs = [np.ascontiguousarray(vector, np.float32) for vector in vectors]
        if wrong := next((b.shape for b in blobs if b.shape != (dim,)), None):
            raise DimensionMismatchError(f"query vector has shape {wrong}; collection has {dim} dimensions")
        where = " ".join(query_clauses(scope, None, None)) or "*"
        batch = BatchNearest(self._run, index_name(collection), collection_prefix(collection), where, hnsw=self._hnsw)
        try:
            return await batch.nearest([b.tobytes() for b in blobs], k=k, min_similarity=min_similarity,
                                       now=time.time() if now is None else now)  # fmt: skip
        except ResponseError as exc:
            if is_missing_index(exc):
                return [[] for _ in vectors]  # another client dropped the collection meanwhile
            raise
