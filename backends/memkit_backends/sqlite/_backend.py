"""``sqlite:///path.db``: the durable embedded default.

The file is the truth; each collection is also held as columnar arrays in
process and scored by the same kernels as ``memory://``. Another process may
write the same file, so before every operation the backend compares SQLite's
``PRAGMA data_version`` with the last one it saw and, if it moved, loads only
the rows whose change sequence is newer. Writes take the write lock first
(``BEGIN IMMEDIATE``), catch up with foreign changes, write, commit, and only
then touch the arrays: a failed write leaves both untouched.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from memkit.backend import Backend, Capabilities, FilterValue, Hit, Page, Query, Record, Scope, StorageURL
from memkit.errors import BackendError, BackendUnavailableError, InvalidURLError
from memkit.text import tokenize
from memkit_backends._embedded.columnar import ColumnarCollection
from memkit_backends._embedded.options import storage_dtype
from memkit_backends.sqlite._schema import (
    RECORD_COLUMNS,
    create_schema,
    fts_tokens,
    record_from_row,
    record_params,
    scope_tokens,
)

__all__ = ["SQLiteBackend"]

T = TypeVar("T")
_LOAD_BATCH = 5_000


def _discard(_: object) -> None:
    return None


class SQLiteBackend(Backend):
    capabilities = Capabilities(vector_search=True, text_search=True, ttl=True, transactions=True, persistent=True)

    def __init__(self, url: StorageURL) -> None:
        super().__init__(url)
        self.path = url.file_path
        if not self.path:
            raise InvalidURLError(f"{url} names no file; use sqlite:///relative.db or sqlite:////absolute.db")
        self._dtype = storage_dtype(url)
        self._busy_timeout_s = float(url.options.get("timeout", "10"))
        self._synchronous = url.options.get("synchronous", "normal").upper()
        if self._synchronous not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise InvalidURLError(f"synchronous={self._synchronous.lower()!r}: use off, normal, full or extra")
        self._conn: sqlite3.Connection | None = None
        self._lock = anyio.Lock()
        self._cache: dict[str, ColumnarCollection] = {}
        self._data_version = -1
        self._last_seq = 0

    # -- plumbing -------------------------------------------------------------------------------
    async def _run(self, action: Callable[[sqlite3.Connection], T]) -> T:
        async with self._lock:
            conn = self._conn
            if conn is None:
                raise BackendError("the SQLite backend is not open; use 'async with backend:'")
            try:
                return await anyio.to_thread.run_sync(action, conn)
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    raise BackendUnavailableError(f"{self.path} stayed locked by another process: {exc}") from exc
                raise BackendError(f"SQLite error on {self.path}: {exc}") from exc
            except sqlite3.DatabaseError as exc:
                raise BackendError(f"SQLite error on {self.path}: {exc}") from exc

    def _connect(self) -> sqlite3.Connection:
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(directory):
            raise BackendUnavailableError(f"cannot open {self.path}: directory {directory} does not exist")
        try:
            conn = sqlite3.connect(self.path, timeout=self._busy_timeout_s, isolation_level=None,
                                   check_same_thread=False)  # fmt: skip
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            conn.execute("BEGIN IMMEDIATE")
            try:
                create_schema(conn)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as exc:
            raise BackendUnavailableError(f"cannot open SQLite file {self.path}: {exc}") from exc
        return conn

    async def open(self) -> None:
        if self._conn is None:
            self._conn = await anyio.to_thread.run_sync(self._connect)

    async def close(self) -> None:
        async with self._lock:
            if self._conn is not None:
                conn, self._conn = self._conn, None
                await anyio.to_thread.run_sync(conn.close)
            self._cache.clear()
            self._data_version = -1

    # -- cache sync -------------------------------------------------------------------------------
    def _sync(self, conn: sqlite3.Connection) -> None:
        """Apply changes other connections committed since we last looked.

        Version, changed rows and the change counter must come from one snapshot: read apart, a
        commit landing in between would be counted as seen without being loaded.
        """
        if conn.in_transaction:
            self._sync_snapshot(conn)
            return
        conn.execute("BEGIN")
        try:
            self._sync_snapshot(conn)
        finally:
            conn.execute("COMMIT")

    def _sync_snapshot(self, conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        if version == self._data_version:
            return
        changes: list[tuple[int, str, str, Record | None]] = []
        for row in conn.execute(f"SELECT {RECORD_COLUMNS} FROM memkit_records WHERE seq > ?", (self._last_seq,)):
            if row[1] in self._cache:
                changes.append((row[13], row[1], row[2], record_from_row(row)))
        deletions = conn.execute("SELECT seq, collection, id FROM memkit_deletions WHERE seq > ?", (self._last_seq,))
        changes.extend((seq, name, record_id, None) for seq, name, record_id in deletions if name in self._cache)
        changes.sort(key=lambda change: change[0])
        for _, name, record_id, record in changes:
            if record is None:
                self._cache[name].delete([record_id])
            else:
                self._cache[name].upsert([record])
        self._last_seq = conn.execute("SELECT value FROM memkit_meta WHERE key = 'change_seq'").fetchone()[0]
        self._data_version = version

    def _collection(self, conn: sqlite3.Connection, name: str) -> ColumnarCollection:
        self._sync(conn)
        found = self._cache.get(name)
        if found is not None:
            return found
        dim_row = conn.execute("SELECT dim FROM memkit_collections WHERE name = ?", (name,)).fetchone()
        found = ColumnarCollection(dim_row[0] if dim_row else None, self._dtype, index_text=False)
        cursor = conn.execute(f"SELECT {RECORD_COLUMNS} FROM memkit_records WHERE collection = ?", (name,))
        while batch := cursor.fetchmany(_LOAD_BATCH):
            found.upsert([record_from_row(row) for row in batch])
        self._cache[name] = found
        return found

    def _write(self, conn: sqlite3.Connection, name: str, work: Callable[[ColumnarCollection], Any]) -> None:
        """Run ``work`` (SQL writes, then cache updates) in one IMMEDIATE transaction."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            collection = self._collection(conn, name)
            apply_to_cache = work(collection)
            # Read while the write lock is still ours: after COMMIT another writer may already have
            # moved the counter, and its changes would then be skipped by the next sync.
            last_seq = conn.execute("SELECT value FROM memkit_meta WHERE key = 'change_seq'").fetchone()[0]
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        apply_to_cache()
        self._last_seq = last_seq

    @staticmethod
    def _next_seqs(conn: sqlite3.Connection, count: int) -> int:
        """Reserve ``count`` change numbers; returns the first."""
        end = conn.execute(
            "UPDATE memkit_meta SET value = value + ? WHERE key = 'change_seq' RETURNING value", (count,)
        ).fetchone()[0]
        return int(end) - count + 1

    # -- contract -------------------------------------------------------------------------------
    async def ensure_collection(self, name: str, dim: int | None) -> None:
        def work(conn: sqlite3.Connection) -> None:
            def write(collection: ColumnarCollection) -> Callable[[], None]:
                if dim is not None:
                    ColumnarCollection.require_dim(name, collection.dim, dim)
                conn.execute("INSERT OR IGNORE INTO memkit_collections (name, dim) VALUES (?, ?)", (name, dim))
                if dim is not None:
                    conn.execute("UPDATE memkit_collections SET dim = ? WHERE name = ? AND dim IS NULL", (dim, name))
                return lambda: collection.set_dim(dim) if dim is not None else None

            self._write(conn, name, write)

        await self._run(work)

    async def upsert(self, collection: str, records: Sequence[Record]) -> None:
        if not records:
            return

        def work(conn: sqlite3.Connection) -> None:
            def write(cache: ColumnarCollection) -> Callable[[], None]:
                self._write_records(conn, collection, cache, records)
                return lambda: cache.upsert(records)

            self._write(conn, collection, write)

        await self._run(work)

    async def replace(self, collection: str, record: Record, expected_body: bytes) -> bool:
        replaced: list[bool] = []

        def work(conn: sqlite3.Connection) -> None:
            def write(cache: ColumnarCollection) -> Callable[[], None]:
                # The write lock is held and the cache caught up, so the cache shows the committed state.
                current = cache.get([record.id])
                if not current or current[0].body != expected_body:
                    return lambda: None
                self._write_records(conn, collection, cache, [record])
                replaced.append(True)
                return lambda: cache.upsert([record])

            self._write(conn, collection, write)

        await self._run(work)
        return bool(replaced)

    def _write_records(
        self, conn: sqlite3.Connection, collection: str, cache: ColumnarCollection, records: Sequence[Record]
    ) -> None:
        cache.check_dims(records)
        first = self._next_seqs(conn, len(records))
        conn.executemany(
            "INSERT INTO memkit_records (collection, id, user_id, agent_id, session_id, body, text, vector, "
            "importance, timestamp, expires_at, fields, seq) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT (collection, id) DO UPDATE SET user_id = excluded.user_id, "
            "agent_id = excluded.agent_id, session_id = excluded.session_id, body = excluded.body, "
            "text = excluded.text, vector = excluded.vector, importance = excluded.importance, "
            "timestamp = excluded.timestamp, expires_at = excluded.expires_at, fields = excluded.fields, "
            "seq = excluded.seq",
            [record_params(collection, record, first + i) for i, record in enumerate(records)],
        )
        rowids = dict(conn.execute("SELECT id, rowid FROM memkit_records WHERE seq >= ?", (first,)))
        self._index_text(conn, [(rowids[r.id], fts_tokens(r), scope_tokens(r.scope)) for r in records])
        dim = cache.dim or next((int(r.vector.shape[0]) for r in records if r.vector is not None), None)
        conn.execute("INSERT OR IGNORE INTO memkit_collections (name, dim) VALUES (?, ?)", (collection, dim))
        conn.execute("UPDATE memkit_collections SET dim = ? WHERE name = ? AND dim IS NULL", (dim, collection))

    @staticmethod
    def _index_text(conn: sqlite3.Connection, rows: list[tuple[int, str | None, str]]) -> None:
        conn.executemany("DELETE FROM memkit_records_fts WHERE rowid = ?", [(rowid,) for rowid, _, _ in rows])
        conn.executemany(
            "INSERT INTO memkit_records_fts (rowid, tokens, scope) VALUES (?, ?, ?)",
            [row for row in rows if row[1]],
        )

    async def get(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> list[Record]:
        return await self._run(lambda conn: self._collection(conn, collection).get(ids, scope))

    async def delete(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> int:
        deleted: list[str] = []

        def work(conn: sqlite3.Connection) -> None:
            def write(cache: ColumnarCollection) -> Callable[[], None]:
                existing = [record.id for record in cache.get(ids, scope)]
                if existing:
                    self._delete_rows(conn, collection, existing)
                deleted.extend(existing)
                return lambda: _discard(cache.delete(existing))

            self._write(conn, collection, write)

        await self._run(work)
        return len(deleted)

    def _delete_rows(self, conn: sqlite3.Connection, collection: str, ids: list[str]) -> None:
        first = self._next_seqs(conn, len(ids))
        keys = [(collection, record_id) for record_id in ids]
        rowids = [
            row[0]
            for key in keys
            for row in conn.execute("SELECT rowid FROM memkit_records WHERE collection = ? AND id = ?", key)
        ]
        conn.executemany("DELETE FROM memkit_records_fts WHERE rowid = ?", [(rowid,) for rowid in rowids])
        conn.executemany("DELETE FROM memkit_records WHERE collection = ? AND id = ?", keys)
        conn.executemany(
            "INSERT INTO memkit_deletions (seq, collection, id) VALUES (?, ?, ?)",
            [(first + i, collection, record_id) for i, record_id in enumerate(ids)],
        )

    async def query(self, collection: str, query: Query) -> list[Hit]:
        def work(conn: sqlite3.Connection) -> list[Hit]:
            cache = self._collection(conn, collection)
            lexical = self._fts_scores(conn, collection, query) if query.text else None
            return cache.query(query, external_lexical=lexical)

        return await self._run(work)

    @staticmethod
    def _fts_scores(conn: sqlite3.Connection, collection: str, query: Query) -> dict[str, float]:
        """Raw BM25 per record id, with scope and expiry pushed into the SQL."""
        tokens = sorted(set(tokenize(query.text or "")))
        if not tokens:
            return {}
        # Tokens are plain word characters; quoting each makes FTS5 read it as a term, never as syntax.
        # The scope's terms are ANDed in, so FTS5 intersects posting lists instead of scoring every
        # match of every user; the scope column has weight 0 in bm25, so scores are unchanged.
        match = "tokens : (" + " OR ".join(f'"{token}"' for token in tokens) + ")"
        for term in scope_tokens(query.scope).split():
            match += f' AND scope : "{term}"'
        sql = [
            # CROSS JOIN fixes the loop order: one full-text search, then a rowid lookup per match
            # (the planner otherwise runs one full-text search per record in scope).
            "SELECT r.id, -bm25(memkit_records_fts, 1.0, 0.0) FROM memkit_records_fts "
            "CROSS JOIN memkit_records r ON r.rowid = memkit_records_fts.rowid "
            "WHERE memkit_records_fts MATCH ? AND r.collection = ? AND (r.expires_at IS NULL OR r.expires_at > ?)"
        ]
        params: list[Any] = [match, collection, query.now]
        for column, value in (("user_id", query.scope.user_id), ("agent_id", query.scope.agent_id),
                              ("session_id", query.scope.session_id)):  # fmt: skip
            if value is not None:
                sql.append(f"AND r.{column} = ?")
                params.append(value)
        return {record_id: float(score) for record_id, score in conn.execute(" ".join(sql), params)}

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
        return await self._run(lambda conn: self._collection(conn, collection).scan(scope, filters, limit, cursor, now))

    async def delete_expired(self, collection: str, now: float) -> int:
        deleted: list[str] = []

        def work(conn: sqlite3.Connection) -> None:
            def write(cache: ColumnarCollection) -> Callable[[], None]:
                expired = cache.expired_ids(now)
                if expired:
                    self._delete_rows(conn, collection, expired)
                deleted.extend(expired)
                return lambda: _discard(cache.delete(expired))

            self._write(conn, collection, write)

        await self._run(work)
        return len(deleted)

    # -- key-value ------------------------------------------------------------------------------
    async def kv_get(self, namespace: str, key: str) -> bytes | None:
        def work(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(
                "SELECT value FROM memkit_kv WHERE namespace = ? AND key = ? "
                "AND (expires_at IS NULL OR expires_at > ?)",
                (namespace, key, time.time()),
            ).fetchone()
            return None if row is None else bytes(row[0])

        return await self._run(work)

    async def kv_set(self, namespace: str, key: str, value: bytes, ttl_s: float | None = None) -> None:
        expires_at = None if ttl_s is None else time.time() + ttl_s
        await self._run(
            lambda conn: conn.execute(
                "INSERT OR REPLACE INTO memkit_kv (namespace, key, value, expires_at) VALUES (?, ?, ?, ?)",
                (namespace, key, bytes(value), expires_at),
            )
        )

    async def kv_delete(self, namespace: str, key: str) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "DELETE FROM memkit_kv WHERE namespace = ? AND key = ? AND (expires_at IS NULL OR expires_at > ?)",
                (namespace, key, time.time()),
            )
            conn.execute("DELETE FROM memkit_kv WHERE expires_at IS NOT NULL AND expires_at <= ?", (time.time(),))
            return cursor.rowcount > 0

        return await self._run(work)

    async def kv_replace(
        self, namespace: str, key: str, value: bytes, expected: bytes | None, ttl_s: float | None = None
    ) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            now = time.time()
            conn.execute("BEGIN IMMEDIATE")  # the write lock makes read-compare-write atomic across processes
            try:
                row = conn.execute(
                    "SELECT value FROM memkit_kv WHERE namespace = ? AND key = ? "
                    "AND (expires_at IS NULL OR expires_at > ?)",
                    (namespace, key, now),
                ).fetchone()
                if (None if row is None else bytes(row[0])) != expected:
                    conn.execute("ROLLBACK")
                    return False
                conn.execute(
                    "INSERT OR REPLACE INTO memkit_kv (namespace, key, value, expires_at) VALUES (?, ?, ?, ?)",
                    (namespace, key, bytes(value), None if ttl_s is None else now + ttl_s),
                )
                conn.execute("COMMIT")
                return True
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

        return await self._run(work)
