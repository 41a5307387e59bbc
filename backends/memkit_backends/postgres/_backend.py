"""``postgresql://``: asyncpg pool, pgvector HNSW, tsvector full-text search, JSONB fields.

URL options (removed before the URL reaches asyncpg): ``schema`` (default ``memkit``),
``pool_min`` / ``pool_max`` (1 / 10), ``connect_timeout`` (seconds, 10), ``vector=vector|halfvec``,
``retries`` (6: how often an operation is retried, with exponential backoff, after a lost connection),
``index=none|hnsw`` (default ``none``: no graph to maintain on insert, ingest ~30x faster on 2 cores, and
queries scoped to one user stay exact and fast through the scope index; ``hnsw`` builds pgvector's HNSW
index, worth it when one scope, or a search across all scopes, holds far more rows than a scan serves).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode, urlsplit

import anyio
import asyncpg
import msgspec
import numpy as np

from memkit.backend import Backend, Capabilities, FilterValue, Hit, Page, Query, Record, Scope, StorageURL
from memkit.errors import BackendError, BackendUnavailableError, DimensionMismatchError, InvalidURLError
from memkit.text import tokenize
from memkit_backends._server.retry import retrying
from memkit_backends.postgres._hybrid import HybridQuery
from memkit_backends.postgres._sql import (
    RECORD_COLUMNS,
    SCHEMA_VERSION,
    Where,
    collection_ddl,
    schema_ddl,
    table_name,
    valid_identifier,
    vector_ddl,
)

__all__ = ["PostgresBackend"]

_OPTIONS = ("schema", "pool_min", "pool_max", "connect_timeout", "vector", "retries", "index")
_FIRST_DEPTH = 100
_MAX_DEPTH = 6_400
_COPY_MIN_ROWS = 64
_EXACT_SCOPE = 5_000
_TRANSIENT = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.InterfaceError,
)
"""Errors after which a new connection may succeed: lost connections, a server restarting."""


def _encode_vector(vector: Any) -> bytes:
    """pgvector's binary format: dimension (int16), unused (int16), big-endian float32 values."""
    values = np.asarray(vector, dtype=">f4")
    return struct.pack(">HH", values.shape[0], 0) + values.tobytes()


def _decode_vector(data: bytes) -> Any:
    dim = struct.unpack_from(">H", data)[0]
    return np.frombuffer(data, dtype=">f4", count=dim, offset=4).astype(np.float32)


async def _register_vector_codec(conn: Any) -> None:
    """Vectors cross the wire as binary (not a text list of 384 numbers): bulk ingest is CPU-bound here."""
    schema = await conn.fetchval("SELECT typnamespace::regnamespace::text FROM pg_type WHERE typname = 'vector'")
    if schema is None:
        await conn.execute("SELECT pg_advisory_lock(hashtext('memkit.extension'))")
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        finally:
            await conn.execute("SELECT pg_advisory_unlock(hashtext('memkit.extension'))")
        schema = await conn.fetchval("SELECT typnamespace::regnamespace::text FROM pg_type WHERE typname = 'vector'")
    await conn.set_type_codec("vector", schema=schema, encoder=_encode_vector, decoder=_decode_vector, format="binary")


def _record(row: Mapping[str, Any]) -> Record:
    embedding = row["embedding"]
    return Record(
        id=row["id"],
        scope=Scope(user_id=row["user_id"], agent_id=row["agent_id"], session_id=row["session_id"]),
        body=bytes(row["body"]),
        text=row["text"],
        vector=None if embedding is None else np.asarray(embedding, dtype=np.float32),
        importance=float(row["importance"]),
        timestamp=float(row["ts"]),
        expires_at=row["expires_at"],
        fields=json.loads(row["fields"]),
    )


class PostgresBackend(Backend):
    capabilities = Capabilities(vector_search=True, text_search=True, ttl=True, transactions=True, persistent=True)

    def __init__(self, url: StorageURL) -> None:
        super().__init__(url)
        options = url.options
        self.schema = valid_identifier(options.get("schema", "memkit"), "schema")
        self._pool_min = int(options.get("pool_min", "1"))
        self._pool_max = int(options.get("pool_max", "10"))
        self._timeout = float(options.get("connect_timeout", "10"))
        self.retries = int(options.get("retries", "6"))
        self.backoff_s = 0.1
        self.transient_errors: tuple[type[BaseException], ...] = _TRANSIENT
        self._vector_type = options.get("vector", "vector")
        if self._vector_type not in {"vector", "halfvec"}:
            raise InvalidURLError(f"vector={self._vector_type!r}: use vector or halfvec")
        self._index = options.get("index", "none")
        if self._index not in {"hnsw", "none"}:
            raise InvalidURLError(f"index={self._index!r}: use hnsw or none")
        parts = urlsplit(url.raw)
        rest = {k: v for k, v in options.items() if k not in _OPTIONS}
        self._dsn = parts._replace(scheme="postgresql", query=urlencode(rest)).geturl()
        self._pool: asyncpg.Pool | None = None
        self._dims: dict[str, int | None] = {}

    # -- connection -----------------------------------------------------------------------------
    async def open(self) -> None:
        if self._pool is not None:
            return
        try:
            with anyio.fail_after(self._timeout):
                self._pool = await asyncpg.create_pool(
                    self._dsn, min_size=self._pool_min, max_size=self._pool_max, timeout=self._timeout,
                    init=_register_vector_codec,
                )  # fmt: skip
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise BackendUnavailableError(f"cannot reach Postgres at {self.url}: {exc}") from exc
        await self.setup()

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise BackendError("the Postgres backend is not open; use 'async with backend:'")
        return self._pool

    async def setup(self) -> None:
        """Create or upgrade the schema; idempotent, serialised across clients by an advisory lock."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('memkit.setup'))")
            for statement in schema_ddl(self.schema):
                await conn.execute(statement)
            current = await conn.fetchval(f'SELECT value FROM "{self.schema}".memkit_meta WHERE key = $1', "version")
            if current is not None and int(current) > SCHEMA_VERSION:
                raise BackendError(f"schema {self.schema} was created by a newer memkit (version {current})")
            await conn.execute(
                f'INSERT INTO "{self.schema}".memkit_meta (key, value) VALUES ($1, $2) '
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                "version",
                str(SCHEMA_VERSION),
            )

    def _table(self, collection: str) -> str:
        return f'"{self.schema}"."{table_name(collection)}"'

    async def _known_dim(self, conn: Any, collection: str) -> tuple[bool, int | None]:
        if collection in self._dims:
            return True, self._dims[collection]
        row = await conn.fetchrow(f'SELECT dim FROM "{self.schema}".memkit_collections WHERE name = $1', collection)
        if row is None:
            return False, None
        self._dims[collection] = row["dim"]
        return True, row["dim"]

    async def _ensure(self, conn: Any, collection: str, dim: int | None) -> None:
        exists, have = await self._known_dim(conn, collection)
        if exists and (dim is None or have == dim):
            return
        if have is not None and dim is not None and have != dim:
            raise DimensionMismatchError(f"collection {collection!r} holds {have}-dimensional vectors, not {dim}")
        table = table_name(collection)
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"memkit.{self.schema}.{table}")
        for statement in collection_ddl(self.schema, table):
            await conn.execute(statement)
        if dim is not None:
            for statement in vector_ddl(self.schema, table, dim, self._vector_type, hnsw=self._index == "hnsw"):
                await conn.execute(statement)
        await conn.execute(
            f'INSERT INTO "{self.schema}".memkit_collections (name, table_name, dim) VALUES ($1, $2, $3) '
            "ON CONFLICT (name) DO UPDATE SET dim = coalesce(memkit_collections.dim, excluded.dim)",
            collection, table, dim,
        )  # fmt: skip
        self._dims.pop(collection, None)

    @retrying
    async def ensure_collection(self, name: str, dim: int | None) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            await self._ensure(conn, name, dim)

    # -- writes -----------------------------------------------------------------------------------
    @retrying
    async def upsert(self, collection: str, records: Sequence[Record]) -> None:
        if not records:
            return
        dims = {int(r.vector.shape[0]) for r in records if r.vector is not None}
        if len(dims) > 1:
            raise DimensionMismatchError(f"records in one batch have vectors of dimensions {sorted(dims)}")
        rows = [self._row(r) for r in records]
        async with self.pool.acquire() as conn, conn.transaction():
            await self._ensure(conn, collection, next(iter(dims), None))
            _, have = await self._known_dim(conn, collection)
            if dims and have is not None and have not in dims:
                raise DimensionMismatchError(f"collection {collection!r} holds {have}-dimensional vectors")
            if len(rows) >= _COPY_MIN_ROWS:
                await self._copy_upsert(conn, collection, rows)
            else:
                await conn.executemany(self._insert_sql(collection, "VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,"
                                                                    "$12::vector::{vt})"), rows)  # fmt: skip

    @retrying
    async def replace(self, collection: str, record: Record, expected_body: bytes) -> bool:
        async with self.pool.acquire() as conn, conn.transaction():
            exists, _ = await self._known_dim(conn, collection)
            if not exists:
                return False
            # The row lock holds off concurrent writers until this transaction ends.
            body = await conn.fetchval(f"SELECT body FROM {self._table(collection)} WHERE id = $1 FOR UPDATE",
                                       record.id)  # fmt: skip
            if body is None or bytes(body) != expected_body:
                return False
            if record.vector is not None:
                _, have = await self._known_dim(conn, collection)
                if have is not None and int(record.vector.shape[0]) != have:
                    raise DimensionMismatchError(f"collection {collection!r} holds {have}-dimensional vectors")
            values = "VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12::vector::{vt})"
            await conn.execute(self._insert_sql(collection, values), *self._row(record))
            return True

    def _insert_sql(self, collection: str, source: str) -> str:
        vector_type = self._vector_type
        return (
            f"INSERT INTO {self._table(collection)} (id, user_id, agent_id, session_id, body, text, tokens, "
            f"importance, ts, expires_at, fields, embedding) {source.format(vt=vector_type)} "
            "ON CONFLICT (id) DO UPDATE SET user_id = excluded.user_id, agent_id = excluded.agent_id, "
            "session_id = excluded.session_id, body = excluded.body, text = excluded.text, "
            "tokens = excluded.tokens, importance = excluded.importance, ts = excluded.ts, "
            "expires_at = excluded.expires_at, fields = excluded.fields, embedding = excluded.embedding"
        )

    async def _copy_upsert(self, conn: Any, collection: str, rows: list[tuple[Any, ...]]) -> None:
        """Bulk path: COPY into a temporary table, then one INSERT ... SELECT with conflict handling."""
        await conn.execute(
            "CREATE TEMPORARY TABLE IF NOT EXISTS memkit_staging (id text, user_id text, agent_id text, "
            "session_id text, body bytea, text text, tokens text, importance real, ts double precision, "
            "expires_at double precision, fields jsonb, embedding vector) ON COMMIT DELETE ROWS"
        )
        await conn.copy_records_to_table("memkit_staging", records=rows)
        source = (
            "SELECT DISTINCT ON (id) id, user_id, agent_id, session_id, body, text, tokens, importance, ts, "
            "expires_at, fields, embedding::{vt} FROM memkit_staging"
        )
        await conn.execute(self._insert_sql(collection, source))

    @staticmethod
    def _row(record: Record) -> tuple[Any, ...]:
        scope = record.scope
        tokens = " ".join(tokenize(record.text)) if record.text else None
        vector = None if record.vector is None else np.asarray(record.vector, dtype=np.float32)
        return (
            record.id, scope.user_id, scope.agent_id, scope.session_id, record.body, record.text, tokens,
            record.importance, record.timestamp, record.expires_at, json.dumps(record.fields), vector,
        )  # fmt: skip

    @retrying
    async def delete(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> int:
        if not await self._exists(collection):
            return 0
        where = Where()
        where.add(f"id = ANY({where.bind(list(ids))}::text[])")
        where.scope(scope)
        rows = await self.pool.fetch(f"DELETE FROM {self._table(collection)} WHERE {where.sql()} RETURNING id",
                                     *where.params)  # fmt: skip
        return len(rows)

    @retrying
    async def delete_expired(self, collection: str, now: float) -> int:
        if not await self._exists(collection):
            return 0
        rows = await self.pool.fetch(f"DELETE FROM {self._table(collection)} WHERE expires_at <= $1 RETURNING id", now)
        return len(rows)

    async def _exists(self, collection: str) -> bool:
        async with self.pool.acquire() as conn:
            exists, _ = await self._known_dim(conn, collection)
            return exists

    # -- reads ----------------------------------------------------------------------------------
    @retrying
    async def get(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> list[Record]:
        if not await self._exists(collection):
            return []
        where = Where()
        where.add(f"id = ANY({where.bind(list(ids))}::text[])")
        where.scope(scope)
        rows = await self.pool.fetch(f"SELECT {RECORD_COLUMNS} FROM {self._table(collection)} WHERE {where.sql()}",
                                     *where.params)  # fmt: skip
        by_id = {row["id"]: _record(row) for row in rows}
        return [by_id[i] for i in dict.fromkeys(ids) if i in by_id]

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
        if not await self._exists(collection):
            return Page(records=[])
        where = Where().scope(scope).filters(filters).alive(now)
        if cursor is not None:
            where.add(f"id > {where.bind(cursor)}")
        sql = f"SELECT {RECORD_COLUMNS} FROM {self._table(collection)} WHERE {where.sql()} ORDER BY id LIMIT "
        rows = await self.pool.fetch(sql + where.bind(limit), *where.params)
        records = [_record(row) for row in rows]
        return Page(records=records, next_cursor=records[-1].id if len(records) == limit else None)

    @retrying
    async def query(self, collection: str, query: Query) -> list[Hit]:
        async with self.pool.acquire() as conn:
            exists, dim = await self._known_dim(conn, collection)
            if not exists:
                return []
            if query.vector is not None and dim is not None and int(query.vector.shape[0]) != dim:
                have = query.vector.shape[0]
                raise DimensionMismatchError(f"query vector has {have} dimensions; collection has {dim}")
            if dim is None and query.vector is not None:
                query = msgspec.structs.replace(query, vector=None)
            search = HybridQuery(conn, self._table(collection), self._vector_type, query)
            small = await search.scope_size(_EXACT_SCOPE) <= _EXACT_SCOPE
            # A small scope (one user's memories, say) is scored whole: one cheap query, exact by construction.
            depth: int | None = None if small else max(_FIRST_DEPTH, 4 * query.k)
            while True:
                candidates = await search.candidates(depth)
                ranked = candidates.rank(query)
                if depth is None or candidates.is_exact(query, ranked):
                    break
                # The lists could not prove the answer exact: go deeper, at last score every row in scope.
                depth = depth * 4 if depth < _MAX_DEPTH else None
            rows = await conn.fetch(f"SELECT {RECORD_COLUMNS} FROM {self._table(collection)} "
                                    "WHERE id = ANY($1::text[])", [i for i, _ in ranked])  # fmt: skip
        records = {row["id"]: _record(row) for row in rows}
        return [Hit(record=records[i], scores=scores) for i, scores in ranked if i in records]

    # -- key-value ------------------------------------------------------------------------------
    @retrying
    async def kv_get(self, namespace: str, key: str) -> bytes | None:
        value = await self.pool.fetchval(
            f'SELECT value FROM "{self.schema}".memkit_kv WHERE namespace = $1 AND key = $2 '
            "AND (expires_at IS NULL OR expires_at > extract(epoch from clock_timestamp()))",
            namespace, key,
        )  # fmt: skip
        return None if value is None else bytes(value)

    @retrying
    async def kv_set(self, namespace: str, key: str, value: bytes, ttl_s: float | None = None) -> None:
        expiry = "NULL" if ttl_s is None else "extract(epoch from clock_timestamp()) + $4"
        params: list[Any] = [namespace, key, bytes(value)]
        if ttl_s is not None:
            params.append(float(ttl_s))
        await self.pool.execute(
            f'INSERT INTO "{self.schema}".memkit_kv (namespace, key, value, expires_at) VALUES ($1, $2, $3, {expiry}) '
            "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at",
            *params,
        )

    @retrying
    async def kv_delete(self, namespace: str, key: str) -> bool:
        rows = await self.pool.fetch(
            f'DELETE FROM "{self.schema}".memkit_kv WHERE namespace = $1 AND key = $2 '
            "AND (expires_at IS NULL OR expires_at > extract(epoch from clock_timestamp())) RETURNING 1",
            namespace, key,
        )  # fmt: skip
        return bool(rows)

    @retrying
    async def kv_replace(
        self, namespace: str, key: str, value: bytes, expected: bytes | None, ttl_s: float | None = None
    ) -> bool:
        table = f'"{self.schema}".memkit_kv'
        alive = "(expires_at IS NULL OR expires_at > extract(epoch from clock_timestamp()))"
        expiry = "NULL" if ttl_s is None else f"extract(epoch from clock_timestamp()) + {float(ttl_s)!r}"
        async with self.pool.acquire() as conn, conn.transaction():
            # Serialise writers of this key (the row may not exist yet, so lock the key itself).
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"memkit.kv.{namespace}.{key}")
            current = await conn.fetchval(
                f"SELECT value FROM {table} WHERE namespace = $1 AND key = $2 AND {alive}", namespace, key
            )
            if (None if current is None else bytes(current)) != expected:
                return False
            await conn.execute(
                f"INSERT INTO {table} (namespace, key, value, expires_at) VALUES ($1, $2, $3, {expiry}) "
                "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at",
                namespace, key, bytes(value),
            )  # fmt: skip
            return True
