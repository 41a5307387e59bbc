"""postgresql://: a schema written by memkit's first layout (version 1) opens, reads and is upgraded in place."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import anyio
import asyncpg
import numpy as np
import pytest
from memkit_backends.postgres import PostgresBackend
from memkit_backends.postgres._sql import table_name

from memkit.backend import Scope, StorageURL
from memkit.testing import make_record
from tests.conftest import with_option

pytestmark = pytest.mark.anyio

# The version-1 layout, as memkit 0.x wrote it: no access counters, keys in the database's collation.
V1_TABLE = table_name("notes")
V1_DDL = [
    'CREATE SCHEMA "{s}"',
    'CREATE TABLE "{s}".memkit_meta (key text PRIMARY KEY, value text NOT NULL)',
    'CREATE TABLE "{s}".memkit_collections (name text PRIMARY KEY, table_name text NOT NULL, dim integer)',
    'CREATE TABLE "{s}".memkit_kv (namespace text NOT NULL, key text NOT NULL, value bytea NOT NULL, '
    "expires_at double precision, PRIMARY KEY (namespace, key))",
    'CREATE TABLE "{s}".{t} (id text PRIMARY KEY, user_id text, agent_id text, session_id text, body bytea NOT NULL, '
    "text text, tokens text, tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', coalesce(tokens, ''))) STORED, "
    "embedding vector(8), importance real NOT NULL, ts double precision NOT NULL, expires_at double precision, "
    "fields jsonb NOT NULL DEFAULT '{{}}')",
    'CREATE INDEX "{t}_scope" ON "{s}".{t} (user_id, agent_id, session_id)',
    'CREATE INDEX "{t}_tsv" ON "{s}".{t} USING gin (tsv)',
    'CREATE INDEX "{t}_fields" ON "{s}".{t} USING gin (fields jsonb_path_ops)',
    "INSERT INTO \"{s}\".memkit_meta VALUES ('version', '1')",
    "INSERT INTO \"{s}\".memkit_collections VALUES ('notes', '{t}', 8)",
]


async def _v1_schema(url: str, schema: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        for statement in V1_DDL:
            await conn.execute(statement.format(s=schema, t=V1_TABLE))
        vector = "[" + ",".join(["0.5"] * 8) + "]"
        for i in range(3):
            await conn.execute(
                f'INSERT INTO "{schema}".{V1_TABLE} (id, user_id, body, text, tokens, embedding, importance, ts, '
                "fields) VALUES ($1, 'alice', $2, 'old note', 'old note', $3::vector, 0.5, $4, $5::jsonb)",
                f"old{i}", b"old body", vector, 1000.0 + i, json.dumps({"kind": "fact"}),
            )  # fmt: skip
        await conn.execute(f"INSERT INTO \"{schema}\".memkit_kv VALUES ('ns', 'b', 'x', NULL), ('ns', 'a', 'y', NULL)")
    finally:
        await conn.close()


async def _embedding_storage(conn: Any, schema: str, table: str) -> str:
    """The embedding column's TOAST strategy: 'm' (MAIN, inline) or 'x' (EXTENDED, pgvector's default)."""
    return str(await conn.fetchval(
        "SELECT attstorage::text FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'embedding'",
        f'"{schema}"."{table}"',
    ))  # fmt: skip


async def test_a_new_collection_keeps_its_vectors_in_the_row(postgres_url: str) -> None:
    """Out of line (TOAST), every comparison of the near-duplicate check re-read the vector: 7x slower. The
    column's type is set when the dimension is known, and a type change takes the type's default storage."""
    schema = f"inline_{uuid.uuid4().hex[:10]}"
    async with PostgresBackend(StorageURL(with_option(postgres_url, "schema", schema))) as backend:
        await backend.ensure_collection("notes", None)
        table = table_name("notes")
        async with backend.pool.acquire() as conn:
            assert await _embedding_storage(conn, schema, table) == "m"
        await backend.upsert("notes", [make_record("r", seed=1)])  # the dimension is set now
        async with backend.pool.acquire() as conn:
            assert await _embedding_storage(conn, schema, table) == "m"


async def test_a_version_1_schema_is_upgraded_in_place(postgres_url: str) -> None:
    schema = f"v1_{uuid.uuid4().hex[:10]}"
    await _v1_schema(postgres_url, schema)
    url = with_option(postgres_url, "schema", schema)
    # Two clients open at once: the advisory lock serialises the upgrade, the second finds it done.
    backends = [PostgresBackend(StorageURL(url)) for _ in range(2)]
    async with anyio.create_task_group() as group:
        for backend in backends:
            group.start_soon(backend.open)
    backend = backends[0]
    try:
        old = await backend.get("notes", ["old0"])
        assert old[0].body == b"old body" and old[0].access_count == 0 and old[0].last_accessed is None
        assert old[0].fields == {"kind": "fact"} and np.allclose(old[0].vector, 0.5)
        at = time.time()
        await backend.touch("notes", {"old0": 2}, at)
        await backend.upsert("notes", [make_record("new", seed=1, fields={"tags": ("a", "b")})])
        page = await backend.scan("notes", Scope(user_id="alice"), limit=2)
        assert [r.id for r in page.records] == ["old0", "old1"] and page.records[0].access_count == 2
        rest = await backend.scan("notes", Scope(user_id="alice"), limit=2, cursor=page.next_cursor)
        assert [r.id for r in rest.records] == ["old2", "new"]
        assert await backend.count("notes", Scope(user_id="alice"), filters={"tags": "a"}) == 1
        assert [k for k, _ in (await backend.kv_scan("ns")).items] == ["a", "b"]
        async with backend.pool.acquire() as conn:
            assert await conn.fetchval(f'SELECT value FROM "{schema}".memkit_meta WHERE key = $1', "version") == "4"
            # A count a version 3 touch wrote into the row still counts, with the counters table's.
            await conn.execute(f'UPDATE "{schema}"."{V1_TABLE}" SET access_count = 5, last_accessed = 1.0 '
                               "WHERE id = 'old1'")  # fmt: skip
            assert await _embedding_storage(conn, schema, V1_TABLE) == "m"  # vectors written now stay inline
            assert await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", f'"{schema}"."{V1_TABLE}_scan"')
            collation = await conn.fetchval(
                "SELECT collation_name FROM information_schema.columns WHERE table_schema = $1 "
                "AND table_name = 'memkit_kv' AND column_name = 'key'",
                schema,
            )
            assert collation == "C"
        await backend.touch("notes", {"old1": 2}, at)
        [old1] = await backend.get("notes", ["old1"])
        assert (old1.access_count, old1.last_accessed) == (7, at)
    finally:
        for backend in backends:
            await backend.aclose()
    # Opening again changes nothing and still reads.
    again = PostgresBackend(StorageURL(url))
    async with again:
        assert (await again.get("notes", ["old0"]))[0].access_count == 2


async def test_a_schema_from_a_newer_memkit_is_refused(postgres_url: str) -> None:
    from memkit.errors import BackendError

    schema = f"v9_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(postgres_url)
    try:
        await conn.execute(f'CREATE SCHEMA "{schema}"')
        await conn.execute(f'CREATE TABLE "{schema}".memkit_meta (key text PRIMARY KEY, value text NOT NULL)')
        await conn.execute(f"INSERT INTO \"{schema}\".memkit_meta VALUES ('version', '99')")
    finally:
        await conn.close()
    with pytest.raises(BackendError, match="newer memkit"):
        async with PostgresBackend(StorageURL(with_option(postgres_url, "schema", schema))):
            pass
