"""``sqlite:///path.db``: the durable embedded default.

The file is the truth; each collection is also held as columnar arrays in process (``_cache``) and
scored by the same kernels as ``memory://``. Writes take the write lock first (``BEGIN IMMEDIATE``),
catch up with foreign changes, write, commit, and only then touch the arrays: a failed write leaves
both untouched, and a compare-and-set decided on the caught-up arrays is atomic across processes.
"""

from __future__ import annotations

import math
import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final, TypeVar

import anyio
import anyio.to_thread
import msgspec

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
from memkit.errors import InvalidURLError, NotOpenError, ValidationError
from memkit_backends._embedded.columnar import ColumnarCollection, refuse_past_float16
from memkit_backends._embedded.indexes import replace_verdict
from memkit_backends._embedded.nearest import nearest, nearest_many
from memkit_backends._embedded.offload import offloaded
from memkit_backends._embedded.options import DTYPE_OPTION, storage_dtype
from memkit_backends._embedded.priority import QueriesLast
from memkit_backends.sqlite._bulk import (
    EncodedRows,
    Written,
    check_encoded,
    encoded_params,
    insert_rows,
    records_of,
    stored_dim,
    unique_rows,
    write_records,
)
from memkit_backends.sqlite._cache import DELETIONS_KEPT, RecordCache, log_deletions, prune_deletions
from memkit_backends.sqlite._checkpoint import Checkpointer
from memkit_backends.sqlite._connect import connect, driver_error, next_seqs, transaction
from memkit_backends.sqlite._kv_face import SQLiteKeyValue
from memkit_backends.sqlite._schema import create_schema

__all__ = ["SQLiteBackend"]

T = TypeVar("T")
OPTIONS: Final = (DTYPE_OPTION, "timeout", "synchronous")
_SYNCHRONOUS: Final = ("off", "normal", "full", "extra")
_TOUCH_SLICE: Final = 64
"""Access counts written per transaction (a store() waits for at most one slice, ~3 ms)."""
_Apply = Callable[[], object]
"""What a write does to the arrays once its transaction committed."""


def _NOTHING() -> None:
    """The arrays' part of a write to a collection that is not loaded."""


class SQLiteBackend(SQLiteKeyValue, Backend):
    capabilities = Capabilities(vector_search=True, text_search=True, ttl=True, persistent=True)

    deletions_kept: int = DELETIONS_KEPT
    prune_every: int = 1_000
    """Deletions between two prunings of the log (each reads ``deletions_kept`` index entries)."""

    def __init__(self, url: StorageURL) -> None:
        super().__init__(url)
        url.check_options(OPTIONS)
        self.path = url.file_path
        if not self.path:
            raise InvalidURLError(f"{url} names no file; use sqlite:///relative.db or sqlite:////absolute.db")
        self._dtype = storage_dtype(url)
        self._busy_timeout_s = url.option("timeout", 10.0)
        if not (math.isfinite(self._busy_timeout_s) and self._busy_timeout_s > 0):
            raise InvalidURLError(f"timeout={url.options['timeout']!r} in {url}: must be a number of seconds > 0")
        self._synchronous = url.option("synchronous", "normal", choices=_SYNCHRONOUS).upper()
        self._conn: sqlite3.Connection | None = None
        self._checkpoints = Checkpointer(self.path, self._synchronous)
        self._in_use = threading.Lock()
        self._lock = QueriesLast()  # a store's operations go before queued recalls' queries
        self._cache = RecordCache(self._dtype, self.path)
        self._deletions_since_prune = 0

    @property
    def undecodable(self) -> dict[str, set[str]]:
        """Ids of rows skipped because they could not be decoded, per collection loaded."""
        return self._cache.undecodable

    # -- plumbing -------------------------------------------------------------------------------
    async def _run(self, action: Callable[[sqlite3.Connection], T], *, query: bool = False) -> T:
        async with self._lock.hold(query=query):
            return await self._in_thread(self._connection(), action)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            # NotOpenError, as Memkit says for use before open / after close (BackendError read as a failure)
            raise NotOpenError.closed(
                self.owner, "the SQLite backend is not open (never opened, or closed); use 'async with backend:'"
            )
        return self._conn

    async def _in_thread(self, conn: sqlite3.Connection, action: Callable[[sqlite3.Connection], T]) -> T:
        changes = conn.total_changes
        try:
            return await anyio.to_thread.run_sync(self._using, conn, action)
        except sqlite3.Error as exc:
            raise driver_error(self.path, self._busy_timeout_s, exc) from exc
        except UnicodeEncodeError as exc:  # a lone surrogate in an id or key
            raise ValidationError(f"SQLite cannot store this string (not valid UTF-8): {exc}") from exc
        finally:
            if conn.total_changes != changes:  # something was written (a rolled-back write costs one no-op)
                self._checkpoints.wrote()

    def _using(self, conn: sqlite3.Connection, action: Callable[[sqlite3.Connection], T]) -> T:
        # A call the event loop gave up on (Ctrl-C under asyncio cancels even a shielded wait) may still be
        # running here: closing the connection under it crashed the process (aclose takes this lock first).
        with self._in_use:
            return action(conn)

    async def _read(self, collection: str, action: Callable[[ColumnarCollection], T], *, scans: bool = False,
                    scope: Scope | None = None, query: bool = False) -> T:  # fmt: skip
        """``action`` on the collection's arrays: on the event loop when they are loaded, no other connection
        committed since they caught up, and the work is small (memory://'s rule, ``offloaded``), since a
        thread hop was half of a recall on 10k rows (110-190 us here); else in a worker thread, which loads
        or catches up first."""
        async with self._lock.hold(query=query):
            conn = self._connection()
            found = self._current(conn, collection)
            if found is not None and not offloaded(found, scans=scans, scope=scope):
                return action(found)
            return await self._in_thread(conn, lambda conn: action(self._cache.collection(conn, collection)))

    def _current(self, conn: sqlite3.Connection, collection: str) -> ColumnarCollection | None:
        """``_cache.current`` on the event loop, only while no worker uses the connection (one the loop gave
        up on may still be running): else None, and the read goes to a thread that waits for it."""
        if not self._in_use.acquire(blocking=False):
            return None
        try:
            return self._cache.current(conn, collection)
        except sqlite3.Error as exc:
            raise driver_error(self.path, self._busy_timeout_s, exc) from exc
        finally:
            self._in_use.release()

    async def open(self) -> None:
        if self._conn is not None:
            return
        self._conn = await anyio.to_thread.run_sync(connect, self.path, self._busy_timeout_s, self._synchronous)
        # A closed backend's was ended; a reopened one gets its own.
        self._checkpoints = Checkpointer(self.path, self._synchronous)
        try:
            await self.setup()
        except BaseException:
            await self.aclose()
            raise

    async def setup(self) -> None:
        def work(conn: sqlite3.Connection) -> None:
            transaction(conn, lambda: create_schema(conn))

        await self._run(work)

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):  # closed even when cancelled: no thread or descriptor left behind
            async with self._lock.hold():
                if self._conn is not None:
                    await anyio.to_thread.run_sync(self._close, self._conn)
                    self._conn = None
                self._cache.clear()

    def _close(self, conn: sqlite3.Connection) -> None:
        self._checkpoints.close()  # before the last connection closes (that close empties the WAL)
        with self._in_use:
            conn.close()

    def _write(self, conn: sqlite3.Connection, name: str, work: Callable[[ColumnarCollection], _Apply]) -> None:
        """Run ``work`` (SQL writes; returns the cache update) in one IMMEDIATE transaction."""
        if name not in self._cache.collections:
            # Loaded before the write lock is taken, as a read loads it: 100k rows take seconds, and inside
            # the transaction every other process's write waited for them (its busy timeout is 10 s).
            self._cache.collection(conn, name)
        self._transact(conn, lambda: work(self._cache.collection(conn, name)))

    def _write_unloaded(
        self, conn: sqlite3.Connection, name: str, work: Callable[[ColumnarCollection | None], _Apply]
    ) -> None:
        """``_write`` for a write that needs nothing from the arrays: a collection this process has not
        read is not loaded for it (``work`` gets None, and the file alone is written; its first read loads
        it from there). A process that only writes (an import, an ingestion worker) mirrors nothing: the
        mirror was half of a SQLite import's time, and all of its memory."""
        self._transact(conn, lambda: work(self._cache.loaded(conn, name)))

    def _transact(self, conn: sqlite3.Connection, work: Callable[[], _Apply]) -> None:
        def work_and_seq() -> tuple[_Apply, int]:
            apply_to_cache = work()
            # Read while the write lock is still ours: after COMMIT another writer may already have
            # moved the counter, and its changes would then be skipped by the next sync.
            return apply_to_cache, conn.execute("SELECT value FROM memkit_meta WHERE key = 'change_seq'").fetchone()[0]

        apply_to_cache, last_seq = transaction(conn, work_and_seq)
        apply_to_cache()
        self._cache.last_seq = last_seq

    async def _write_async(self, name: str, work: Callable[[sqlite3.Connection, ColumnarCollection], _Apply]) -> None:
        await self._run(lambda conn: self._write(conn, name, lambda cache: work(conn, cache)))

    # -- writes ---------------------------------------------------------------------------------
    async def ensure_collection(self, name: str, dim: int | None) -> None:
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
            raise ValidationError(f"a collection's dimension must be a positive integer, got {dim!r}")

        def write(conn: sqlite3.Connection) -> None:
            def work(cache: ColumnarCollection | None) -> _Apply:
                if dim is not None:
                    ColumnarCollection.require_dim(name, stored_dim(conn, name, cache), dim)
                conn.execute("INSERT OR IGNORE INTO memkit_collections (name, dim) VALUES (?, ?)", (name, dim))
                if dim is not None:
                    conn.execute("UPDATE memkit_collections SET dim = ? WHERE name = ? AND dim IS NULL", (dim, name))
                return lambda: cache.set_dim(dim) if cache is not None and dim is not None else None

            self._write_unloaded(conn, name, work)

        await self._run(write)

    async def upsert(self, collection: str, records: Sequence[Record]) -> None:
        if not records:
            return
        refuse_past_float16(self._dtype, [(record.id, record.vector) for record in records])  # all, as memory://
        if len({record.id for record in records}) < len(records):  # the last write of an id wins, as in memory://
            records = list({record.id: record for record in records}.values())

        def write(conn: sqlite3.Connection) -> None:
            def work(cache: ColumnarCollection | None) -> _Apply:
                written = write_records(conn, collection, cache, records, self.undecodable.get(collection))
                return _NOTHING if cache is None else lambda: self._cache_upsert(collection, cache, records, written)

            self._write_unloaded(conn, collection, work)

        await self._run(write)

    async def upsert_encoded(self, collection: str, rows: EncodedRows) -> None:
        """``upsert`` of the records ``rows`` stands for, encoded by their producer (``memkit import``'s reading
        process): checked as ``upsert`` checks records, then written with its statement. A collection this
        process holds in arrays takes them as records, so the arrays stay in step."""

        def write(conn: sqlite3.Connection) -> None:
            def work(cache: ColumnarCollection | None) -> _Apply:
                dim = stored_dim(conn, collection, cache)
                check_encoded(rows, dim)  # before any SQL: a refused batch writes nothing
                refuse_past_float16(self._dtype, zip(rows.ids, rows.vectors, strict=True))
                unique = unique_rows(rows)
                if cache is not None:
                    records = records_of(unique)
                    written = write_records(conn, collection, cache, records, self.undecodable.get(collection))
                    return lambda: self._cache_upsert(collection, cache, records, written)
                first = next_seqs(conn, len(unique.ids))
                tokens = dict(zip(unique.ids, unique.tokens, strict=True))
                dim = dim or int(unique.vectors.shape[1])
                insert_rows(conn, collection, encoded_params(collection, unique, first), first_seq=first,
                            tokens=tokens, dim=dim)  # fmt: skip
                return _NOTHING

            self._write_unloaded(conn, collection, work)

        if rows.ids:
            await self._run(write)

    async def replace(self, collection: str, record: Record, expected_body: bytes | None) -> bool:
        refuse_past_float16(self._dtype, [(record.id, record.vector)])
        verdicts: list[str] = []

        def write(conn: sqlite3.Connection, cache: ColumnarCollection) -> _Apply:
            # The write lock is held and the cache caught up, so the cache shows the committed state.
            if record.id in self.undecodable.get(collection, ()):
                verdicts.append("refuse")  # its body cannot be read; a delete or an upsert clears it
                return lambda: None
            current = cache.get([record.id])
            verdicts.append(replace_verdict(current[0].body if current else None, record.body, expected_body))
            if verdicts[0] != "write":
                return lambda: None
            written = write_records(conn, collection, cache, [record], self.undecodable.get(collection))
            return lambda: self._cache_upsert(collection, cache, [record], written)

        await self._write_async(collection, write)
        return verdicts[0] != "refuse"

    def _cache_upsert(self, collection: str, cache: ColumnarCollection, records: Sequence[Record],
                      written: Written) -> None:  # fmt: skip
        # Checked by write_records, against this cache's dimension.
        repaired = written.counters
        if repaired:  # rows the cache skipped as undecodable: their counters are the file's
            cache.upsert([r for r in records if r.id not in repaired], tokens=written.tokens, checked=True)
            cache.upsert([msgspec.structs.replace(r, access_count=repaired[r.id][0], last_accessed=repaired[r.id][1])
                          for r in records if r.id in repaired], keep_counters=False, tokens=written.tokens,
                         checked=True)  # fmt: skip
        else:
            cache.upsert(records, tokens=written.tokens, checked=True)
        bad = self.undecodable.get(collection)
        if bad:
            bad.difference_update(record.id for record in records)

    async def touch(self, collection: str, counts: Mapping[str, int], at: float) -> None:
        if not counts:
            return
        if not math.isfinite(at):
            raise ValidationError(f"touch time must be a finite number, got {at!r}")
        items = list(counts.items())
        # Statistics queue with the recall queries, behind waiting writes, a slice per transaction: when a count
        # rewrote its record's row (before schema 5), 2,000 counts held the one connection for 60-107 ms, and a
        # store() arriving then waited for all of it (its p99 under a recall load 4.5x its p99 alone).
        # A cancel between slices keeps the slices written (``AccessTracker`` writes one slice a call).
        for start in range(0, len(items), _TOUCH_SLICE):
            await self._touch_slice(collection, dict(items[start : start + _TOUCH_SLICE]), at)

    async def _touch_slice(self, collection: str, counts: Mapping[str, int], at: float) -> None:
        def write(conn: sqlite3.Connection, cache: ColumnarCollection) -> _Apply:
            live = {record_id: int(count) for record_id, count in counts.items() if record_id in cache}
            if live:  # the write lock is ours and the arrays caught up: each of these has its row
                # A small row per record beside it, with a change number for other clients' caches: the
                # record's row (vector, text) is not rewritten, nor re-read by them.
                first = next_seqs(conn, len(live))
                conn.executemany(
                    "INSERT INTO memkit_counters (collection, id, reads, read_at, seq) VALUES (?, ?, ?, ?, ?) "
                    "ON CONFLICT (collection, id) DO UPDATE SET seq = excluded.seq, reads = excluded.reads + "
                    "CASE WHEN typeof(reads) = 'integer' THEN reads ELSE 0 END, read_at = CASE WHEN "
                    "typeof(read_at) IN ('integer', 'real') AND read_at > excluded.read_at AND read_at < 1e999 "
                    "THEN read_at ELSE excluded.read_at END",  # 1e999: infinity, unreadable as a time
                    [(collection, rid, count, at, first + i) for i, (rid, count) in enumerate(live.items())],
                )
            return lambda: cache.touch(live, at)

        await self._run(lambda conn: self._write(conn, collection, lambda cache: write(conn, cache)), query=True)

    # -- deletes --------------------------------------------------------------------------------
    async def delete(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> int:
        deleted: list[str] = []

        def write(conn: sqlite3.Connection, cache: ColumnarCollection) -> _Apply:
            wanted = list(dict.fromkeys(ids))
            existing = [record.id for record in cache.get(wanted, scope)]
            broken = self._undecodable_in(conn, collection, wanted, scope)
            if existing or broken:
                self._delete_rows(conn, collection, existing + broken)
            deleted.extend(existing + broken)

            def apply() -> None:
                cache.delete(existing)
                self.undecodable.get(collection, set()).difference_update(broken)

            return apply

        await self._write_async(collection, write)
        return len(deleted)

    def _undecodable_in(
        self, conn: sqlite3.Connection, collection: str, ids: Iterable[str], scope: Scope | None
    ) -> list[str]:
        """Which of ``ids`` are undecodable rows within ``scope`` (judged by the plain scope columns)."""
        bad = self.undecodable.get(collection, set())
        found = []
        for record_id in (i for i in ids if i in bad):
            row = conn.execute(
                "SELECT user_id, agent_id, session_id FROM memkit_records WHERE collection = ? AND id = ?",
                (collection, record_id),
            ).fetchone()
            if row is not None and (scope is None or scope_matches(Scope(user_id=row[0], agent_id=row[1],
                                                                         session_id=row[2]), scope)):  # fmt: skip
                found.append(record_id)
        return found

    def _delete_rows(self, conn: sqlite3.Connection, collection: str, ids: list[str]) -> None:
        first = next_seqs(conn, len(ids))
        keys = [(collection, record_id) for record_id in ids]
        conn.executemany("DELETE FROM memkit_tokens WHERE record = (SELECT rowid FROM memkit_records "
                         "WHERE collection = ? AND id = ?)", keys)  # fmt: skip
        conn.executemany("DELETE FROM memkit_records WHERE collection = ? AND id = ?", keys)
        log_deletions(conn, collection, ids, first)
        self._deletions_since_prune += len(ids)
        if self._deletions_since_prune >= self.prune_every:
            prune_deletions(conn, self.deletions_kept)
            self._deletions_since_prune = 0

    async def delete_expired(self, collection: str, now: float) -> int:
        deleted: list[str] = []

        def write(conn: sqlite3.Connection, cache: ColumnarCollection) -> _Apply:
            expired = cache.expired_ids(now)
            if expired:
                self._delete_rows(conn, collection, expired)
            deleted.extend(expired)
            return lambda: cache.delete(expired)

        await self._write_async(collection, write)
        return len(deleted)

    # -- reads ----------------------------------------------------------------------------------
    async def get(self, collection: str, ids: Sequence[str], scope: Scope | None = None) -> list[Record]:
        return await self._read(collection, lambda found: found.get(ids, scope))

    async def query(self, collection: str, query: Query) -> list[Hit]:
        return await self._read(collection, lambda found: found.query(query), scans=True, scope=query.scope,
                                query=True)  # fmt: skip

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
        require_scope(scope, False)
        return await self._read(
            collection,
            lambda found: nearest(found, scope, vectors, k=k, min_similarity=min_similarity, now=now),
            scans=True,
            scope=scope,
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
        for scope, _ in requests:
            require_scope(scope, False)
        if not requests:
            self._connection()  # closed: NotOpenError, as every other call (and memory://) says
            return []
        return await self._read(
            collection,
            lambda found: nearest_many(found, requests, k=k, min_similarity=min_similarity, now=now),
            scans=True,
            scope=requests[0][0] if len(requests) == 1 else None,
        )

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
        require_scope(scope, all_scopes)
        return await self._read(
            collection,
            lambda found: found.scan(scope, filters, limit, cursor, now, newest_first=newest_first),
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
        require_scope(scope, all_scopes)
        return await self._read(collection, lambda found: found.count(scope, filters, now), scans=not filters,
                                scope=scope)  # fmt: skip
